#include "prefill_worker/metrics.h"

namespace tandem::prefill_worker {

PrefillMetrics::PrefillMetrics(base::MetricsRegistry& r, const std::string& transport)
    : serving::WorkerMetrics(r, "tandem_prefill", transport, "sent"),
      running_requests(r.GetGauge("tandem_prefill_running_requests",
                                  "Requests being prefilled, pushed or committed.")),
      waiting_requests(
          r.GetGauge("tandem_prefill_waiting_requests", "Requests in the admission queue.")),
      queued_prompt_tokens(r.GetGauge("tandem_prefill_queued_prompt_tokens",
                                      "Prompt tokens not computed yet (queued and running).")),
      queue_seconds(r.GetHistogram("tandem_prefill_queue_seconds",
                                   "From arrival to the first chunk.", base::LatencyBuckets())),
      time_to_first_token(r.GetHistogram("tandem_prefill_time_to_first_token_seconds",
                                         "From arrival to the first token sampled.",
                                         base::LatencyBuckets())),
      request_seconds(r.GetHistogram("tandem_prefill_request_seconds",
                                     "From arrival to the decode worker's commit.",
                                     base::LatencyBuckets())),
      step_tokens(r.GetHistogram("tandem_prefill_step_tokens", "Prompt tokens per engine step.",
                                 {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192})),
      prompt_tokens(r.GetCounter("tandem_prefill_prompt_tokens_total", "Prompt tokens received.")),
      cached_prompt_tokens(r.GetCounter("tandem_prefill_cached_prompt_tokens_total",
                                        "Prompt tokens found in the prefix cache.")),
      kv_transfer_failures(r.GetCounter("tandem_kv_transfer_failures_total",
                                        "Requests whose KV writes failed.",
                                        {{"transport", transport}})) {}

}  // namespace tandem::prefill_worker
