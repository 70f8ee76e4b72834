#pragma once
// --isa=scalar|avx2|avx512|avx512vnni|avx512amx for the engine's benchmarks:
// runs the kernels on that path (clamped to what the CPU has, see
// SetActiveIsa), so two paths can be measured alternately with one binary.
// --prefetch=l1|l2 likewise sets where the decode kernels prefetch their
// weight stream (SetStreamPrefetch; the default is DetectStreamPrefetch's).

#include <cstdio>
#include <string_view>

#include "benchmark/benchmark.h"
#include "common/engine/kernels/kernels.h"

namespace tandem::engine::bench {

// Applies and removes --isa=NAME and --prefetch=LEVEL from argv (the rest is kept for Google
// Benchmark). False, after a message naming `program`, on an unknown name.
inline bool TakeIsaFlag(const char* program, int* argc, char** argv) {
  constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni,
                           Isa::kAvx512Amx};
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, 11) == "--prefetch=") {
      const std::string_view level = arg.substr(11);
      if (level != "l1" && level != "l2") {
        std::fprintf(stderr, "%s: unknown --prefetch=%.*s (l1, l2)\n", program,
                     static_cast<int>(level.size()), level.data());
        return false;
      }
      SetStreamPrefetch(level == "l2" ? StreamPrefetch::kL2 : StreamPrefetch::kL1);
      continue;
    }
    if (arg.substr(0, 6) != "--isa=") {
      argv[kept++] = argv[i];
      continue;
    }
    const std::string_view name = arg.substr(6);
    bool known = false;
    for (Isa isa : kIsas) {
      if (name == IsaName(isa)) {
        SetActiveIsa(isa);
        known = true;
      }
    }
    if (!known) {
      std::fprintf(stderr, "%s: unknown --isa=%.*s (scalar, avx2, avx512, avx512vnni, avx512amx)\n",
                   program, static_cast<int>(name.size()), name.data());
      return false;
    }
  }
  *argc = kept;
  return true;
}

// main() of a Google Benchmark binary that also takes --isa and --prefetch.
inline int BenchmarkMainWithIsaFlag(const char* program, int argc, char** argv) {
  if (!TakeIsaFlag(program, &argc, argv)) {
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace tandem::engine::bench
