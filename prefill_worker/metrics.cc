#include "prefill_worker/metrics.h"

namespace tandem::prefill_worker {

PrefillMetrics::PrefillMetrics(MetricsRegistry& r, const std::string& transport)
    : registry(r),
      running_requests(r.GetGauge("tandem_prefill_running_requests",
                                  "Requests being prefilled, pushed or committed.")),
      waiting_requests(r.GetGauge("tandem_prefill_waiting_requests",
                                  "Requests in the admission queue.")),
      queued_prompt_tokens(r.GetGauge("tandem_prefill_queued_prompt_tokens",
                                      "Prompt tokens not computed yet (queued and running).")),
      kv_blocks_free(r.GetGauge("tandem_prefill_kv_blocks_free",
                                "KV blocks allocatable now (prefix-cache blocks included).")),
      kv_blocks_used(r.GetGauge("tandem_prefill_kv_blocks_used",
                                "KV blocks referenced by a request.")),
      kv_blocks_cached(r.GetGauge("tandem_prefill_kv_blocks_cached",
                                  "Unreferenced KV blocks kept for the prefix cache.")),
      kv_blocks_total(r.GetGauge("tandem_prefill_kv_blocks_total", "KV blocks in the pool.")),
      queue_seconds(r.GetHistogram("tandem_prefill_queue_seconds",
                                   "From arrival to the first chunk.", LatencyBuckets())),
      time_to_first_token(r.GetHistogram("tandem_prefill_time_to_first_token_seconds",
                                         "From arrival to the first token sampled.",
                                         LatencyBuckets())),
      request_seconds(r.GetHistogram("tandem_prefill_request_seconds",
                                     "From arrival to the decode worker's commit.",
                                     LatencyBuckets())),
      step_seconds(r.GetHistogram("tandem_prefill_step_seconds", "Engine step time.",
                                  LatencyBuckets())),
      step_tokens(r.GetHistogram("tandem_prefill_step_tokens", "Prompt tokens per engine step.",
                                 {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192})),
      prompt_tokens(r.GetCounter("tandem_prefill_prompt_tokens_total", "Prompt tokens received.")),
      cached_prompt_tokens(r.GetCounter("tandem_prefill_cached_prompt_tokens_total",
                                        "Prompt tokens found in the prefix cache.")),
      kv_transfer_bytes(r.GetCounter("tandem_kv_transfer_bytes_total",
                                     "KV bytes moved between workers.",
                                     {{"transport", transport}, {"direction", "sent"}})),
      kv_transfer_seconds(r.GetHistogram(
          "tandem_kv_transfer_seconds",
          "KV transfer time per request (decode: Commit to all bytes present; prefill: "
          "first write to last completion).",
          LatencyBuckets(), {{"transport", transport}, {"direction", "sent"}})),
      kv_transfer_failures(r.GetCounter("tandem_kv_transfer_failures_total",
                                        "Requests whose KV writes failed.",
                                        {{"transport", transport}})) {}

void PrefillMetrics::RequestDone(absl::StatusCode code) {
  registry
      .GetCounter("tandem_prefill_requests_total", "Finished requests by gRPC code.",
                  {{"code", absl::StatusCodeToString(code)}})
      ->Increment();
}

}  // namespace tandem::prefill_worker
