#pragma once
// Pieces of UcxTransport that need no live UCX worker, kept apart so they can
// be tested alone: the peer address envelope, process liveness, parsing of
// UCX's printed endpoint and context tables, and ucs_status_t -> absl::Status.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::kvtransfer::internal {

// Who a worker address belongs to. The envelope is what
// RegionDescriptor::worker_address holds: this identity, then UCX's own
// worker address bytes.
struct ProcessIdentity {
  std::string hostname;
  std::string boot_id;         // /proc/sys/kernel/random/boot_id ("" if unreadable)
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid (0 if unreadable)
  int32_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)

  // Same kernel and pid namespace: pids (and shared memory) mean the same
  // thing on both sides. False when either side could not read its ids.
  bool SameHostAs(const ProcessIdentity& other) const;
  std::string ToString() const;  // "host:pid"
};

// This process (read once and cached).
const ProcessIdentity& LocalIdentity();

// /proc/<pid>/stat's start time of `pid` (clock ticks since boot); 0 if
// there is no such process.
uint64_t ProcessStartTime(int32_t pid);

// Whether the process `pid` that started at `start_time` still runs (a pid
// reused by a newer process counts as gone). Only meaningful on this host.
bool ProcessAlive(int32_t pid, uint64_t start_time);

struct PeerAddress {
  ProcessIdentity identity;
  std::string ucx_address;  // ucp_worker_get_address bytes
};

std::string EncodePeerAddress(const PeerAddress& address);
// InvalidArgument for anything EncodePeerAddress did not produce.
absl::StatusOr<PeerAddress> DecodePeerAddress(absl::string_view bytes);

// Checks that `packed` has the shape of a UCX 1.13 packed rkey (md map, memory
// type, then one length-prefixed key per md in the map, then optionally the
// system device and its distances) and that every length stays inside it.
// ucp_ep_rkey_unpack takes no length and trusts what it reads: a peer-supplied
// rkey must pass this first. InvalidArgument naming the rkey otherwise. The
// shape says nothing about what memory a well-formed key names.
absl::Status ValidatePackedRkey(absl::string_view packed);

// Bytes of zeros kept after a copy of a packed rkey handed to UCX: a
// transport's unpack reads its fixed-size key whatever length the rkey
// claims (at most 255 bytes, the length prefix's range).
inline constexpr size_t kRkeyUnpackSlackBytes = 256;

// What ucp_ep_print_info says about an endpoint's lanes.
struct LaneInfo {
  std::vector<std::string> transports;  // distinct, in lane order ("sysv", "cma")
  bool native_rma = false;              // some lane is an "rma#N" lane
};
LaneInfo ParseEndpointInfo(absl::string_view text);

// Distinct transport names of ucp_context_print_info's resource lines
// ("resource 1 : md 0 dev 1 flags -- tcp/lo" -> "tcp").
std::vector<std::string> ParseContextTransports(absl::string_view text);

// A transport that moves data between processes of one host.
bool IsSharedMemoryTransport(absl::string_view tl);
// A transport whose puts UCX does natively (RDMA verbs).
bool IsNativeRmaTransport(absl::string_view tl);

// `context`: what failed, e.g. "put op 3 (65536 bytes) to host:1234".
// Peer and network errors (and anything unexpected during a transfer) map to
// `fallback`; UCS_ERR_CANCELED to kCancelled; UCS_ERR_INVALID_PARAM to
// kInvalidArgument; out-of-memory to kResourceExhausted.
absl::Status UcsError(int ucs_status, absl::string_view context,
                      absl::StatusCode fallback = absl::StatusCode::kUnavailable);

}  // namespace tandem::kvtransfer::internal
