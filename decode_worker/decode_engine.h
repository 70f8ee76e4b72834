#pragma once
// DecodeEngine: owns the engine thread of a decode (or colocated) worker and
// everything that thread owns: the Engine (KV pool and block manager), every
// request's sequence, sampler, detokenizer and stop matcher, the running
// batch and the reservations waiting for their KV.
//
// Each engine step plans with PlanDecodeStep (one token for every running
// sequence plus prefill chunks of colocated / preempted requests in the token
// budget), runs Engine::Step, samples, and streams tokens to each request's
// sink. Sequences join as soon as their KV is committed and leave the moment
// they finish; their blocks free at once. Preemption frees the newest
// sequence's blocks and recomputes its prompt + generated tokens locally.
//
// Disaggregated requests: SubmitReserve queues (FIFO) until the pool has the
// prompt's blocks plus one free block per running sequence (so a new
// reservation never forces a preemption), bounded by the client's deadline
// and max_waiting; then it allocates them (Engine::AddSequenceForImport)
// and hands the sink a Reservation; the
// prefill worker writes the KV through the transport and calls Commit; the
// engine thread then waits (polling, never in a gRPC callback) until the
// transport's ReceivedBytes(tag) reaches the KvLayout formula's byte count,
// bounded by the reservation deadline, commits the import and the sequence
// joins the batch with the prefill worker's first token (its Sampler skips
// the one draw the prefill worker made).
//
// Fences: a reservation that ends before its import completes (cancelled,
// expired, failed) may still have writes on the way. Its tag is refused at
// once (KvTransport::Refuse: message-mode data is dropped from then on), but
// its blocks stay allocated, fenced, until no write can reach them: in
// message mode once the transport has no receive of the tag in flight; in
// put mode (RMA, which the receiver cannot refuse) once the prefill worker
// says it stopped writing (its Commit, or Commit with abort), or else a
// grace period after the reservation's deadline (a prefill worker stops
// writing at the deadline; one that died writes nothing).
//
// Threads: public methods are thread-safe and post to the engine thread;
// sinks and completion callbacks run on the engine thread.
//
// Liveness: the engine thread beats heartbeat() at the top of every
// iteration and marks it idle before it waits for work, so a watchdog
// (serving::WorkerHealth) can tell a wedged loop from an idle one.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/work_queue.h"
#include "common/engine/engine.h"
#include "common/engine/generation.h"
#include "common/engine/sampling.h"
#include "common/serving/worker_health.h"
#include "decode_worker/metrics.h"
#include "decode_worker/scheduler.h"
#include "kvtransfer/kv_layout.h"
#include "kvtransfer/transport.h"

namespace tandem::decode_worker {

// A generation request as the engine sees it (the edge has validated it).
struct RequestSpec {
  std::string request_id;  // "" -> the engine names it "<worker_id>-<n>"
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  engine::SamplingParams sampling;
  // The client's deadline (gRPC); a reservation expires at the earlier of
  // this and now + reservation_deadline.
  absl::Time deadline = absl::InfiniteFuture();
};

// Where and how the prefill worker writes a reservation's KV.
struct Reservation {
  std::string request_id;
  kvtransfer::TransferTag transfer_tag = 0;
  std::vector<int32_t> block_ids;
  kvtransfer::KvLayout layout;
  kvtransfer::RegionDescriptor region;
  std::string transfer_mode;  // "put" (native RMA) or "am" (active messages)
  absl::Time deadline;
  uint64_t expected_bytes = 0;
};

// The prefill worker's commit.
struct CommitSpec {
  std::string request_id;
  // The prefill worker gives the reservation up: none of its writes is in
  // flight any more. The request fails (if still live) and its blocks free
  // at once instead of waiting out a fence.
  bool abort = false;
  engine::SampleResult first;  // the first token, sampled by the prefill worker
  int32_t num_tokens = 0;
  uint64_t bytes_written = 0;
};

enum class Finish { kLength, kStop };

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

struct Timings {
  absl::Duration queue;  // arrival -> joins the batch (or KV committed)
  absl::Duration time_to_first_token;
  absl::Duration prefill;      // local prefill, or arrival -> commit when disaggregated
  absl::Duration kv_transfer;  // Commit -> all bytes present
  absl::Duration decode;       // first token -> last token
  absl::Duration total;
};

// One streamed message: the tokens of a step and their text delta (never a
// partial UTF-8 code point; held back while it could be a stop string's
// start). The last one of a request has `final` set with finish, usage and
// timings.
struct TokenEvent {
  std::vector<engine::SampleResult> tokens;
  std::string text;
  bool final = false;
  Finish finish = Finish::kLength;
  Usage usage;
  Timings timings;
};

// A request's client stream. Engine thread only. After a terminal call (a
// final OnTokens or OnError) the engine never touches the sink again.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnReservation(const Reservation& /*reservation*/) {}
  virtual void OnTokens(TokenEvent event) = 0;
  virtual void OnError(const absl::Status& status) = 0;
};

struct LoadInfo {
  int32_t running = 0;   // admitted into the batch
  int32_t waiting = 0;   // queued for the batch (committed imports, colocated, preempted)
  int32_t reserved = 0;  // reservations whose KV has not been committed
  int64_t queued_prefill_tokens = 0;
  int32_t free_blocks = 0;
  int32_t used_blocks = 0;
  int32_t cached_blocks = 0;
  int32_t total_blocks = 0;
  int32_t fenced = 0;  // ended reservations whose blocks wait out a fence
  bool operator==(const LoadInfo&) const = default;
};

struct DecodeEngineOptions {
  SchedulerConfig scheduler;  // block_size is taken from the engine
  absl::Duration reservation_deadline = absl::Seconds(30);
  // Colocated requests waiting for the batch (and, separately, Reserves
  // waiting for blocks) beyond which Generate (Reserve) answers
  // RESOURCE_EXHAUSTED.
  int32_t max_waiting = 1024;
  std::string worker_id = "decode";
  // Idle wait (real time) between polls for KV of committed reservations
  // and, in message mode, for receives into fenced blocks to finish.
  absl::Duration commit_poll_interval = absl::Microseconds(200);
  // Put mode: how long after a reservation's deadline its fenced blocks
  // free when the prefill worker never said it stopped writing.
  absl::Duration fence_grace = absl::Seconds(1);
};

class DecodeEngine {
 public:
  // `transport` (may be null: colocated, Reserve then fails) must outlive the
  // engine and have `region` registered over the engine's KV pool. `metrics`
  // and `clock` must outlive the engine.
  DecodeEngine(std::unique_ptr<engine::Engine> engine, kvtransfer::KvTransport* transport,
               kvtransfer::RegionDescriptor region, DecodeEngineOptions options,
               DecodeMetrics* metrics, base::Clock& clock);
  ~DecodeEngine();  // Stop()
  DecodeEngine(const DecodeEngine&) = delete;
  DecodeEngine& operator=(const DecodeEngine&) = delete;

  // Names the worker in logs and generated request ids (its id is only
  // known once the server is bound). Before Start().
  void set_worker_id(std::string id) { worker_id_ = std::move(id); }

  // Starts the engine thread. `on_load` (engine thread) is told the load
  // whenever it changes.
  void Start(std::function<void(const LoadInfo&)> on_load);
  // Before Start(): turns on the KV cache's block events and hands each
  // step's net change of the prefix cache's block names to `on_blocks`
  // (engine thread; must not block), for the router's prefix index.
  void set_block_listener(std::function<void(const engine::KvBlockEvents&)> on_blocks);
  // Fails every live request with `reason` (its sink's OnError, pending
  // commits too), frees their KV and joins the thread. Idempotent; later
  // submissions fail with UNAVAILABLE at once.
  void Stop(absl::Status reason = absl::UnavailableError("decode worker shutting down"));

  // Any thread. A fresh key for a request (Submit*, CancelKey); taken before
  // submitting so the sink knows it before the engine can answer.
  engine::SequenceId NewRequestKey() { return next_key_.fetch_add(1, std::memory_order_relaxed); }
  // Any thread. Errors reach the sink (engine thread; or the calling thread
  // when the engine is stopped):
  //  - Reserve: FailedPrecondition without a transport, AlreadyExists (live
  //    request_id), ResourceExhausted (the pool can never hold the prompt,
  //    or max_waiting Reserves already queue), DeadlineExceeded (the
  //    client's deadline passed while queued), InvalidArgument (prompt).
  //  - Generate: AlreadyExists; ResourceExhausted when max_waiting requests
  //    already wait or the pool can never hold the request.
  void SubmitReserve(engine::SequenceId key, RequestSpec spec, RequestSink* sink);
  void SubmitGenerate(engine::SequenceId key, RequestSpec spec, RequestSink* sink);
  // `done` runs on the engine thread once the import is committed (OK) or
  // not: NotFound (unknown or cancelled request; a fenced one's blocks free
  // now, as the writer has finished), FailedPrecondition
  // (already committed), InvalidArgument (token count, first token),
  // DeadlineExceeded (bytes missing at the deadline).
  void Commit(CommitSpec commit, absl::AnyInvocable<void(absl::Status) &&> done);
  // Cancels by request id; `done(found)` on the engine thread. The request's
  // sink gets OnError(CANCELLED); its blocks are free before the next step.
  void Cancel(std::string request_id, absl::AnyInvocable<void(bool) &&> done);
  // The client stream went away: like Cancel, by key; no callback.
  void CancelKey(engine::SequenceId key);

  // Any thread.
  int32_t num_live_requests() const { return num_live_.load(std::memory_order_relaxed); }
  LoadInfo load() const;
  const engine::Engine& engine() const { return *engine_; }
  kvtransfer::KvLayout layout() const { return layout_; }
  const engine::ModelConfig& model_config() const { return engine_->model().config(); }
  // Any thread. The engine loop's progress (see the file comment).
  const serving::LoopHeartbeat& heartbeat() const { return heartbeat_; }

  // Any thread. Runs `task` on the engine thread between iterations (a test
  // wedges the loop with a task that blocks). False once stopped.
  bool PostForTest(absl::AnyInvocable<void() &&> task) { return queue_.Post(std::move(task)); }

 private:
  struct Seq;
  enum class State;

  void Loop();
  void Submit(engine::SequenceId key, RequestSpec spec, RequestSink* sink, bool reserve);
  void DoSubmit(engine::SequenceId key, RequestSpec spec, RequestSink* sink, bool reserve);
  void DoCommit(CommitSpec commit, absl::AnyInvocable<void(absl::Status) &&> done);
  void DoCancel(engine::SequenceId key, const absl::Status& why);
  void PollImports(absl::Time now);
  // Hands out reservations to queued Reserves, oldest first, while the pool
  // has their blocks plus one per running sequence.
  void AdmitReservations(absl::Time now);
  // Allocates `s`'s blocks and sends its reservation (true), or leaves it
  // queued (false: not enough blocks yet). True also when it failed.
  bool TryReserve(Seq& s, absl::Time now);
  void PollFences(absl::Time now);
  void ReleaseFence(size_t index, const char* why);
  bool RunStep();
  // Applies a sampled token (stop ids, text, stop strings, limits). Returns
  // true when the request finished (the final event went to the sink and
  // `s` is gone); otherwise `event` holds the token for the caller to send.
  bool AcceptToken(Seq& s, const engine::SampleResult& sample, TokenEvent* event);
  // Ends `s` normally (sink gets the final event) or with an error, frees
  // everything and forgets it.
  void FinishSeq(Seq& s, Finish finish, TokenEvent event);
  void FailSeq(Seq& s, const absl::Status& status);
  void Release(Seq& s);
  void Preempt(Seq& s);
  void UpdateLoad();
  // Sleeps until a post, the next deadline on the clock, or (while KV may
  // be arriving) commit_poll_interval of real time.
  void Idle();

  std::unique_ptr<engine::Engine> engine_;
  kvtransfer::KvTransport* const transport_;
  const kvtransfer::RegionDescriptor region_;
  const DecodeEngineOptions options_;
  DecodeMetrics* const metrics_;
  base::Clock& clock_;
  kvtransfer::KvLayout layout_;
  std::string transfer_mode_;
  // High bits of every transfer tag: a prefill worker's transport cancels
  // and forgets by tag alone, so tags of different decode workers must not
  // collide (keys alone restart at 1 in every process).
  uint64_t tag_salt_ = 0;

  base::WorkQueue queue_;
  serving::LoopHeartbeat heartbeat_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  std::atomic<engine::SequenceId> next_key_{1};
  std::atomic<int32_t> num_live_{0};
  std::string worker_id_;  // options_.worker_id until set_worker_id()
  std::function<void(const LoadInfo&)> on_load_;
  std::function<void(const engine::KvBlockEvents&)> on_blocks_;

  // Engine thread only.
  bool stopping_ = false;
  absl::Status stop_reason_;
  absl::flat_hash_map<engine::SequenceId, std::unique_ptr<Seq>> seqs_;
  absl::flat_hash_map<std::string, engine::SequenceId> by_request_id_;
  struct Fence {
    engine::SequenceId key;  // the engine sequence that still holds the blocks
    std::string request_id;
    kvtransfer::TransferTag tag;
    absl::Time release_at;
  };
  std::vector<Fence> fences_;
  int64_t next_order_ = 0;
  LoadInfo last_load_;
  mutable absl::Mutex load_mu_;
  LoadInfo load_ ABSL_GUARDED_BY(load_mu_);
};

}  // namespace tandem::decode_worker
