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

TEST(WorkerMetricsTest, SetLoadExportsThePoolAndTheVllmGauges) {
  // The names, types and units vLLM exports (vllm/v1/metrics/loggers.py), so
  // scrapers written for vLLM (Gateway API Inference Extension, llm-d, KEDA)
  // read a Tandem worker unchanged.
  base::MetricsRegistry registry;
  WorkerMetrics m(registry, "tandem_decode", "ucx", "received");
  m.SetLoad({.running = 3,
             .waiting = 7,
             .free_blocks = 6,
             .used_blocks = 1,
             .cached_blocks = 1,
             .total_blocks = 8});
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_free 6\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_used 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_cached 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_kv_blocks_capacity 8\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 7\n"));
  // 1 - free / total = 1 - 6/8.
  EXPECT_THAT(text,
              HasSubstr("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.25\n"));
}

TEST(WorkerMetricsTest, KvCacheUsageOfAnEmptyPoolIsZero) {
  base::MetricsRegistry registry;
  WorkerMetrics m(registry, "tandem_prefill", "ucx", "sent");
  m.SetLoad({});
  EXPECT_THAT(registry.RenderText(), HasSubstr("vllm:kv_cache_usage_perc 0\n"));
}

}  // namespace
}  // namespace tandem::serving
