#include "router/http_server.h"

#include <httplib.h>

#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "nlohmann/json.hpp"
#include "router/api_error.h"
#include "router/openai_request.h"
#include "router/openai_response.h"
#include "router/readiness.h"

namespace tandem::router {
namespace {

// Collects a request's events for the HTTP pool thread that serves it. The
// router pushes (never blocks); the HTTP thread pops (may block).
class QueueObserver : public GenerationObserver {
 public:
  struct Event {
    enum Kind { kDelta, kChoiceDone, kComplete } kind = kDelta;
    ChoiceDelta delta;
    ChoiceResult result;
    absl::Status status;
    RequestSummary summary;
  };

  void OnDelta(const ChoiceDelta& d) override {
    Event e;
    e.kind = Event::kDelta;
    e.delta = d;
    Push(std::move(e));
  }
  void OnChoiceDone(const ChoiceResult& r) override {
    Event e;
    e.kind = Event::kChoiceDone;
    e.result = r;
    Push(std::move(e));
  }
  void OnComplete(const absl::Status& status, const RequestSummary& s) override {
    Event e;
    e.kind = Event::kComplete;
    e.status = status;
    e.summary = s;
    Push(std::move(e));
  }

  // The next event, or nullopt after `timeout`.
  std::optional<Event> Pop(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return std::nullopt;
    }
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  void Push(Event e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }

  absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
};

void WriteError(httplib::Response& res, const absl::Status& s, absl::Duration retry_after) {
  res.status = HttpStatusFor(s.code());
  if (s.code() == absl::StatusCode::kResourceExhausted ||
      s.code() == absl::StatusCode::kUnavailable) {
    res.set_header("Retry-After", RetryAfterSeconds(retry_after));
  }
  res.set_content(OpenAiErrorJson(s), "application/json");
}

// State shared by a streaming response's content provider and releaser.
struct StreamState {
  std::shared_ptr<QueueObserver> observer;
  std::shared_ptr<RequestHandle> handle;
  OpenAiRequest request;
  std::unique_ptr<OpenAiResponseBuilder> builder;
  std::optional<QueueObserver::Event> first;
  absl::Time deadline;
};

// Writes the stream until the request completes. Returns false when the
// client went away (httplib then calls the releaser, which cancels).
bool WriteStream(StreamState& st, httplib::DataSink& sink) {
  auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
  absl::Time last_write = absl::Now();
  bool cancelled_late = false;
  while (true) {
    std::optional<QueueObserver::Event> ev;
    if (st.first.has_value()) {
      ev = std::move(st.first);
      st.first.reset();
    } else {
      ev = st.observer->Pop(absl::Milliseconds(500));
    }
    if (!ev.has_value()) {
      const absl::Time now = absl::Now();
      if (now - last_write > absl::Seconds(5)) {
        if (!write(SseKeepAlive())) {
          return false;
        }
        last_write = now;
      }
      if (!cancelled_late && now > st.deadline + absl::Seconds(5)) {
        // Worker calls carry the deadline; this is a backstop, never a hang.
        st.handle->Cancel();
        cancelled_late = true;
      }
      continue;
    }
    switch (ev->kind) {
      case QueueObserver::Event::kDelta:
        for (const std::string& chunk : st.builder->OnDelta(ev->delta)) {
          if (!write(SseEvent(chunk))) {
            return false;
          }
        }
        break;
      case QueueObserver::Event::kChoiceDone:
        if (!write(SseEvent(st.builder->OnChoiceDone(ev->result)))) {
          return false;
        }
        break;
      case QueueObserver::Event::kComplete:
        if (ev->status.ok()) {
          if (st.request.include_usage && !write(SseEvent(st.builder->UsageChunk(ev->summary)))) {
            return false;
          }
        } else if (!write(SseEvent(OpenAiErrorJson(ev->status)))) {
          return false;
        }
        write(SseDone());
        sink.done();
        return true;
    }
    last_write = absl::Now();
  }
}

}  // namespace

HttpServer::HttpServer(Router& router, base::MetricsRegistry& metrics, const ApiKeys& api_keys,
                       std::function<absl::Status()> liveness)
    : router_(router),
      metrics_(metrics),
      api_keys_(api_keys),
      liveness_(std::move(liveness)),
      server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http_address '", address,
                                                   "' is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const RouterConfig& cfg = router_.config();
  const size_t threads = cfg.http_threads > 0 ? cfg.http_threads : cfg.limits.max_inflight + 8;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(cfg.limits.max_body_bytes);

  auto generate = [this](OpenAiEndpoint endpoint, const httplib::Request& req,
                         httplib::Response& res) {
    const absl::Duration retry_after = router_.config().limits.retry_after;
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, req.body);
    if (!parsed.ok()) {
      router_.RecordRejected("", parsed.status());
      WriteError(res, parsed.status(), retry_after);
      return;
    }
    if (api_keys_.enabled()) {  // the pre-routing check let it through: a valid key
      parsed->gen.tenant =
          AuthorizeHttp(api_keys_, req.path, req.get_header_value("Authorization")).tenant;
    }
    std::string rid = req.get_header_value("X-Request-Id");
    if (!rid.empty()) {
      parsed->gen.request_id = rid;
    }
    absl::StatusOr<PreparedRequest> prepared =
        router_.Prepare(parsed->gen, absl::InfiniteFuture());
    if (!prepared.ok()) {
      router_.RecordRejected(parsed->gen.model, prepared.status());
      WriteError(res, prepared.status(), retry_after);
      return;
    }
    const ServedModel& model = *prepared->model;
    const absl::Time deadline = prepared->deadline;
    const std::string request_id = prepared->client_request_id;
    auto observer = std::make_shared<QueueObserver>();
    absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
        router_.Start(*std::move(prepared), observer);
    if (!handle.ok()) {
      WriteError(res, handle.status(), retry_after);
      return;
    }
    res.set_header("X-Request-Id", request_id);
    auto builder = std::make_unique<OpenAiResponseBuilder>(
        *parsed,
        model, absl::StrCat(endpoint == OpenAiEndpoint::kChat ? "chatcmpl-" : "cmpl-", request_id),
        absl::ToUnixSeconds(absl::Now()));

    // Wait for the first event: a request that fails before any output gets
    // a proper HTTP status instead of a 200 stream carrying an error.
    std::optional<QueueObserver::Event> first;
    bool cancelled_late = false;
    while (!first.has_value()) {
      first = observer->Pop(absl::Milliseconds(500));
      if (!first.has_value() && !cancelled_late && absl::Now() > deadline + absl::Seconds(5)) {
        (*handle)->Cancel();
        cancelled_late = true;
      }
    }
    if (first->kind == QueueObserver::Event::kComplete && !first->status.ok()) {
      WriteError(res, first->status, retry_after);
      return;
    }

    if (parsed->stream) {
      // The builder points at parsed->request: move both into the state.
      auto st = std::make_shared<StreamState>();
      st->observer = observer;
      st->handle = *handle;
      st->request = *std::move(parsed);
      st->builder = std::make_unique<OpenAiResponseBuilder>(
          st->request, model, builder->id(), absl::ToUnixSeconds(absl::Now()));
      st->first = std::move(first);
      st->deadline = deadline;
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [st](size_t /*offset*/, httplib::DataSink& sink) { return WriteStream(*st, sink); },
          [st](bool success) {
            if (!success) {
              st->handle->Cancel();  // the client left mid-stream
            }
          });
      return;
    }

    // Non-streaming: collect everything.
    std::optional<QueueObserver::Event> ev = std::move(first);
    while (true) {
      if (!ev.has_value()) {
        ev = observer->Pop(absl::Milliseconds(500));
        if (!ev.has_value()) {
          if (!cancelled_late && absl::Now() > deadline + absl::Seconds(5)) {
            (*handle)->Cancel();
            cancelled_late = true;
          }
          continue;
        }
      }
      if (ev->kind == QueueObserver::Event::kDelta) {
        builder->OnDelta(ev->delta);
      } else if (ev->kind == QueueObserver::Event::kChoiceDone) {
        builder->OnChoiceDone(ev->result);
      } else {
        if (!ev->status.ok()) {
          WriteError(res, ev->status, retry_after);
        } else {
          res.set_content(builder->FinalResponse(ev->summary), "application/json");
        }
        return;
      }
      ev.reset();
    }
  };

  // API keys: before routing, so that unknown routes answer 401 too.
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    HttpAuthDecision d = AuthorizeHttp(api_keys_, req.path, req.get_header_value("Authorization"));
    if (d.allowed) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = d.http_status;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(d.body, "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->Post("/v1/completions", [generate](const httplib::Request& req,
                                              httplib::Response& res) {
    generate(OpenAiEndpoint::kCompletions, req, res);
  });
  server_->Post("/v1/chat/completions", [generate](const httplib::Request& req,
                                                   httplib::Response& res) {
    generate(OpenAiEndpoint::kChat, req, res);
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelListJson(router_.catalog(), absl::ToUnixSeconds(absl::Now())),
                    "application/json");
  });
  auto readiness = [this](const httplib::Request&, httplib::Response& res) {
    std::shared_ptr<const RegistrySnapshot> snap = router_.snapshot();
    const absl::Time now = router_.clock().Now();
    const std::vector<ModelReadiness> models =
        CheckReadiness(router_.catalog(), router_.config().mode, *snap, now);
    const bool ready = AllReady(models);
    nlohmann::json per_model = nlohmann::json::array();
    for (const ModelReadiness& m : models) {
      per_model.push_back({{"model", m.model},
                           {"ready", m.ready},
                           {"reason", m.reason},
                           {"workers",
                            {{"prefill", m.prefill},
                             {"decode", m.decode},
                             {"colocated", m.colocated}}}});
    }
    nlohmann::json body = {
        {"status", ready ? "ok" : "unavailable"},
        {"models", std::move(per_model)},
        {"inflight", router_.inflight()},
        {"workers",
         {{"prefill", snap->CountLive(WorkerRole::kPrefill, now)},
          {"decode", snap->CountLive(WorkerRole::kDecode, now)},
          {"colocated", snap->CountLive(WorkerRole::kColocated, now)},
          {"known", snap->workers.size()}}}};
    res.status = ready ? 200 : 503;
    res.set_content(body.dump(), "application/json");
  };
  server_->Get("/health", readiness);
  server_->Get("/health/ready", readiness);
  server_->Get("/health/live", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Status live = liveness_ ? liveness_() : absl::OkStatus();
    nlohmann::json body = {{"status", live.ok() ? "ok" : "unavailable"}};
    if (!live.ok()) {
      body["reason"] = std::string(live.message());
    }
    res.status = live.ok() ? 200 : 503;
    res.set_content(body.dump(), "application/json");
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    router_.metrics().SetWorkersUp(*router_.snapshot(), router_.clock().Now());
    res.set_content(metrics_.RenderText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) {
      return;
    }
    absl::Status s;
    if (res.status == 404) {
      s = absl::NotFoundError(absl::StrCat("no route for ", req.method, " ", req.path));
    } else if (res.status == 413) {
      s = absl::InvalidArgumentError("the request body is too large");
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("HTTP ", res.status, " for ", req.method, " ",
                                                   req.path));
    }
    res.set_content(OpenAiErrorJson(s), "application/json");
  });

  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", host));
    }
  } else {
    if (!server_->bind_to_port(host, port)) {
      return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", address));
    }
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (server_ != nullptr && thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace tandem::router
