#pragma once
// The decode worker's metrics, declared once at startup; hot paths hold the
// handles. The series every worker has (KV pool, step time, requests by code,
// KV transfer) come from WorkerMetrics. Thread-safe (the metric types are).

#include <string>

#include "common/base/metrics.h"
#include "common/serving/worker_metrics.h"

namespace tandem::decode_worker {

struct DecodeMetrics : serving::WorkerMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback", "none").
  DecodeMetrics(base::MetricsRegistry& registry, const std::string& transport);

  base::Gauge* running_requests;
  base::Gauge* waiting_requests;
  base::Gauge* reserved_requests;
  base::Histogram* time_to_first_token;
  base::Histogram* time_per_output_token;
  base::Histogram* inter_token_latency;
  base::Histogram* e2e_latency;
  base::Histogram* batch_size;
  base::Counter* generated_tokens;
  base::Counter* preemptions;
  base::Counter* reservations_expired;
  base::Gauge* fenced_reservations;
  base::Counter* reservation_aborts;
  base::Histogram* reservation_wait;
};

}  // namespace tandem::decode_worker
