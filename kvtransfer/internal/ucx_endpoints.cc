#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/ucx_handles.h"
#include "kvtransfer/internal/ucx_transport_impl.h"
#include "kvtransfer/internal/ucx_util.h"
#include "ucp/api/ucp.h"

// UcxTransport::Impl's endpoints: connecting to a peer (and choosing how its
// failure is noticed), unpacking its rkeys, closing, and failing the writes
// of a peer that is gone.

namespace tandem::kvtransfer {
namespace {

using internal::Capture;
using internal::DecodePeerAddress;
using internal::LaneInfo;
using internal::PeerAddress;
using internal::UcsError;

}  // namespace

absl::StatusOr<UcxTransport::Impl::Endpoint*> UcxTransport::Impl::GetEndpoint(
    const std::string& key) {
  auto it = endpoints_.find(key);
  if (it != endpoints_.end()) {
    return it->second.get();
  }
  ASSIGN_OR_RETURN(PeerAddress address, DecodePeerAddress(key));
  auto ep = std::make_unique<Endpoint>();
  ep->key = key;
  ep->name = address.identity.ToString();
  const bool same_host = internal::LocalIdentity().SameHostAs(address.identity);
  if (same_host && !internal::ProcessAlive(address.identity.pid, address.identity.start_time)) {
    return absl::UnavailableError(absl::StrCat("peer ", ep->name, " is not running"));
  }
  // UCX 1.13's shared-memory transports refuse MODE_PEER; on this host the
  // thread watches the peer's pid instead (see the header).
  ep->watch_pid = same_host && context_has_shm_;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.ucx_address.data());
  params.err_mode = ep->watch_pid ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Impl::EpErrorCallback;
  params.err_handler.arg = this;
  ucp_ep_h handle = nullptr;
  const ucs_status_t s = ucp_ep_create(worker_.get(), &params, &handle);
  if (s != UCS_OK) {
    return UcsError(s, absl::StrCat("connect to peer ", ep->name));
  }
  ep->ep = EpPtr(handle, EpCloser{this, false});
  ep->address = std::move(address);
  const LaneInfo lanes =
      internal::ParseEndpointInfo(Capture([&](FILE* f) { ucp_ep_print_info(handle, f); }));
  ep->native_rma = lanes.native_rma;
  VLOG(1) << "UcxTransport: endpoint to " << ep->name << " over "
          << absl::StrJoin(lanes.transports, ",") << (lanes.native_rma ? " (rma lane)" : "")
          << (ep->watch_pid ? ", watching its pid" : "");
  {
    absl::MutexLock lock(&caps_mu_);
    caps_.transports = absl::StrJoin(lanes.transports, ",");
  }
  Endpoint* raw = ep.get();
  endpoint_by_handle_[handle] = raw;
  endpoints_[key] = std::move(ep);
  return raw;
}

absl::StatusOr<const UcxTransport::Impl::RemoteKey*> UcxTransport::Impl::GetRkey(
    Endpoint& ep, const RegionDescriptor& peer) {
  auto it = ep.rkeys.find(peer.rkey);
  if (it != ep.rkeys.end()) {
    return &it->second;
  }
  // Write() checked the rkey's shape; the slack keeps a transport's
  // fixed-size read of its key inside this copy whatever the key claims.
  RETURN_IF_ERROR(internal::ValidatePackedRkey(peer.rkey));
  std::string padded = peer.rkey;
  padded.resize(padded.size() + internal::kRkeyUnpackSlackBytes, '\0');
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t s = ucp_ep_rkey_unpack(ep.ep.get(), padded.data(), &rkey);
  if (s != UCS_OK) {
    return UcsError(s, absl::StrCat("unpack the rkey of peer ", ep.name),
                    absl::StatusCode::kInvalidArgument);
  }
  RemoteKey key;
  key.rkey.reset(rkey);
  void* local = nullptr;
  key.mapped = ucp_rkey_ptr(rkey, peer.base, &local) == UCS_OK;
  return &ep.rkeys.emplace(peer.rkey, std::move(key)).first->second;
}

void UcxTransport::Impl::StartClose(ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* r = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(r)) {
    closing_.push_back(r);
  } else if (UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) != UCS_ERR_CANCELED &&
             UCS_PTR_STATUS(r) != UCS_ERR_ENDPOINT_TIMEOUT &&
             UCS_PTR_STATUS(r) != UCS_ERR_CONNECTION_RESET) {
    VLOG(1) << "ucp_ep_close_nbx: " << ucs_status_string(UCS_PTR_STATUS(r));
  }
}

void UcxTransport::Impl::ReapClosing() {
  std::vector<void*> still;
  for (void* r : closing_) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) {
      still.push_back(r);
    } else {
      ucp_request_free(r);
    }
  }
  closing_.swap(still);
}

void UcxTransport::Impl::EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<Impl*>(arg)->failed_endpoints_.emplace_back(ep, status);
}

void UcxTransport::Impl::FailEndpoint(Endpoint* ep, const absl::Status& error) {
  std::vector<uint64_t> ids;
  for (auto& [id, w] : writes_) {
    if (w->ep == ep) {
      ids.push_back(id);
    }
  }
  for (uint64_t id : ids) {
    FinishWrite(id, error);
  }
  ep->rkeys.clear();
  ep->ep.get_deleter().force = true;
  endpoint_by_handle_.erase(ep->ep.get());
  const std::string key = ep->key;
  endpoints_.erase(key);  // closes it
}

void UcxTransport::Impl::CheckPeers() {
  std::vector<Endpoint*> dead;
  for (auto& [key, ep] : endpoints_) {
    if (ep->watch_pid && ep->active_writes > 0 &&
        !internal::ProcessAlive(ep->address.identity.pid, ep->address.identity.start_time)) {
      dead.push_back(ep.get());
    }
  }
  for (Endpoint* ep : dead) {
    FailEndpoint(ep, absl::UnavailableError(absl::StrCat("peer ", ep->name, " exited")));
  }
}

}  // namespace tandem::kvtransfer
