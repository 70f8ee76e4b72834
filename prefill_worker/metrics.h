#pragma once
// The prefill worker's metrics, declared once at startup; hot paths hold the
// handles. Thread-safe (the metric types are).

#include <string>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace tandem::prefill_worker {

struct PrefillMetrics {
  // `transport` labels the KV transfer series ("ucx", "loopback").
  PrefillMetrics(MetricsRegistry& registry, const std::string& transport);

  void RequestDone(absl::StatusCode code);

  MetricsRegistry& registry;
  Gauge* running_requests;
  Gauge* waiting_requests;
  Gauge* queued_prompt_tokens;
  Gauge* kv_blocks_free;
  Gauge* kv_blocks_used;
  Gauge* kv_blocks_cached;
  Gauge* kv_blocks_total;
  Histogram* queue_seconds;
  Histogram* time_to_first_token;
  Histogram* request_seconds;
  Histogram* step_seconds;
  Histogram* step_tokens;
  Counter* prompt_tokens;
  Counter* cached_prompt_tokens;
  Counter* kv_transfer_bytes;
  Histogram* kv_transfer_seconds;
  Counter* kv_transfer_failures;
};

}  // namespace tandem::prefill_worker
