// WorkerMetrics (common/serving/worker_metrics.h): the series both workers declare
// the same way, under each worker's prefix.

#include "common/serving/worker_metrics.h"

#include "common/base/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::serving {
namespace {

using ::testing::HasSubstr;

TEST(WorkerMetricsTest, NamesSeriesByPrefixAndLabelsTransfers) {
  base::MetricsRegistry registry;
  WorkerMetrics m(registry, "tandem_decode", "loopback", "received");
  m.kv_blocks_free->Set(5);
  m.kv_blocks_used->Set(2);
  m.kv_blocks_cached->Set(1);
  m.kv_blocks_capacity->Set(8);
  m.step_seconds->Observe(0.01);
  m.kv_transfer_bytes->Increment(4096);
  m.kv_transfer_seconds->Observe(0.002);
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_free 5\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_used 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_cached 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_capacity 8\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_step_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_kv_transfer_bytes_total{transport=\"loopback\",direction="
                              "\"received\"} 4096\n"));
  EXPECT_THAT(text, HasSubstr("tandem_kv_transfer_seconds_count{transport=\"loopback\","
                              "direction=\"received\"} 1\n"));
}

TEST(WorkerMetricsTest, RequestDoneCountsByCodeName) {
  base::MetricsRegistry registry;
  WorkerMetrics m(registry, "tandem_prefill", "ucx", "sent");
  m.RequestDone(absl::StatusCode::kOk);
  m.RequestDone(absl::StatusCode::kOk);
  m.RequestDone(absl::StatusCode::kResourceExhausted);
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("# HELP tandem_prefill_requests_total Finished requests by gRPC "
                              "code.\n"));
  EXPECT_THAT(text, HasSubstr("tandem_prefill_requests_total{code=\"OK\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_prefill_requests_total{code=\"RESOURCE_EXHAUSTED\"} 1\n"));
}

TEST(WorkerMetricsTest, TwoWorkersShareTheTransferFamilies) {
  // A prefill and a decode worker in one registry (in-process tests) use the
  // same tandem_kv_transfer_* families, told apart by direction.
  base::MetricsRegistry registry;
  WorkerMetrics decode(registry, "tandem_decode", "loopback", "received");
  WorkerMetrics prefill(registry, "tandem_prefill", "loopback", "sent");
  decode.kv_transfer_bytes->Increment(1);
  prefill.kv_transfer_bytes->Increment(2);
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("direction=\"received\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("direction=\"sent\"} 2\n"));
}

}  // namespace
}  // namespace tandem::serving
