#include "bench/replay/trace.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::replay {
namespace {

constexpr absl::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr absl::string_view kUtf8Bom = "\xEF\xBB\xBF";

absl::Status LineError(const std::string& path, int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open trace file '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read trace file '", path, "'"));
  }
  return ss.str();
}

// Lines without their end ('\n' or "\r\n"); the last may lack one.
std::vector<absl::string_view> SplitLines(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) {
    lines.pop_back();
  }
  for (absl::string_view& line : lines) {
    absl::ConsumeSuffix(&line, "\r");
  }
  return lines;
}

// A non-negative integer count named `what`, for "FILE:LINE: ..." errors.
absl::StatusOr<int64_t> ParseCount(absl::string_view field, absl::string_view what) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(field);
  if (stripped.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(stripped, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", stripped, "' is not an integer"));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", value, " is negative"));
  }
  return value;
}

absl::Status CheckOrder(const std::string& path, int64_t line, double t, double previous,
                        bool have_previous) {
  if (have_previous && t < previous) {
    return LineError(path, line,
                     absl::StrCat("timestamp goes backwards (", t - previous,
                                  " s after the previous row); a trace must be sorted by time"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TraceEntry>> ParseAzure(absl::string_view text,
                                                   const std::string& path) {
  const std::vector<absl::string_view> lines = SplitLines(text);
  if (lines.empty()) {
    return LineError(path, 1, absl::StrCat("empty file; expected the header '", kAzureHeader, "'"));
  }
  absl::string_view header = lines[0];
  absl::ConsumePrefix(&header, kUtf8Bom);
  if (absl::StripAsciiWhitespace(header) != kAzureHeader) {
    return LineError(path, 1,
                     absl::StrCat("expected the Azure header '", kAzureHeader, "', found '",
                                  header.substr(0, 80), "'"));
  }
  std::vector<TraceEntry> entries;
  double first = 0;
  double previous = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const int64_t line = static_cast<int64_t>(i) + 1;
    if (absl::StripAsciiWhitespace(lines[i]).empty()) {
      continue;
    }
    const std::vector<absl::string_view> fields = absl::StrSplit(lines[i], ',');
    if (fields.size() != 3) {
      return LineError(path, line,
                       absl::StrCat("expected 3 fields (TIMESTAMP,ContextTokens,GeneratedTokens), "
                                    "found ",
                                    fields.size()));
    }
    auto t = ParseAzureTimestamp(fields[0]);
    if (!t.ok()) {
      return LineError(path, line, t.status().message());
    }
    auto input = ParseCount(fields[1], "ContextTokens");
    if (!input.ok()) {
      return LineError(path, line, input.status().message());
    }
    auto output = ParseCount(fields[2], "GeneratedTokens");
    if (!output.ok()) {
      return LineError(path, line, output.status().message());
    }
    RETURN_IF_ERROR(CheckOrder(path, line, *t, previous, !entries.empty()));
    if (entries.empty()) {
      first = *t;
    }
    previous = *t;
    TraceEntry entry;
    entry.arrival_s = *t - first;
    entry.input_tokens = *input;
    entry.output_tokens = *output;
    entry.line = line;
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    return LineError(path, 2, "empty trace: no rows after the header");
  }
  return entries;
}

// A JSON value that must be a non-negative integer (an integral double too).
absl::StatusOr<int64_t> JsonCount(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing field '", key, "'"));
  }
  if (it->is_number_unsigned() || it->is_number_integer()) {
    const int64_t value = it->get<int64_t>();
    if (value < 0 || (it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' ", it->dump(), " is negative or too large"));
    }
    return value;
  }
  if (it->is_number_float()) {
    const double value = it->get<double>();
    if (value >= 0 && value < 9e18 && std::floor(value) == value) {
      return static_cast<int64_t>(value);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", key, "' is ", it->dump(), ", not a non-negative integer"));
}

absl::StatusOr<TraceEntry> ParseMooncakeLine(absl::string_view line_text, double* timestamp_ms) {
  const nlohmann::json row = nlohmann::json::parse(line_text.begin(), line_text.end(), nullptr,
                                                   /*allow_exceptions=*/false);
  if (row.is_discarded()) {
    return absl::InvalidArgumentError("not valid JSON");
  }
  if (!row.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  const auto ts = row.find("timestamp");
  if (ts == row.end()) {
    return absl::InvalidArgumentError("missing field 'timestamp'");
  }
  if (!ts->is_number() || ts->get<double>() < 0 || !std::isfinite(ts->get<double>())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'timestamp' is ", ts->dump(), ", not a non-negative number of ms"));
  }
  *timestamp_ms = ts->get<double>();
  TraceEntry entry;
  ASSIGN_OR_RETURN(entry.input_tokens, JsonCount(row, "input_length"));
  ASSIGN_OR_RETURN(entry.output_tokens, JsonCount(row, "output_length"));
  const auto hashes = row.find("hash_ids");
  if (hashes != row.end()) {
    if (!hashes->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'hash_ids' is ", hashes->dump().substr(0, 40), ", not an array"));
    }
    entry.hash_ids.reserve(hashes->size());
    for (size_t i = 0; i < hashes->size(); ++i) {
      const nlohmann::json& id = (*hashes)[i];
      if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<int64_t>() >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("hash_ids[", i, "] is ", id.dump(), ", not a non-negative integer"));
      }
      entry.hash_ids.push_back(id.get<uint64_t>());
    }
  }
  return entry;
}

absl::StatusOr<std::vector<TraceEntry>> ParseMooncake(absl::string_view text,
                                                      const std::string& path) {
  const std::vector<absl::string_view> lines = SplitLines(text);
  std::vector<TraceEntry> entries;
  double first_ms = 0;
  double previous_ms = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int64_t line = static_cast<int64_t>(i) + 1;
    absl::string_view line_text = lines[i];
    if (i == 0) {
      absl::ConsumePrefix(&line_text, kUtf8Bom);
    }
    if (absl::StripAsciiWhitespace(line_text).empty()) {
      continue;
    }
    double ms = 0;
    auto entry = ParseMooncakeLine(line_text, &ms);
    if (!entry.ok()) {
      return LineError(path, line, entry.status().message());
    }
    RETURN_IF_ERROR(CheckOrder(path, line, ms / 1000, previous_ms / 1000, !entries.empty()));
    if (entries.empty()) {
      first_ms = ms;
    }
    previous_ms = ms;
    entry->arrival_s = (ms - first_ms) / 1000;
    entry->line = line;
    entries.push_back(*std::move(entry));
  }
  if (entries.empty()) {
    return LineError(path, 1, "empty trace: no JSON rows");
  }
  return entries;
}

absl::StatusOr<TraceFormat> DetectFromText(absl::string_view text, const std::string& path) {
  const std::vector<absl::string_view> lines = SplitLines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (i == 0) {
      absl::ConsumePrefix(&line, kUtf8Bom);
    }
    line = absl::StripLeadingAsciiWhitespace(line);
    if (line.empty()) {
      continue;
    }
    if (absl::StartsWith(line, "TIMESTAMP")) {
      return TraceFormat::kAzure;
    }
    if (absl::StartsWith(line, "{")) {
      return TraceFormat::kMooncake;
    }
    return LineError(path, static_cast<int64_t>(i) + 1,
                     absl::StrCat("cannot detect the trace format: expected the Azure CSV header '",
                                  kAzureHeader, "' or a Mooncake JSON object, found '",
                                  line.substr(0, 80), "'"));
  }
  return LineError(path, 1, "empty trace file");
}

}  // namespace

absl::StatusOr<double> ParseAzureTimestamp(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  absl::Time time;
  std::string error;
  if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S", std::string(stripped), absl::UTCTimeZone(), &time,
                       &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TIMESTAMP '", stripped, "' is not 'YYYY-MM-DD HH:MM:SS.fffffff' (", error, ")"));
  }
  return absl::ToDoubleSeconds(time - absl::UnixEpoch());
}

absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  return DetectFromText(text, path);
}

absl::StatusOr<std::vector<TraceEntry>> ParseTrace(absl::string_view text, TraceFormat format,
                                                   const std::string& path) {
  if (format == TraceFormat::kAuto) {
    ASSIGN_OR_RETURN(format, DetectFromText(text, path));
  }
  if (format == TraceFormat::kAzure) {
    return ParseAzure(text, path);
  }
  return ParseMooncake(text, path);
}

absl::StatusOr<std::vector<TraceEntry>> LoadTrace(const std::string& path, TraceFormat format) {
  ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  return ParseTrace(text, format, path);
}

absl::StatusOr<std::vector<TraceEntry>> SelectWindow(const std::vector<TraceEntry>& trace,
                                                     double start_s, double duration_s,
                                                     double speedup, int64_t max_requests) {
  if (!(speedup > 0) || !std::isfinite(speedup)) {
    return absl::InvalidArgumentError(absl::StrCat("speedup ", speedup, " must be > 0"));
  }
  if (!(start_s >= 0) || !(duration_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace window start ", start_s, " s and duration ", duration_s, " s must be >= 0"));
  }
  if (max_requests < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_requests ", max_requests, " is negative"));
  }
  std::vector<TraceEntry> window;
  for (const TraceEntry& entry : trace) {
    if (entry.arrival_s < start_s) {
      continue;
    }
    if (duration_s > 0 && entry.arrival_s >= start_s + duration_s) {
      break;
    }
    if (max_requests > 0 && static_cast<int64_t>(window.size()) >= max_requests) {
      break;
    }
    window.push_back(entry);
  }
  if (!window.empty()) {
    const double first = window.front().arrival_s;
    for (TraceEntry& entry : window) {
      entry.arrival_s = (entry.arrival_s - first) / speedup;
    }
  }
  return window;
}

}  // namespace tandem::replay
