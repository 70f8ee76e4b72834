#include "decode_worker/decode_engine.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::decode_worker {

enum class DecodeEngine::State {
  kQueued,      // a Reserve waiting for the pool to have its blocks (FIFO)
  kReserved,    // blocks reserved for an import; waiting for the Commit
  kCommitting,  // Commit received; waiting for the transport's bytes
  kWaiting,     // waiting to join the batch (committed import, colocated, preempted)
  kAdmitted,    // in the running batch (prefilling locally or decoding)
};

struct DecodeEngine::Seq {
  Seq(engine::SequenceId k, const engine::SamplingParams& params)
      : key(k), sampler(params), stops(params.stop_strings) {}

  engine::SequenceId key;
  std::string request_id;
  RequestSink* sink = nullptr;
  State state = State::kWaiting;
  bool import = false;  // disaggregated (Reserve) rather than colocated (Generate)

  std::vector<int32_t> tokens;  // prompt + generated; the last generated one is the next input
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;
  int32_t generated = 0;
  int32_t kv = 0;          // tokens whose KV the engine holds
  bool in_engine = false;  // the engine knows the sequence (holds or reserved blocks)
  int64_t order = 0;
  int32_t preemptions = 0;

  engine::Sampler sampler;
  std::vector<int32_t> stop_ids;
  std::unique_ptr<engine::Detokenizer> detok;
  engine::StopStringMatcher stops;
  bool stop_string_hit = false;
  int32_t cached_prompt_tokens = 0;
  bool cache_counted = false;

  // Import.
  kvtransfer::TransferTag tag = 0;
  uint64_t expected_bytes = 0;
  absl::Time deadline = absl::InfiniteFuture();
  engine::SampleResult first;
  absl::AnyInvocable<void(absl::Status) &&> commit_done;
  bool writer_done = false;  // the prefill worker said none of its writes is in flight

  // Times.
  absl::Time arrival;
  absl::Time commit_time;
  absl::Time import_done_time;
  absl::Time admitted_time = absl::InfinitePast();
  absl::Time first_token_time = absl::InfinitePast();
  absl::Time last_token_time;
  absl::Duration prefill_time;
};

namespace {

const char* FinishName(Finish f) { return f == Finish::kStop ? "stop" : "length"; }

}  // namespace

DecodeEngine::DecodeEngine(std::unique_ptr<engine::Engine> engine, kvtransfer::KvTransport* transport,
                           kvtransfer::RegionDescriptor region, DecodeEngineOptions options,
                           DecodeMetrics* metrics, base::Clock& clock)
    : engine_(std::move(engine)),
      transport_(transport),
      region_(std::move(region)),
      options_(std::move(options)),
      metrics_(metrics),
      clock_(clock),
      heartbeat_("decode engine loop", clock),
      worker_id_(options_.worker_id) {
  const engine::ModelConfig& mc = engine_->model().config();
  layout_.num_layers = mc.num_layers;
  layout_.num_kv_heads = mc.num_kv_heads;
  layout_.head_dim = mc.head_dim;
  layout_.block_size = engine_->config().block_size;
  layout_.dtype = engine_->config().kv_dtype;
  layout_.model_id = engine_->model().model_id();
  if (transport_ != nullptr) {
    transfer_mode_ = transport_->capabilities().native_put ? "put" : "am";
  }
  std::random_device rd;
  tag_salt_ = (static_cast<uint64_t>(rd()) & 0x7fffffffu) << 32;
}

DecodeEngine::~DecodeEngine() { Stop(); }

void DecodeEngine::set_block_listener(
    std::function<void(const engine::KvBlockEvents&)> on_blocks) {
  on_blocks_ = std::move(on_blocks);
  engine_->kv_cache().EnableBlockEvents();
}

void DecodeEngine::Start(std::function<void(const LoadInfo&)> on_load) {
  on_load_ = std::move(on_load);
  UpdateLoad();
  thread_ = std::thread([this] { Loop(); });
}

void DecodeEngine::Stop(absl::Status reason) {
  if (!stopped_.exchange(true)) {
    if (!queue_.Post([this, reason] {
          stopping_ = true;
          stop_reason_ = reason;
        })) {
      LOG(WARNING) << "decode engine: stop posted to a closed queue";
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

LoadInfo DecodeEngine::load() const {
  absl::MutexLock lock(&load_mu_);
  return load_;
}

void DecodeEngine::SubmitReserve(engine::SequenceId key, RequestSpec spec, RequestSink* sink) {
  Submit(key, std::move(spec), sink, /*reserve=*/true);
}

void DecodeEngine::SubmitGenerate(engine::SequenceId key, RequestSpec spec, RequestSink* sink) {
  Submit(key, std::move(spec), sink, /*reserve=*/false);
}

void DecodeEngine::Submit(engine::SequenceId key, RequestSpec spec, RequestSink* sink, bool reserve) {
  if (!queue_.Post([this, key, spec = std::move(spec), sink, reserve]() mutable {
        DoSubmit(key, std::move(spec), sink, reserve);
      })) {
    sink->OnError(absl::UnavailableError("decode worker shutting down"));
  }
}

void DecodeEngine::Commit(CommitSpec commit, absl::AnyInvocable<void(absl::Status) &&> done) {
  // On a closed queue the task (and `done`) is destroyed unrun; run it here.
  auto shared_done = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  if (!queue_.Post([this, commit = std::move(commit), shared_done]() mutable {
        DoCommit(std::move(commit), std::move(*shared_done));
      })) {
    std::move (*shared_done)(absl::UnavailableError("decode worker shutting down"));
  }
}

void DecodeEngine::Cancel(std::string request_id, absl::AnyInvocable<void(bool) &&> done) {
  auto shared_done = std::make_shared<absl::AnyInvocable<void(bool) &&>>(std::move(done));
  if (!queue_.Post([this, request_id = std::move(request_id), shared_done]() mutable {
        auto it = by_request_id_.find(request_id);
        const bool found = it != by_request_id_.end();
        if (found) {
          DoCancel(it->second,
                   absl::CancelledError(absl::StrCat("request ", request_id, " cancelled")));
        }
        std::move (*shared_done)(found);
      })) {
    std::move (*shared_done)(false);
  }
}

void DecodeEngine::CancelKey(engine::SequenceId key) {
  queue_.Post([this, key] { DoCancel(key, absl::CancelledError("client stream cancelled")); });
}

void DecodeEngine::Loop() {
  while (true) {
    heartbeat_.Beat();
    queue_.RunPending();
    if (stopping_) {
      break;
    }
    const absl::Time now = clock_.Now();
    PollFences(now);
    AdmitReservations(now);
    PollImports(now);
    const bool progressed = RunStep();
    UpdateLoad();
    if (!progressed) {
      heartbeat_.Idle();
      Idle();
    }
  }
  heartbeat_.Idle();  // stopping is not wedged
  queue_.Close();
  queue_.RunPending();  // posts that raced with Close: they see stopping_
  std::vector<engine::SequenceId> keys;
  for (const auto& [key, s] : seqs_) keys.push_back(key);
  for (engine::SequenceId key : keys) {
    auto it = seqs_.find(key);
    if (it != seqs_.end()) FailSeq(*it->second, stop_reason_);
  }
  UpdateLoad();
}

void DecodeEngine::Idle() {
  // KV arriving and receives finishing post nothing: poll those in real
  // time. Everything else that ends a wait is a post or a deadline.
  absl::Time wake = absl::InfiniteFuture();
  bool poll = false;
  for (const Fence& f : fences_) {
    poll |= transfer_mode_ != "put";  // until its receives finish
    wake = std::min(wake, f.release_at);
  }
  for (const auto& [key, s] : seqs_) {
    poll |= s->state == State::kCommitting;
    if (s->state == State::kReserved || s->state == State::kQueued) {
      wake = std::min(wake, s->deadline);
    }
  }
  if (poll) {
    queue_.WaitFor(options_.commit_poll_interval);
  } else {
    queue_.WaitUntil(clock_, wake);
  }
}

void DecodeEngine::DoSubmit(engine::SequenceId key, RequestSpec spec, RequestSink* sink, bool reserve) {
  if (stopping_) {
    sink->OnError(stop_reason_);
    return;
  }
  const std::string request_id =
      spec.request_id.empty() ? absl::StrCat(worker_id_, "-", key) : spec.request_id;
  if (by_request_id_.contains(request_id)) {
    sink->OnError(absl::AlreadyExistsError(
        absl::StrCat("request ", request_id, " is already live on this worker")));
    return;
  }
  if (!reserve) {
    int32_t waiting = 0;
    for (const auto& [k, other] : seqs_) waiting += other->state == State::kWaiting;
    if (waiting >= options_.max_waiting) {
      metrics_->RequestDone(absl::StatusCode::kResourceExhausted);
      sink->OnError(absl::ResourceExhaustedError(
          absl::StrCat("decode worker queue full (", waiting, " requests waiting)")));
      return;
    }
  }
  if (reserve && transport_ == nullptr) {
    sink->OnError(absl::FailedPreconditionError(
        "this worker is colocated (no KV transport): use Decode.Generate"));
    return;
  }
  const absl::Time now = clock_.Now();
  auto s = std::make_unique<Seq>(key, spec.sampling);
  s->request_id = request_id;
  s->sink = sink;
  s->tokens = std::move(spec.prompt);
  s->prompt_len = static_cast<int32_t>(s->tokens.size());
  s->max_tokens = spec.max_tokens;
  s->arrival = now;
  s->import = reserve;
  s->stop_ids = spec.sampling.stop_token_ids;
  if (const engine::Tokenizer* tok = engine_->model().tokenizer(); tok != nullptr) {
    if (!spec.sampling.ignore_eos) {
      s->stop_ids.insert(s->stop_ids.end(), tok->eog_ids().begin(), tok->eog_ids().end());
    }
    s->detok = std::make_unique<engine::Detokenizer>(*tok);
  }
  if (reserve) {
    const int64_t bs = engine_->config().block_size;
    const int64_t needed = (static_cast<int64_t>(s->tokens.size()) + bs - 1) / bs;
    if (needed > engine_->num_blocks()) {
      metrics_->RequestDone(absl::StatusCode::kResourceExhausted);
      sink->OnError(absl::ResourceExhaustedError(absl::StrCat(
          "reserve ", request_id, ": the KV pool (", engine_->num_blocks(), " blocks of ", bs,
          " tokens) can never hold a prompt of ", s->tokens.size(), " tokens")));
      return;
    }
    int32_t queued = 0;
    for (const auto& [k, other] : seqs_) queued += other->state == State::kQueued;
    if (queued >= options_.max_waiting) {
      metrics_->RequestDone(absl::StatusCode::kResourceExhausted);
      sink->OnError(absl::ResourceExhaustedError(absl::StrCat(
          "decode worker reservation queue full (", queued, " reservations waiting)")));
      return;
    }
    s->state = State::kQueued;
    s->deadline = spec.deadline;  // the client's, while queued
    s->order = next_order_++;
  } else {
    s->state = State::kWaiting;
    s->order = next_order_++;
  }
  by_request_id_[request_id] = key;
  seqs_[key] = std::move(s);
  num_live_.store(static_cast<int32_t>(seqs_.size()), std::memory_order_relaxed);
  if (reserve) {
    AdmitReservations(now);
  }
}

bool DecodeEngine::TryReserve(Seq& s, absl::Time now) {
  const int64_t bs = engine_->config().block_size;
  const int64_t needed = (static_cast<int64_t>(s.tokens.size()) + bs - 1) / bs;
  // Headroom: every running sequence may need one more block next step; a
  // reservation must not take it (that would preempt a running sequence).
  int64_t running = 0;
  for (const auto& [k, other] : seqs_) running += other->state == State::kAdmitted;
  const engine::KvCacheManager& kv = engine_->kv_cache();
  const int64_t available = kv.num_free_blocks() + kv.num_cached_blocks();
  if (available - needed < running) {
    return false;
  }
  absl::StatusOr<std::vector<engine::BlockId>> blocks = engine_->AddSequenceForImport(s.key, s.tokens);
  if (!blocks.ok()) {
    if (blocks.status().code() == absl::StatusCode::kResourceExhausted) {
      return false;  // cached blocks still referenced elsewhere: wait
    }
    FailSeq(s, base::Annotate(blocks.status(), absl::StrCat("reserve ", s.request_id)));
    return true;
  }
  s.in_engine = true;
  s.state = State::kReserved;
  s.tag = tag_salt_ | static_cast<kvtransfer::TransferTag>(s.key);
  s.deadline = std::min(now + options_.reservation_deadline, s.deadline);
  s.expected_bytes = static_cast<uint64_t>(layout_.num_layers) * 2 * blocks->size() *
                     static_cast<uint64_t>(layout_.block_bytes());
  metrics_->reservation_wait->Observe(absl::ToDoubleSeconds(now - s.arrival));
  Reservation reservation;
  reservation.request_id = s.request_id;
  reservation.transfer_tag = s.tag;
  reservation.block_ids.assign(blocks->begin(), blocks->end());
  reservation.layout = layout_;
  reservation.region = region_;
  reservation.transfer_mode = transfer_mode_;
  reservation.deadline = s.deadline;
  reservation.expected_bytes = s.expected_bytes;
  s.sink->OnReservation(reservation);
  return true;
}

void DecodeEngine::AdmitReservations(absl::Time now) {
  std::vector<Seq*> queued;
  for (const auto& [k, s] : seqs_) {
    if (s->state == State::kQueued) queued.push_back(s.get());
  }
  std::sort(queued.begin(), queued.end(),
            [](const Seq* a, const Seq* b) { return a->order < b->order; });
  bool blocked = false;  // FIFO: once one waits, later ones wait too
  for (Seq* s : queued) {
    if (now >= s->deadline) {
      FailSeq(*s, absl::DeadlineExceededError(absl::StrCat(
                      "reserve ", s->request_id, ": the deadline passed while waiting for ",
                      "KV blocks (pool busy)")));
      continue;
    }
    if (!blocked && !TryReserve(*s, now)) {
      blocked = true;
    }
  }
}

void DecodeEngine::DoCommit(CommitSpec commit, absl::AnyInvocable<void(absl::Status) &&> done) {
  if (stopping_) {
    std::move(done)(stop_reason_);
    return;
  }
  auto it = by_request_id_.find(commit.request_id);
  if (it == by_request_id_.end()) {
    // The writer is done with the request's tag either way: a fence over it
    // can go.
    for (size_t i = 0; i < fences_.size(); ++i) {
      if (fences_[i].request_id == commit.request_id) {
        ReleaseFence(i, commit.abort ? "prefill worker aborted" : "prefill worker committed late");
        if (commit.abort) {
          metrics_->reservation_aborts->Increment();
          std::move(done)(absl::OkStatus());
          return;
        }
        break;
      }
    }
    std::move(done)(
        absl::NotFoundError(absl::StrCat("commit: no reservation for request ", commit.request_id,
                                         " (cancelled, expired or never made)")));
    return;
  }
  Seq& s = *seqs_.at(it->second);
  if (commit.abort) {
    if (s.state != State::kReserved && s.state != State::kCommitting) {
      std::move(done)(absl::FailedPreconditionError(
          absl::StrCat("commit abort: request ", commit.request_id, " already has its KV")));
      return;
    }
    s.writer_done = true;
    metrics_->reservation_aborts->Increment();
    std::move(done)(absl::OkStatus());
    FailSeq(s, absl::UnavailableError(
                   absl::StrCat("request ", commit.request_id, ": the prefill worker gave it up")));
    return;
  }
  if (s.state != State::kReserved) {
    std::move(done)(absl::FailedPreconditionError(
        absl::StrCat("commit: request ", commit.request_id,
                     s.import ? " was already committed" : " is not a reservation")));
    return;
  }
  if (commit.num_tokens != s.prompt_len) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("commit: request ", commit.request_id, " has ", s.prompt_len,
                     " prompt tokens, the commit names ", commit.num_tokens)));
    return;
  }
  const int32_t vocab = engine_->model().config().vocab_size;
  if (commit.first.token < 0 || commit.first.token >= vocab) {
    std::move(done)(
        absl::InvalidArgumentError(absl::StrCat("commit: first token id ", commit.first.token,
                                                " outside the vocabulary [0, ", vocab, ")")));
    return;
  }
  if (commit.bytes_written != s.expected_bytes) {
    LOG(WARNING) << "commit request_id=" << s.request_id << ": prefill reports "
                 << commit.bytes_written << " bytes written, the layout gives " << s.expected_bytes;
  }
  s.state = State::kCommitting;
  s.writer_done = true;  // a commit comes after all of the writer's writes ended
  s.first = std::move(commit.first);
  s.commit_done = std::move(done);
  s.commit_time = clock_.Now();
  PollImports(s.commit_time);
}

void DecodeEngine::PollImports(absl::Time now) {
  std::vector<engine::SequenceId> keys;
  for (const auto& [key, s] : seqs_) {
    if (s->state == State::kReserved || s->state == State::kCommitting) keys.push_back(key);
  }
  for (engine::SequenceId key : keys) {
    Seq& s = *seqs_.at(key);
    if (s.state == State::kCommitting) {
      const uint64_t received = transport_->ReceivedBytes(s.tag);
      if (received >= s.expected_bytes) {
        absl::Status st = engine_->CommitImport(key);
        transport_->Forget(s.tag);
        if (!st.ok()) {
          std::move(s.commit_done)(absl::InternalError(st.message()));
          s.commit_done = nullptr;
          FailSeq(s, absl::InternalError(absl::StrCat("commit import: ", st.message())));
          continue;
        }
        s.kv = s.prompt_len;
        s.state = State::kWaiting;
        s.order = next_order_++;
        s.import_done_time = now;
        s.sampler.SkipSteps(1);  // the prefill worker drew the first token
        metrics_->kv_transfer_bytes->Increment(static_cast<double>(s.expected_bytes));
        metrics_->kv_transfer_seconds->Observe(absl::ToDoubleSeconds(now - s.commit_time));
        std::move(s.commit_done)(absl::OkStatus());
        s.commit_done = nullptr;
        TokenEvent ev;
        const engine::SampleResult first = s.first;
        if (!AcceptToken(s, first, &ev)) {
          s.sink->OnTokens(std::move(ev));
        }
        continue;
      }
      if (now >= s.deadline) {
        metrics_->reservations_expired->Increment();
        std::move(s.commit_done)(absl::DeadlineExceededError(
            absl::StrCat("request ", s.request_id, ": ", received, " of ", s.expected_bytes,
                         " KV bytes arrived by the reservation deadline")));
        s.commit_done = nullptr;
        FailSeq(s, absl::UnavailableError(absl::StrCat(
                       "request ", s.request_id, ": KV transfer incomplete at the deadline (",
                       received, " of ", s.expected_bytes, " bytes)")));
      }
      continue;
    }
    if (now >= s.deadline) {
      metrics_->reservations_expired->Increment();
      FailSeq(s, absl::UnavailableError(absl::StrCat(
                     "request ", s.request_id,
                     ": no prefill worker committed the KV by the reservation deadline")));
    }
  }
}

bool DecodeEngine::RunStep() {
  std::vector<SeqView> views;
  for (const auto& [key, s] : seqs_) {
    if (s->state != State::kWaiting && s->state != State::kAdmitted) {
      continue;
    }
    views.push_back(SeqView{
        .id = key,
        .order = s->order,
        .kv_tokens = s->kv,
        .total_tokens = static_cast<int32_t>(s->tokens.size()),
        .blocks_held =
            s->in_engine ? static_cast<int32_t>(engine_->kv_cache().block_table(key).size()) : 0,
        .admitted = s->state == State::kAdmitted,
    });
  }
  if (views.empty()) {
    return false;
  }
  SchedulerConfig sched = options_.scheduler;
  sched.block_size = engine_->config().block_size;
  const StepPlan plan = PlanDecodeStep(sched, views, engine_->kv_cache().num_free_blocks());

  const absl::Time now = clock_.Now();
  for (engine::SequenceId key : plan.unservable) {
    FailSeq(*seqs_.at(key),
            absl::ResourceExhaustedError(absl::StrCat("the KV pool (", engine_->num_blocks(),
                                                      " blocks of ", engine_->config().block_size,
                                                      " tokens) cannot hold this request")));
  }
  for (engine::SequenceId key : plan.preempt) {
    Preempt(*seqs_.at(key));
  }
  for (engine::SequenceId key : plan.admit) {
    Seq& s = *seqs_.at(key);
    s.state = State::kAdmitted;
    if (s.admitted_time == absl::InfinitePast()) {
      s.admitted_time = now;
    }
    if (!s.in_engine) {
      absl::StatusOr<int32_t> cached = engine_->AddSequence(key, s.tokens);
      if (!cached.ok()) {
        FailSeq(s, cached.status());
        continue;
      }
      s.in_engine = true;
      s.kv = *cached;
      if (!s.cache_counted) {
        s.cache_counted = true;
        s.cached_prompt_tokens = std::min(*cached, s.prompt_len);
      }
    }
  }

  std::vector<engine::BatchEntry> batch;
  std::vector<Seq*> batch_seqs;
  for (const StepPlan::Entry& e : plan.entries) {
    auto it = seqs_.find(e.id);
    if (it == seqs_.end() || it->second->state != State::kAdmitted) {
      continue;  // failed above
    }
    Seq& s = *it->second;
    const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.kv;
    const int32_t n = std::min(e.num_tokens, left);
    if (n <= 0) {
      continue;
    }
    batch.push_back(engine::BatchEntry{
        s.key, absl::MakeConstSpan(s.tokens.data() + s.kv, n),
        s.kv + n == static_cast<int32_t>(s.tokens.size()) ? engine::LogitsMode::kLast : engine::LogitsMode::kNone});
    batch_seqs.push_back(&s);
  }
  if (batch.empty()) {
    return !plan.preempt.empty() || !plan.unservable.empty();
  }

  const absl::Time t0 = clock_.Now();
  absl::StatusOr<engine::StepOutput> out = engine_->Step(batch);
  const absl::Time t1 = clock_.Now();
  if (!out.ok()) {
    if (out.status().code() == absl::StatusCode::kResourceExhausted) {
      // The plan and the pool disagree (prefix-cache blocks attached at
      // admission): preempt the newest sequence of the batch and re-plan.
      Seq* newest = *std::max_element(batch_seqs.begin(), batch_seqs.end(),
                                      [](Seq* a, Seq* b) { return a->order < b->order; });
      LOG_EVERY_N(WARNING, 100) << "decode step: " << out.status() << "; preempting request "
                                << newest->request_id;
      if (batch_seqs.size() > 1) {
        Preempt(*newest);
      } else {
        FailSeq(*newest, out.status());
      }
      return true;
    }
    LOG(ERROR) << "decode step failed: " << out.status();
    for (Seq* s : batch_seqs) {
      FailSeq(*s, absl::InternalError(absl::StrCat("engine step: ", out.status().message())));
    }
    return true;
  }
  metrics_->step_seconds->Observe(absl::ToDoubleSeconds(t1 - t0));
  metrics_->batch_size->Observe(static_cast<double>(batch.size()));

  for (size_t i = 0; i < batch.size(); ++i) {
    Seq& s = *batch_seqs[i];
    const int32_t n = static_cast<int32_t>(batch[i].tokens.size());
    if (n > 1 || s.generated == 0) {
      s.prefill_time += t1 - t0;
    }
    s.kv += n;
    if (batch[i].logits != engine::LogitsMode::kLast) {
      continue;
    }
    const engine::SampleResult sample = s.sampler.Sample(out->last_logits(i), s.tokens);
    TokenEvent ev;
    if (!AcceptToken(s, sample, &ev)) {
      s.sink->OnTokens(std::move(ev));
    }
  }
  return true;
}

bool DecodeEngine::AcceptToken(Seq& s, const engine::SampleResult& sample, TokenEvent* event) {
  const absl::Time now = clock_.Now();
  if (s.first_token_time == absl::InfinitePast()) {
    s.first_token_time = now;
    metrics_->time_to_first_token->Observe(absl::ToDoubleSeconds(now - s.arrival));
  } else {
    metrics_->inter_token_latency->Observe(absl::ToDoubleSeconds(now - s.last_token_time));
  }
  s.last_token_time = now;
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), sample.token) != s.stop_ids.end()) {
    FinishSeq(s, Finish::kStop, std::move(*event));
    return true;
  }
  s.tokens.push_back(sample.token);
  ++s.generated;
  metrics_->generated_tokens->Increment();
  event->tokens.push_back(sample);
  if (s.detok != nullptr) {
    bool stopped = false;
    event->text += s.stops.Append(s.detok->Push(sample.token), &stopped);
    if (stopped) {
      s.stop_string_hit = true;
      FinishSeq(s, Finish::kStop, std::move(*event));
      return true;
    }
  }
  if (s.generated >= s.max_tokens ||
      static_cast<int32_t>(s.tokens.size()) >= engine_->model().config().context_length) {
    FinishSeq(s, Finish::kLength, std::move(*event));
    return true;
  }
  return false;
}

void DecodeEngine::FinishSeq(Seq& s, Finish finish, TokenEvent event) {
  const absl::Time now = clock_.Now();
  if (s.detok != nullptr && !s.stop_string_hit) {
    bool stopped = false;
    event.text += s.stops.Append(s.detok->Flush(), &stopped);
    if (!stopped) {
      event.text += s.stops.Flush();
    }
  }
  event.final = true;
  event.finish = finish;
  event.usage = Usage{s.prompt_len, s.generated, s.cached_prompt_tokens};
  const absl::Time joined = s.import ? s.import_done_time : s.admitted_time;
  event.timings.queue = std::max(absl::ZeroDuration(), joined - s.arrival);
  event.timings.time_to_first_token = s.first_token_time - s.arrival;
  event.timings.prefill = s.import ? (s.commit_time - s.arrival) + s.prefill_time : s.prefill_time;
  event.timings.kv_transfer = s.import ? s.import_done_time - s.commit_time : absl::ZeroDuration();
  event.timings.decode = s.last_token_time - s.first_token_time;
  event.timings.total = now - s.arrival;
  if (s.generated > 1) {
    metrics_->time_per_output_token->Observe(
        absl::ToDoubleSeconds(s.last_token_time - s.first_token_time) / (s.generated - 1));
  }
  metrics_->e2e_latency->Observe(absl::ToDoubleSeconds(event.timings.total));
  metrics_->RequestDone(absl::StatusCode::kOk);
  LOG(INFO) << "request_done worker=" << worker_id_ << " request_id=" << s.request_id
            << " mode=" << (s.import ? "disaggregated" : "colocated")
            << " code=OK finish=" << FinishName(finish) << " prompt_tokens=" << s.prompt_len
            << " completion_tokens=" << s.generated << " cached_tokens=" << s.cached_prompt_tokens
            << " preemptions=" << s.preemptions
            << " ttft_s=" << absl::ToDoubleSeconds(event.timings.time_to_first_token)
            << " total_s=" << absl::ToDoubleSeconds(event.timings.total);
  RequestSink* sink = s.sink;
  Release(s);
  sink->OnTokens(std::move(event));
}

void DecodeEngine::FailSeq(Seq& s, const absl::Status& status) {
  metrics_->RequestDone(status.code());
  LOG(INFO) << "request_done worker=" << worker_id_ << " request_id=" << s.request_id
            << " mode=" << (s.import ? "disaggregated" : "colocated")
            << " code=" << absl::StatusCodeToString(status.code())
            << " prompt_tokens=" << s.prompt_len << " completion_tokens=" << s.generated
            << " preemptions=" << s.preemptions
            << " total_s=" << absl::ToDoubleSeconds(clock_.Now() - s.arrival) << " error=\""
            << status.message() << "\"";
  if (s.commit_done) {
    std::move(s.commit_done)(status);
    s.commit_done = nullptr;
  }
  RequestSink* sink = s.sink;
  Release(s);
  sink->OnError(status);
}

void DecodeEngine::Release(Seq& s) {
  const engine::SequenceId key = s.key;
  bool fenced = false;
  if (s.import && transport_ != nullptr &&
      (s.state == State::kReserved || s.state == State::kCommitting)) {
    // Writes may still be on the way: refuse the tag and hold the blocks
    // while any can land (see the class comment). Message mode: a receive
    // accepted before the refusal may still be copying, even after the
    // writer's commit (its sends completed, our copies need not have). Put
    // mode: until the writer says it is done.
    transport_->Refuse(s.tag);
    const bool may_land = transfer_mode_ == "put" ? !s.writer_done : transport_->Receiving(s.tag);
    if (s.in_engine && may_land) {
      const absl::Time release_at = std::max(clock_.Now(), s.deadline) + options_.fence_grace;
      VLOG(1) << "kv_fence request_id=" << s.request_id << " tag=" << s.tag
              << " until=" << release_at;
      fences_.push_back(Fence{key, s.request_id, s.tag, release_at});
      fenced = true;
    }
  }
  if (s.in_engine && !fenced) {
    engine_->FreeSequence(key).IgnoreError();  // NotFound only if never added: nothing to free
  }
  by_request_id_.erase(s.request_id);
  seqs_.erase(key);  // destroys s
  num_live_.store(static_cast<int32_t>(seqs_.size()), std::memory_order_relaxed);
}

void DecodeEngine::PollFences(absl::Time now) {
  for (size_t i = 0; i < fences_.size();) {
    const Fence& f = fences_[i];
    if (now >= f.release_at) {
      ReleaseFence(i, "grace after the deadline passed");
    } else if (transfer_mode_ != "put" && !transport_->Receiving(f.tag)) {
      ReleaseFence(i, "tag refused, no receive in flight");
    } else {
      ++i;
    }
  }
}

void DecodeEngine::ReleaseFence(size_t index, const char* why) {
  const Fence& f = fences_[index];
  VLOG(1) << "kv_fence_released request_id=" << f.request_id << " (" << why << ")";
  engine_->FreeSequence(f.key).IgnoreError();  // present: fenced sequences stay in the engine
  fences_[index] = std::move(fences_.back());
  fences_.pop_back();
}

void DecodeEngine::Preempt(Seq& s) {
  VLOG(1) << "preempt request_id=" << s.request_id << " tokens=" << s.tokens.size();
  if (s.in_engine) {
    engine_->FreeSequence(s.key).IgnoreError();  // present: in_engine
  }
  s.in_engine = false;
  s.kv = 0;
  s.state = State::kWaiting;
  ++s.preemptions;
  metrics_->preemptions->Increment();
}

void DecodeEngine::DoCancel(engine::SequenceId key, const absl::Status& why) {
  auto it = seqs_.find(key);
  if (it == seqs_.end()) {
    return;  // already finished
  }
  FailSeq(*it->second, why);
}

void DecodeEngine::UpdateLoad() {
  if (on_blocks_) {
    const engine::KvBlockEvents blocks = engine_->kv_cache().DrainBlockEvents();
    if (!blocks.empty()) {
      on_blocks_(blocks);
    }
  }
  LoadInfo l;
  for (const auto& [key, s] : seqs_) {
    switch (s->state) {
      case State::kReserved:
      case State::kCommitting:
        ++l.reserved;
        break;
      case State::kWaiting:
      case State::kQueued:
        ++l.waiting;
        break;
      case State::kAdmitted:
        ++l.running;
        break;
    }
    const int64_t left = static_cast<int64_t>(s->tokens.size()) - s->kv;
    if ((s->state == State::kWaiting || s->state == State::kAdmitted) && left > 1) {
      l.queued_prefill_tokens += left;
    }
  }
  const engine::KvCacheManager& kv = engine_->kv_cache();
  l.free_blocks = kv.num_free_blocks();
  l.used_blocks = kv.num_used_blocks();
  l.cached_blocks = kv.num_cached_blocks();
  l.total_blocks = engine_->num_blocks();
  l.fenced = static_cast<int32_t>(fences_.size());
  if (l == last_load_) {
    return;
  }
  last_load_ = l;
  {
    absl::MutexLock lock(&load_mu_);
    load_ = l;
  }
  metrics_->running_requests->Set(l.running);
  metrics_->waiting_requests->Set(l.waiting);
  metrics_->reserved_requests->Set(l.reserved);
  metrics_->fenced_reservations->Set(l.fenced);
  metrics_->SetLoad({.running = l.running,
                     .waiting = l.waiting,
                     .free_blocks = l.free_blocks,
                     .used_blocks = l.used_blocks,
                     .cached_blocks = l.cached_blocks,
                     .total_blocks = l.total_blocks});
  if (on_load_) {
    on_load_(l);
  }
}

}  // namespace tandem::decode_worker
