#include "common/serving/worker_metrics.h"

#include "absl/strings/str_cat.h"

namespace tandem::serving {

WorkerMetrics::WorkerMetrics(base::MetricsRegistry& r, absl::string_view prefix,
                             const std::string& transport, const std::string& direction)
    : registry(r),
      prefix(prefix),
      kv_blocks_free(r.GetGauge(absl::StrCat(prefix, "_kv_blocks_free"),
                                "KV blocks allocatable now (prefix-cache blocks included).")),
      kv_blocks_used(r.GetGauge(absl::StrCat(prefix, "_kv_blocks_used"),
                                "KV blocks referenced by a request.")),
      kv_blocks_cached(r.GetGauge(absl::StrCat(prefix, "_kv_blocks_cached"),
                                  "Unreferenced KV blocks kept for the prefix cache.")),
      kv_blocks_capacity(
          r.GetGauge(absl::StrCat(prefix, "_kv_blocks_capacity"), "KV blocks in the pool.")),
      step_seconds(r.GetHistogram(absl::StrCat(prefix, "_step_seconds"), "Engine step time.",
                                  base::LatencyBuckets())),
      kv_transfer_bytes(r.GetCounter("tandem_kv_transfer_bytes_total",
                                     "KV bytes moved between workers.",
                                     {{"transport", transport}, {"direction", direction}})),
      kv_transfer_seconds(r.GetHistogram(
          "tandem_kv_transfer_seconds",
          "KV transfer time per request (decode: Commit to all bytes present; prefill: "
          "first write to last completion).",
          base::LatencyBuckets(), {{"transport", transport}, {"direction", direction}})),
      vllm_num_requests_running(r.GetGauge(
          "vllm:num_requests_running",
          "Number of requests in model execution batches (vLLM-compatible; Tandem: the running "
          "batch of a decode worker, the requests being prefilled on a prefill worker).")),
      vllm_num_requests_waiting(
          r.GetGauge("vllm:num_requests_waiting",
                     "Number of requests waiting to be processed (vLLM-compatible).")),
      vllm_kv_cache_usage_perc(
          r.GetGauge("vllm:kv_cache_usage_perc",
                     "KV-cache usage. 1 means 100 percent usage (vLLM-compatible: 1 - free / total "
                     "blocks).")) {}

void WorkerMetrics::RequestDone(absl::StatusCode code) {
  registry
      .GetCounter(absl::StrCat(prefix, "_requests_total"), "Finished requests by gRPC code.",
                  {{"code", absl::StatusCodeToString(code)}})
      ->Increment();
}

void WorkerMetrics::SetLoad(const WorkerLoadGauges& load) {
  kv_blocks_free->Set(static_cast<double>(load.free_blocks));
  kv_blocks_used->Set(static_cast<double>(load.used_blocks));
  kv_blocks_cached->Set(static_cast<double>(load.cached_blocks));
  kv_blocks_capacity->Set(static_cast<double>(load.total_blocks));
  vllm_num_requests_running->Set(static_cast<double>(load.running));
  vllm_num_requests_waiting->Set(static_cast<double>(load.waiting));
  vllm_kv_cache_usage_perc->Set(load.total_blocks > 0
                                    ? 1.0 - static_cast<double>(load.free_blocks) /
                                                static_cast<double>(load.total_blocks)
                                    : 0.0);
}

}  // namespace tandem::serving
