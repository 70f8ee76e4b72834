#pragma once
// The prefill worker's metrics, declared once at startup; hot paths hold the
// handles. The series every worker has (KV pool, step time, requests by code,
// KV transfer) come from WorkerMetrics. Thread-safe (the metric types are).

#include <string>

#include "common/metrics.h"
#include "common/worker_metrics.h"

namespace tandem::prefill_worker {

struct PrefillMetrics : WorkerMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback").
  PrefillMetrics(MetricsRegistry& registry, const std::string& transport);

  Gauge* running_requests;
  Gauge* waiting_requests;
  Gauge* queued_prompt_tokens;
  Histogram* queue_seconds;
  Histogram* time_to_first_token;
  Histogram* request_seconds;
  Histogram* step_tokens;
  Counter* prompt_tokens;
  Counter* cached_prompt_tokens;
  Counter* kv_transfer_failures;
};

}  // namespace tandem::prefill_worker
