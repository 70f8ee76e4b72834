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
#include "common/base/metrics.h"

namespace tandem::serving {

struct WorkerMetrics {
  // `prefix` starts every worker series name ("tandem_decode"); `transport`
  // ("ucx", "loopback", "none") and `direction` ("sent", "received") label
  // the KV transfer series.
  WorkerMetrics(base::MetricsRegistry& registry, absl::string_view prefix, const std::string& transport,
                const std::string& direction);

  // Counts a finished request by its gRPC code name (<prefix>_requests_total).
  void RequestDone(absl::StatusCode code);

  base::MetricsRegistry& registry;
  const std::string prefix;
  base::Gauge* kv_blocks_free;
  base::Gauge* kv_blocks_used;
  base::Gauge* kv_blocks_cached;
  base::Gauge* kv_blocks_capacity;
  base::Histogram* step_seconds;
  base::Counter* kv_transfer_bytes;
  base::Histogram* kv_transfer_seconds;
};

}  // namespace tandem::serving
