// The request checks both workers run before admitting a request, and the
// wire -> engine sampling conversion.

#include "common/serving/request_validation.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::serving {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

engine::ModelConfig SmallModel() {
  engine::ModelConfig m;
  m.vocab_size = 100;
  m.context_length = 64;
  return m;
}

TEST(RequestValidationTest, NamesTheProblem) {
  const engine::ModelConfig m = SmallModel();
  engine::SamplingParams ok;
  EXPECT_OK(ValidateGenerationRequest(m, {1, 2, 3}, 10, ok));
  EXPECT_THAT(ValidateGenerationRequest(m, {}, 10, ok),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt is empty")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1, 100}, 10, ok),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("prompt token 1 has id 100, outside the vocabulary [0, 100)")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 0, ok),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_tokens must be > 0")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1, 2, 3, 4}, 61, ok),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("prompt (4 tokens) + max_tokens (61) exceeds the model context "
                                 "of 64")));
  EXPECT_OK(ValidateGenerationRequest(m, {1, 2, 3, 4}, 60, ok));
  engine::SamplingParams bad;
  bad.temperature = -0.5f;
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 1, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("temperature")));
  engine::SamplingParams stop;
  stop.stop_token_ids = {5, 1000};
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 1, stop),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stop token id 1000")));
}

TEST(RequestValidationTest, SamplingFromProtoMapsProto3DefaultsToOff) {
  tandem::v1::SamplingParams p;
  engine::SamplingParams s = SamplingFromProto(p);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.repetition_penalty, 1.0f);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_OK(s.Validate());
  p.set_temperature(0.8f);
  p.set_top_p(0.9f);
  p.set_seed(42);
  p.add_stop()->push_back('\n');  // not add_stop("\n"): GCC 12 -Wrestrict false positive (PR 105329)
  p.add_stop_token_ids(7);
  p.set_top_k(-1);
  s = SamplingFromProto(p);
  EXPECT_EQ(s.temperature, 0.8f);
  EXPECT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_THAT(s.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_k")));
}

}  // namespace
}  // namespace tandem::serving
