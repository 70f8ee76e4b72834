#pragma once
// FaultInjectingTransport: wraps any KvTransport and, per FaultSpec, fails,
// drops, delays or corrupts the status of writes, so failover code runs in
// every test without a broken network. Everything but Write() is forwarded.
//
// Thread-safe. `done` runs on this transport's fault thread (failed,
// dropped, delayed-then-refused writes) or on the inner transport's progress
// thread (forwarded writes); never inline in Write().

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer {

namespace internal {
class TaskThread;
}  // namespace internal

struct FaultSpec {
  // Writes are numbered from 1 in Write() order. < 0: never fail; N >= 0: the
  // first N writes go through and every later one completes with
  // `fail_status` without being forwarded.
  int64_t fail_after_writes = -1;
  absl::Status fail_status = absl::UnavailableError("injected failure");
  // Nothing is written, yet done reports OK: the receiver's ReceivedBytes()
  // never reaches the total (tests receiver-side accounting and deadlines).
  bool drop = false;
  // Forwarding waits this long (on the fault thread, so Write() returns at
  // once); a Cancel() meanwhile completes the write with kCancelled at once.
  absl::Duration delay = absl::ZeroDuration();
  // Forwarded, but done reports kDataLoss (naming what the inner reported).
  bool corrupt_status = false;
};

class FaultInjectingTransport final : public KvTransport {
 public:
  explicit FaultInjectingTransport(std::unique_ptr<KvTransport> inner, FaultSpec spec = {});
  ~FaultInjectingTransport() override;  // Shutdown()

  // Any thread; applies to writes after the call.
  void set_faults(FaultSpec spec);
  FaultSpec faults() const;
  // Write() calls that passed validation so far (the numbering of
  // fail_after_writes).
  int64_t writes() const;
  KvTransport& inner() { return *inner_; }

  Capabilities capabilities() const override { return inner_->capabilities(); }
  absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes) override {
    return inner_->RegisterRegion(base, bytes);
  }
  absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes) override {
    return inner_->AllocateRegion(bytes);
  }
  absl::Status RegisterSource(void* base, uint64_t bytes) override {
    return inner_->RegisterSource(base, bytes);
  }
  // Validates as every transport does (InvalidArgument), then fails, drops,
  // delays or forwards the write per the current FaultSpec, in that order of
  // precedence (a failing write is not delayed; a dropped one neither).
  absl::Status Write(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                     absl::AnyInvocable<void(absl::Status) &&> done) override;
  // Delayed writes with `tag` complete with kCancelled; then the inner's
  // Cancel (which also fails later writes of `tag` that reach it).
  void Cancel(TransferTag tag) override;
  uint64_t ReceivedBytes(TransferTag tag) const override { return inner_->ReceivedBytes(tag); }
  void Forget(TransferTag tag) override;  // the inner's
  void Refuse(TransferTag tag) override { inner_->Refuse(tag); }
  bool Receiving(TransferTag tag) const override { return inner_->Receiving(tag); }
  // Delayed writes complete with kUnavailable; then the inner shuts down.
  void Shutdown() override;

 private:
  absl::Status Forward(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                       absl::AnyInvocable<void(absl::Status) &&> done, bool corrupt);

  // A delayed write waiting on the fault thread.
  struct Delayed {
    RegionDescriptor peer;
    TransferTag tag = 0;
    std::vector<WriteOp> ops;
    absl::AnyInvocable<void(absl::Status) &&> done;
    bool corrupt = false;
  };
  void RunDelayed(uint64_t id, bool shutting_down);

  const std::unique_ptr<KvTransport> inner_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Delayed> delayed_ ABSL_GUARDED_BY(mu_);
  uint64_t next_delayed_id_ ABSL_GUARDED_BY(mu_) = 1;
  FaultSpec spec_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  const std::unique_ptr<internal::TaskThread> thread_;  // last: stopped before the fields above go
};

}  // namespace tandem::kvtransfer
