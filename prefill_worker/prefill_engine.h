#pragma once
// PrefillEngine: owns the engine thread of a prefill worker and what it owns:
// the Engine (KV pool, prefix cache), the admission queue, the chunked
// prefill schedule and the KV staging of every request.
//
// Each step plans chunks of several requests (PlanPrefillStep) and runs them
// in one Engine::Step. In the step's layer hook, as soon as layer l's K and V
// are in the pool, the blocks that became complete (prefix-cache hits on the
// first chunk, every full block, the last partial block on the last chunk)
// are pushed for that layer to the decode worker's reserved blocks
// (CoalesceRuns local -> reservation ids, one transport Write per request and
// layer) while later layers compute. Every block is pushed exactly once per
// layer and K|V, so the bytes written are exactly the KvLayout formula. On
// the last chunk the first token is sampled; once every write is done the
// local blocks are released (kept as prefix cache) and Decode.Commit is sent;
// the request completes when the decode worker has committed the import.
//
// Threads: public methods are thread-safe and post to the engine thread;
// calls and the committer's callbacks are handled on the engine thread.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "common/serving/worker_health.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/work_queue.h"
#include "common/engine/engine.h"
#include "common/engine/sampling.h"
#include "kvtransfer/kv_layout.h"
#include "kvtransfer/transport.h"
#include "prefill_worker/metrics.h"
#include "prefill_worker/scheduler.h"

namespace tandem::prefill_worker {

// A validated prefill request with its reservation on a decode worker.
struct PrefillJob {
  std::string request_id;
  std::vector<int32_t> prompt;
  engine::SamplingParams sampling;
  kvtransfer::TransferTag transfer_tag = 0;
  std::vector<int32_t> remote_blocks;            // reservation block ids, one per prompt block
  kvtransfer::PoolGeometry remote;               // the decode worker's pool
  kvtransfer::RegionDescriptor region;           // where to write
  std::string decode_worker;                     // gRPC address for Commit
  absl::Time deadline = absl::InfiniteFuture();  // reservation deadline, client deadline
};

struct PrefillResult {
  engine::SampleResult first;
  int32_t cached_prompt_tokens = 0;
  uint64_t kv_bytes = 0;
  absl::Duration prefill;
  absl::Duration kv_transfer;
};

// The edge's call for one job. Engine thread; Done() exactly once, after
// which the engine never touches the call.
class PrefillCall {
 public:
  virtual ~PrefillCall() = default;
  virtual void Done(absl::StatusOr<PrefillResult> result) = 0;
};

struct CommitArgs {
  std::string decode_worker;
  std::string request_id;
  engine::SampleResult first;
  int32_t num_tokens = 0;
  uint64_t bytes_written = 0;
  absl::Time deadline = absl::InfiniteFuture();
  // Give the reservation up: sent once none of the request's writes is in
  // flight, so the decode worker frees its blocks at once (Decode.Commit
  // with abort).
  bool abort = false;
};

// Sends Decode.Commit to a decode worker (the network seam; the worker uses
// the gRPC CommitClient). Thread-safe; `done` runs exactly once, on any thread.
class Committer {
 public:
  virtual ~Committer() = default;
  virtual void Commit(CommitArgs args, absl::AnyInvocable<void(absl::Status) &&> done) = 0;
};

struct PrefillLoad {
  int32_t running = 0;  // admitted, pushing or committing
  int32_t waiting = 0;  // admission queue
  int64_t queued_prompt_tokens = 0;
  int32_t free_blocks = 0;
  int32_t used_blocks = 0;
  int32_t cached_blocks = 0;
  int32_t total_blocks = 0;
  bool operator==(const PrefillLoad&) const = default;
};

struct PrefillEngineOptions {
  PrefillSchedulerConfig scheduler;  // block_size is taken from the engine
  int32_t max_queued = 1024;         // admission queue bound (RESOURCE_EXHAUSTED beyond)
  std::string worker_id = "prefill";
  // Stop(): how long (on the engine's clock) aborted jobs may wait for their
  // writes to end before they complete anyway (a stuck transport).
  absl::Duration shutdown_bound = absl::Seconds(3);
};

class PrefillEngine {
 public:
  // `transport`, `committer`, `metrics` and `clock` must outlive the engine;
  // the transport must be shut down before the engine is destroyed (its
  // writes read the engine's KV pool).
  PrefillEngine(std::unique_ptr<engine::Engine> engine, kvtransfer::KvTransport* transport,
                Committer* committer, PrefillEngineOptions options, PrefillMetrics* metrics,
                base::Clock& clock);
  ~PrefillEngine();  // Stop()
  PrefillEngine(const PrefillEngine&) = delete;
  PrefillEngine& operator=(const PrefillEngine&) = delete;

  // Names the worker in logs (its id is only known once the server is
  // bound). Before Start().
  void set_worker_id(std::string id) { worker_id_ = std::move(id); }
  void Start(std::function<void(const PrefillLoad&)> on_load);
  // Before Start(): turns on the KV cache's block events and hands each
  // step's net change of the prefix cache's block names to `on_blocks`
  // (engine thread; must not block), for the router's prefix index.
  void set_block_listener(std::function<void(const engine::KvBlockEvents&)> on_blocks);
  // Fails queued and running jobs with `reason` (running ones once their
  // writes are cancelled and done), then joins the thread. Idempotent.
  void Stop(absl::Status reason = absl::UnavailableError("prefill worker shutting down"));

  // Any thread.
  engine::SequenceId NewRequestKey() { return next_key_.fetch_add(1, std::memory_order_relaxed); }
  // Queues `job`; `call` gets the result (engine thread, or this thread when
  // stopped). ResourceExhausted when the admission queue is full;
  // AlreadyExists for a live request id.
  void Submit(engine::SequenceId key, PrefillJob job, PrefillCall* call);
  // The caller went away (or its deadline passed): cancels the writes,
  // frees the blocks once no write reads them, and completes the call
  // with CANCELLED.
  void CancelKey(engine::SequenceId key);
  // Any thread. Tells the decode worker holding `request_id`'s reservation
  // that this worker will not write into it (Decode.Commit with abort), so
  // it frees the blocks at once instead of fencing them past the deadline.
  // For requests refused before any write (the engine sends it itself for
  // requests it accepted).
  void AbortReservation(const std::string& decode_worker, const std::string& request_id);

  int32_t num_live_requests() const { return num_live_.load(std::memory_order_relaxed); }
  PrefillLoad load() const;
  const engine::Engine& engine() const { return *engine_; }
  const kvtransfer::KvLayout& layout() const { return layout_; }
  const engine::ModelConfig& model_config() const { return engine_->model().config(); }
  // Any thread. The engine loop's progress: beaten at the top of every
  // iteration, idle while it waits for work (serving::WorkerHealth watches it).
  const serving::LoopHeartbeat& heartbeat() const { return heartbeat_; }

  // Any thread. Runs `task` on the engine thread between iterations (a test
  // wedges the loop with a task that blocks). False once stopped.
  bool PostForTest(absl::AnyInvocable<void() &&> task) { return queue_.Post(std::move(task)); }

 private:
  struct Seq;
  enum class State;

  void Loop();
  void DoSubmit(engine::SequenceId key, PrefillJob job, PrefillCall* call);
  bool RunStep();
  // Layer hook: pushes layer `layer` of the blocks of `s` complete after
  // its current chunk (blocks [pushed_blocks, complete)).
  void PushLayer(Seq& s, int layer, int32_t complete);
  void OnWriteDone(engine::SequenceId key, uint64_t bytes, absl::Status status);
  void OnCommitDone(engine::SequenceId key, absl::Status status);
  // Moves `s` on once its writes are done: commit, or finish an abort.
  void Advance(Seq& s);
  void Abort(Seq& s, absl::Status why);
  void Complete(Seq& s, absl::StatusOr<PrefillResult> result);
  void CheckDeadlines(absl::Time now);
  void UpdateLoad();
  // The earliest deadline CheckDeadlines acts on (the idle loop's wake-up).
  absl::Time NextDeadline() const;

  std::unique_ptr<engine::Engine> engine_;
  kvtransfer::KvTransport* const transport_;
  Committer* const committer_;
  const PrefillEngineOptions options_;
  PrefillMetrics* const metrics_;
  base::Clock& clock_;
  kvtransfer::KvLayout layout_;
  kvtransfer::PoolGeometry local_geometry_;

  base::WorkQueue queue_;
  serving::LoopHeartbeat heartbeat_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  std::atomic<engine::SequenceId> next_key_{1};
  std::atomic<int32_t> num_live_{0};
  std::string worker_id_;  // options_.worker_id until set_worker_id()
  std::function<void(const PrefillLoad&)> on_load_;
  std::function<void(const engine::KvBlockEvents&)> on_blocks_;

  // Engine thread only.
  bool stopping_ = false;
  absl::Status stop_reason_;
  absl::flat_hash_map<engine::SequenceId, std::unique_ptr<Seq>> seqs_;
  absl::flat_hash_map<std::string, engine::SequenceId> by_request_id_;
  int64_t next_order_ = 0;
  PrefillLoad last_load_;
  mutable absl::Mutex load_mu_;
  PrefillLoad load_ ABSL_GUARDED_BY(load_mu_);
};

}  // namespace tandem::prefill_worker
