#include "bench/replay/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace tandem::replay {
namespace {

// State shared by the dispatcher, the request threads and the caller.
struct Shared {
  Shared(const Workload& w, Client& c, size_t n) : workload(w), client(c), cancels(n), records(n) {}

  const Workload& workload;
  Client& client;
  absl::Time origin;
  std::optional<absl::Time> stop_sending;  // origin + duration_s
  std::vector<Cancellation> cancels;       // one per request
  std::vector<std::optional<RequestRecord>> records;  // slot i: its thread only
  std::atomic<bool> hard_stop{false};      // no more sends; set before cancelling
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> ok{0};
  std::atomic<bool> dispatch_over{false};

  bool MaySend() const {
    return !hard_stop.load() && (!stop_sending || absl::Now() < *stop_sending);
  }

  // Sends request i on the calling thread.
  void SendOne(size_t i, double scheduled_s) {
    sent.fetch_add(1);
    RequestRecord r = client.Send(workload.requests[i], origin, cancels[i]);
    r.scheduled_s = scheduled_s;
    if (r.ok) {
      ok.fetch_add(1);
    }
    records[i] = std::move(r);
    done.fetch_add(1);  // after the record is stored: the caller reads it once done == sent
  }
};

// Open loop: a thread per request, started at its time.
void DispatchOpenLoop(Shared& s, size_t n) {
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    const absl::Time at = s.origin + absl::Seconds(s.workload.requests[i].send_at_s);
    // Sleep in short steps so that a hard stop or interrupt is seen.
    while (absl::Now() < at && s.MaySend()) {
      absl::SleepFor(std::min(at - absl::Now(), absl::Milliseconds(50)));
    }
    if (!s.MaySend()) {
      break;
    }
    threads.emplace_back(
        [&s, i] { s.SendOne(i, s.workload.requests[i].send_at_s); });
  }
  s.dispatch_over.store(true);
  for (std::thread& t : threads) {
    t.join();
  }
}

// Closed loop: `concurrency` threads, each sending the next request when its
// previous one ends.
void DispatchConcurrency(Shared& s, size_t n, int concurrency) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < concurrency; ++k) {
    threads.emplace_back([&s, &next, n] {
      for (size_t i = next.fetch_add(1); i < n && s.MaySend(); i = next.fetch_add(1)) {
        s.SendOne(i, absl::ToDoubleSeconds(absl::Now() - s.origin));
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  s.dispatch_over.store(true);
}

class Progress {
 public:
  Progress(ProgressMode mode, absl::Duration interval, int64_t total)
      : mode_(mode), interval_(interval), total_(total) {
    if (mode_ == ProgressMode::kAuto) {
      tty_ = isatty(STDERR_FILENO) == 1;
      if (!tty_) {
        mode_ = ProgressMode::kLines;
      }
    }
  }

  void Update(const Shared& s, bool final) {
    if (mode_ == ProgressMode::kOff) {
      return;
    }
    const absl::Time now = absl::Now();
    if (!tty_ && !final && now - last_ < interval_) {
      return;
    }
    last_ = now;
    const int64_t sent = s.sent.load();
    const int64_t done = s.done.load();
    const int64_t ok = s.ok.load();
    const std::string counts =
        absl::StrFormat("%d/%d sent, %d done (%d ok, %d failed), %d in flight, %.1f s", sent,
                        total_, done, ok, done - ok, sent - done,
                        absl::ToDoubleSeconds(now - s.origin));
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = total_ == 0 ? kWidth : static_cast<int>(kWidth * done / total_);
      std::fprintf(stderr, "\r[%s%s] %s\033[K%s", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), counts.c_str(), final ? "\n" : "");
    } else {
      std::fprintf(stderr, "tandem-replay: %s\n", counts.c_str());
    }
    std::fflush(stderr);
  }

 private:
  ProgressMode mode_;
  absl::Duration interval_;
  int64_t total_;
  bool tty_ = false;
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace

std::vector<RequestRecord> RunWorkload(const Workload& workload, Client& client,
                                       const RunOptions& options) {
  size_t n = workload.requests.size();
  if (options.max_requests > 0) {
    n = std::min(n, static_cast<size_t>(options.max_requests));
  }
  Shared s(workload, client, n);
  s.origin = absl::Now();
  std::optional<absl::Time> hard_deadline;
  if (options.duration_s > 0) {
    s.stop_sending = s.origin + absl::Seconds(options.duration_s);
    hard_deadline = *s.stop_sending + absl::Seconds(options.grace_s);
  }
  std::thread dispatcher([&s, n, &workload] {
    if (workload.concurrency > 0) {
      DispatchConcurrency(s, n, workload.concurrency);
    } else {
      DispatchOpenLoop(s, n);
    }
  });

  Progress progress(options.progress, options.progress_interval, static_cast<int64_t>(n));
  while (!(s.dispatch_over.load() && s.done.load() == s.sent.load())) {
    const bool interrupted = options.interrupt != nullptr && options.interrupt->load();
    if (!s.hard_stop.load() &&
        (interrupted || (hard_deadline && absl::Now() >= *hard_deadline))) {
      s.hard_stop.store(true);
      for (Cancellation& c : s.cancels) {
        c.Cancel();
      }
    }
    progress.Update(s, /*final=*/false);
    absl::SleepFor(absl::Milliseconds(100));
  }
  dispatcher.join();
  progress.Update(s, /*final=*/true);

  std::vector<RequestRecord> out;
  out.reserve(n);
  for (std::optional<RequestRecord>& r : s.records) {
    if (r) {
      out.push_back(*std::move(r));
    }
  }
  return out;
}

}  // namespace tandem::replay
