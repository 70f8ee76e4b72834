// Synthetic arrivals: the sample mean interval is 1/rate and the coefficient
// of variation 1/sqrt(burstiness) within bounds computed from the sample size;
// bounded by max_requests and duration; the same seed gives the same offsets.

#include "bench/replay/arrivals.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::replay {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

struct IntervalStats {
  double mean = 0;
  double cv = 0;  // standard deviation / mean
  size_t n = 0;
};

IntervalStats Intervals(const std::vector<double>& offsets) {
  IntervalStats s;
  s.n = offsets.size() - 1;
  double sum = 0;
  double sum_sq = 0;
  for (size_t i = 1; i < offsets.size(); ++i) {
    const double d = offsets[i] - offsets[i - 1];
    sum += d;
    sum_sq += d * d;
  }
  s.mean = sum / static_cast<double>(s.n);
  const double var = sum_sq / static_cast<double>(s.n) - s.mean * s.mean;
  s.cv = std::sqrt(var) / s.mean;
  return s;
}

// Gamma(shape k) intervals: the sample mean has relative standard error
// 1/sqrt(k n); the sample CV's relative standard error is about
// sqrt((excess kurtosis + 2) / (4 n)) with excess kurtosis 6 / k.
void ExpectGammaStatistics(Arrival arrival, double rate, double shape, uint64_t seed) {
  constexpr int64_t kN = 40000;
  ASSERT_OK_AND_ASSIGN(const std::vector<double> offsets,
                       SyntheticArrivals(arrival, rate, shape, kN, 0, seed));
  ASSERT_EQ(offsets.size(), static_cast<size_t>(kN));
  EXPECT_EQ(offsets[0], 0);
  const IntervalStats s = Intervals(offsets);
  const double mean_se = 1 / std::sqrt(shape * static_cast<double>(s.n));
  EXPECT_NEAR(s.mean * rate, 1.0, 5 * mean_se) << "shape " << shape;
  const double expected_cv = 1 / std::sqrt(shape);
  const double cv_se = std::sqrt((6 / shape + 2) / (4 * static_cast<double>(s.n)));
  EXPECT_NEAR(s.cv / expected_cv, 1.0, 5 * cv_se) << "shape " << shape;
}

TEST(ArrivalsTest, PoissonHasRateAndUnitCv) {
  ExpectGammaStatistics(Arrival::kPoisson, 50, 1.0, 1);
  // kPoisson ignores burstiness.
  ASSERT_OK_AND_ASSIGN(auto a, SyntheticArrivals(Arrival::kPoisson, 3, 0.1, 100, 0, 7));
  ASSERT_OK_AND_ASSIGN(auto b, SyntheticArrivals(Arrival::kPoisson, 3, 1.0, 100, 0, 7));
  EXPECT_EQ(a, b);
}

TEST(ArrivalsTest, GammaHasRateAndCvFromBurstiness) {
  ExpectGammaStatistics(Arrival::kGamma, 20, 0.25, 2);  // bursty: CV 2
  ExpectGammaStatistics(Arrival::kGamma, 5, 4.0, 3);    // regular: CV 0.5
  ExpectGammaStatistics(Arrival::kGamma, 8, 1.0, 4);    // as Poisson
}

TEST(ArrivalsTest, DeterministicBySeed) {
  ASSERT_OK_AND_ASSIGN(auto a, SyntheticArrivals(Arrival::kGamma, 10, 0.5, 500, 0, 42));
  ASSERT_OK_AND_ASSIGN(auto b, SyntheticArrivals(Arrival::kGamma, 10, 0.5, 500, 0, 42));
  ASSERT_OK_AND_ASSIGN(auto c, SyntheticArrivals(Arrival::kGamma, 10, 0.5, 500, 0, 43));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(ArrivalsTest, BoundedByDurationAndRequests) {
  ASSERT_OK_AND_ASSIGN(auto by_time, SyntheticArrivals(Arrival::kPoisson, 100, 1, 0, 30, 5));
  ASSERT_FALSE(by_time.empty());
  EXPECT_LT(by_time.back(), 30);
  // 3000 expected; Poisson count standard deviation ~55.
  EXPECT_NEAR(static_cast<double>(by_time.size()), 3000, 5 * std::sqrt(3000.0));
  ASSERT_OK_AND_ASSIGN(auto both, SyntheticArrivals(Arrival::kPoisson, 100, 1, 10, 30, 5));
  EXPECT_EQ(both.size(), 10u);
  EXPECT_TRUE(std::equal(both.begin(), both.end(), by_time.begin()));
  ASSERT_OK_AND_ASSIGN(auto short_run, SyntheticArrivals(Arrival::kPoisson, 100, 1, 1000, 1, 5));
  EXPECT_LT(short_run.size(), 1000u);
}

TEST(ArrivalsTest, RejectsBadParameters) {
  EXPECT_THAT(SyntheticArrivals(Arrival::kPoisson, 10, 1, 0, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need a bound")));
  EXPECT_THAT(SyntheticArrivals(Arrival::kPoisson, 0, 1, 10, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("request rate 0")));
  EXPECT_THAT(SyntheticArrivals(Arrival::kGamma, 1, -2, 10, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("burstiness")));
  EXPECT_THAT(SyntheticArrivals(Arrival::kPoisson, 1e9, 1, 0, 3600, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set max_requests")));
  EXPECT_THAT(SyntheticArrivals(Arrival::kTrace, 1, 1, 10, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("poisson or gamma")));
}

}  // namespace
}  // namespace tandem::replay
