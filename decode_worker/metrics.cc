#include "decode_worker/metrics.h"

namespace tandem::decode_worker {

DecodeMetrics::DecodeMetrics(base::MetricsRegistry& r, const std::string& transport)
    : serving::WorkerMetrics(r, "tandem_decode", transport, "received"),
      running_requests(r.GetGauge("tandem_decode_running_requests",
                                  "Requests in the running batch (decoding or prefilling).")),
      waiting_requests(r.GetGauge("tandem_decode_waiting_requests",
                                  "Requests waiting to join the running batch.")),
      reserved_requests(r.GetGauge("tandem_decode_reserved_requests",
                                   "Reservations whose KV is not committed yet.")),
      time_to_first_token(
          r.GetHistogram("tandem_decode_time_to_first_token_seconds",
                         "From the request's arrival (Reserve or Generate) to its first token.",
                         base::LatencyBuckets())),
      time_per_output_token(r.GetHistogram("tandem_decode_time_per_output_token_seconds",
                                           "Mean time between a request's output tokens.",
                                           base::LatencyBuckets())),
      inter_token_latency(r.GetHistogram("tandem_decode_inter_token_latency_seconds",
                                         "Time between two consecutive output tokens of a request.",
                                         base::LatencyBuckets())),
      e2e_latency(r.GetHistogram("tandem_decode_request_seconds",
                                 "From a request's arrival to its last token.", base::LatencyBuckets())),
      batch_size(r.GetHistogram("tandem_decode_batch_size", "Sequences per engine step.",
                                {1, 2, 4, 8, 16, 32, 64, 128, 256, 512})),
      generated_tokens(
          r.GetCounter("tandem_decode_generated_tokens_total", "Tokens streamed to clients.")),
      preemptions(r.GetCounter("tandem_decode_preemptions_total",
                               "Sequences preempted (blocks freed, recomputed later).")),
      reservations_expired(r.GetCounter("tandem_decode_reservations_expired_total",
                                        "Reservations freed because their KV never arrived.")),
      fenced_reservations(
          r.GetGauge("tandem_decode_fenced_reservations",
                     "Ended reservations whose blocks stay allocated until no write can land.")),
      reservation_aborts(
          r.GetCounter("tandem_decode_reservation_aborts_total",
                       "Reservations a prefill worker gave up (Commit with abort).")),
      reservation_wait(r.GetHistogram("tandem_decode_reservation_wait_seconds",
                                      "Time a Reserve queued for KV blocks before its reservation.",
                                      base::LatencyBuckets())) {}

}  // namespace tandem::decode_worker
