#pragma once
// The decode worker's metrics, declared once at startup; hot paths hold the
// handles. Thread-safe (the metric types are).

#include <string>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace tandem::decode_worker {

struct DecodeMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback", "none").
  DecodeMetrics(MetricsRegistry& registry, const std::string& transport);

  // Counts a finished request by its gRPC code name.
  void RequestDone(absl::StatusCode code);

  MetricsRegistry& registry;
  Gauge* running_requests;
  Gauge* waiting_requests;
  Gauge* reserved_requests;
  Gauge* kv_blocks_free;
  Gauge* kv_blocks_used;
  Gauge* kv_blocks_cached;
  Gauge* kv_blocks_total;
  Histogram* time_to_first_token;
  Histogram* time_per_output_token;
  Histogram* e2e_latency;
  Histogram* step_seconds;
  Histogram* batch_size;
  Counter* generated_tokens;
  Counter* preemptions;
  Counter* reservations_expired;
  Counter* kv_transfer_bytes;
  Histogram* kv_transfer_seconds;
};

}  // namespace tandem::decode_worker
