#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/ucx_handles.h"
#include "kvtransfer/internal/ucx_transport_impl.h"
#include "kvtransfer/internal/ucx_util.h"
#include "kvtransfer/internal/write_checks.h"
#include "ucp/api/ucp.h"

// UcxTransport::Impl's sender side: Write() from validation to done (put or
// am per op, the flush, the landed notice), source registrations, Cancel.

namespace tandem::kvtransfer {
namespace {

using internal::AmHeader;
using internal::AmKind;
using internal::DecodePeerAddress;
using internal::kAmId;
using internal::MemPtr;
using internal::PeerAddress;
using internal::UcsError;

// Requests in flight per write: enough to keep a link busy with 2 MiB ops,
// few enough that Cancel takes effect within a window.
constexpr int kMaxInflightPerWrite = 64;

bool Contains(uint64_t base, uint64_t bytes, const void* p, uint64_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= base && n <= bytes && a - base <= bytes - n;
}

}  // namespace

absl::Status UcxTransport::Impl::Write(const RegionDescriptor& peer, TransferTag tag,
                                       std::vector<WriteOp> ops,
                                       absl::AnyInvocable<void(absl::Status) &&> done) {
  absl::StatusOr<PeerAddress> address = DecodePeerAddress(peer.worker_address);
  if (!address.ok()) {
    return base::Annotate(address.status(), "Write: peer worker_address");
  }
  RETURN_IF_ERROR(internal::ValidateWrite(peer, ops));
  if (config_.mode != "am") {
    // Checked here, on the caller's thread, so a forged rkey never reaches
    // ucp_ep_rkey_unpack (which reads as far as the bytes it parses say).
    RETURN_IF_ERROR(base::Annotate(internal::ValidatePackedRkey(peer.rkey), "Write: peer"));
  }
  auto w = std::make_unique<PendingWrite>();
  w->tag = tag;
  w->peer = peer;
  w->peer_name = address->identity.ToString();
  w->ops = std::move(ops);
  w->done = std::move(done);
  for (const WriteOp& op : w->ops) {
    w->total_bytes += op.bytes;
  }
  const bool posted = Post([this, w = std::move(w)]() mutable { StartWrite(std::move(w)); });
  if (!posted) {
    return absl::UnavailableError("Write: transport shut down");
  }
  return absl::OkStatus();
}

void UcxTransport::Impl::Cancel(TransferTag tag) {
  Post([this, tag] { CancelOnThread(tag); });
}

absl::Status UcxTransport::Impl::RegisterSource(void* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterSource: null or empty region");
  }
  absl::Status result;
  RETURN_IF_ERROR(RunOnThread([&] { result = RegisterSourceOnThread(base, bytes); }));
  return result;
}

absl::Status UcxTransport::Impl::RegisterSourceOnThread(void* base, uint64_t bytes) {
  ASSIGN_OR_RETURN(MemPtr mem, internal::MapMemory(context_.get(), base, bytes, /*allocate=*/false,
                                                   "RegisterSource", absl::StatusCode::kInternal));
  sources_.push_back(Source{reinterpret_cast<uint64_t>(base), bytes, std::move(mem)});
  return absl::OkStatus();
}

ucp_mem_h UcxTransport::Impl::SourceMemh(const void* p, uint64_t n) const {
  for (const Source& s : sources_) {
    if (Contains(s.base, s.bytes, p, n)) {
      return s.memh.get();
    }
  }
  return nullptr;
}

void UcxTransport::Impl::StartWrite(std::unique_ptr<PendingWrite> w) {
  if (stopping_) {
    std::move(w->done)(absl::UnavailableError(
        absl::StrCat("write tag=", w->tag, " to ", w->peer_name, ": transport shut down")));
    return;
  }
  if (cancelled_.Contains(w->tag)) {
    std::move(w->done)(absl::CancelledError(absl::StrCat("write tag=", w->tag, " cancelled")));
    return;
  }
  absl::StatusOr<Endpoint*> ep = GetEndpoint(w->peer.worker_address);
  if (!ep.ok()) {
    std::move(w->done)(base::Annotate(ep.status(), absl::StrCat("write tag=", w->tag)));
    return;
  }
  w->ep = *ep;
  if (config_.mode == "am") {
    w->use_am = true;
  } else {
    absl::StatusOr<const RemoteKey*> rkey = GetRkey(**ep, w->peer);
    if (!rkey.ok()) {
      std::move(w->done)(base::Annotate(rkey.status(), absl::StrCat("write tag=", w->tag)));
      return;
    }
    w->rkey = (*rkey)->rkey.get();
    // auto: put where it is native (an RDMA lane, or a region mapped here).
    w->use_am = config_.mode == "auto" && !(*ep)->native_rma && !(*rkey)->mapped;
  }
  if (w->use_am != last_use_am_) {
    last_use_am_ = w->use_am;
    absl::MutexLock lock(&caps_mu_);
    caps_.native_put = !w->use_am;
  }
  w->id = next_write_id_++;
  ++w->ep->active_writes;
  const uint64_t id = w->id;
  writes_[id] = std::move(w);
  Pump(id);
}

void UcxTransport::Impl::Pump(uint64_t id) {
  auto it = writes_.find(id);
  if (it == writes_.end()) {
    return;
  }
  PendingWrite& w = *it->second;
  while (true) {
    if (w.cancelled || !w.status.ok()) {
      if (w.outstanding == 0) {
        FinishWrite(id, w.cancelled ? absl::CancelledError(absl::StrCat("write tag=", w.tag, " to ",
                                                                        w.peer_name, " cancelled"))
                                    : w.status);
      }
      return;
    }
    if (w.phase == Phase::kSending) {
      while (w.next_op < w.ops.size() && w.outstanding < kMaxInflightPerWrite && w.status.ok()) {
        IssueOp(w, w.next_op++);
      }
      if (!w.status.ok()) {
        continue;
      }
      if (w.next_op < w.ops.size() || w.outstanding > 0) {
        return;
      }
      if (w.total_bytes == 0) {
        FinishWrite(id, absl::OkStatus());
        return;
      }
      // Sent: flush for remote completion.
      w.phase = Phase::kFlushing;
      ucp_request_param_t p{};
      OpContext* ctx = NewContext(w, w.ops.size());
      SetSendCallback(p, ctx);
      Track(w, ctx, ucp_ep_flush_nbx(w.ep->ep.get(), &p), "flush");
      continue;
    }
    if (w.outstanding > 0) {
      return;
    }
    if (w.phase == Phase::kFlushing && !w.use_am) {
      // Puts are in the peer's memory: tell it how many bytes landed.
      w.phase = Phase::kLanding;
      OpContext* ctx = NewContext(w, w.ops.size());
      ctx->header.kind = AmKind::kLanded;
      ctx->header.tag = w.tag;
      ctx->header.region_base = w.peer.base;
      ctx->header.bytes = w.total_bytes;
      ucp_request_param_t p{};
      SetSendCallback(p, ctx);
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_EAGER;
      Track(w, ctx,
            ucp_am_send_nbx(w.ep->ep.get(), kAmId, &ctx->header, sizeof(AmHeader), nullptr, 0, &p),
            "landed notice");
      continue;
    }
    FinishWrite(id, absl::OkStatus());
    return;
  }
}

UcxTransport::Impl::OpContext* UcxTransport::Impl::NewContext(const PendingWrite& w,
                                                              size_t op_index) {
  auto* ctx = new OpContext;
  ctx->impl = this;
  ctx->write_id = w.id;
  ctx->op_index = op_index;
  return ctx;
}

void UcxTransport::Impl::SetSendCallback(ucp_request_param_t& p, OpContext* ctx) {
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &Impl::SendCallback;
  p.user_data = ctx;
}

void UcxTransport::Impl::IssueOp(PendingWrite& w, size_t i) {
  const WriteOp& op = w.ops[i];
  if (op.bytes == 0) {
    return;
  }
  OpContext* ctx = NewContext(w, i);
  ucp_request_param_t p{};
  SetSendCallback(p, ctx);
  if (ucp_mem_h memh = SourceMemh(op.src, op.bytes); memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh;
  }
  void* r;
  if (w.use_am) {
    ctx->header.kind = AmKind::kData;
    ctx->header.tag = w.tag;
    ctx->header.region_base = w.peer.base;
    ctx->header.offset = op.remote_offset;
    ctx->header.bytes = op.bytes;
    r = ucp_am_send_nbx(w.ep->ep.get(), kAmId, &ctx->header, sizeof(AmHeader), op.src, op.bytes,
                        &p);
  } else {
    r = ucp_put_nbx(w.ep->ep.get(), op.src, op.bytes, w.peer.base + op.remote_offset, w.rkey, &p);
  }
  Track(w, ctx, r, w.use_am ? "am send" : "put");
}

void UcxTransport::Impl::Track(PendingWrite& w, OpContext* ctx, void* r, const char* what) {
  if (UCS_PTR_IS_PTR(r)) {
    ++w.outstanding;
    w.requests.insert(r);
    live_sends_.insert(ctx);
    return;
  }
  const size_t i = ctx->op_index;
  delete ctx;
  if (UCS_PTR_IS_ERR(r) && w.status.ok()) {
    w.status = UcsError(UCS_PTR_STATUS(r), OpDescription(w, i, what));
  }
}

std::string UcxTransport::Impl::OpDescription(const PendingWrite& w, size_t i,
                                              const char* what) const {
  if (i < w.ops.size()) {
    return absl::StrCat("write tag=", w.tag, " to ", w.peer_name, ": ", what, " op ", i, " of ",
                        w.ops.size(), " (", w.ops[i].bytes, " bytes at offset ",
                        w.ops[i].remote_offset, ")");
  }
  return absl::StrCat("write tag=", w.tag, " to ", w.peer_name, ": ", what);
}

void UcxTransport::Impl::SendCallback(void* request, ucs_status_t status, void* user_data) {
  auto* ctx = static_cast<OpContext*>(user_data);
  ctx->impl->OnSendDone(*ctx, request, status);
  ctx->impl->live_sends_.erase(ctx);
  delete ctx;
  ucp_request_free(request);
}

void UcxTransport::Impl::OnSendDone(const OpContext& ctx, void* request, ucs_status_t status) {
  auto it = writes_.find(ctx.write_id);
  if (it == writes_.end()) {
    return;  // abandoned (peer failed or shutdown)
  }
  PendingWrite& w = *it->second;
  w.requests.erase(request);
  --w.outstanding;
  if (status != UCS_OK && w.status.ok() && !w.cancelled) {
    const char* what = ctx.op_index < w.ops.size()   ? (w.use_am ? "am send" : "put")
                       : w.phase == Phase::kFlushing ? "flush"
                                                     : "landed notice";
    w.status = UcsError(status, OpDescription(w, ctx.op_index, what));
  }
  dirty_writes_.push_back(ctx.write_id);
}

void UcxTransport::Impl::FinishWrite(uint64_t id, absl::Status status) {
  auto it = writes_.find(id);
  if (it == writes_.end()) {
    return;
  }
  std::unique_ptr<PendingWrite> w = std::move(it->second);
  writes_.erase(it);
  if (w->ep != nullptr) {
    --w->ep->active_writes;
  }
  std::move(w->done)(std::move(status));
}

void UcxTransport::Impl::CancelRequests(PendingWrite& w) {
  const std::vector<void*> requests(w.requests.begin(), w.requests.end());
  for (void* r : requests) {
    ucp_request_cancel(worker_.get(), r);
  }
}

void UcxTransport::Impl::CancelOnThread(TransferTag tag) {
  cancelled_.Add(tag);
  std::vector<uint64_t> ids;
  for (auto& [id, w] : writes_) {
    if (w->tag == tag) {
      w->cancelled = true;
      CancelRequests(*w);
      ids.push_back(id);
    }
  }
  for (uint64_t id : ids) {
    Pump(id);
  }
}

}  // namespace tandem::kvtransfer
