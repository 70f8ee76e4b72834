#include "tests/testing/fake_worker.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem::router::testing {

namespace v1 = ::tandem::v1;

class FakeWorker::Impl : public v1::Control::Service,
                         public v1::Decode::Service,
                         public v1::Prefill::Service {
 public:
  explicit Impl(Options o) : opts_(std::move(o)) {}

  // --- Control ---
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::WorkerEvent>* writer) override {
    v1::WorkerEvent first;
    v1::WorkerSnapshot* s = first.mutable_snapshot();
    s->set_worker_id(absl::StrCat("fake@", address));
    s->set_role(opts_.role);
    s->mutable_model()->set_id(opts_.model);
    s->mutable_model()->set_context_length(opts_.context_length);
    s->mutable_layout()->set_block_size(opts_.block_size);
    s->mutable_load()->set_free_kv_blocks(opts_.free_blocks);
    s->mutable_load()->set_total_kv_blocks(opts_.total_blocks);
    // A paused worker is hung: it accepts the stream but says nothing.
    while (!ctx->IsCancelled() && !Stopping()) {
      absl::MutexLock lock(&mu_);
      if (!heartbeats_paused_) {
        break;
      }
      mu_.AwaitWithTimeout(absl::Condition(+[](bool* p) { return !*p; }, &heartbeats_paused_),
                           absl::Milliseconds(20));
    }
    if (!writer->Write(first)) {
      return grpc::Status::OK;
    }
    while (!ctx->IsCancelled() && !Stopping()) {
      const absl::Time next = absl::Now() + opts_.heartbeat_interval;
      while (absl::Now() < next && !ctx->IsCancelled() && !Stopping()) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      if (ctx->IsCancelled() || Stopping()) {
        break;
      }
      bool paused;
      {
        absl::MutexLock lock(&mu_);
        paused = heartbeats_paused_;
      }
      if (!paused) {
        v1::WorkerEvent hb;
        hb.set_heartbeat_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
        if (!writer->Write(hb)) {
          break;
        }
      }
    }
    return grpc::Status::OK;
  }

  // --- Decode ---
  grpc::Status Reserve(grpc::ServerContext* ctx, const v1::ReserveRequest* req,
                       grpc::ServerWriter<v1::DecodeEvent>* writer) override {
    const std::string id = req->request().request_id();
    if (absl::Status s = Begin(ctx, req->request()); !s.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
    }
    v1::DecodeEvent ev;
    v1::KvReservation* r = ev.mutable_reservation();
    r->set_request_id(id);
    r->add_block_ids(0);
    r->set_decode_worker(address);
    writer->Write(ev);
    // Wait for the prefill worker's Commit.
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (committed_.count(id) > 0) {
          break;
        }
      }
      if (ctx->IsCancelled() || Stopping()) {
        End(id, true);
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before commit");
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return Stream(ctx, req->request(), [writer](const v1::GenerateResponse& m) {
      v1::DecodeEvent e;
      *e.mutable_tokens() = m;
      return writer->Write(e);
    });
  }

  grpc::Status Commit(grpc::ServerContext*, const v1::CommitRequest* req,
                      v1::CommitResponse*) override {
    absl::MutexLock lock(&mu_);
    committed_.insert(req->request_id());
    ++commits_;
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest*,
                      v1::CancelResponse* resp) override {
    resp->set_found(false);
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::DecodeSubmit* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    if (absl::Status s = Begin(ctx, *req); !s.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
    }
    return Stream(ctx, *req,
                  [writer](const v1::GenerateResponse& m) { return writer->Write(m); });
  }

  // --- Prefill ---
  grpc::Status Prefill(grpc::ServerContext* /*ctx*/, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override {
    Failure f;
    {
      absl::MutexLock lock(&mu_);
      ++requests_;
      f = failure_;
    }
    if (f == Failure::kPrefillUnavailable) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake prefill worker is down");
    }
    auto channel = grpc::CreateChannel(req->reservation().decode_worker(),
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::Decode::NewStub(channel);
    grpc::ClientContext cc;
    cc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::CommitRequest commit;
    commit.set_request_id(req->reservation().request_id());
    v1::CommitResponse cr;
    grpc::Status s = stub->Commit(&cc, commit, &cr);
    if (!s.ok()) {
      return s;
    }
    resp->set_prefill_seconds(0.001);
    resp->set_kv_transfer_seconds(0.0005);
    resp->set_cached_prompt_tokens(1);
    return grpc::Status::OK;
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

  absl::Status Begin(grpc::ServerContext* ctx, const v1::DecodeSubmit& req) {
    absl::MutexLock lock(&mu_);
    ++requests_;
    last_submit_ = req;
    request_ids_.push_back(req.request_id());
    deadlines_.push_back(absl::FromChrono(ctx->deadline()));
    if (failure_ == Failure::kReserveUnavailable) {
      return absl::UnavailableError("fake decode worker has no KV blocks");
    }
    // Like the real decode worker: a request id is a key while live.
    if (!live_ids_.insert(req.request_id()).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("request ", req.request_id(), " is already live on this worker"));
    }
    ++active_;
    return absl::OkStatus();
  }

  void End(const std::string& id, bool cancelled) {
    absl::MutexLock lock(&mu_);
    live_ids_.erase(id);
    --active_;
    cancelled_ += cancelled ? 1 : 0;
  }

  template <typename WriteFn>
  grpc::Status Stream(grpc::ServerContext* ctx, const v1::DecodeSubmit& req, WriteFn write) {
    std::vector<int32_t> script;
    v1::FinishReason finish;
    absl::Duration delay;
    Failure failure;
    int after;
    {
      absl::MutexLock lock(&mu_);
      script = script_;
      finish = finish_;
      delay = delay_;
      failure = failure_;
      after = after_tokens_;
    }
    const size_t n = std::min<size_t>(script.size(), req.max_tokens());
    if (n < script.size()) {
      finish = v1::FINISH_REASON_LENGTH;
    }
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<int>(i) == after && failure == Failure::kDieMidStream) {
        End(req.request_id(), false);
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake worker died mid-stream");
      }
      if (static_cast<int>(i) == after && failure == Failure::kHangMidStream) {
        while (!ctx->IsCancelled() && !Stopping()) {
          absl::SleepFor(absl::Milliseconds(5));
        }
        End(req.request_id(), ctx->IsCancelled());
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while hanging");
      }
      // Sleep in small steps so a cancellation is seen promptly.
      const absl::Time until = absl::Now() + delay;
      while (absl::Now() < until && !ctx->IsCancelled()) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      if (ctx->IsCancelled() || Stopping()) {
        End(req.request_id(), true);
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      v1::GenerateResponse m;
      m.set_request_id(req.request_id());
      v1::TokenDelta* t = m.add_tokens();
      t->set_token(script[i]);
      t->set_logprob(-0.25f);
      if (req.sampling().top_logprobs() > 0) {
        v1::TokenLogprob* tl = t->add_top_logprobs();
        tl->set_token(script[i]);
        tl->set_logprob(-0.25f);
      }
      if (i + 1 == n) {
        m.set_finish_reason(finish);
        m.mutable_usage()->set_prompt_tokens(req.prompt_ids_size());
        m.mutable_usage()->set_completion_tokens(static_cast<int32_t>(n));
      }
      if (!write(m)) {
        End(req.request_id(), true);
        return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
      }
    }
    if (n == 0) {
      v1::GenerateResponse m;
      m.set_finish_reason(finish);
      write(m);
    }
    End(req.request_id(), false);
    return grpc::Status::OK;
  }

  const Options opts_;
  std::string address;

  mutable absl::Mutex mu_;
  std::vector<int32_t> script_ ABSL_GUARDED_BY(mu_);
  v1::FinishReason finish_ ABSL_GUARDED_BY(mu_) = v1::FINISH_REASON_STOP;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  Failure failure_ ABSL_GUARDED_BY(mu_) = Failure::kNone;
  int after_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool heartbeats_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> committed_ ABSL_GUARDED_BY(mu_);
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  int commits_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  v1::DecodeSubmit last_submit_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> live_ids_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<FakeWorker> FakeWorker::Start(Options options) {
  std::unique_ptr<FakeWorker> w(new FakeWorker());
  w->impl_ = std::make_unique<Impl>(options);
  grpc::ServerBuilder b;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", options.port), grpc::InsecureServerCredentials(),
                     &w->port_);
  b.RegisterService(static_cast<v1::Control::Service*>(w->impl_.get()));
  b.RegisterService(static_cast<v1::Decode::Service*>(w->impl_.get()));
  b.RegisterService(static_cast<v1::Prefill::Service*>(w->impl_.get()));
  w->server_ = b.BuildAndStart();
  if (w->server_ == nullptr || w->port_ == 0) {
    return nullptr;
  }
  w->address_ = absl::StrCat("127.0.0.1:", w->port_);
  w->impl_->address = w->address_;
  return w;
}

FakeWorker::~FakeWorker() { Shutdown(); }

void FakeWorker::Shutdown() {
  if (server_ == nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&impl_->mu_);
    impl_->stopping_ = true;
  }
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

void FakeWorker::SetScript(std::vector<int32_t> tokens, v1::FinishReason finish) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->script_ = std::move(tokens);
  impl_->finish_ = finish;
}
void FakeWorker::SetTokenDelay(absl::Duration d) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->delay_ = d;
}
void FakeWorker::SetFailure(Failure f, int after_tokens) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->failure_ = f;
  impl_->after_tokens_ = after_tokens;
}
void FakeWorker::PauseHeartbeats(bool paused) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->heartbeats_paused_ = paused;
}
int FakeWorker::requests() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->requests_;
}
int FakeWorker::cancelled() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->cancelled_;
}
int FakeWorker::commits() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->commits_;
}
int FakeWorker::active_streams() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->active_;
}
std::vector<absl::Time> FakeWorker::deadlines() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->deadlines_;
}
std::vector<std::string> FakeWorker::request_ids() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->request_ids_;
}
v1::DecodeSubmit FakeWorker::last_submit() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->last_submit_;
}

}  // namespace tandem::router::testing
