#include "prefill_worker/prefill_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace tandem::prefill_worker {

enum class PrefillEngine::State {
  kQueued,      // admission queue
  kComputing,   // chunks running; KV pushed layer by layer
  kPushing,     // computed and first token sampled; writes in flight
  kCommitting,  // writes done, local blocks released; Decode.Commit in flight
  kAborting,    // cancelled or failed; waiting for writes in flight before freeing
};

struct PrefillEngine::Seq {
  engine::SequenceId key = 0;
  PrefillJob job;
  PrefillCall* call = nullptr;
  State state = State::kQueued;
  int64_t order = 0;
  bool in_engine = false;
  int32_t computed = 0;       // prompt tokens whose KV is present
  int32_t pushed_blocks = 0;  // leading blocks pushed for every layer
  int32_t cached = 0;
  int32_t outstanding = 0;  // writes whose done has not run
  uint64_t bytes_issued = 0;
  uint64_t bytes_done = 0;
  absl::Status write_error;   // first failed write
  absl::Status abort_status;  // why it is aborting
  engine::SampleResult first;
  absl::Time arrival;
  absl::Time first_chunk = absl::InfinitePast();
  absl::Time compute_done;
  absl::Time first_write = absl::InfinitePast();
  absl::Time last_write_done;
};

namespace {

int32_t BlocksFor(int32_t tokens, int32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

}  // namespace

PrefillEngine::PrefillEngine(std::unique_ptr<engine::Engine> engine, kvtransfer::KvTransport* transport,
                             Committer* committer, PrefillEngineOptions options,
                             PrefillMetrics* metrics, base::Clock& clock)
    : engine_(std::move(engine)),
      transport_(transport),
      committer_(committer),
      options_(std::move(options)),
      metrics_(metrics),
      clock_(clock),
      heartbeat_("prefill engine loop", clock),
      worker_id_(options_.worker_id) {
  const engine::ModelConfig& mc = engine_->model().config();
  layout_.num_layers = mc.num_layers;
  layout_.num_kv_heads = mc.num_kv_heads;
  layout_.head_dim = mc.head_dim;
  layout_.block_size = engine_->config().block_size;
  layout_.dtype = engine_->config().kv_dtype;
  layout_.model_id = engine_->model().model_id();
  local_geometry_.layout = layout_;
  local_geometry_.num_blocks = engine_->num_blocks();
}

PrefillEngine::~PrefillEngine() { Stop(); }

void PrefillEngine::Start(std::function<void(const PrefillLoad&)> on_load) {
  on_load_ = std::move(on_load);
  UpdateLoad();
  thread_ = std::thread([this] { Loop(); });
}

void PrefillEngine::set_block_listener(
    std::function<void(const engine::KvBlockEvents&)> on_blocks) {
  on_blocks_ = std::move(on_blocks);
  engine_->kv_cache().EnableBlockEvents();
}

void PrefillEngine::Stop(absl::Status reason) {
  if (!stopped_.exchange(true)) {
    queue_.Post([this, reason] {
      stopping_ = true;
      stop_reason_ = reason;
    });
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

PrefillLoad PrefillEngine::load() const {
  absl::MutexLock lock(&load_mu_);
  return load_;
}

void PrefillEngine::Submit(engine::SequenceId key, PrefillJob job, PrefillCall* call) {
  if (!queue_.Post([this, key, job = std::move(job), call]() mutable {
        DoSubmit(key, std::move(job), call);
      })) {
    call->Done(absl::UnavailableError("prefill worker shutting down"));
  }
}

void PrefillEngine::CancelKey(engine::SequenceId key) {
  queue_.Post([this, key] {
    auto it = seqs_.find(key);
    if (it != seqs_.end()) {
      Abort(*it->second, absl::CancelledError(
                             absl::StrCat("request ", it->second->job.request_id, " cancelled")));
    }
  });
}

void PrefillEngine::Loop() {
  while (!stopping_) {
    heartbeat_.Beat();
    queue_.RunPending();
    if (stopping_) {
      break;
    }
    CheckDeadlines(clock_.Now());
    const bool progressed = RunStep();
    UpdateLoad();
    if (!progressed) {
      heartbeat_.Idle();
      queue_.WaitUntil(clock_, NextDeadline());
    }
  }
  heartbeat_.Idle();  // stopping is not wedged
  // Abort everything; writes in flight must finish (their sources are our
  // KV pool) before the jobs complete, bounded so a stuck transport cannot
  // hold the shutdown (options_.shutdown_bound on the clock).
  std::vector<engine::SequenceId> keys;
  for (const auto& [key, s] : seqs_) keys.push_back(key);
  for (engine::SequenceId key : keys) {
    auto it = seqs_.find(key);
    if (it != seqs_.end()) Abort(*it->second, stop_reason_);
  }
  const absl::Time give_up = clock_.Now() + options_.shutdown_bound;
  while (!seqs_.empty() && clock_.Now() < give_up) {
    queue_.WaitUntil(clock_, give_up);
    queue_.RunPending();
  }
  queue_.Close();
  queue_.RunPending();
  keys.clear();
  for (const auto& [key, s] : seqs_) keys.push_back(key);
  for (engine::SequenceId key : keys) {
    auto it = seqs_.find(key);
    if (it != seqs_.end()) Complete(*it->second, stop_reason_);
  }
  UpdateLoad();
}

absl::Time PrefillEngine::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, s] : seqs_) {
    if (s->state != State::kAborting && s->state != State::kCommitting) {
      next = std::min(next, s->job.deadline);
    }
  }
  return next;
}

void PrefillEngine::AbortReservation(const std::string& decode_worker,
                                     const std::string& request_id) {
  if (decode_worker.empty() || request_id.empty()) {
    return;
  }
  CommitArgs abort;
  abort.decode_worker = decode_worker;
  abort.request_id = request_id;
  abort.abort = true;
  abort.deadline = clock_.Now() + absl::Seconds(5);
  committer_->Commit(std::move(abort), [request_id](absl::Status st) {
    VLOG(1) << "abort notice for " << request_id << ": " << st;
  });
}

void PrefillEngine::DoSubmit(engine::SequenceId key, PrefillJob job, PrefillCall* call) {
  if (stopping_) {
    AbortReservation(job.decode_worker, job.request_id);
    call->Done(stop_reason_);
    return;
  }
  if (by_request_id_.contains(job.request_id)) {
    // No abort notice: the reservation is the live request's.
    call->Done(absl::AlreadyExistsError(
        absl::StrCat("request ", job.request_id, " is already being prefilled here")));
    return;
  }
  int32_t queued = 0;
  for (const auto& [k, s] : seqs_) queued += s->state == State::kQueued;
  if (queued >= options_.max_queued) {
    metrics_->RequestDone(absl::StatusCode::kResourceExhausted);
    AbortReservation(job.decode_worker, job.request_id);
    call->Done(absl::ResourceExhaustedError(
        absl::StrCat("prefill admission queue full (", queued, " requests waiting)")));
    return;
  }
  auto s = std::make_unique<Seq>();
  s->key = key;
  s->call = call;
  s->order = next_order_++;
  s->arrival = clock_.Now();
  s->job = std::move(job);
  metrics_->prompt_tokens->Increment(static_cast<double>(s->job.prompt.size()));
  by_request_id_[s->job.request_id] = key;
  seqs_[key] = std::move(s);
  num_live_.store(static_cast<int32_t>(seqs_.size()), std::memory_order_relaxed);
}

void PrefillEngine::CheckDeadlines(absl::Time now) {
  std::vector<engine::SequenceId> expired;
  for (const auto& [key, s] : seqs_) {
    if (s->state != State::kAborting && s->state != State::kCommitting && now >= s->job.deadline) {
      expired.push_back(key);
    }
  }
  for (engine::SequenceId key : expired) {
    Seq& s = *seqs_.at(key);
    Abort(s, absl::DeadlineExceededError(absl::StrCat(
                 "request ", s.job.request_id,
                 ": deadline passed during prefill (reservation or client deadline)")));
  }
}

bool PrefillEngine::RunStep() {
  std::vector<PrefillSeqView> views;
  for (const auto& [key, s] : seqs_) {
    if (s->state != State::kQueued && s->state != State::kComputing) {
      continue;
    }
    views.push_back(PrefillSeqView{
        .id = key,
        .order = s->order,
        .computed_tokens = s->computed,
        .prompt_tokens = static_cast<int32_t>(s->job.prompt.size()),
        .blocks_held =
            s->in_engine ? static_cast<int32_t>(engine_->kv_cache().block_table(key).size()) : 0,
        .admitted = s->state == State::kComputing,
    });
  }
  if (views.empty()) {
    return false;
  }
  PrefillSchedulerConfig sched = options_.scheduler;
  sched.block_size = engine_->config().block_size;
  const PrefillPlan plan = PlanPrefillStep(sched, views, engine_->kv_cache().num_free_blocks());

  const absl::Time now = clock_.Now();
  for (engine::SequenceId key : plan.admit) {
    Seq& s = *seqs_.at(key);
    absl::StatusOr<int32_t> cached = engine_->AddSequence(key, s.job.prompt);
    if (!cached.ok()) {
      Complete(s, cached.status());
      continue;
    }
    s.state = State::kComputing;
    s.in_engine = true;
    s.computed = *cached;
    s.cached = *cached;
    s.first_chunk = now;
    metrics_->cached_prompt_tokens->Increment(*cached);
    metrics_->queue_seconds->Observe(absl::ToDoubleSeconds(now - s.arrival));
  }

  std::vector<engine::BatchEntry> batch;
  std::vector<Seq*> batch_seqs;
  std::vector<int32_t> complete_after;
  for (const PrefillPlan::Chunk& c : plan.chunks) {
    auto it = seqs_.find(c.id);
    if (it == seqs_.end() || it->second->state != State::kComputing) {
      continue;
    }
    Seq& s = *it->second;
    const int32_t prompt_len = static_cast<int32_t>(s.job.prompt.size());
    const int32_t n = std::min(c.num_tokens, prompt_len - s.computed);
    if (n <= 0) {
      continue;
    }
    const bool last = s.computed + n == prompt_len;
    batch.push_back(engine::BatchEntry{s.key, absl::MakeConstSpan(s.job.prompt.data() + s.computed, n),
                               last ? engine::LogitsMode::kLast : engine::LogitsMode::kNone});
    batch_seqs.push_back(&s);
    const int32_t bs = engine_->config().block_size;
    complete_after.push_back(last ? BlocksFor(prompt_len, bs) : (s.computed + n) / bs);
  }
  if (batch.empty()) {
    return !plan.admit.empty();
  }

  auto hook = [&](int layer) {
    for (size_t i = 0; i < batch.size(); ++i) {
      PushLayer(*batch_seqs[i], layer, complete_after[i]);
    }
  };
  const absl::Time t0 = clock_.Now();
  absl::StatusOr<engine::StepOutput> out = engine_->Step(batch, hook);
  if (!out.ok() && out.status().code() == absl::StatusCode::kResourceExhausted &&
      batch.size() > 1) {
    // Prefix-cache blocks attached at admission left fewer free blocks than
    // planned: run the oldest chunk alone (nothing was computed or pushed).
    LOG_EVERY_N(WARNING, 100) << "prefill step: " << out.status() << "; running one chunk";
    batch.resize(1);
    batch_seqs.resize(1);
    complete_after.resize(1);
    out = engine_->Step(batch, hook);
  }
  const absl::Time t1 = clock_.Now();
  if (!out.ok()) {
    LOG(ERROR) << "prefill step failed: " << out.status();
    for (Seq* s : batch_seqs) {
      Abort(*s, out.status().code() == absl::StatusCode::kResourceExhausted
                    ? out.status()
                    : absl::InternalError(absl::StrCat("engine step: ", out.status().message())));
    }
    return true;
  }
  metrics_->step_seconds->Observe(absl::ToDoubleSeconds(t1 - t0));
  int64_t tokens = 0;
  for (const engine::BatchEntry& e : batch) tokens += static_cast<int64_t>(e.tokens.size());
  metrics_->step_tokens->Observe(static_cast<double>(tokens));

  for (size_t i = 0; i < batch.size(); ++i) {
    Seq& s = *batch_seqs[i];
    s.computed += static_cast<int32_t>(batch[i].tokens.size());
    s.pushed_blocks = std::max(s.pushed_blocks, complete_after[i]);
    if (batch[i].logits != engine::LogitsMode::kLast) {
      continue;
    }
    engine::Sampler sampler(s.job.sampling);
    s.first = sampler.Sample(out->last_logits(i), s.job.prompt);
    s.compute_done = t1;
    metrics_->time_to_first_token->Observe(absl::ToDoubleSeconds(t1 - s.arrival));
    if (s.state == State::kComputing) {
      s.state = State::kPushing;
    }
    Advance(s);
  }
  return true;
}

void PrefillEngine::PushLayer(Seq& s, int layer, int32_t complete) {
  if (s.state != State::kComputing || !s.write_error.ok() || complete <= s.pushed_blocks) {
    return;
  }
  absl::Span<const engine::BlockId> table = engine_->kv_cache().block_table(s.key);
  if (static_cast<int32_t>(table.size()) < complete ||
      static_cast<int32_t>(s.job.remote_blocks.size()) < complete) {
    s.write_error = absl::InternalError(
        absl::StrCat("push: ", complete, " blocks complete but the sequence holds ", table.size(),
                     " and the reservation has ", s.job.remote_blocks.size()));
    return;
  }
  const absl::Span<const int32_t> local =
      table.subspan(s.pushed_blocks, complete - s.pushed_blocks);
  const absl::Span<const int32_t> remote =
      absl::MakeConstSpan(s.job.remote_blocks).subspan(s.pushed_blocks, complete - s.pushed_blocks);
  std::vector<kvtransfer::WriteOp> ops;
  for (int kv = 0; kv < 2; ++kv) {
    absl::StatusOr<std::vector<kvtransfer::WriteOp>> part = kvtransfer::CoalesceRuns(
        local_geometry_, engine_->kv_pool_base(), s.job.remote, layer, kv, local, remote);
    if (!part.ok()) {
      s.write_error = base::Annotate(part.status(), absl::StrCat("push layer ", layer));
      return;
    }
    ops.insert(ops.end(), part->begin(), part->end());
  }
  uint64_t bytes = 0;
  for (const kvtransfer::WriteOp& op : ops) bytes += op.bytes;
  if (s.first_write == absl::InfinitePast()) {
    s.first_write = clock_.Now();
  }
  ++s.outstanding;
  s.bytes_issued += bytes;
  const engine::SequenceId key = s.key;
  absl::Status st = transport_->Write(
      s.job.region, s.job.transfer_tag, std::move(ops), [this, key, bytes](absl::Status done) {
        // Progress thread: hand the result to the engine thread.
        queue_.Post([this, key, bytes, done = std::move(done)]() mutable {
          OnWriteDone(key, bytes, std::move(done));
        });
      });
  if (!st.ok()) {
    --s.outstanding;
    s.bytes_issued -= bytes;
    s.write_error = base::Annotate(st, absl::StrCat("push layer ", layer));
  }
}

void PrefillEngine::OnWriteDone(engine::SequenceId key, uint64_t bytes, absl::Status status) {
  auto it = seqs_.find(key);
  if (it == seqs_.end()) {
    return;
  }
  Seq& s = *it->second;
  --s.outstanding;
  s.last_write_done = clock_.Now();
  if (status.ok()) {
    s.bytes_done += bytes;
  } else if (s.write_error.ok()) {
    s.write_error = status;
  }
  if (s.state == State::kPushing || s.state == State::kAborting) {
    Advance(s);
  }
}

void PrefillEngine::Advance(Seq& s) {
  if (s.outstanding > 0) {
    return;
  }
  if (s.state == State::kAborting) {
    Complete(s, s.abort_status);
    return;
  }
  if (s.state != State::kPushing) {
    return;
  }
  if (!s.write_error.ok()) {
    metrics_->kv_transfer_failures->Increment();
    Complete(
        s, base::Annotate(s.write_error, absl::StrCat("KV push to decode worker ", s.job.decode_worker)));
    return;
  }
  // The decode worker has the bytes: release ours (full blocks stay as prefix cache).
  engine_->FreeSequence(s.key).IgnoreError();  // in_engine: present
  s.in_engine = false;
  metrics_->kv_transfer_bytes->Increment(static_cast<double>(s.bytes_done));
  if (s.first_write != absl::InfinitePast()) {
    metrics_->kv_transfer_seconds->Observe(
        absl::ToDoubleSeconds(s.last_write_done - s.first_write));
  }
  s.state = State::kCommitting;
  CommitArgs args;
  args.decode_worker = s.job.decode_worker;
  args.request_id = s.job.request_id;
  args.first = s.first;
  args.num_tokens = static_cast<int32_t>(s.job.prompt.size());
  args.bytes_written = s.bytes_done;
  args.deadline = s.job.deadline;
  const engine::SequenceId key = s.key;
  committer_->Commit(std::move(args), [this, key](absl::Status st) {
    queue_.Post([this, key, st = std::move(st)]() mutable { OnCommitDone(key, std::move(st)); });
  });
}

void PrefillEngine::OnCommitDone(engine::SequenceId key, absl::Status status) {
  auto it = seqs_.find(key);
  if (it == seqs_.end()) {
    return;
  }
  Seq& s = *it->second;
  if (!status.ok()) {
    Complete(s, base::Annotate(status, absl::StrCat("commit on decode worker ", s.job.decode_worker)));
    return;
  }
  PrefillResult r;
  r.first = s.first;
  r.cached_prompt_tokens = s.cached;
  r.kv_bytes = s.bytes_done;
  r.prefill = s.compute_done - s.first_chunk;
  r.kv_transfer = s.first_write == absl::InfinitePast() ? absl::ZeroDuration()
                                                        : s.last_write_done - s.first_write;
  Complete(s, std::move(r));
}

void PrefillEngine::Abort(Seq& s, absl::Status why) {
  switch (s.state) {
    case State::kQueued:
      Complete(s, why);
      return;
    case State::kComputing:
    case State::kPushing:
      transport_->Cancel(s.job.transfer_tag);
      s.state = State::kAborting;
      s.abort_status = std::move(why);
      Advance(s);
      return;
    case State::kCommitting:
      // The commit is in flight; its answer completes the request.
      return;
    case State::kAborting:
      return;
  }
}

void PrefillEngine::Complete(Seq& s, absl::StatusOr<PrefillResult> result) {
  const absl::StatusCode code = result.ok() ? absl::StatusCode::kOk : result.status().code();
  if (s.in_engine) {
    engine_->FreeSequence(s.key).IgnoreError();  // in_engine: present
  }
  if (s.state == State::kAborting || !s.write_error.ok()) {
    transport_->Forget(s.job.transfer_tag);  // drop the sender's cancelled-tag record
  }
  if (!result.ok() && s.state != State::kCommitting) {
    // No commit reached the decode worker and none of our writes is in
    // flight (Complete runs once they all ended).
    AbortReservation(s.job.decode_worker, s.job.request_id);
  }
  metrics_->RequestDone(code);
  metrics_->request_seconds->Observe(absl::ToDoubleSeconds(clock_.Now() - s.arrival));
  LOG(INFO) << "request_done worker=" << worker_id_ << " request_id=" << s.job.request_id
            << " code=" << absl::StatusCodeToString(code)
            << " prompt_tokens=" << s.job.prompt.size() << " cached_tokens=" << s.cached
            << " kv_bytes=" << s.bytes_done << " decode_worker=" << s.job.decode_worker
            << " total_s=" << absl::ToDoubleSeconds(clock_.Now() - s.arrival)
            << (result.ok() ? "" : absl::StrCat(" error=\"", result.status().message(), "\""));
  PrefillCall* call = s.call;
  by_request_id_.erase(s.job.request_id);
  seqs_.erase(s.key);  // destroys s
  num_live_.store(static_cast<int32_t>(seqs_.size()), std::memory_order_relaxed);
  call->Done(std::move(result));
}

void PrefillEngine::UpdateLoad() {
  if (on_blocks_) {
    const engine::KvBlockEvents blocks = engine_->kv_cache().DrainBlockEvents();
    if (!blocks.empty()) {
      on_blocks_(blocks);
    }
  }
  PrefillLoad l;
  for (const auto& [key, s] : seqs_) {
    const int64_t left = static_cast<int64_t>(s->job.prompt.size()) - s->computed;
    if (s->state == State::kQueued) {
      ++l.waiting;
      l.queued_prompt_tokens += left;
    } else {
      ++l.running;
      if (s->state == State::kComputing) l.queued_prompt_tokens += left;
    }
  }
  const engine::KvCacheManager& kv = engine_->kv_cache();
  l.free_blocks = kv.num_free_blocks();
  l.used_blocks = kv.num_used_blocks();
  l.cached_blocks = kv.num_cached_blocks();
  l.total_blocks = engine_->num_blocks();
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
  metrics_->queued_prompt_tokens->Set(static_cast<double>(l.queued_prompt_tokens));
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

}  // namespace tandem::prefill_worker
