#include "tests/testing/smaps.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace tandem::testing {

absl::StatusOr<std::string> VmFlagsAt(const void* address) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return absl::UnavailableError("cannot read /proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    // A mapping's header: "lo-hi perms offset dev inode [path]".
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
        line.find(' ') > line.find('-')) {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && absl::StartsWith(line, "VmFlags:")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(8)));
    }
  }
  return absl::NotFoundError(absl::StrCat("no mapping contains ", absl::Hex(a)));
}

bool AdvisedHugePages(const void* address) {
  auto flags = VmFlagsAt(address);
  if (!flags.ok()) {
    ADD_FAILURE() << flags.status();
    return false;
  }
  for (absl::string_view f : absl::StrSplit(*flags, ' ', absl::SkipEmpty())) {
    if (f == "hg") return true;
  }
  return false;
}

bool Mapped(const void* address) { return VmFlagsAt(address).ok(); }

}  // namespace tandem::testing
