#include "kvtransfer/internal/ucx_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "ucs/memory/memory_type.h"
#include "ucs/type/status.h"

namespace tandem::kvtransfer::internal {
namespace {

constexpr absl::string_view kMagic = "TKV1";

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fields of /proc/<pid>/stat after the command name: [0] is field 3 (state).
std::vector<std::string> StatFields(int32_t pid) {
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return {};
  }
  return absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
}

void PutU64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

void PutString(std::string& out, absl::string_view s) {
  PutU64(out, s.size());
  out.append(s.data(), s.size());
}

bool GetU64(absl::string_view& in, uint64_t& v) {
  if (in.size() < 8) {
    return false;
  }
  std::memcpy(&v, in.data(), 8);
  in.remove_prefix(8);
  return true;
}

bool GetString(absl::string_view& in, std::string& s) {
  uint64_t n = 0;
  if (!GetU64(in, n) || n > in.size()) {
    return false;
  }
  s.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

void AddUnique(std::vector<std::string>& v, absl::string_view s) {
  if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) {
    v.emplace_back(s);
  }
}

ProcessIdentity ReadLocalIdentity() {
  ProcessIdentity id;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    id.hostname = host;
  }
  id.boot_id =
      std::string(absl::StripAsciiWhitespace(ReadSmallFile("/proc/sys/kernel/random/boot_id")));
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) == 0) {
    id.pid_namespace = st.st_ino;
  }
  id.pid = static_cast<int32_t>(getpid());
  id.start_time = ProcessStartTime(id.pid);
  return id;
}

}  // namespace

bool ProcessIdentity::SameHostAs(const ProcessIdentity& other) const {
  return !boot_id.empty() && boot_id == other.boot_id && pid_namespace != 0 &&
         pid_namespace == other.pid_namespace;
}

std::string ProcessIdentity::ToString() const { return absl::StrCat(hostname, ":", pid); }

const ProcessIdentity& LocalIdentity() {
  static const ProcessIdentity* const id = new ProcessIdentity(ReadLocalIdentity());
  return *id;
}

uint64_t ProcessStartTime(int32_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  uint64_t t = 0;
  if (fields.size() <= 19 || !absl::SimpleAtoi(fields[19], &t)) {
    return 0;
  }
  return t;
}

bool ProcessAlive(int32_t pid, uint64_t start_time) {
  const std::vector<std::string> fields = StatFields(pid);
  if (fields.size() <= 19) {
    return false;  // no such process
  }
  if (fields[0] == "Z" || fields[0] == "X") {
    return false;  // exited, not yet reaped
  }
  uint64_t t = 0;
  return absl::SimpleAtoi(fields[19], &t) && t == start_time;
}

std::string EncodePeerAddress(const PeerAddress& address) {
  std::string out(kMagic);
  PutString(out, address.identity.hostname);
  PutString(out, address.identity.boot_id);
  PutU64(out, address.identity.pid_namespace);
  PutU64(out, static_cast<uint64_t>(address.identity.pid));
  PutU64(out, address.identity.start_time);
  PutString(out, address.ucx_address);
  return out;
}

absl::StatusOr<PeerAddress> DecodePeerAddress(absl::string_view bytes) {
  PeerAddress a;
  absl::string_view in = bytes;
  uint64_t pid = 0;
  if (!absl::ConsumePrefix(&in, kMagic) || !GetString(in, a.identity.hostname) ||
      !GetString(in, a.identity.boot_id) || !GetU64(in, a.identity.pid_namespace) ||
      !GetU64(in, pid) || !GetU64(in, a.identity.start_time) || !GetString(in, a.ucx_address) ||
      !in.empty() || a.ucx_address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a UCX transport worker address (", bytes.size(), " bytes)"));
  }
  a.identity.pid = static_cast<int32_t>(pid);
  return a;
}

absl::Status ValidatePackedRkey(absl::string_view packed) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("rkey of ", packed.size(), " bytes is not a packed UCX rkey: ", why));
  };
  uint64_t md_map = 0;
  if (packed.size() < sizeof(md_map) + 1) {
    return bad("shorter than its header");
  }
  std::memcpy(&md_map, packed.data(), sizeof(md_map));
  const auto mem_type = static_cast<uint8_t>(packed[sizeof(md_map)]);
  if (mem_type >= UCS_MEMORY_TYPE_LAST) {
    return bad(absl::StrCat("memory type ", mem_type));
  }
  size_t at = sizeof(md_map) + 1;
  for (int md = 0; md < 64; ++md) {
    if ((md_map >> md & 1) == 0) {
      continue;
    }
    if (at >= packed.size()) {
      return bad(absl::StrCat("md ", md, " has no key"));
    }
    const size_t n = static_cast<uint8_t>(packed[at]);
    if (n > packed.size() - at - 1) {
      return bad(absl::StrCat("md ", md, "'s key of ", n, " bytes runs past the end"));
    }
    at += 1 + n;
  }
  // Optional tail: a system device byte and 3-byte distances.
  const size_t tail = packed.size() - at;
  if (tail != 0 && (tail - 1) % 3 != 0) {
    return bad(absl::StrCat(tail, " bytes after the keys"));
  }
  return absl::OkStatus();
}

LaneInfo ParseEndpointInfo(absl::string_view text) {
  LaneInfo info;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t lane = line.find("lane[");
    if (lane == absl::string_view::npos) {
      continue;
    }
    // "lane[0]:  2:sysv/memory.0 md[0]  -> md[0]/sysv/sysdev[255] am am_bw#0"
    absl::string_view rest = line.substr(lane);
    const size_t colon = rest.find(':');
    const size_t arrow = rest.find("->");
    if (colon == absl::string_view::npos || arrow == absl::string_view::npos) {
      continue;
    }
    absl::string_view local = absl::StripLeadingAsciiWhitespace(rest.substr(colon + 1));
    // "2:sysv/memory.0 md[0]" (a proxy lane says "proxy to lane[N]" instead).
    const size_t idx_colon = local.find(':');
    const size_t slash = local.find('/');
    if (idx_colon != absl::string_view::npos && slash != absl::string_view::npos &&
        idx_colon < slash) {
      AddUnique(info.transports, local.substr(idx_colon + 1, slash - idx_colon - 1));
    }
    for (absl::string_view token : absl::StrSplit(rest.substr(arrow + 2), ' ', absl::SkipEmpty())) {
      if (absl::StartsWith(token, "rma#")) {
        info.native_rma = true;
      }
    }
  }
  return info;
}

std::vector<std::string> ParseContextTransports(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StrContains(line, "resource")) {
      continue;
    }
    const size_t dashes = line.find("--");
    if (dashes == absl::string_view::npos) {
      continue;
    }
    absl::string_view tl = absl::StripAsciiWhitespace(line.substr(dashes + 2));
    const size_t slash = tl.find('/');
    if (slash != absl::string_view::npos) {
      AddUnique(out, tl.substr(0, slash));
    }
  }
  return out;
}

bool IsSharedMemoryTransport(absl::string_view tl) {
  return tl == "sysv" || tl == "posix" || tl == "cma" || tl == "knem" || tl == "xpmem";
}

bool IsNativeRmaTransport(absl::string_view tl) {
  return absl::StartsWith(tl, "rc") || absl::StartsWith(tl, "dc") || tl == "ugni_rdma";
}

absl::Status UcsError(int ucs_status, absl::string_view context, absl::StatusCode fallback) {
  const auto status = static_cast<ucs_status_t>(ucs_status);
  const std::string message = absl::StrCat(context, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_OK:
      return absl::OkStatus();
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_INVALID_PARAM:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::Status(fallback, message);
  }
}

}  // namespace tandem::kvtransfer::internal
