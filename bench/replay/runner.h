#pragma once

// tandem-replay's open-loop runner. Each request is sent at its send_at_s
// on a thread of its own, whatever the earlier ones are doing (a slow server
// never delays the schedule); with Workload::concurrency > 0 that many
// requests are kept in flight instead (a closed loop, send_at_s ignored).
// Bounded: no request is sent after duration_s; at duration_s + grace_s
// whatever is still in flight is cancelled and recorded as CANCELLED. Every
// request sent gets exactly one record, so sent = ok + errors always holds.
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "bench/replay/client.h"
#include "bench/replay/record.h"
#include "bench/replay/workload.h"

namespace tandem::replay {

enum class ProgressMode {
  kAuto,  // a bar redrawn in place when stderr is a terminal, else a line every 5 s
  kLines, // a line every progress_interval
  kOff,
};

struct RunOptions {
  double duration_s = 0;      // no send after this (0 = until the workload ends)
  double grace_s = 10;        // after duration_s, then in-flight requests are cancelled
  int64_t max_requests = 0;   // 0 = the whole workload
  ProgressMode progress = ProgressMode::kAuto;
  absl::Duration progress_interval = absl::Seconds(5);
  // Set from elsewhere (SIGINT): stop sending and cancel what is in flight.
  const std::atomic<bool>* interrupt = nullptr;
};

// Sends `workload` through `client`; the records of the requests sent, in id
// order. Blocks until every request sent has ended. Calling thread: drives
// the progress display and the hard stop.
std::vector<RequestRecord> RunWorkload(const Workload& workload, Client& client,
                                       const RunOptions& options);

}  // namespace tandem::replay
