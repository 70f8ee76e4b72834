#include "bench/replay/arrivals.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::replay {

absl::StatusOr<std::vector<double>> SyntheticArrivals(Arrival arrival, double rate,
                                                      double burstiness, int64_t max_requests,
                                                      double duration_s, uint64_t seed) {
  if (arrival != Arrival::kPoisson && arrival != Arrival::kGamma) {
    return absl::InvalidArgumentError("synthetic arrivals are poisson or gamma");
  }
  if (!(rate > 0) || !std::isfinite(rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request rate ", rate, " must be a positive number of requests/s"));
  }
  if (arrival == Arrival::kGamma && (!(burstiness > 0) || !std::isfinite(burstiness))) {
    return absl::InvalidArgumentError(
        absl::StrCat("burstiness (the gamma shape) ", burstiness, " must be > 0"));
  }
  if (max_requests < 0 || !(duration_s >= 0) || !std::isfinite(duration_s)) {
    return absl::InvalidArgumentError(absl::StrCat("max_requests ", max_requests, " and duration ",
                                                   duration_s, " s must be >= 0"));
  }
  if (max_requests == 0 && duration_s == 0) {
    return absl::InvalidArgumentError(
        "synthetic arrivals need a bound: max_requests or a duration");
  }
  // Expected count from the duration, with room for the Poisson spread.
  const double expected = duration_s * rate;
  if ((max_requests == 0 || max_requests > kMaxSyntheticRequests) &&
      expected + 10 * std::sqrt(expected) > static_cast<double>(kMaxSyntheticRequests)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate ", rate, "/s for ", duration_s, " s would send more than ",
                     kMaxSyntheticRequests, " requests; lower the rate or set max_requests"));
  }
  std::mt19937_64 rng(seed);
  // Gamma(shape k, scale 1/(rate k)) has mean 1/rate; k = 1 is exponential.
  const double shape = arrival == Arrival::kGamma ? burstiness : 1.0;
  std::gamma_distribution<double> interval(shape, 1.0 / (rate * shape));
  std::vector<double> offsets;
  double t = 0;
  while (max_requests == 0 || static_cast<int64_t>(offsets.size()) < max_requests) {
    if (duration_s > 0 && t >= duration_s) {
      break;
    }
    if (static_cast<int64_t>(offsets.size()) >= kMaxSyntheticRequests) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxSyntheticRequests,
                                                     " synthetic arrivals; set max_requests"));
    }
    offsets.push_back(t);
    t += interval(rng);
  }
  return offsets;
}

}  // namespace tandem::replay
