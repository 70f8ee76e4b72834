// PlanPrefillStep, table-driven: chunks of several requests in one step
// within the token budget and chunk size, FIFO order, admission under
// max_running and only when the pool can hold the whole prompt on top of
// what admitted requests still need.

#include "prefill_worker/scheduler.h"

#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::prefill_worker {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct Chunk {
  engine::SequenceId id;
  int32_t n;
  bool operator==(const Chunk&) const = default;
};

void PrintTo(const Chunk& c, std::ostream* os) { *os << "{" << c.id << ", " << c.n << "}"; }

PrefillSeqView Running(engine::SequenceId id, int64_t order, int32_t computed, int32_t prompt,
                       int32_t blocks) {
  return PrefillSeqView{id, order, computed, prompt, blocks, true};
}
PrefillSeqView Waiting(engine::SequenceId id, int64_t order, int32_t prompt) {
  return PrefillSeqView{id, order, 0, prompt, 0, false};
}

struct Case {
  std::string name;
  PrefillSchedulerConfig config;
  std::vector<PrefillSeqView> seqs;
  int32_t free_blocks;
  std::vector<Chunk> chunks = {};
  std::vector<engine::SequenceId> admit = {};
};

// ctest lists the test with its parameter: print the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

PrefillSchedulerConfig Cfg(int32_t budget, int32_t chunk, int32_t max_running,
                           int32_t block = 4) {
  return PrefillSchedulerConfig{budget, chunk, max_running, block};
}

class PlanPrefillStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanPrefillStepTest, Plans) {
  const Case& c = GetParam();
  ASSERT_TRUE(c.config.Validate().ok());
  const PrefillPlan plan = PlanPrefillStep(c.config, c.seqs, c.free_blocks);
  std::vector<Chunk> chunks = {};
  int32_t tokens = 0;
  for (const auto& ch : plan.chunks) {
    chunks.push_back({ch.id, ch.num_tokens});
    tokens += ch.num_tokens;
    EXPECT_LE(ch.num_tokens, c.config.chunk_size);
  }
  EXPECT_THAT(chunks, ElementsAreArray(c.chunks));
  EXPECT_THAT(plan.admit, ElementsAreArray(c.admit));
  EXPECT_LE(tokens, c.config.token_budget);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PlanPrefillStepTest,
    ::testing::Values(
        Case{"OneRequestChunked", Cfg(64, 16, 4), {Waiting(1, 0, 40)}, 100, {{1, 16}}, {1}},
        Case{"LastChunkIsTheRest", Cfg(64, 16, 4), {Running(1, 0, 32, 40, 8)}, 100, {{1, 8}}},
        Case{"SeveralRequestsInOneStep",
             Cfg(20, 8, 4),
             {Running(1, 0, 8, 30, 2), Waiting(2, 1, 5), Waiting(3, 2, 30)},
             100,
             // 1: 8; 2: 5; 3: min(8, 30, 7) = 7.
             {{1, 8}, {2, 5}, {3, 7}},
             {2, 3}},
        Case{"OldestFirst",
             Cfg(8, 8, 4),
             {Waiting(5, 7, 10), Waiting(6, 3, 10)},
             100,
             {{6, 8}},
             {6}},
        Case{"AdmittedRequestsGoBeforeWaitingOnes",
             Cfg(8, 8, 4),
             {Waiting(1, 0, 10), Running(2, 5, 0, 10, 0)},
             100,
             {{2, 8}}},
        Case{"MaxRunningCapsAdmission",
             Cfg(64, 8, 2),
             {Running(1, 0, 0, 10, 0), Running(2, 1, 0, 10, 0), Waiting(3, 2, 10)},
             100,
             {{1, 8}, {2, 8}}},
        Case{"AdmissionNeedsTheWholePrompt",
             Cfg(64, 8, 4),
             {Waiting(1, 0, 20), Waiting(2, 1, 8)},
             3,
             // 1 needs 5 blocks (skipped, not waited for); 2 needs 2.
             {{2, 8}},
             {2}},
        Case{"AdmittedRequestsKeepTheirBlocks",
             Cfg(64, 8, 4),
             {Running(1, 0, 4, 16, 1), Waiting(2, 1, 8)},
             4,
             // 1 still needs 3 of the 4 free blocks: 2 (2 blocks) must wait.
             {{1, 8}}},
        Case{"PrefixCacheHitLeavesFewTokens",
             Cfg(64, 8, 4),
             {Running(1, 0, 32, 33, 8)},
             0,
             {{1, 1}}},
        Case{"NothingWaiting", Cfg(64, 8, 4), {}, 10, {}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(PrefillSchedulerConfigTest, RejectsNonPositiveFields) {
  EXPECT_THAT(Cfg(0, 1, 1).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("token_budget must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 0, 1).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("chunk_size must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 1, 0).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("max_running must be > 0, got 0")));
  EXPECT_THAT(Cfg(1, 1, 1, 0).Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("block_size must be > 0, got 0")));
  EXPECT_OK(Cfg(1, 1, 1, 1).Validate());
}

}  // namespace
}  // namespace tandem::prefill_worker
