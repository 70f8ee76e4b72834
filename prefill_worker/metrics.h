#pragma once
// The prefill worker's metrics, declared once at startup; hot paths hold the
// handles. The series every worker has (KV pool, step time, requests by code,
// KV transfer) come from WorkerMetrics. Thread-safe (the metric types are).

#include <string>

#include "common/base/metrics.h"
#include "common/serving/worker_metrics.h"

namespace tandem::prefill_worker {

struct PrefillMetrics : serving::WorkerMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback").
  PrefillMetrics(base::MetricsRegistry& registry, const std::string& transport);

  base::Gauge* running_requests;
  base::Gauge* waiting_requests;
  base::Gauge* queued_prompt_tokens;
  base::Histogram* queue_seconds;
  base::Histogram* time_to_first_token;
  base::Histogram* request_seconds;
  base::Histogram* step_tokens;
  base::Counter* prompt_tokens;
  base::Counter* cached_prompt_tokens;
  base::Counter* kv_transfer_failures;
};

}  // namespace tandem::prefill_worker
