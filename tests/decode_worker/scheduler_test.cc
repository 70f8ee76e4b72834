// PlanDecodeStep, table-driven: batch formation (decodes first, prefill
// chunks in the budget left, admission under max_running), preemption choice
// (newest first, only when the next token of all does not fit) and the
// unservable and stuck-prefill cases.

#include "decode_worker/scheduler.h"

#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::decode_worker {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A decoder: holds `kv` tokens' KV, one token to feed.
SeqView Decoder(engine::SequenceId id, int64_t order, int32_t kv, int32_t blocks, bool admitted = true) {
  return SeqView{id, order, kv, kv + 1, blocks, admitted};
}
// A sequence needing a prefill of `total - kv` tokens.
SeqView Prefill(engine::SequenceId id, int64_t order, int32_t kv, int32_t total, int32_t blocks,
                bool admitted) {
  return SeqView{id, order, kv, total, blocks, admitted};
}

struct Entry {
  engine::SequenceId id;
  int32_t n;
  bool operator==(const Entry&) const = default;
};

void PrintTo(const Entry& e, std::ostream* os) { *os << "{" << e.id << ", " << e.n << "}"; }

struct Case {
  std::string name;
  SchedulerConfig config;
  std::vector<SeqView> seqs;
  int32_t free_blocks;
  std::vector<Entry> entries = {};
  std::vector<engine::SequenceId> admit = {};
  std::vector<engine::SequenceId> preempt = {};
  std::vector<engine::SequenceId> unservable = {};
};

// ctest lists the test with its parameter: print the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

SchedulerConfig Cfg(int32_t budget, int32_t max_running, int32_t chunk, int32_t block = 4) {
  return SchedulerConfig{budget, max_running, chunk, block};
}

class PlanDecodeStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanDecodeStepTest, Plans) {
  const Case& c = GetParam();
  ASSERT_TRUE(c.config.Validate().ok());
  const StepPlan plan = PlanDecodeStep(c.config, c.seqs, c.free_blocks);
  std::vector<Entry> entries = {};
  for (const auto& e : plan.entries) entries.push_back({e.id, e.num_tokens});
  EXPECT_THAT(entries, ElementsAreArray(c.entries));
  EXPECT_THAT(plan.admit, ElementsAreArray(c.admit));
  EXPECT_THAT(plan.preempt, ElementsAreArray(c.preempt));
  EXPECT_THAT(plan.unservable, ElementsAreArray(c.unservable));
  // The plan never needs more blocks than are free once preemptions freed theirs.
  int32_t freed = 0;
  for (engine::SequenceId id : plan.preempt) {
    for (const SeqView& s : c.seqs) {
      if (s.id == id) freed += s.blocks_held;
    }
  }
  for (engine::SequenceId id : plan.unservable) {
    for (const SeqView& s : c.seqs) {
      if (s.id == id) freed += s.blocks_held;
    }
  }
  EXPECT_LE(plan.new_blocks, c.free_blocks + freed);
  int32_t tokens = 0;
  for (const auto& e : plan.entries) tokens += e.num_tokens;
  EXPECT_LE(tokens, c.config.token_budget);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PlanDecodeStepTest,
    ::testing::Values(
        Case{"DecodersInsideTheirBlocksNeedNothing",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 5, 2), Decoder(2, 1, 6, 2), Decoder(3, 2, 1, 1)},
             0,
             {{1, 1}, {2, 1}, {3, 1}}},
        Case{"DecoderAtABlockBoundaryTakesAFreeBlock",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 8, 2)},
             1,
             {{1, 1}}},
        Case{"LoneDecoderWithoutAnyBlockIsUnservable",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 8, 2)},
             0,
             {},
             {},
             {},
             {1}},
        Case{"PoolDryPreemptsTheNewest",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 8, 2), Decoder(2, 5, 8, 2), Decoder(3, 2, 8, 2)},
             1,
             // needs 3, has 1: preempt 2 (newest, +2 free) -> 3 free, fits.
             {{1, 1}, {3, 1}},
             {},
             {2}},
        Case{"PreemptsUntilItFits",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 8, 2), Decoder(2, 1, 4, 1), Decoder(3, 2, 4, 1)},
             0,
             // needs 3: preempt 3 (+1, needs 2), preempt 2 (+1, needs 1, 2 free).
             {{1, 1}},
             {},
             {3, 2}},
        Case{"PreemptionCanTakeAPrefillingSequence",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 8, 2), Prefill(2, 3, 4, 12, 1, true)},
             0,
             // the decoder needs 1 block; the newest (a prefill) goes, its
             // block lets the decoder run; nothing left for a chunk.
             {{1, 1}},
             {},
             {2}},
        Case{"BudgetCapsDecodersOldestFirst",
             Cfg(2, 8, 4),
             {Decoder(1, 3, 1, 1), Decoder(2, 1, 1, 1), Decoder(3, 2, 1, 1)},
             0,
             {{2, 1}, {3, 1}}},
        Case{"ChunksFillTheBudgetAfterDecodes",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 2, 1), Prefill(2, 1, 0, 10, 0, false)},
             8,
             // 1 decode + chunk of min(4, 10, 7) = 4.
             {{1, 1}, {2, 4}},
             {2}},
        Case{"SeveralPrefillsShareOneStep",
             Cfg(10, 4, 4),
             {Prefill(1, 0, 4, 10, 1, true), Prefill(2, 1, 0, 3, 0, false),
              Prefill(3, 2, 0, 9, 0, false)},
             10,
             // 1: min(4, 6, 10) = 4; 2: min(4, 3, 6) = 3; 3: min(4, 9, 3) = 3.
             {{1, 4}, {2, 3}, {3, 3}},
             {2, 3}},
        Case{"MaxRunningCapsAdmission",
             Cfg(8, 2, 4),
             {Decoder(1, 0, 2, 1), Decoder(2, 1, 2, 1), Prefill(3, 2, 0, 4, 0, false)},
             8,
             {{1, 1}, {2, 1}}},
        Case{"WaitingImportJoinsAsADecoder",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 2, 1), Decoder(2, 1, 7, 2, /*admitted=*/false)},
             0,
             {{1, 1}, {2, 1}},
             {2}},
        Case{"WaitingImportWithoutItsNextBlockWaits",
             Cfg(8, 4, 4),
             {Decoder(1, 0, 2, 1), Decoder(2, 1, 8, 2, /*admitted=*/false)},
             0,
             {{1, 1}}},
        Case{"ChunkShortenedToTheFreeBlocks",
             Cfg(16, 4, 8),
             {Prefill(1, 0, 2, 20, 1, true)},
             1,
             // holds 1 block (4 tokens), 1 free: room for 8 tokens, 2 present -> 6.
             {{1, 6}}},
        Case{"PrefillJoinsOnlyIfItsWholePromptFits",
             Cfg(16, 4, 4),
             {Prefill(1, 0, 0, 20, 0, false), Prefill(2, 1, 0, 8, 0, false)},
             3,
             // 1 needs 5 blocks (skipped), 2 needs 2.
             {{2, 4}},
             {2}},
        Case{"PreemptedSequenceRejoinsBeforeNewerOnes",
             Cfg(4, 4, 4),
             {Prefill(7, 9, 0, 6, 0, false), Prefill(3, 1, 0, 6, 0, false)},
             8,
             // 3 (order 1, a preempted request) is older than 7: it takes the budget.
             {{3, 4}},
             {3}},
        Case{"StuckPrefillsPreemptTheNewest",
             Cfg(8, 4, 4),
             {Prefill(1, 0, 8, 20, 2, true), Prefill(2, 1, 8, 20, 2, true)},
             0,
             // Neither can grow; preempting 2 frees 2 blocks for 1's chunk of 4 (needs 1).
             {{1, 4}},
             {},
             {2}},
        Case{"LonePrefillThePoolCannotHoldIsUnservable",
             Cfg(8, 4, 4),
             {Prefill(1, 0, 8, 20, 2, true)},
             0,
             {},
             {},
             {},
             {1}},
        Case{"NothingToDo", Cfg(8, 4, 4), {}, 4, {}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(SchedulerConfigTest, RejectsNonPositiveFields) {
  EXPECT_THAT(Cfg(0, 1, 1).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("token_budget must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 0, 1).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("max_running must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 1, 0).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("chunk_size must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 1, 1, 0).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("block_size must be > 0, got 0")));
  EXPECT_OK(Cfg(1, 1, 1, 1).Validate());
}

}  // namespace
}  // namespace tandem::decode_worker
