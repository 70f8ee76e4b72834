#pragma once
// Server-sent events as the router's HTTP API streams them.

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tandem::testing {

// The "data:" payloads of an SSE stream body, in order.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (absl::ConsumePrefix(&line, "data: ")) {
      out.emplace_back(line);
    }
  }
  return out;
}

}  // namespace tandem::testing
