#pragma once
// What the kernel says about this process's mappings (/proc/self/smaps).

#include <string>

#include "absl/status/statusor.h"

namespace tandem::testing {

// The "VmFlags:" field of the mapping that contains `address` (two-letter
// codes separated by spaces, e.g. "rd wr mr mw me ac hg"; "hg" is
// MADV_HUGEPAGE advice), or NotFound if no mapping contains it.
absl::StatusOr<std::string> VmFlagsAt(const void* address);
// Whether `address` lies in a mapping advised MADV_HUGEPAGE (fails the test
// through ADD_FAILURE and returns false if no mapping contains it).
bool AdvisedHugePages(const void* address);
// Whether any mapping of this process contains `address`.
bool Mapped(const void* address);

}  // namespace tandem::testing
