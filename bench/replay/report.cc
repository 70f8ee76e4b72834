#include "bench/replay/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tandem::replay {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

// "value cumulative_fraction" lines of an empirical CDF, in milliseconds.
std::string CdfData(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  std::string out;
  for (size_t i = 0; i < seconds.size(); ++i) {
    absl::StrAppend(&out, absl::StrFormat("%.6f %.6f\n", seconds[i] * 1e3,
                                          static_cast<double>(i + 1) / seconds.size()));
  }
  return out;
}

// The path of `name` in a directory of $PATH ("" when none has it).
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view d : absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(d, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// plot.gp: the four CDFs (a "no data" panel for an empty one) and the
// throughput over time.
std::string PlotScript(const std::vector<std::pair<std::string, bool>>& metrics) {
  std::string out = R"gp(# Drawn by tandem-replay (bench/replay/report.cc); rerun: gnuplot plot.gp
set terminal pngcairo size 1200,900 font ",10"
set output "latency_cdf.png"
set multiplot layout 2,2 title "tandem-replay: latency CDFs"
set grid
set key off
set ylabel "cumulative fraction"
set yrange [0:1]
)gp";
  for (const auto& [name, has_data] : metrics) {
    const std::string upper = absl::AsciiStrToUpper(name);
    absl::StrAppend(&out, "set title \"", upper, "\"\nset xlabel \"", upper, " (ms)\"\n");
    if (has_data) {
      absl::StrAppend(&out, "plot \"cdf_", name, ".dat\" using 1:2 with steps lw 2\n");
    } else {
      absl::StrAppend(&out, "set label 1 \"no data\" at graph 0.5,0.5 center\n",
                      "set xrange [0:1]\nplot NaN\nunset label 1\nset xrange [*:*]\n");
    }
  }
  out += R"gp(unset multiplot
set terminal pngcairo size 1200,500 font ",10"
set output "throughput.png"
set title "tandem-replay: throughput over time"
set key top left
set yrange [0:*]
set xlabel "time since start (s)"
set ylabel "requests completed / s"
set y2label "output tokens / s"
set y2range [0:*]
set y2tics
set ytics nomirror
plot "throughput.dat" using 1:2 with steps lw 2 title "requests completed / s" axes x1y1, \
     "throughput.dat" using 1:3 with steps lw 2 title "output tokens / s (HTTP: SSE events / s)" axes x1y2
)gp";
  return out;
}

}  // namespace

absl::Status WriteReport(const std::string& dir, absl::Span<const RequestRecord> records,
                         const Summary& summary, const nlohmann::json& run) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("--output ", dir, ": cannot create the directory: ", ec.message()));
  }
  if (absl::Status s = WriteFile(absl::StrCat(dir, "/requests.jsonl"), RecordsJsonl(records));
      !s.ok()) {
    return s;
  }
  nlohmann::json j = SummaryJson(summary);
  j["run"] = run;
  return WriteFile(absl::StrCat(dir, "/summary.json"), j.dump(2) + "\n");
}

absl::Status WritePlots(const std::string& dir, absl::Span<const RequestRecord> records) {
  std::vector<double> ttft, tpot, itl, e2e;
  double end = 0;
  for (const RequestRecord& r : records) {
    end = std::max(end, r.end_s);
  }
  // Throughput in ~50 buckets of at least 0.1 s.
  const double bucket = std::max(0.1, end / 50.0);
  const size_t buckets = static_cast<size_t>(std::ceil(end / bucket)) + 1;
  std::vector<int64_t> completed(buckets, 0), tokens(buckets, 0);
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      continue;
    }
    ++completed[static_cast<size_t>(r.end_s / bucket)];
    const bool counted = r.chunk_tokens.size() == r.chunk_times_s.size();
    for (size_t i = 0; i < r.chunk_times_s.size(); ++i) {
      tokens[static_cast<size_t>(std::max(0.0, r.chunk_times_s[i]) / bucket)] +=
          counted ? r.chunk_tokens[i] : 1;
    }
    e2e.push_back(r.e2e_s());
    if (r.ttft_s()) {
      ttft.push_back(*r.ttft_s());
    }
    if (const std::optional<double> t = Tpot(r)) {
      tpot.push_back(*t);
    }
    AppendItl(r, itl);
  }
  // Tokens per second where chunks say how many they carry (gRPC), else chunks.
  std::string throughput = "# start_s requests_per_s output_tokens_per_s\n";
  for (size_t b = 0; b < buckets; ++b) {
    absl::StrAppend(&throughput, absl::StrFormat("%.3f %.4f %.4f\n", b * bucket,
                                                 completed[b] / bucket, tokens[b] / bucket));
  }
  const bool ttft_empty = ttft.empty(), tpot_empty = tpot.empty(), itl_empty = itl.empty(),
             e2e_empty = e2e.empty();
  const std::vector<std::pair<std::string, std::string>> files = {
      {"cdf_ttft.dat", CdfData(std::move(ttft))}, {"cdf_tpot.dat", CdfData(std::move(tpot))},
      {"cdf_itl.dat", CdfData(std::move(itl))},   {"cdf_e2e.dat", CdfData(std::move(e2e))},
      {"throughput.dat", throughput},
      {"plot.gp", PlotScript({{"ttft", !ttft_empty},
                              {"tpot", !tpot_empty},
                              {"itl", !itl_empty},
                              {"e2e", !e2e_empty}})}};
  for (const auto& [name, text] : files) {
    if (absl::Status s = WriteFile(absl::StrCat(dir, "/", name), text); !s.ok()) {
      return s;
    }
  }
  const std::string gnuplot = FindOnPath("gnuplot");
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(
        "gnuplot is not on PATH (Debian: apt-get install gnuplot-nox; scripts/setup.sh does): no "
        "PNG drawn; the data and plot.gp are in the output directory");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError("fork for gnuplot failed");
  }
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) {
      _exit(127);
    }
    execl(gnuplot.c_str(), "gnuplot", "plot.gp", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot ", dir, "/plot.gp failed (exit status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::replay
