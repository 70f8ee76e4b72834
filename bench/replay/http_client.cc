// tandem-replay's HTTP client: POST /v1/completions, stream=true, read as
// server-sent events (cpp-httplib, one connection per request).
#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/replay/client.h"
#include "nlohmann/json.hpp"

namespace tandem::replay::internal {
namespace {

using json = nlohmann::json;

// What failed before or after the status line (RequestRecord::status).
std::string TransportStatus(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "CONNECT_FAILED";
    case httplib::Error::Read:
      return "READ_ERROR";
    case httplib::Error::Canceled:
      return "CANCELLED";
    default:
      return "HTTP_CLIENT_ERROR";
  }
}

// Consumes complete SSE events from `buffer` into `record`; sets `done` on
// "[DONE]" and `stream_error` on an error event.
class SseReader {
 public:
  SseReader(RequestRecord& record, absl::Time origin) : r_(record), origin_(origin) {}

  void Feed(absl::string_view bytes) {
    buffer_.append(bytes.data(), bytes.size());
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      OnEvent(event);
    }
  }

  bool done() const { return done_; }
  const std::string& stream_error() const { return stream_error_; }
  int64_t chunks() const { return static_cast<int64_t>(r_.chunk_times_s.size()); }
  bool saw_usage() const { return saw_usage_; }

 private:
  void OnEvent(absl::string_view event) {
    std::string data;
    for (absl::string_view line : absl::StrSplit(event, '\n')) {
      absl::ConsumeSuffix(&line, "\r");
      if (absl::ConsumePrefix(&line, "data:")) {
        absl::ConsumePrefix(&line, " ");
        absl::StrAppend(&data, data.empty() ? "" : "\n", line);
      }
    }
    if (data.empty()) {
      return;  // a comment (keep-alive)
    }
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      stream_error_ = absl::StrCat("not JSON in the stream: ", data.substr(0, 200));
      return;
    }
    if (j.contains("error")) {
      stream_error_ = j["error"].dump();
      return;
    }
    if (j.contains("model") && j["model"].is_string()) {
      r_.route_model = j["model"].get<std::string>();
    }
    if (j.contains("choices") && j["choices"].is_array()) {
      for (const json& c : j["choices"]) {
        if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
          const double now = SecondsSince(origin_);
          if (!r_.first_token_s) {
            r_.first_token_s = now;
          }
          r_.chunk_times_s.push_back(now);
        }
        if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
          r_.finish_reason = c["finish_reason"].get<std::string>();
        }
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      saw_usage_ = true;
      if (u.value("prompt_tokens", 0) > 0) {
        r_.prompt_tokens = u.value("prompt_tokens", int64_t{0});
        r_.prompt_tokens_from_server = true;
      }
      r_.output_tokens = u.value("completion_tokens", int64_t{0});
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
        r_.cached_prompt_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
      }
    }
  }

  RequestRecord& r_;
  absl::Time origin_;
  std::string buffer_;
  bool done_ = false;
  bool saw_usage_ = false;
  std::string stream_error_;
};

class HttpClient : public Client {
 public:
  HttpClient(const ClientOptions& options, HostPort target)
      : options_(options), target_(std::move(target)) {}

  RequestRecord Send(const ReplayRequest& request, absl::Time origin,
                     Cancellation& cancel) override {
    RequestRecord r = NewRecord(request, Protocol::kHttp);
    json body;
    if (!options_.model.empty()) {
      body["model"] = options_.model;
    }
    body["prompt"] = request.prompt;
    body["max_tokens"] = request.max_tokens;
    body["ignore_eos"] = true;
    body["temperature"] = options_.temperature;
    body["stream"] = true;
    body["stream_options"] = json{{"include_usage", true}};

    httplib::Client cli(target_.host, target_.port);
    cli.set_connection_timeout(10, 0);
    cli.set_read_timeout(24 * 3600, 0);  // the runner's hard stop bounds a request
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    if (!options_.api_key.empty()) {
      req.set_header("Authorization", absl::StrCat("Bearer ", options_.api_key));
    }
    req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    int http_status = 0;
    std::string error_body;
    SseReader sse(r, origin);
    req.response_handler = [&](const httplib::Response& res) {
      http_status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (cancel.cancelled()) {
        return false;
      }
      if (http_status == 200) {
        sse.Feed(absl::string_view(data, n));
      } else if (error_body.size() < 4096) {
        error_body.append(data, n);
      }
      return true;
    };
    cancel.SetHook([&cli] { cli.stop(); });
    r.send_s = SecondsSince(origin);
    const httplib::Result res = cli.send(req);
    r.end_s = SecondsSince(origin);
    cancel.ClearHook();
    if (!sse.saw_usage()) {
      r.output_tokens = sse.chunks();
    }
    if (cancel.cancelled()) {
      r.status = "CANCELLED";
      r.error = "cancelled by the replay's hard stop (--duration + --grace)";
    } else if (!res) {
      r.status = TransportStatus(res.error());
      r.error = httplib::to_string(res.error());
    } else if (http_status != 200) {
      r.status = absl::StrCat(http_status);
      r.error = error_body;
    } else if (!sse.stream_error().empty()) {
      r.status = "STREAM_ERROR";
      r.error = sse.stream_error();
    } else if (!sse.done()) {
      r.status = "STREAM_ERROR";
      r.error = "the event stream ended without [DONE]";
    } else {
      r.status = "200";
      r.ok = true;
    }
    return r;
  }

 private:
  ClientOptions options_;
  HostPort target_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> MakeHttpClient(const ClientOptions& options) {
  absl::StatusOr<HostPort> target = ParseTarget(options.target);
  if (!target.ok()) {
    return target.status();
  }
  return std::make_unique<HttpClient>(options, *std::move(target));
}

}  // namespace tandem::replay::internal
