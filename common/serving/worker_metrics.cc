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
          base::LatencyBuckets(), {{"transport", transport}, {"direction", direction}})) {}

void WorkerMetrics::RequestDone(absl::StatusCode code) {
  registry
      .GetCounter(absl::StrCat(prefix, "_requests_total"), "Finished requests by gRPC code.",
                  {{"code", absl::StatusCodeToString(code)}})
      ->Increment();
}

}  // namespace tandem::serving
