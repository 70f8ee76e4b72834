#include "decode_worker/metrics.h"

#include "absl/status/status.h"

namespace tandem::decode_worker {

DecodeMetrics::DecodeMetrics(MetricsRegistry& r, const std::string& transport)
    : registry(r),
      running_requests(r.GetGauge("tandem_decode_running_requests",
                                  "Requests in the running batch (decoding or prefilling).")),
      waiting_requests(r.GetGauge("tandem_decode_waiting_requests",
                                  "Requests waiting to join the running batch.")),
      reserved_requests(r.GetGauge("tandem_decode_reserved_requests",
                                   "Reservations whose KV is not committed yet.")),
      kv_blocks_free(r.GetGauge("tandem_decode_kv_blocks_free",
                                "KV blocks allocatable now (prefix-cache blocks included).")),
      kv_blocks_used(r.GetGauge("tandem_decode_kv_blocks_used",
                                "KV blocks referenced by a request.")),
      kv_blocks_cached(r.GetGauge("tandem_decode_kv_blocks_cached",
                                  "Unreferenced KV blocks kept for the prefix cache.")),
      kv_blocks_total(r.GetGauge("tandem_decode_kv_blocks_total", "KV blocks in the pool.")),
      time_to_first_token(r.GetHistogram(
          "tandem_decode_time_to_first_token_seconds",
          "From the request's arrival (Reserve or Generate) to its first token.",
          LatencyBuckets())),
      time_per_output_token(r.GetHistogram("tandem_decode_time_per_output_token_seconds",
                                           "Mean time between a request's output tokens.",
                                           LatencyBuckets())),
      e2e_latency(r.GetHistogram("tandem_decode_request_seconds",
                                 "From a request's arrival to its last token.",
                                 LatencyBuckets())),
      step_seconds(r.GetHistogram("tandem_decode_step_seconds", "Engine step time.",
                                  LatencyBuckets())),
      batch_size(r.GetHistogram("tandem_decode_batch_size", "Sequences per engine step.",
                                {1, 2, 4, 8, 16, 32, 64, 128, 256, 512})),
      generated_tokens(r.GetCounter("tandem_decode_generated_tokens_total",
                                    "Tokens streamed to clients.")),
      preemptions(r.GetCounter("tandem_decode_preemptions_total",
                               "Sequences preempted (blocks freed, recomputed later).")),
      reservations_expired(r.GetCounter("tandem_decode_reservations_expired_total",
                                        "Reservations freed because their KV never arrived.")),
      kv_transfer_bytes(r.GetCounter("tandem_kv_transfer_bytes_total",
                                     "KV bytes moved between workers.",
                                     {{"transport", transport}, {"direction", "received"}})),
      kv_transfer_seconds(r.GetHistogram(
          "tandem_kv_transfer_seconds",
          "KV transfer time per request (decode: Commit to all bytes present; prefill: "
          "first write to last completion).",
          LatencyBuckets(), {{"transport", transport}, {"direction", "received"}})) {}

void DecodeMetrics::RequestDone(absl::StatusCode code) {
  registry
      .GetCounter("tandem_decode_requests_total", "Finished requests by gRPC code.",
                  {{"code", absl::StatusCodeToString(code)}})
      ->Increment();
}

}  // namespace tandem::decode_worker
