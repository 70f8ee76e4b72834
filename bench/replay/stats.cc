#include "bench/replay/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;

// "200ms" / "2s" / "1.5s" -> seconds.
absl::StatusOr<double> ParseSeconds(absl::string_view item, absl::string_view value) {
  double scale = 1;
  if (absl::ConsumeSuffix(&value, "ms")) {
    scale = 1e-3;
  } else if (!absl::ConsumeSuffix(&value, "s")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slo item '", item, "': the value needs a unit, ms or s (e.g. 200ms)"));
  }
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slo item '", item, "': '", value, "' is not a positive number"));
  }
  return v * scale;
}

json DistributionJson(const Distribution& d) {
  auto v = [&](double x) { return d.count == 0 ? json(nullptr) : json(x); };
  return json{{"count", d.count}, {"mean", v(d.mean)}, {"p50", v(d.p50)},
              {"p90", v(d.p90)},  {"p99", v(d.p99)}};
}

json SloJson(const Slo& slo) {
  json j = json::object();
  if (slo.ttft_s) {
    j["ttft_s"] = *slo.ttft_s;
  }
  if (slo.tpot_s) {
    j["tpot_s"] = *slo.tpot_s;
  }
  if (slo.e2e_s) {
    j["e2e_s"] = *slo.e2e_s;
  }
  return j;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (slo.ttft_s && (!r.ttft_s() || *r.ttft_s() > *slo.ttft_s)) {
    return false;
  }
  if (slo.tpot_s) {
    const std::optional<double> tpot = Tpot(r);
    if (tpot && *tpot > *slo.tpot_s) {
      return false;
    }
  }
  return !slo.e2e_s || r.e2e_s() <= *slo.e2e_s;
}

std::string Ms(const Distribution& d, double v) {
  return d.count == 0 ? "-" : absl::StrFormat("%.1f", v * 1e3);
}

}  // namespace

std::optional<double> Tpot(const RequestRecord& r) {
  if (r.output_tokens < 2 || !r.ttft_s()) {
    return std::nullopt;
  }
  return (r.e2e_s() - *r.ttft_s()) / static_cast<double>(r.output_tokens - 1);
}

void AppendItl(const RequestRecord& r, std::vector<double>& itl) {
  const bool counted = r.chunk_tokens.size() == r.chunk_times_s.size();
  for (size_t i = 1; i < r.chunk_times_s.size(); ++i) {
    const double gap = r.chunk_times_s[i] - r.chunk_times_s[i - 1];
    const int64_t k = counted ? std::max<int64_t>(1, r.chunk_tokens[i]) : 1;
    for (int64_t j = 0; j < k; ++j) {
      itl.push_back(gap / static_cast<double>(k));
    }
  }
}

absl::StatusOr<Slo> ParseSlo(absl::string_view spec) {
  Slo slo;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--slo item '", item, "' is not NAME=VALUE (e.g. ttft=2s,tpot=200ms)"));
    }
    std::optional<double>* target = nullptr;
    if (kv[0] == "ttft") {
      target = &slo.ttft_s;
    } else if (kv[0] == "tpot") {
      target = &slo.tpot_s;
    } else if (kv[0] == "e2e") {
      target = &slo.e2e_s;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--slo item '", item, "': unknown SLO '", kv[0], "' (ttft, tpot, e2e)"));
    }
    absl::StatusOr<double> seconds = ParseSeconds(item, kv[1]);
    if (!seconds.ok()) {
      return seconds.status();
    }
    *target = *seconds;
  }
  return slo;
}

double Percentile(absl::Span<const double> sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t k = static_cast<size_t>(std::floor(rank));
  if (k + 1 >= sorted.size()) {
    return sorted.back();
  }
  return sorted[k] + (rank - static_cast<double>(k)) * (sorted[k + 1] - sorted[k]);
}

Distribution Describe(std::vector<double> values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    return d;
  }
  std::sort(values.begin(), values.end());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  return d;
}

Summary Summarize(absl::Span<const RequestRecord> records, const Slo& slo) {
  Summary s;
  s.slo = slo;
  std::vector<double> ttft, tpot, itl, e2e;
  double first_send = 0;
  double last_end = 0;
  for (const RequestRecord& r : records) {
    if (s.requests_sent == 0 || r.send_s < first_send) {
      first_send = r.send_s;
    }
    if (s.requests_sent == 0 || r.end_s > last_end) {
      last_end = r.end_s;
    }
    ++s.requests_sent;
    if (!r.ok) {
      ++s.requests_error;
      ++s.errors[r.status];
      continue;
    }
    ++s.requests_ok;
    s.input_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.cached_prompt_tokens += r.cached_prompt_tokens.value_or(0);
    s.cache_hits += r.cache_hit.value_or(false) ? 1 : 0;
    if (r.ttft_s()) {
      ttft.push_back(*r.ttft_s());
    }
    if (const std::optional<double> t = Tpot(r)) {
      tpot.push_back(*t);
    }
    AppendItl(r, itl);
    e2e.push_back(r.e2e_s());
    s.requests_meeting_slo += MeetsSlo(r, slo) ? 1 : 0;
  }
  s.duration_s = std::max(0.0, last_end - first_send);
  if (s.duration_s > 0) {
    s.throughput_rps = static_cast<double>(s.requests_ok) / s.duration_s;
    s.input_tokens_per_s = static_cast<double>(s.input_tokens) / s.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.duration_s;
    s.goodput_rps = static_cast<double>(s.requests_meeting_slo) / s.duration_s;
  }
  s.ttft_s = Describe(std::move(ttft));
  s.tpot_s = Describe(std::move(tpot));
  s.itl_s = Describe(std::move(itl));
  s.e2e_s = Describe(std::move(e2e));
  return s;
}

json SummaryJson(const Summary& s) {
  json j;
  j["requests_sent"] = s.requests_sent;
  j["requests_ok"] = s.requests_ok;
  j["requests_error"] = s.requests_error;
  j["errors"] = json::object();
  for (const auto& [status, n] : s.errors) {
    j["errors"][status] = n;
  }
  j["requests_meeting_slo"] = s.requests_meeting_slo;
  j["slo"] = SloJson(s.slo);
  j["duration_s"] = s.duration_s;
  j["input_tokens"] = s.input_tokens;
  j["output_tokens"] = s.output_tokens;
  j["cached_prompt_tokens"] = s.cached_prompt_tokens;
  j["cache_hits"] = s.cache_hits;
  j["throughput_rps"] = s.throughput_rps;
  j["input_tokens_per_s"] = s.input_tokens_per_s;
  j["output_tokens_per_s"] = s.output_tokens_per_s;
  j["goodput_rps"] = s.goodput_rps;
  j["ttft_s"] = DistributionJson(s.ttft_s);
  j["tpot_s"] = DistributionJson(s.tpot_s);
  j["itl_s"] = DistributionJson(s.itl_s);
  j["e2e_s"] = DistributionJson(s.e2e_s);
  j["percentile_method"] = "linear interpolation between closest ranks (numpy default)";
  return j;
}

std::string SummaryTable(const Summary& s) {
  std::string out = "============ tandem-replay summary ============\n";
  auto line = [&](absl::string_view name, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-32s %s\n", name, value));
  };
  line("Requests sent", absl::StrCat(s.requests_sent));
  line("Requests OK", absl::StrCat(s.requests_ok));
  line("Requests failed", absl::StrCat(s.requests_error));
  for (const auto& [status, n] : s.errors) {
    line(absl::StrCat("  ", status), absl::StrCat(n));
  }
  line("Duration (s)", absl::StrFormat("%.2f", s.duration_s));
  line("Output tokens (OK requests)", absl::StrCat(s.output_tokens));
  line("Throughput (requests/s)", absl::StrFormat("%.3f", s.throughput_rps));
  line("Output tokens/s", absl::StrFormat("%.1f", s.output_tokens_per_s));
  line("Goodput (requests/s at SLO)", absl::StrFormat("%.3f", s.goodput_rps));
  absl::StrAppend(&out, absl::StrFormat("%-10s %10s %10s %10s %10s %8s\n", "(ms)", "mean", "p50",
                                        "p90", "p99", "n"));
  for (const auto& [name, d] : {std::pair<const char*, const Distribution&>{"TTFT", s.ttft_s},
                                {"TPOT", s.tpot_s},
                                {"ITL", s.itl_s},
                                {"E2E", s.e2e_s}}) {
    absl::StrAppend(&out, absl::StrFormat("%-10s %10s %10s %10s %10s %8d\n", name, Ms(d, d.mean),
                                          Ms(d, d.p50), Ms(d, d.p90), Ms(d, d.p99), d.count));
  }
  out += "===============================================\n";
  return out;
}

}  // namespace tandem::replay
