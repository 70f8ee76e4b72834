// The other process of the cross-process UcxTransport tests (and of the
// transfer benchmark). Talks line by line over stdin/stdout:
//
//   ucx_transport_peer receiver <ucx_tls> <region_bytes> [alloc]
//     prints "DESC ..." (its region: its own memory, registered, or with
//     "alloc" one from AllocateRegion), then answers
//       "WAIT <tag> <bytes> <timeout_ms>" -> "RECEIVED <n>" (n < bytes: timed out)
//       "HASH <offset> <length>"          -> "HASH <fingerprint>"
//       "FORGET <tag>"                    -> "OK"
//       "QUIT" (or end of input)          -> exits 0
//   ucx_transport_peer sender <ucx_tls> <mode>
//     reads a "DESC ..." line, then writes its whole region over and over
//     (ops of 1 MiB, tag = round) printing "WROTE <round> <status>", until
//     killed or a write fails.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtransfer/transport.h"
#include "kvtransfer/ucx_transport.h"
#include "tests/testing/transport_test_util.h"

namespace tandem::kvtransfer {
namespace {

void Say(const std::string& line) {
  std::cout << line << std::endl;  // flushes
}

int Receiver(const std::string& tls, uint64_t region_bytes, bool allocate) {
  auto transport = UcxTransport::Create(
      TransportConfig{.kind = "ucx", .ucx_tls = tls, .ucx_net_devices = tls == "tcp" ? "lo" : ""});
  if (!transport.ok()) {
    std::cerr << "peer: " << transport.status() << "\n";
    return 1;
  }
  std::vector<uint8_t> owned;
  absl::Span<uint8_t> region;
  absl::StatusOr<RegionDescriptor> desc;
  if (allocate) {
    absl::StatusOr<AllocatedRegion> a = (*transport)->AllocateRegion(region_bytes);
    if (a.ok()) {
      region = absl::MakeSpan(static_cast<uint8_t*>(a->base), region_bytes);
      std::fill(region.begin(), region.end(), 0);
      desc = a->descriptor;
    } else {
      desc = a.status();
    }
  } else {
    owned.assign(region_bytes, 0);
    region = absl::MakeSpan(owned);
    desc = (*transport)->RegisterRegion(owned.data(), owned.size());
  }
  if (!desc.ok()) {
    std::cerr << "peer: " << desc.status() << "\n";
    return 1;
  }
  Say(testing::DescriptorLine(*desc));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty()) {
      continue;
    }
    if (f[0] == "QUIT") {
      break;
    }
    if (f[0] == "WAIT" && f.size() == 4) {
      uint64_t tag = 0, bytes = 0, timeout_ms = 0;
      (void)absl::SimpleAtoi(f[1], &tag);
      (void)absl::SimpleAtoi(f[2], &bytes);
      (void)absl::SimpleAtoi(f[3], &timeout_ms);
      const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
      uint64_t got = 0;
      while ((got = (*transport)->ReceivedBytes(tag)) < bytes && absl::Now() < deadline) {
        absl::SleepFor(absl::Microseconds(200));
      }
      Say(absl::StrCat("RECEIVED ", got));
    } else if (f[0] == "HASH" && f.size() == 3) {
      uint64_t offset = 0, length = 0;
      (void)absl::SimpleAtoi(f[1], &offset);
      (void)absl::SimpleAtoi(f[2], &length);
      if (offset > region.size() || length > region.size() - offset) {
        Say("HASH out-of-range");
      } else {
        Say(absl::StrCat("HASH ", testing::Fingerprint(region.data() + offset, length)));
      }
    } else if (f[0] == "FORGET" && f.size() == 2) {
      uint64_t tag = 0;
      (void)absl::SimpleAtoi(f[1], &tag);
      (*transport)->Forget(tag);
      Say("OK");
    } else {
      Say(absl::StrCat("ERROR unknown command: ", line));
    }
  }
  (*transport)->Shutdown();
  return 0;
}

int Sender(const std::string& tls, const std::string& mode) {
  std::string line;
  RegionDescriptor peer;
  if (!std::getline(std::cin, line) || !testing::ParseDescriptorLine(line, &peer)) {
    std::cerr << "peer: expected a DESC line\n";
    return 1;
  }
  auto transport = UcxTransport::Create(TransportConfig{
      .kind = "ucx", .mode = mode, .ucx_tls = tls, .ucx_net_devices = tls == "tcp" ? "lo" : ""});
  if (!transport.ok()) {
    std::cerr << "peer: " << transport.status() << "\n";
    return 1;
  }
  std::vector<uint8_t> src(peer.bytes);
  testing::FillPattern(src.data(), src.size(), 42);
  constexpr uint64_t kOp = 1 << 20;
  for (uint64_t round = 0;; ++round) {
    std::vector<WriteOp> ops;
    for (uint64_t off = 0; off < src.size(); off += kOp) {
      ops.push_back({src.data() + off, off, std::min(kOp, src.size() - off)});
    }
    testing::DoneRecorder done;
    absl::Status s = (*transport)->Write(peer, round, std::move(ops), done.Callback());
    if (s.ok()) {
      if (!done.Wait()) {
        s = absl::DeadlineExceededError("write did not complete");
      } else {
        s = done.status();
      }
    }
    Say(absl::StrCat("WROTE ", round, " ", s.ToString()));
    if (!s.ok()) {
      return 1;
    }
  }
}

}  // namespace
}  // namespace tandem::kvtransfer

int main(int argc, char** argv) {
  if ((argc == 4 || argc == 5) && std::string(argv[1]) == "receiver") {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(argv[3], &bytes) || bytes == 0) {
      std::cerr << "bad region size\n";
      return 2;
    }
    const bool allocate = argc == 5 && std::string(argv[4]) == "alloc";
    return tandem::kvtransfer::Receiver(argv[2], bytes, allocate);
  }
  if (argc == 4 && std::string(argv[1]) == "sender") {
    return tandem::kvtransfer::Sender(argv[2], argv[3]);
  }
  std::cerr << "usage: " << argv[0]
            << " receiver <ucx_tls> <region_bytes> [alloc] | sender <ucx_tls> <mode>\n";
  return 2;
}
