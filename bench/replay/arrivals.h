#pragma once
// Synthetic arrival processes for tandem-replay: send offsets (seconds from
// the start of the replay) of a Poisson process at `rate`, or of a Gamma
// renewal process whose intervals have mean 1/rate and shape `burstiness`
// (coefficient of variation 1/sqrt(burstiness): < 1 burstier than Poisson,
// > 1 more regular), as vLLM benchmark_serving's --burstiness. The first
// request goes at 0. Deterministic for a seed (std::mt19937_64 and libstdc++'s
// distributions, so the same build gives the same offsets). Pure, any thread.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/workload.h"

namespace tandem::replay {

// At most this many synthetic arrivals (a bound on memory, not a tuning knob).
inline constexpr int64_t kMaxSyntheticRequests = 10'000'000;

// Offsets for `arrival` (kPoisson or kGamma; kPoisson ignores burstiness):
// stops at max_requests (> 0) or before the first offset >= duration_s (> 0),
// whichever comes first. InvalidArgument when neither bound is given, when
// rate or burstiness is not a positive finite number, or when the bounds allow
// more than kMaxSyntheticRequests arrivals.
absl::StatusOr<std::vector<double>> SyntheticArrivals(Arrival arrival, double rate,
                                                      double burstiness, int64_t max_requests,
                                                      double duration_s, uint64_t seed);

}  // namespace tandem::replay
