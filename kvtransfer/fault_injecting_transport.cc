#include "kvtransfer/fault_injecting_transport.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/task_thread.h"
#include "kvtransfer/internal/write_checks.h"

namespace tandem::kvtransfer {

FaultInjectingTransport::FaultInjectingTransport(std::unique_ptr<KvTransport> inner, FaultSpec spec)
    : inner_(std::move(inner)),
      spec_(std::move(spec)),
      thread_(std::make_unique<internal::TaskThread>()) {}

FaultInjectingTransport::~FaultInjectingTransport() { Shutdown(); }

void FaultInjectingTransport::set_faults(FaultSpec spec) {
  absl::MutexLock lock(&mu_);
  spec_ = std::move(spec);
}

FaultSpec FaultInjectingTransport::faults() const {
  absl::MutexLock lock(&mu_);
  return spec_;
}

int64_t FaultInjectingTransport::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

absl::Status FaultInjectingTransport::Write(const RegionDescriptor& peer, TransferTag tag,
                                            std::vector<WriteOp> ops,
                                            absl::AnyInvocable<void(absl::Status) &&> done) {
  RETURN_IF_ERROR(internal::ValidateWrite(peer, ops));
  FaultSpec spec;
  int64_t n;
  {
    absl::MutexLock lock(&mu_);
    spec = spec_;
    n = ++writes_;
  }
  absl::Status immediate;  // what a failed or dropped write reports
  bool inject = false;
  if (spec.fail_after_writes >= 0 && n > spec.fail_after_writes) {
    inject = true;
    immediate = spec.fail_status.ok()
                    ? absl::UnavailableError("injected failure")
                    : base::Annotate(spec.fail_status,
                               absl::StrCat("injected after ", spec.fail_after_writes, " writes"));
  } else if (spec.drop) {
    inject = true;  // immediate stays OK
  }
  if (inject) {
    if (!thread_->Post([done = std::move(done), immediate](bool shutting_down) mutable {
          std::move(done)(shutting_down ? absl::UnavailableError("transport shut down")
                                        : immediate);
        })) {
      return absl::UnavailableError("Write: transport shut down");
    }
  } else if (spec.delay > absl::ZeroDuration()) {
    uint64_t id;
    {
      absl::MutexLock lock(&mu_);
      id = next_delayed_id_++;
      delayed_[id] = Delayed{peer, tag, std::move(ops), std::move(done), spec.corrupt_status};
    }
    if (!thread_->Post([this, id](bool shutting_down) { RunDelayed(id, shutting_down); },
                       spec.delay)) {
      absl::MutexLock lock(&mu_);
      delayed_.erase(id);  // `done` goes unrun: the error is returned instead
      return absl::UnavailableError("Write: transport shut down");
    }
  } else {
    return Forward(peer, tag, std::move(ops), std::move(done), spec.corrupt_status);
  }
  return absl::OkStatus();
}

absl::Status FaultInjectingTransport::Forward(const RegionDescriptor& peer, TransferTag tag,
                                              std::vector<WriteOp> ops,
                                              absl::AnyInvocable<void(absl::Status) &&> done,
                                              bool corrupt) {
  if (!corrupt) {
    return inner_->Write(peer, tag, std::move(ops), std::move(done));
  }
  return inner_->Write(peer, tag, std::move(ops), [done = std::move(done)](absl::Status s) mutable {
    std::move(done)(absl::DataLossError(
        absl::StrCat("injected corruption (the transport reported: ", s.ToString(), ")")));
  });
}

void FaultInjectingTransport::RunDelayed(uint64_t id, bool shutting_down) {
  Delayed d;
  {
    absl::MutexLock lock(&mu_);
    auto it = delayed_.find(id);
    if (it == delayed_.end()) {
      return;  // cancelled meanwhile
    }
    d = std::move(it->second);
    delayed_.erase(it);
  }
  if (shutting_down) {
    std::move(d.done)(
        absl::UnavailableError(absl::StrCat("write tag=", d.tag, ": transport shut down")));
    return;
  }
  // Forward() consumes `done` only when it returns OK.
  auto shared = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(d.done));
  const absl::Status s = Forward(
      d.peer, d.tag, std::move(d.ops),
      [shared](absl::Status st) mutable { std::move (*shared)(std::move(st)); }, d.corrupt);
  if (!s.ok()) {
    std::move (*shared)(s);
  }
}

void FaultInjectingTransport::Cancel(TransferTag tag) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, d] : delayed_) {
      if (d.tag == tag) {
        ids.push_back(id);
      }
    }
  }
  if (!ids.empty()) {
    // Completed now rather than when their delay ends. If the thread is
    // stopping, the delayed tasks themselves complete them (kUnavailable).
    thread_->Post([this, ids = std::move(ids)](bool) {
      for (uint64_t id : ids) {
        Delayed d;
        {
          absl::MutexLock lock(&mu_);
          auto it = delayed_.find(id);
          if (it == delayed_.end()) {
            continue;
          }
          d = std::move(it->second);
          delayed_.erase(it);
        }
        std::move(d.done)(absl::CancelledError(absl::StrCat("write tag=", d.tag, " cancelled")));
      }
    });
  }
  inner_->Cancel(tag);
}

void FaultInjectingTransport::Forget(TransferTag tag) { inner_->Forget(tag); }

void FaultInjectingTransport::Shutdown() {
  thread_->Stop();
  inner_->Shutdown();
}

}  // namespace tandem::kvtransfer
