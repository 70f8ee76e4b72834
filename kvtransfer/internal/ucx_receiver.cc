#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/ucx_handles.h"
#include "kvtransfer/internal/ucx_transport_impl.h"
#include "kvtransfer/internal/ucx_util.h"
#include "ucp/api/ucp.h"

// UcxTransport::Impl's receiver side: the regions peers write into, the
// active message handler (eager copies, rendezvous receives, landed
// notices), and what ReceivedBytes, Refuse and Receiving report.

namespace tandem::kvtransfer {
namespace {

using internal::AmHeader;
using internal::AmKind;
using internal::kAmMagic;
using internal::MemPtr;
using internal::RkeyBufferPtr;
using internal::UcsError;

}  // namespace

absl::StatusOr<RegionDescriptor> UcxTransport::Impl::RegisterRegion(void* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion: null or empty region");
  }
  absl::StatusOr<RegionDescriptor> result = absl::UnavailableError("transport shut down");
  RETURN_IF_ERROR(RunOnThread([&] { result = RegisterRegionOnThread(base, bytes); }));
  return result;
}

absl::StatusOr<AllocatedRegion> UcxTransport::Impl::AllocateRegion(uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("AllocateRegion: 0 bytes");
  }
  absl::StatusOr<AllocatedRegion> result = absl::UnavailableError("transport shut down");
  RETURN_IF_ERROR(RunOnThread([&] { result = AllocateRegionOnThread(bytes); }));
  return result;
}

uint64_t UcxTransport::Impl::ReceivedBytes(TransferTag tag) const {
  absl::MutexLock lock(&received_mu_);
  auto it = received_.find(tag);
  return it == received_.end() ? 0 : it->second;
}

void UcxTransport::Impl::Forget(TransferTag tag) {
  {
    absl::MutexLock lock(&received_mu_);
    received_.erase(tag);
  }
  Post([this, tag] { cancelled_.Remove(tag); });
}

void UcxTransport::Impl::Refuse(TransferTag tag) {
  absl::MutexLock lock(&received_mu_);
  refused_.Add(tag);
  received_.erase(tag);
}

bool UcxTransport::Impl::Receiving(TransferTag tag) const {
  absl::MutexLock lock(&received_mu_);
  return receiving_.contains(tag);
}

absl::StatusOr<RegionDescriptor> UcxTransport::Impl::RegisterRegionOnThread(void* base,
                                                                            uint64_t bytes) {
  const auto b = reinterpret_cast<uint64_t>(base);
  for (const auto& [rb, r] : regions_) {
    if (b < rb + r.bytes && rb < b + bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("RegisterRegion: [", b, ", +", bytes, ") overlaps a registered region"));
    }
  }
  ASSIGN_OR_RETURN(MemPtr mem, internal::MapMemory(context_.get(), base, bytes, /*allocate=*/false,
                                                   "RegisterRegion", absl::StatusCode::kInternal));
  return AddRegion(b, bytes, std::move(mem));
}

absl::StatusOr<AllocatedRegion> UcxTransport::Impl::AllocateRegionOnThread(uint64_t bytes) {
  ASSIGN_OR_RETURN(MemPtr mem,
                   internal::MapMemory(context_.get(), nullptr, bytes, /*allocate=*/true,
                                       "AllocateRegion", absl::StatusCode::kResourceExhausted));
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  const ucs_status_t s = ucp_mem_query(mem.get(), &attr);
  if (s != UCS_OK || attr.address == nullptr || attr.length < bytes) {
    return UcsError(s == UCS_OK ? UCS_ERR_NO_MEMORY : s, "AllocateRegion: ucp_mem_query",
                    absl::StatusCode::kInternal);
  }
  const auto b = reinterpret_cast<uint64_t>(attr.address);
  ASSIGN_OR_RETURN(RegionDescriptor d, AddRegion(b, bytes, std::move(mem)));
  return AllocatedRegion{attr.address, std::move(d)};
}

absl::StatusOr<RegionDescriptor> UcxTransport::Impl::AddRegion(uint64_t base, uint64_t bytes,
                                                               MemPtr mem) {
  void* rkey_buf = nullptr;
  size_t rkey_size = 0;
  const ucs_status_t s = ucp_rkey_pack(context_.get(), mem.get(), &rkey_buf, &rkey_size);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_rkey_pack", absl::StatusCode::kInternal);
  }
  RkeyBufferPtr packed(rkey_buf);
  RegionDescriptor d;
  d.worker_address = local_address_;
  d.rkey.assign(static_cast<const char*>(rkey_buf), rkey_size);
  d.base = base;
  d.bytes = bytes;
  regions_[base] = Region{bytes, std::move(mem)};
  return d;
}

ucs_status_t UcxTransport::Impl::AmRecvCallback(void* arg, const void* header, size_t header_length,
                                                void* data, size_t length,
                                                const ucp_am_recv_param_t* param) {
  return static_cast<Impl*>(arg)->OnActiveMessage(header, header_length, data, length,
                                                  param->recv_attr);
}

ucs_status_t UcxTransport::Impl::OnActiveMessage(const void* header, size_t header_length,
                                                 void* data, size_t length, uint64_t recv_attr) {
  const bool rndv = (recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  AmHeader h;
  if (header_length != sizeof(AmHeader)) {
    LOG_EVERY_N(WARNING, 100) << "UcxTransport: dropped a message with a " << header_length
                              << "-byte header";
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  if (h.magic != kAmMagic) {
    LOG_EVERY_N(WARNING, 100) << "UcxTransport: dropped a message with a bad magic";
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  if (h.kind == AmKind::kLanded) {
    AddReceived(h.tag, h.bytes);  // ignored for a refused tag
    return UCS_OK;
  }
  auto it = regions_.find(h.region_base);
  if (h.kind != AmKind::kData || it == regions_.end() || h.bytes != length ||
      h.offset > it->second.bytes || h.bytes > it->second.bytes - h.offset) {
    LOG_EVERY_N(WARNING, 100) << "UcxTransport: rejected " << length << " bytes for tag " << h.tag
                              << " at offset " << h.offset << " (not inside a registered region)";
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  if (!BeginReceive(h.tag)) {
    VLOG(1) << "UcxTransport: refused " << length << " bytes for refused tag " << h.tag;
    return rndv ? UCS_ERR_CANCELED : UCS_OK;
  }
  void* dest = reinterpret_cast<uint8_t*>(h.region_base) + h.offset;
  if (rndv) {
    // Received after ucp_worker_progress returns (no UCX calls from inside
    // a callback).
    pending_recvs_.push_back(PendingRecv{data, dest, length, h.tag});
    return UCS_INPROGRESS;
  }
  std::memcpy(dest, data, length);
  EndReceive(h.tag, length, /*ok=*/true);
  return UCS_OK;
}

void UcxTransport::Impl::StartReceive(const PendingRecv& r) {
  auto* ctx = new RecvContext{this, r.tag};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &Impl::RecvCallback;
  p.user_data = ctx;
  void* req = ucp_am_recv_data_nbx(worker_.get(), r.desc, r.dest, r.bytes, &p);
  if (UCS_PTR_IS_PTR(req)) {
    ++inflight_receives_;
    live_receives_.insert(ctx);
    return;  // RecvCallback counts it
  }
  delete ctx;
  if (UCS_PTR_IS_ERR(req)) {
    LOG_EVERY_N(WARNING, 100) << "UcxTransport: receive of " << r.bytes << " bytes for tag "
                              << r.tag << " failed: " << ucs_status_string(UCS_PTR_STATUS(req));
    EndReceive(r.tag, 0, /*ok=*/false);
    return;
  }
  EndReceive(r.tag, r.bytes, /*ok=*/true);
}

void UcxTransport::Impl::RecvCallback(void* request, ucs_status_t status, size_t length,
                                      void* user_data) {
  auto* ctx = static_cast<RecvContext*>(user_data);
  --ctx->impl->inflight_receives_;
  ctx->impl->live_receives_.erase(ctx);
  ctx->impl->EndReceive(ctx->tag, length, status == UCS_OK);
  if (status != UCS_OK) {
    VLOG(1) << "UcxTransport: receive for tag " << ctx->tag
            << " failed: " << ucs_status_string(status);
  }
  delete ctx;
  ucp_request_free(request);
}

void UcxTransport::Impl::AddReceived(TransferTag tag, uint64_t bytes) {
  absl::MutexLock lock(&received_mu_);
  if (!refused_.Contains(tag)) {
    received_[tag] += bytes;
  }
}

bool UcxTransport::Impl::BeginReceive(TransferTag tag) {
  absl::MutexLock lock(&received_mu_);
  if (refused_.Contains(tag)) {
    return false;
  }
  ++receiving_[tag];
  return true;
}

void UcxTransport::Impl::EndReceive(TransferTag tag, uint64_t bytes, bool ok) {
  absl::MutexLock lock(&received_mu_);
  if (ok && !refused_.Contains(tag)) {
    received_[tag] += bytes;
  }
  auto it = receiving_.find(tag);
  if (it != receiving_.end() && --it->second == 0) {
    receiving_.erase(it);
  }
}

}  // namespace tandem::kvtransfer
