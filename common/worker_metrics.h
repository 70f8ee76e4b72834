#pragma once
// WorkerMetrics: the series tandem-prefill and tandem-decode declare the same
// way, each under its own prefix ("tandem_prefill", "tandem_decode"): the KV
// pool gauges, the engine step time, finished requests by gRPC code, and the
// KV transfer series both ends of a transfer share (tandem_kv_transfer_*,
// labelled by transport and direction). A worker's metrics struct derives
// from it and adds the series only it has; hot paths hold the handles.
//
// Thread-safe (the metric types are). The registry must outlive the struct.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"

namespace tandem {

struct WorkerMetrics {
  // `prefix` starts every worker series name ("tandem_decode"); `transport`
  // ("ucx", "loopback", "none") and `direction` ("sent", "received") label
  // the KV transfer series.
  WorkerMetrics(MetricsRegistry& registry, absl::string_view prefix, const std::string& transport,
                const std::string& direction);

  // Counts a finished request by its gRPC code name (<prefix>_requests_total).
  void RequestDone(absl::StatusCode code);

  MetricsRegistry& registry;
  const std::string prefix;
  Gauge* kv_blocks_free;
  Gauge* kv_blocks_used;
  Gauge* kv_blocks_cached;
  Gauge* kv_blocks_total;
  Histogram* step_seconds;
  Counter* kv_transfer_bytes;
  Histogram* kv_transfer_seconds;
};

}  // namespace tandem
