#include "common/base/metrics.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::base {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry r;
  r.GetCounter("tandem_requests_total", "Requests.", {{"code", "OK"}})->Increment(3);
  r.GetCounter("tandem_requests_total", "Requests.", {{"code", "INVALID_ARGUMENT"}})->Increment();
  r.GetGauge("tandem_kv_blocks_free", "Free blocks.")->Set(12);
  Histogram* h = r.GetHistogram("tandem_ttft_seconds", "TTFT.", {0.1, 1}, {{"model", "m"}});
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(7);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("# TYPE tandem_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("tandem_requests_total{code=\"OK\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tandem_requests_total{code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_kv_blocks_free 12\n"));
  EXPECT_THAT(text, HasSubstr("tandem_ttft_seconds_bucket{model=\"m\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_ttft_seconds_bucket{model=\"m\",le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_ttft_seconds_bucket{model=\"m\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tandem_ttft_seconds_sum{model=\"m\"} 7.55\n"));
  EXPECT_THAT(text, HasSubstr("tandem_ttft_seconds_count{model=\"m\"} 3\n"));
  // The same (name, labels) is the same series.
  EXPECT_EQ(r.GetCounter("tandem_requests_total", "Requests.", {{"code", "OK"}})->value(), 3);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.GetCounter("c_total", "c");
  Histogram* h = r.GetHistogram("h_seconds", "h", LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(0.01);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->snapshot().count, 40000u);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry r;
  r.GetGauge("g", "g", {{"model", "a\"b\\c"}})->Set(1);
  EXPECT_THAT(r.RenderText(), HasSubstr("g{model=\"a\\\"b\\\\c\"} 1\n"));
}

TEST(MetricsTest, HelpTextIsEscaped) {
  MetricsRegistry r;
  r.GetCounter("c_total", "a \\ b\nsecond line \"quoted\"")->Increment();
  // HELP escapes backslash and line feed only; a quote stays as it is.
  EXPECT_THAT(r.RenderText(),
              HasSubstr("# HELP c_total a \\\\ b\\nsecond line \"quoted\"\n# TYPE c_total counter\n"));
}

TEST(MetricsTest, SameNameSameHelpIsOneFamily) {
  MetricsRegistry r;
  r.GetCounter("c_total", "help", {{"k", "a"}})->Increment();
  r.GetCounter("c_total", "help", {{"k", "b"}})->Increment(2);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("c_total{k=\"a\"} 1\nc_total{k=\"b\"} 2\n"));
  EXPECT_EQ(text.find("# HELP c_total"), text.rfind("# HELP c_total"));
}

TEST(MetricsDeathTest, RedeclaringWithAnotherHelpTextIsABug) {
  MetricsRegistry r;
  r.GetCounter("c_total", "first help");
  EXPECT_DEATH(r.GetCounter("c_total", "other help", {{"k", "v"}}),
               "metric c_total re-declared with another help text: \"other help\" \\(first: "
               "\"first help\"\\)");
}

TEST(MetricsDeathTest, RedeclaringWithAnotherTypeIsABug) {
  MetricsRegistry r;
  r.GetCounter("x", "help");
  EXPECT_DEATH(r.GetGauge("x", "help"), "metric x re-declared with another type");
}

}  // namespace
}  // namespace tandem::base
