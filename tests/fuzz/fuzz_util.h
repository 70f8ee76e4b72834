#pragma once
// Helpers shared by the libFuzzer harnesses (tests/fuzz/*_fuzzer.cc): where
// the shared models are, and a check that aborts (libFuzzer reports an abort
// as a crash, with the input that caused it) when a property fails.

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tandem::fuzz {

// ../shared next to the repository (fixed at configure time, as in tests/testing/test_paths.h).
inline std::string SharedFile(const std::string& relative) {
  return std::string(TANDEM_SHARED_DIR) + "/" + relative;
}

// Aborts with `what` when `ok` is false: a property the harness asserts.
inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property failed: %s\n", what);
    std::abort();
  }
}

}  // namespace tandem::fuzz
