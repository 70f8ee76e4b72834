#pragma once
// The decode worker's metrics, declared once at startup; hot paths hold the
// handles. The series every worker has (KV pool, step time, requests by code,
// KV transfer) come from WorkerMetrics. Thread-safe (the metric types are).

#include <string>

#include "common/metrics.h"
#include "common/worker_metrics.h"

namespace tandem::decode_worker {

struct DecodeMetrics : WorkerMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback", "none").
  DecodeMetrics(MetricsRegistry& registry, const std::string& transport);

  Gauge* running_requests;
  Gauge* waiting_requests;
  Gauge* reserved_requests;
  Histogram* time_to_first_token;
  Histogram* time_per_output_token;
  Histogram* e2e_latency;
  Histogram* batch_size;
  Counter* generated_tokens;
  Counter* preemptions;
  Counter* reservations_expired;
  Gauge* fenced_reservations;
  Counter* reservation_aborts;
  Histogram* reservation_wait;
};

}  // namespace tandem::decode_worker
