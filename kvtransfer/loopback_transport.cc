#include "kvtransfer/loopback_transport.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/cancelled_tags.h"
#include "kvtransfer/internal/task_thread.h"
#include "kvtransfer/internal/write_checks.h"

namespace tandem::kvtransfer {
namespace internal {

// The receiving half of a LoopbackTransport, shared with the registry and
// with writers in the middle of a copy.
struct LoopbackSink {
  std::string address;

  absl::Mutex mu;  // held during every copy into the regions
  bool alive ABSL_GUARDED_BY(mu) = true;
  std::map<uint64_t, uint64_t> regions ABSL_GUARDED_BY(mu);  // base -> bytes
  CancelledTags refused ABSL_GUARDED_BY(mu){65536};

  mutable absl::Mutex received_mu;
  absl::flat_hash_map<TransferTag, uint64_t> received ABSL_GUARDED_BY(received_mu);

  absl::Status Copy(const RegionDescriptor& peer, TransferTag tag,
                    const std::vector<WriteOp>& ops) {
    uint64_t total = 0;
    {
      absl::MutexLock lock(&mu);
      if (!alive) {
        return absl::UnavailableError(absl::StrCat("peer ", address, " shut down"));
      }
      auto it = regions.find(peer.base);
      if (it == regions.end() || peer.bytes > it->second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "peer ", address, " has no registered region [", peer.base, ", +", peer.bytes, ")"));
      }
      if (refused.Contains(tag)) {
        return absl::OkStatus();  // dropped, as a real receiver drops it (the sender cannot tell)
      }
      for (const WriteOp& op : ops) {
        if (op.bytes > 0) {
          std::memcpy(reinterpret_cast<uint8_t*>(peer.base) + op.remote_offset, op.src, op.bytes);
          total += op.bytes;
        }
      }
    }
    absl::MutexLock lock(&received_mu);
    received[tag] += total;
    return absl::OkStatus();
  }
};

}  // namespace internal

namespace {

constexpr absl::string_view kAddressPrefix = "loopback:";

class Registry {
 public:
  void Add(const std::shared_ptr<internal::LoopbackSink>& sink) {
    absl::MutexLock lock(&mu_);
    sinks_[sink->address] = sink;
  }
  void Remove(const std::string& address) {
    absl::MutexLock lock(&mu_);
    sinks_.erase(address);
  }
  std::shared_ptr<internal::LoopbackSink> Find(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto it = sinks_.find(address);
    return it == sinks_.end() ? nullptr : it->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<internal::LoopbackSink>> sinks_
      ABSL_GUARDED_BY(mu_);
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry;
  return *registry;
}

std::shared_ptr<internal::LoopbackSink> NewSink() {
  static std::atomic<uint64_t> next_id{1};
  auto sink = std::make_shared<internal::LoopbackSink>();
  sink->address = absl::StrCat(kAddressPrefix, next_id.fetch_add(1, std::memory_order_relaxed));
  GetRegistry().Add(sink);
  return sink;
}

}  // namespace

LoopbackTransport::LoopbackTransport()
    : sink_(NewSink()),
      cancelled_(std::make_unique<internal::CancelledTags>()),
      thread_(std::make_unique<internal::TaskThread>()) {}

LoopbackTransport::~LoopbackTransport() { Shutdown(); }

Capabilities LoopbackTransport::capabilities() const {
  return Capabilities{.name = "loopback", .native_put = true, .transports = "memcpy"};
}

absl::StatusOr<RegionDescriptor> LoopbackTransport::RegisterRegion(void* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion: null or empty region");
  }
  const auto b = reinterpret_cast<uint64_t>(base);
  absl::MutexLock lock(&sink_->mu);
  if (!sink_->alive) {
    return absl::UnavailableError("RegisterRegion: transport shut down");
  }
  for (const auto& [rb, rbytes] : sink_->regions) {
    if (b < rb + rbytes && rb < b + bytes) {
      return absl::InvalidArgumentError("RegisterRegion: overlaps a registered region");
    }
  }
  sink_->regions[b] = bytes;
  return RegionDescriptor{.worker_address = sink_->address, .rkey = "", .base = b, .bytes = bytes};
}

absl::StatusOr<AllocatedRegion> LoopbackTransport::AllocateRegion(uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("AllocateRegion: 0 bytes");
  }
  auto memory = std::unique_ptr<uint8_t[]>(new (std::nothrow) uint8_t[bytes]());
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("AllocateRegion: ", bytes, " bytes"));
  }
  ASSIGN_OR_RETURN(RegionDescriptor d, RegisterRegion(memory.get(), bytes));
  AllocatedRegion region{memory.get(), std::move(d)};
  absl::MutexLock lock(&mu_);
  allocated_.push_back(std::move(memory));
  return region;
}

absl::Status LoopbackTransport::RegisterSource(void* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterSource: null or empty region");
  }
  return absl::OkStatus();
}

absl::Status LoopbackTransport::Write(const RegionDescriptor& peer, TransferTag tag,
                                      std::vector<WriteOp> ops,
                                      absl::AnyInvocable<void(absl::Status) &&> done) {
  if (!absl::StartsWith(peer.worker_address, kAddressPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Write: peer '", peer.worker_address, "' is not a loopback address"));
  }
  RETURN_IF_ERROR(internal::ValidateWrite(peer, ops));
  const bool posted = thread_->Post(
      [this, peer, tag, ops = std::move(ops), done = std::move(done)](bool shutting_down) mutable {
        if (shutting_down) {
          std::move(done)(absl::UnavailableError(absl::StrCat(
              "write tag=", tag, " to ", peer.worker_address, ": transport shut down")));
          return;
        }
        bool cancelled;
        {
          absl::MutexLock lock(&mu_);
          cancelled = cancelled_->Contains(tag);
        }
        if (cancelled) {
          std::move(done)(absl::CancelledError(absl::StrCat("write tag=", tag, " cancelled")));
          return;
        }
        std::shared_ptr<internal::LoopbackSink> sink = GetRegistry().Find(peer.worker_address);
        if (sink == nullptr) {
          std::move(done)(absl::UnavailableError(
              absl::StrCat("write tag=", tag, ": peer ", peer.worker_address, " is gone")));
          return;
        }
        std::move(done)(base::Annotate(sink->Copy(peer, tag, ops), absl::StrCat("write tag=", tag)));
      });
  if (!posted) {
    return absl::UnavailableError("Write: transport shut down");
  }
  return absl::OkStatus();
}

void LoopbackTransport::Cancel(TransferTag tag) {
  absl::MutexLock lock(&mu_);
  cancelled_->Add(tag);
}

uint64_t LoopbackTransport::ReceivedBytes(TransferTag tag) const {
  absl::MutexLock lock(&sink_->received_mu);
  auto it = sink_->received.find(tag);
  return it == sink_->received.end() ? 0 : it->second;
}

void LoopbackTransport::Forget(TransferTag tag) {
  {
    absl::MutexLock lock(&mu_);
    cancelled_->Remove(tag);
  }
  absl::MutexLock lock(&sink_->received_mu);
  sink_->received.erase(tag);
}

void LoopbackTransport::Refuse(TransferTag tag) {
  {
    absl::MutexLock lock(&sink_->mu);
    sink_->refused.Add(tag);
  }
  absl::MutexLock lock(&sink_->received_mu);
  sink_->received.erase(tag);
}

void LoopbackTransport::Shutdown() {
  GetRegistry().Remove(sink_->address);
  {
    absl::MutexLock lock(&sink_->mu);
    sink_->alive = false;
  }
  thread_->Stop();
}

}  // namespace tandem::kvtransfer
