#pragma once
// Admission control: whether the router takes a request, decided in
// Router::Start before any worker is called (docs: router/README.md,
// "Admission control").
//
// Three checks, in this order, each with its own Retry-After:
//  1. the tenant's token buckets (admission.defaults / admission.tenants):
//     one for requests, one for tokens (n x (prompt + max_tokens)); a
//     refusal takes nothing from either bucket, and no tenant's refusal
//     touches another tenant's buckets. Retry-After is the time the bucket
//     needs to refill what is missing;
//  2. the router's waiting queue per model (admitted requests whose first
//     token has not arrived), bounded by admission.max_queued_requests and
//     max_queued_tokens. Retry-After: the time the queue needs to drain the
//     excess at the measured rate;
//  3. the time to first token the request would see (EstimateTtft): the
//     prompt tokens queued ahead at the measured rate or, on colocated
//     workers whose running batches are full, the wait for a running slot
//     (SlotWait), whichever is longer; over admission.max_ttft (the SLO) or
//     over the time left to the request's deadline, it is refused at once
//     instead of timing out later. Retry-After: the excess over the limit
//     (the queue ahead shrinks by that much in that time).
// With nothing queued ahead of a request (the router's queue for its model
// and every worker's reported prefill queue empty, and a running slot free)
// checks 2 and 3 admit it:
// the request then waits for nothing but its own prefill, which a later try
// could not shorten, and a refusal would starve the throughput measurement
// that could prove the estimate wrong.
//
// The pieces are pure values and functions (TokenBucket, ThroughputMeter,
// EstimateTtft, DecideAdmission: no clock reads, no locks) wired together by
// AdmissionController, the thread-safe state the Router owns.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/config.h"
#include "router/registry.h"

namespace tandem::router {

// The tenant name requests without an API key's tenant are counted under
// (API keys off), in admission.tenants and in metric labels.
inline constexpr char kAnonymousTenant[] = "anonymous";

// A token bucket: fills at `rate` per second up to `burst`, starts full.
// A value; not thread-safe.
class TokenBucket {
 public:
  // No limit: every amount is available.
  TokenBucket() = default;
  // rate <= 0: no limit. burst <= 0: max(rate, 1).
  TokenBucket(double rate, double burst, absl::Time now);

  bool limited() const { return rate_ > 0; }
  double burst() const { return burst_; }
  // What the bucket holds at `now` (burst when unlimited).
  double available(absl::Time now) const;
  // Zero when `amount` is available at `now`; else how long until it is;
  // absl::InfiniteDuration() when `amount` exceeds the burst (never).
  absl::Duration WaitFor(double amount, absl::Time now) const;
  // Takes `amount` at `now` (refills first). Precondition: WaitFor is zero.
  void Take(double amount, absl::Time now);

 private:
  void Refill(absl::Time now);

  double rate_ = 0;
  double burst_ = 0;
  double tokens_ = 0;
  absl::Time last_ = absl::InfinitePast();
};

// The rate at which prompt tokens reach their first token, measured over
// the time the queue was busy (not idle time): an exponentially weighted
// average over the last `window` of busy time, starting from
// `initial_rate` weighted as `prior` of busy time (conservative until
// measurements outweigh it). A value; not thread-safe.
class ThroughputMeter {
 public:
  ThroughputMeter(double initial_rate, absl::Duration window,
                  absl::Duration prior = absl::Milliseconds(250));
  // `tokens` finished while the queue was busy for `busy` more time.
  void Add(double tokens, absl::Duration busy);
  // Tokens per second (> 0).
  double rate() const;

 private:
  double initial_rate_;
  double window_s_;
  double prior_s_;
  double tokens_ = 0;  // decayed sums
  double busy_s_ = 0;
};

// The live workers that prefill `worker_model` requests in `mode` (prefill
// workers when a prefill + decode pair can serve it, else colocated ones, as
// PickRoute chooses) and the prefill queue of the least loaded one.
struct PrefillQueue {
  int32_t workers = 0;
  // Reported queued prefill tokens ahead of the request: the least loaded
  // worker's here; the Router raises it to the queue of the worker(s) it
  // picked (the picker weighs KV space and running requests too).
  int64_t queued_tokens = 0;
  // Colocated workers only: their running slots together (max_running each,
  // as reported). A colocated worker's running batch holds a request from
  // its prefill on, so while every slot is taken by a decode a new request
  // waits for one to finish before its prefill starts. 0 when any of them
  // does not report its slots, or when requests go to prefill workers (their
  // first token does not wait for a decode slot).
  int32_t slots = 0;
};
PrefillQueue PrefillQueueFor(const RegistrySnapshot& snapshot, absl::string_view worker_model,
                             RoutingMode mode, absl::Time now);

// When the first running slot is free for a request that joins behind
// `queued_hold` (in admission order, one entry per choice: how long each
// will hold its slot once it has one, prefill and decode), on `slots` slots
// held now by sequences that free theirs after `running_left` (one entry per
// running choice). Each queued choice takes the slot free first. Zero when
// a slot is free for it at once; zero for slots <= 0 (unknown).
absl::Duration SlotWait(int32_t slots, std::vector<absl::Duration> running_left,
                        const std::vector<absl::Duration>& queued_hold);

struct TtftInputs {
  int64_t router_queued_tokens = 0;  // this router's queue for the model
  PrefillQueue workers;
  int64_t own_tokens = 0;  // the request's prompt tokens (all choices)
  double rate = 1;         // measured, tokens/s for the whole model
  double calibration = 1;  // CalibrationFactor
  absl::Duration slot_wait = absl::ZeroDuration();  // SlotWait (uncalibrated)
  double slot_calibration = 1;  // CalibrationFactor(..., /*cold_margin=*/false)
};
struct TtftEstimate {
  absl::Duration ttft = absl::ZeroDuration();
  int64_t tokens_ahead = 0;  // on the picked worker
  double calibration = 1;
  absl::Duration slot_wait = absl::ZeroDuration();  // as given (for messages)
  // The part that decided the estimate, uncalibrated (the other is zero):
  // what each part's calibration learns from.
  absl::Duration queue_part = absl::ZeroDuration();
  absl::Duration slot_part = absl::ZeroDuration();
};
// ttft = max(calibration x (ahead + own) / r,
//            slot_calibration x (slot_wait + own / r)),
// the second only when slot_wait > 0, with r = rate / workers and ahead =
// max(the picked worker's reported queue, the router's queue / workers): the
// router's own queue is the freshest view (spread evenly, as the picker
// balances it), a worker's report also counts other routers' requests. No
// worker: as one. Each part has its own calibration, learnt from the
// requests it decided: the throughput estimate and the running-batch model
// err in different ways (the first is often pessimistic at partial load,
// its factor under 1, which must not shorten a slot wait).
TtftEstimate EstimateTtft(const TtftInputs& in);

// The estimate's measured error: of recent admitted requests whose estimate
// was at least kCalibrationFloor of the SLO (those near the decision), the
// kCalibrationQuantile of actual / estimated time to first token, clamped to
// [kMinCalibration, kMaxCalibration]. Multiplying by it makes the estimate an
// upper bound for that share of requests, whatever the rate measurement
// misses (a load change within the rate window, CPU contention, per-request
// overheads). The 99th percentile: the SLO is a p99 (at 0.95, 3 % of the
// admitted requests of a quiet run at twice the capacity, all near the SLO,
// missed it by up to 8 %: docs/benchmarks.md, "Admission control at twice
// the capacity").
//
// Cold start: with fewer than kMinCalibrationSamples ratios the quantile is
// not yet trusted and the factor is the larger of ColdMargin (kColdMargin
// with none, shrinking linearly to 1 as samples arrive) and the largest ratio
// seen so far (of so few, the best guess at a high quantile), clamped to
// [1, kMaxCalibration]. Until requests have finished, the rate is the
// configured guess (initial_prefill_rate) and a fresh cluster is often slower
// than a warm one; without the margin a burst on a cold cluster is admitted
// up to the SLO on that guess alone and overshoots it (docs/benchmarks.md,
// "Admission control at twice the capacity": TTFT 3.3-3.8 s under a 2 s SLO).
//
// Requests still waiting: at each decision, the model's requests that have
// waited longer for their first token than their calibrated estimate join
// the ratios at the ratio they have reached (their own is at least that),
// for the pool's factor, the slot wait's and the picked workers' alike; the
// factor never falls below the finished requests' one. A slowdown, or a
// stalled worker whose first tokens never come, raises the estimates as
// requests pass theirs, not only once their first tokens report it.
inline constexpr double kCalibrationQuantile = 0.99;
inline constexpr double kCalibrationFloor = 0.25;
inline constexpr int kMinCalibrationSamples = 16;
// The most recent ones kept: enough that the 99th percentile has a few
// samples above it (with 128 it was the third largest, and quiet runs at
// twice the capacity still saw 1-2 % of admitted requests over the SLO).
inline constexpr int kCalibrationSamples = 512;
inline constexpr double kMinCalibration = 0.5;
inline constexpr double kMaxCalibration = 4;
inline constexpr double kColdMargin = 2;
// kColdMargin with no sample, 1 from kMinCalibrationSamples on, linear in
// between.
double ColdMargin(int samples);
// cold_margin false (the slot wait's factor): under kMinCalibrationSamples
// the factor is the largest ratio seen, at least 1, without the margin (the
// slot wait is estimated only once decodes have been measured).
double CalibrationFactor(std::vector<double> ratios, bool cold_margin = true);

enum class AdmissionReason {
  kAdmitted,
  kTenantRequestRate,  // the tenant's request bucket is empty
  kTenantTokenRate,    // the tenant's token bucket holds too few
  kQueueFull,          // max_queued_requests / max_queued_tokens
  kTtftOverSlo,        // the estimate exceeds max_ttft
  kDeadline,           // the estimate exceeds the time left to the deadline
};
// "admitted", "tenant_request_rate", "tenant_token_rate", "queue_full",
// "ttft_over_slo", "deadline": the metric's `reason` label.
absl::string_view AdmissionReasonName(AdmissionReason reason);

struct AdmissionInputs {
  std::string tenant;
  absl::Duration request_wait = absl::ZeroDuration();  // TokenBucket::WaitFor
  absl::Duration token_wait = absl::ZeroDuration();
  double request_burst = 0;  // for messages
  double token_burst = 0;
  int64_t cost_tokens = 0;      // n x (prompt + max_tokens)
  int32_t queued_requests = 0;  // the router's queue, before this request
  int64_t queued_tokens = 0;
  int64_t own_tokens = 0;  // what this request adds to the queue
  TtftEstimate estimate;
  double rate = 1;                                      // tokens/s, as the estimate used
  // Calibration samples behind estimate.calibration: under
  // kMinCalibrationSamples it is the cold-start margin (messages say so).
  int32_t calibration_samples = kMinCalibrationSamples;
  // Behind estimate.slot_wait (for messages): the slots and the measured
  // time per output token.
  int32_t slots = 0;
  absl::Duration tpot = absl::ZeroDuration();
  double slot_calibration = 1;
  // Requests still waiting for their first token that are past their
  // calibrated estimate (counted into the factors: AdmissionController).
  int32_t overdue = 0;
  absl::Duration time_left = absl::InfiniteDuration();  // to the request's deadline
};

struct AdmissionDecision {
  AdmissionReason reason = AdmissionReason::kAdmitted;
  // The request can never pass this limit (its cost over the tenant's burst).
  bool never = false;
  absl::Duration retry_after = absl::ZeroDuration();
  absl::Duration estimated_ttft = absl::ZeroDuration();
  std::string message;  // names the limit; empty when admitted
  // What the estimate was made of (for logs), whether admitted or not;
  // empty when no estimate was needed (nothing ahead, a tenant limit).
  std::string explanation;

  bool admitted() const { return reason == AdmissionReason::kAdmitted; }
  // OK when admitted; RESOURCE_EXHAUSTED with the message and the
  // Retry-After attached (router/api_error.h WithRetryAfter); for `never`,
  // INVALID_ARGUMENT naming max_tokens.
  absl::Status ToStatus() const;
};

// The pure decision (order and Retry-After as the file comment says).
AdmissionDecision DecideAdmission(const AdmissionConfig& config, const AdmissionInputs& in);

// The admission state of one router: tenants' buckets, the waiting queue and
// the throughput meter of each model. Owned by the Router. Thread-safe; each
// call is short and takes one internal lock.
class AdmissionController {
 public:
  explicit AdmissionController(AdmissionConfig config);

  struct Request {
    uint64_t ticket = 0;  // unique per request (the router's run id)
    std::string tenant;   // "" = kAnonymousTenant
    std::string model;    // the queue: one per served model
    int64_t prompt_tokens = 0;
    int32_t max_tokens = 0;
    int32_t n = 1;
    absl::Time deadline = absl::InfiniteFuture();
    // The worker(s) picked for it (the prefill or colocated one of each
    // choice; empty: not known). Each worker's estimates are calibrated by
    // their own error too: workers of one pool run at different speeds (one
    // shares its core with the router), and a pool-wide factor leaves the
    // slower one's requests over the SLO.
    std::vector<std::string> workers = {};
  };
  // Decides at `now`; when admitted, takes the request's cost from its
  // tenant's buckets and queues it on its model until FirstToken / Finished.
  AdmissionDecision Admit(const Request& request, const PrefillQueue& workers, absl::Time now);
  // The request's first token arrived: it leaves the queue and its prompt
  // counts as throughput; it now holds running slots (one per choice) until
  // Finished. No-op for an unknown or already-left ticket.
  void FirstToken(uint64_t ticket, absl::Time now);
  // The request ended: it leaves the queue if still there (no throughput)
  // and frees its slots. `completion_tokens` (per choice) and `tpot` (its
  // mean time per output token after the first; zero: none) feed the decode
  // model of SlotWait.
  void Finished(uint64_t ticket, absl::Time now, int32_t completion_tokens = 0,
                absl::Duration tpot = absl::ZeroDuration());

  // SlotWait's decode model: of the most recent kDecodeSamples finished
  // requests, the mean time per output token and the kDecodeLengthQuantile
  // of their completion lengths. A running choice is expected to hold its
  // slot for (min(max_tokens, that length) - 1) x that time after its first
  // token (one time per token at least, once it is overdue); until a request
  // with two or more tokens has finished, no slot wait is estimated (the
  // cold-start margin covers that phase).
  static constexpr int kDecodeSamples = 64;
  static constexpr double kDecodeLengthQuantile = 0.9;

  struct QueueState {
    int32_t requests = 0;
    int64_t tokens = 0;
    double rate = 0;                   // tokens/s
    double calibration = kColdMargin;  // CalibrationFactor of its recent requests
    int32_t calibration_samples = 0;   // how many (at most kCalibrationSamples)
    // Counts the queue's changes: of two states read by different threads,
    // the larger version is the newer (metrics drop a stale one).
    uint64_t version = 0;
    int32_t peak_requests = 0;  // the most it held since start
    int32_t running = 0;        // admitted choices past their first token
    absl::Duration tpot = absl::ZeroDuration();  // measured; zero: none yet
    double slot_calibration = 1;  // the slot wait's factor
    int32_t slot_calibration_samples = 0;
  };
  QueueState queue(const std::string& model) const;
  // Tenants with buckets (bounded by the API keys' tenants, plus anonymous).
  size_t tenant_count() const;
  const AdmissionConfig& config() const { return config_; }

 private:
  struct Buckets {
    TokenBucket requests;
    TokenBucket tokens;
  };
  // The time per output token and decode length SlotWait assumes (zero
  // tpot: not measured yet).
  struct DecodeModel {
    absl::Duration tpot = absl::ZeroDuration();
    int32_t length = 0;  // 0: max_tokens
    absl::Duration Decode(int32_t max_tokens) const;
  };
  struct Queue {
    explicit Queue(const AdmissionConfig& c) : meter(c.initial_prefill_rate, c.rate_window) {}
    int32_t requests = 0;
    int64_t tokens = 0;
    uint64_t version = 0;
    int32_t peak_requests = 0;
    absl::Time busy_since = absl::InfinitePast();  // last accounting point while requests > 0
    ThroughputMeter meter;
    // actual / estimated TTFT of recent requests (a ring of
    // kCalibrationSamples) and the factor they give.
    std::vector<double> ratios;
    size_t next_ratio = 0;
    double calibration = kColdMargin;  // CalibrationFactor({})
    // The same for estimates the slot wait decided.
    std::vector<double> slot_ratios;
    size_t next_slot_ratio = 0;
    double slot_calibration = 1;
    // The decode model (kDecodeSamples most recent finished requests).
    std::vector<double> tpots;       // seconds per output token
    std::vector<int32_t> lengths;    // completion tokens per choice
    size_t next_decode = 0;
    DecodeModel decode;              // of tpots and lengths, kept as they change
    int32_t running = 0;             // choices past their first token
    // Recomputes `decode` from the samples (on each finished request).
    void UpdateDecodeModel();
  };
  struct Ticket {
    std::string model;
    int64_t tokens = 0;
    absl::Time admitted_at;
    absl::Duration estimate;  // uncalibrated: TtftEstimate::queue_part
    absl::Duration slot_estimate = absl::ZeroDuration();  // TtftEstimate::slot_part
    int32_t max_tokens = 0;
    int32_t n = 1;
    std::vector<std::string> workers = {};  // Request::workers
    bool queued = true;  // false from its first token on (it holds slots)
    absl::Time first_token_at = absl::InfiniteFuture();
  };
  // SlotWait for a request of `prompt_tokens` per choice arriving at `now`
  // on `model`'s queue, given the slots and per-worker rate.
  absl::Duration SlotWaitLocked(const std::string& model, const DecodeModel& m, int32_t slots,
                                double per_worker_rate, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Buckets& BucketsLocked(const std::string& tenant, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Queue& QueueLocked(const std::string& model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Estimates under this (a quarter of the SLO) teach no calibration.
  absl::Duration CalibrationFloor() const;
  // Removes `ticket` from its queue; `tokens_done` counts as throughput.
  void LeaveLocked(uint64_t ticket, absl::Time now, bool first_token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One worker's calibration (of the queue part) on one model.
  struct WorkerCalibration {
    std::vector<double> ratios;
    size_t next = 0;
    double factor = 1;
  };

  const AdmissionConfig config_;
  mutable absl::Mutex mu_;
  // (model, worker) -> its calibration. Bounded by the workers seen; a
  // worker gone keeps its entry (small) until the router restarts.
  std::map<std::pair<std::string, std::string>, WorkerCalibration> worker_calibration_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, Buckets> buckets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Queue> queues_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Ticket> tickets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router
