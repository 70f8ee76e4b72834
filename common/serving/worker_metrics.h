#pragma once
// WorkerMetrics: the series tandem-prefill and tandem-decode declare the same
// way, each under its own prefix ("tandem_prefill", "tandem_decode"): the KV
// pool gauges, the engine step time, finished requests by gRPC code, and the
// KV transfer series both ends of a transfer share (tandem_kv_transfer_*,
// labelled by transport and direction). A worker's metrics struct derives
// from it and adds the series only it has; hot paths hold the handles.
//
// Next to them, the gauges vLLM exports under the same names
// (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc), so the Gateway API Inference Extension / llm-d
// scheduler and KEDA recipes written for vLLM read a Tandem worker unchanged.
// SetLoad() sets both families from one snapshot.
//
// Thread-safe (the metric types are). The registry must outlive the struct.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/metrics.h"

namespace tandem::serving {

// One snapshot of a worker's queue and KV pool (what SetLoad() exports).
struct WorkerLoadGauges {
  int64_t running = 0;        // requests in the running batch / being prefilled
  int64_t waiting = 0;        // requests queued before it
  int64_t free_blocks = 0;    // allocatable now (prefix-cache blocks included)
  int64_t used_blocks = 0;    // referenced by a request
  int64_t cached_blocks = 0;  // unreferenced, kept for the prefix cache
  int64_t total_blocks = 0;   // the pool
};

struct WorkerMetrics {
  // `prefix` starts every worker series name ("tandem_decode"); `transport`
  // ("ucx", "loopback", "none") and `direction` ("sent", "received") label
  // the KV transfer series.
  WorkerMetrics(base::MetricsRegistry& registry, absl::string_view prefix, const std::string& transport,
                const std::string& direction);

  // Counts a finished request by its gRPC code name (<prefix>_requests_total).
  void RequestDone(absl::StatusCode code);

  // Sets the KV pool gauges and the vLLM-compatible ones. The caller sets its
  // own <prefix>_running_requests / _waiting_requests. vllm:kv_cache_usage_perc
  // is vLLM's definition, 1 - free / total (a fraction: 1 = full), 0 for an
  // empty pool.
  void SetLoad(const WorkerLoadGauges& load);

  base::MetricsRegistry& registry;
  const std::string prefix;
  base::Gauge* kv_blocks_free;
  base::Gauge* kv_blocks_used;
  base::Gauge* kv_blocks_cached;
  base::Gauge* kv_blocks_capacity;
  base::Histogram* step_seconds;
  base::Counter* kv_transfer_bytes;
  base::Histogram* kv_transfer_seconds;
  base::Gauge* vllm_num_requests_running;
  base::Gauge* vllm_num_requests_waiting;
  base::Gauge* vllm_kv_cache_usage_perc;
};

}  // namespace tandem::serving
