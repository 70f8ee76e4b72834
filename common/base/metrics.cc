#include "common/base/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/base/logging.h"

namespace tandem::base {
namespace {

// The text format escapes a label value's backslash, double quote and line
// feed, and a HELP text's backslash and line feed (nothing else).
std::string EscapeLabel(const std::string& v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string EscapeHelp(const std::string& v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\n", "\\n"}});
}

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    absl::StrAppend(&out, labels[i].first, "=\"", EscapeLabel(labels[i].second), "\"");
  }
  return out + "}";
}

// Adds a label to an already-rendered label set ("{a=\"b\"}" + le).
std::string WithLabel(const std::string& rendered, const std::string& name,
                      const std::string& value) {
  std::string extra = absl::StrCat(name, "=\"", value, "\"");
  if (rendered.empty()) return absl::StrCat("{", extra, "}");
  return absl::StrCat(rendered.substr(0, rendered.size() - 1), ",", extra, "}");
}

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.9g", v);
}

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double v) {
  DCHECK_GE(v, 0) << "counters only go up";
  AtomicAdd(value_, v);
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
  absl::MutexLock lock(&mu_);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100};
}

std::vector<double> ByteBuckets() {
  std::vector<double> b;
  for (double v = 1024; v <= 4.0 * (1ull << 30); v *= 4) b.push_back(v);
  return b;
}

MetricsRegistry::Family& MetricsRegistry::GetFamilyLocked(const std::string& name, Type type,
                                                          const std::string& help) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  }
  CHECK(it->second.type == type) << "metric " << name << " re-declared with another type";
  CHECK(it->second.help == help) << "metric " << name << " re-declared with another help text: \""
                                 << help << "\" (first: \"" << it->second.help << "\")";
  return it->second;
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = GetFamilyLocked(name, Type::kCounter, help).counters[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = GetFamilyLocked(name, Type::kGauge, help).gauges[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = GetFamilyLocked(name, Type::kHistogram, help).histograms[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return slot.get();
}

std::string MetricsRegistry::RenderText() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(f.help), "\n# TYPE ", name, " ", type,
                    "\n");
    for (const auto& [labels, c] : f.counters) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(c->value()), "\n");
    }
    for (const auto& [labels, g] : f.gauges) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(g->value()), "\n");
    }
    for (const auto& [labels, h] : f.histograms) {
      Histogram::Snapshot s = h->snapshot();
      for (size_t i = 0; i < s.bounds.size(); ++i) {
        absl::StrAppend(&out, name, "_bucket", WithLabel(labels, "le", FormatValue(s.bounds[i])),
                        " ", s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_bucket", WithLabel(labels, "le", "+Inf"), " ", s.count, "\n");
      absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", labels, " ", s.count, "\n");
    }
  }
  return out;
}

}  // namespace tandem::base
