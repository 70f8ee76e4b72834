#include "router/admission.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "router/api_error.h"

namespace tandem::router {
namespace {

// A duration of `seconds`, saturating (a rate of 1e-300 must not overflow).
absl::Duration SecondsSat(double seconds) {
  if (!(seconds < 1e9)) {
    return absl::InfiniteDuration();
  }
  return absl::Seconds(std::max(0.0, seconds));
}

std::string Secs(absl::Duration d) {
  return d == absl::InfiniteDuration() ? "inf" : absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
}

}  // namespace

// --- TokenBucket ----------------------------------------------------------------

TokenBucket::TokenBucket(double rate, double burst, absl::Time now)
    : rate_(rate > 0 ? rate : 0),
      burst_(rate > 0 ? (burst > 0 ? burst : std::max(rate, 1.0)) : 0),
      tokens_(burst_),
      last_(now) {}

void TokenBucket::Refill(absl::Time now) {
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + rate_ * absl::ToDoubleSeconds(now - last_));
    last_ = now;
  }
}

double TokenBucket::available(absl::Time now) const {
  if (!limited()) {
    return burst_;
  }
  TokenBucket b = *this;
  b.Refill(now);
  return b.tokens_;
}

absl::Duration TokenBucket::WaitFor(double amount, absl::Time now) const {
  if (!limited()) {
    return absl::ZeroDuration();
  }
  if (amount > burst_) {
    return absl::InfiniteDuration();
  }
  const double have = available(now);
  if (have >= amount) {
    return absl::ZeroDuration();
  }
  return SecondsSat((amount - have) / rate_);
}

void TokenBucket::Take(double amount, absl::Time now) {
  if (!limited()) {
    return;
  }
  Refill(now);
  tokens_ -= amount;
}

// --- ThroughputMeter ------------------------------------------------------------

ThroughputMeter::ThroughputMeter(double initial_rate, absl::Duration window, absl::Duration prior)
    : initial_rate_(initial_rate),
      window_s_(absl::ToDoubleSeconds(window)),
      prior_s_(absl::ToDoubleSeconds(prior)) {}

void ThroughputMeter::Add(double tokens, absl::Duration busy) {
  const double dt = std::max(0.0, absl::ToDoubleSeconds(busy));
  const double decay = std::exp(-dt / window_s_);
  tokens_ = tokens_ * decay + tokens;
  busy_s_ = busy_s_ * decay + dt;
}

double ThroughputMeter::rate() const {
  // The prior acts as `prior_s_` of busy time at the initial rate.
  return (tokens_ + initial_rate_ * prior_s_) / (busy_s_ + prior_s_);
}

// --- The estimate ---------------------------------------------------------------

PrefillQueue PrefillQueueFor(const RegistrySnapshot& snapshot, absl::string_view worker_model,
                             RoutingMode mode, absl::Time now) {
  PrefillQueue prefill;
  PrefillQueue colocated;
  bool decode_live = false;
  bool slots_unknown = false;
  for (const WorkerInfo& w : snapshot.workers) {
    if (w.desc.model != worker_model || !snapshot.IsLive(w, now)) {
      continue;
    }
    PrefillQueue* q = nullptr;
    switch (w.desc.role) {
      case WorkerRole::kPrefill:
        q = &prefill;
        break;
      case WorkerRole::kColocated:
        q = &colocated;
        break;
      case WorkerRole::kDecode:
        decode_live = true;
        break;
      case WorkerRole::kUnknown:
        break;
    }
    if (q == nullptr) {
      continue;
    }
    const int64_t queued = w.desc.load.queued_prefill_tokens;
    q->queued_tokens = q->workers == 0 ? queued : std::min(q->queued_tokens, queued);
    ++q->workers;
    if (q == &colocated) {
      const int32_t slots = w.desc.load.max_running_requests;
      slots_unknown = slots_unknown || slots <= 0;
      colocated.slots += std::max(0, slots);
    }
  }
  const bool pair = prefill.workers > 0 && decode_live;
  if (mode == RoutingMode::kDisaggregated || (mode == RoutingMode::kAuto && pair)) {
    return prefill;
  }
  if (slots_unknown) {
    colocated.slots = 0;
  }
  return colocated;
}

absl::Duration SlotWait(int32_t slots, std::vector<absl::Duration> running_left,
                        const std::vector<absl::Duration>& queued_hold) {
  if (slots <= 0) {
    return absl::ZeroDuration();
  }
  // Free times of the slots, earliest on top. More running than slots (a
  // report that lags): the first ones to finish free no usable slot.
  std::priority_queue<absl::Duration, std::vector<absl::Duration>, std::greater<>> free(
      std::greater<>(), std::move(running_left));
  for (size_t i = free.size(); i < static_cast<size_t>(slots); ++i) {
    free.push(absl::ZeroDuration());
  }
  while (free.size() > static_cast<size_t>(slots)) {
    free.pop();
  }
  for (absl::Duration hold : queued_hold) {
    const absl::Duration at = std::max(free.top(), absl::ZeroDuration());
    free.pop();
    free.push(at + hold);
  }
  return std::max(free.top(), absl::ZeroDuration());
}

TtftEstimate EstimateTtft(const TtftInputs& in) {
  const int64_t workers = std::max<int64_t>(1, in.workers.workers);
  const double per_worker_rate = std::max(in.rate, 1e-9) / static_cast<double>(workers);
  TtftEstimate e;
  e.tokens_ahead = std::max(in.workers.queued_tokens, in.router_queued_tokens / workers);
  e.calibration = in.calibration;
  e.slot_wait = in.slot_wait;
  const double queue_s = static_cast<double>(e.tokens_ahead + in.own_tokens) / per_worker_rate;
  // A free slot (no wait): the queue part alone decides.
  const double slot_s = in.slot_wait > absl::ZeroDuration()
                            ? absl::ToDoubleSeconds(in.slot_wait) +
                                  static_cast<double>(in.own_tokens) / per_worker_rate
                            : 0.0;
  const double queue_cal = in.calibration * queue_s;
  const double slot_cal = in.slot_calibration * slot_s;
  e.ttft = SecondsSat(std::max(queue_cal, slot_cal));
  if (queue_cal >= slot_cal) {
    e.queue_part = SecondsSat(queue_s);
  } else {
    e.slot_part = SecondsSat(slot_s);
  }
  return e;
}

double ColdMargin(int samples) {
  const double confidence =
      std::clamp(static_cast<double>(samples) / kMinCalibrationSamples, 0.0, 1.0);
  return kColdMargin - (kColdMargin - 1) * confidence;
}

double CalibrationFactor(std::vector<double> ratios, bool cold_margin) {
  const int samples = static_cast<int>(ratios.size());
  if (samples >= kMinCalibrationSamples) {
    const size_t k =
        static_cast<size_t>(kCalibrationQuantile * static_cast<double>(ratios.size() - 1));
    std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(k), ratios.end());
    return std::clamp(ratios[k], kMinCalibration, kMaxCalibration);
  }
  // Too few to trust a quantile: never below 1 (a faster cluster than assumed
  // is not yet proven) nor below what was seen.
  const double seen = ratios.empty() ? 0 : *std::max_element(ratios.begin(), ratios.end());
  return std::clamp(std::max(cold_margin ? ColdMargin(samples) : 1.0, seen), 1.0,
                    kMaxCalibration);
}

// --- The decision ---------------------------------------------------------------

absl::string_view AdmissionReasonName(AdmissionReason reason) {
  switch (reason) {
    case AdmissionReason::kAdmitted:
      return "admitted";
    case AdmissionReason::kTenantRequestRate:
      return "tenant_request_rate";
    case AdmissionReason::kTenantTokenRate:
      return "tenant_token_rate";
    case AdmissionReason::kQueueFull:
      return "queue_full";
    case AdmissionReason::kTtftOverSlo:
      return "ttft_over_slo";
    case AdmissionReason::kDeadline:
      return "deadline";
  }
  return "admitted";
}

absl::Status AdmissionDecision::ToStatus() const {
  if (admitted()) {
    return absl::OkStatus();
  }
  if (never) {
    return InvalidParam("max_tokens", message);
  }
  return WithRetryAfter(absl::ResourceExhaustedError(message), retry_after);
}

AdmissionDecision DecideAdmission(const AdmissionConfig& config, const AdmissionInputs& in) {
  AdmissionDecision d;
  d.estimated_ttft = in.estimate.ttft;
  const std::string tenant = in.tenant.empty() ? kAnonymousTenant : in.tenant;
  // 1. The tenant's buckets: the wait until both hold enough.
  if (in.request_wait > absl::ZeroDuration() || in.token_wait > absl::ZeroDuration()) {
    d.reason = in.request_wait > absl::ZeroDuration() ? AdmissionReason::kTenantRequestRate
                                                      : AdmissionReason::kTenantTokenRate;
    if (in.token_wait == absl::InfiniteDuration()) {
      d.reason = AdmissionReason::kTenantTokenRate;
      d.never = true;
      d.message = absl::StrCat("the request costs ", in.cost_tokens,
                               " tokens (n x (prompt + max_tokens)), more than tenant '", tenant,
                               "' may ever use at once (admission token_burst ", in.token_burst,
                               "); lower max_tokens or the prompt");
      return d;
    }
    d.retry_after = std::max(in.request_wait, in.token_wait);
    d.message = absl::StrCat(
        "tenant '", tenant, "' is over its ",
        d.reason == AdmissionReason::kTenantRequestRate
            ? absl::StrCat("request rate (admission requests_per_second, burst ", in.request_burst,
                           ")")
            : absl::StrCat("token rate (admission tokens_per_second, burst ", in.token_burst,
                           "; this request costs ", in.cost_tokens, ")"),
        "; retry after ", Secs(d.retry_after));
    return d;
  }
  const bool queue_empty = in.queued_requests == 0 && in.estimate.tokens_ahead == 0 &&
                           in.estimate.slot_wait == absl::ZeroDuration();
  if (queue_empty) {
    return d;  // nothing ahead: see the file comment
  }
  const double rate = std::max(in.rate, 1e-9);
  // 2. The bounded waiting queue.
  if (config.max_queued_requests > 0 && in.queued_requests >= config.max_queued_requests) {
    d.reason = AdmissionReason::kQueueFull;
    const int64_t excess = int64_t{in.queued_requests} + 1 - config.max_queued_requests;
    const double mean_tokens =
        static_cast<double>(in.queued_tokens) / std::max(1, in.queued_requests);
    d.retry_after = SecondsSat(static_cast<double>(excess) * mean_tokens / rate);
    d.message = absl::StrCat("the router's queue is full: ", in.queued_requests,
                             " requests wait for their first token (admission "
                             "max_queued_requests ",
                             config.max_queued_requests, "); retry after ", Secs(d.retry_after));
    return d;
  }
  if (config.max_queued_tokens > 0 && in.queued_tokens + in.own_tokens > config.max_queued_tokens) {
    d.reason = AdmissionReason::kQueueFull;
    const int64_t excess = in.queued_tokens + in.own_tokens - config.max_queued_tokens;
    d.retry_after = SecondsSat(static_cast<double>(excess) / rate);
    d.message = absl::StrCat("the router's queue is full: ", in.queued_tokens,
                             " prompt tokens wait for their first token, this request adds ",
                             in.own_tokens, " (admission max_queued_tokens ",
                             config.max_queued_tokens, "); retry after ", Secs(d.retry_after));
    return d;
  }
  // 3. The estimated time to first token against the SLO and the deadline.
  const absl::Duration est = in.estimate.ttft;
  const std::string calibrated =
      in.calibration_samples < kMinCalibrationSamples
          ? absl::StrFormat("x%.2f cold-start margin, %d of %d requests measured",
                            in.estimate.calibration, in.calibration_samples,
                            kMinCalibrationSamples)
          : absl::StrFormat("x%.2f calibrated%s", in.estimate.calibration,
                            in.overdue > 0
                                ? absl::StrFormat(" with %d waiting requests past their estimate",
                                                  in.overdue)
                                : std::string());
  const std::string slot =
      in.estimate.slot_wait > absl::ZeroDuration()
          ? absl::StrFormat("; every one of %d running slots taken, the first free in %s at "
                            "%.1f ms per output token measured, x%.2f",
                            in.slots, Secs(in.estimate.slot_wait),
                            absl::ToDoubleMilliseconds(in.tpot), in.slot_calibration)
          : std::string();
  const std::string why = absl::StrFormat(
      "estimated time to first token %s (%d prompt tokens queued ahead on the picked worker at "
      "%.0f tokens/s measured%s, %s)",
      Secs(est), in.estimate.tokens_ahead, rate, slot, calibrated);
  d.explanation = why;
  if (config.max_ttft > absl::ZeroDuration() && est > config.max_ttft) {
    d.reason = AdmissionReason::kTtftOverSlo;
    d.retry_after = est - config.max_ttft;
    d.message = absl::StrCat(why, " is over the SLO admission max_ttft ", Secs(config.max_ttft),
                             "; retry after ", Secs(d.retry_after));
    return d;
  }
  if (config.reject_past_deadline && est > in.time_left) {
    d.reason = AdmissionReason::kDeadline;
    d.retry_after = est - std::max(in.time_left, absl::ZeroDuration());
    d.message =
        absl::StrCat(why, " is past the request's deadline (",
                     Secs(std::max(in.time_left, absl::ZeroDuration())), " left); retry after ",
                     Secs(d.retry_after), " or with a longer deadline");
    return d;
  }
  return d;
}

// --- AdmissionController --------------------------------------------------------

AdmissionController::AdmissionController(AdmissionConfig config) : config_(std::move(config)) {}

AdmissionController::Buckets& AdmissionController::BucketsLocked(const std::string& tenant,
                                                                 absl::Time now) {
  auto it = buckets_.find(tenant);
  if (it == buckets_.end()) {
    const TenantLimits& l = config_.LimitsFor(tenant);
    it = buckets_
             .emplace(tenant, Buckets{TokenBucket(l.requests_per_second, l.request_burst, now),
                                      TokenBucket(l.tokens_per_second, l.token_burst, now)})
             .first;
  }
  return it->second;
}

AdmissionController::Queue& AdmissionController::QueueLocked(const std::string& model) {
  auto it = queues_.find(model);
  if (it == queues_.end()) {
    it = queues_.emplace(model, Queue(config_)).first;
  }
  return it->second;
}

AdmissionDecision AdmissionController::Admit(const Request& r, const PrefillQueue& workers,
                                             absl::Time now) {
  const std::string tenant = r.tenant.empty() ? kAnonymousTenant : r.tenant;
  const int32_t n = std::max(1, r.n);
  const int64_t own = r.prompt_tokens * n;
  const int64_t cost = (r.prompt_tokens + r.max_tokens) * n;
  absl::MutexLock lock(&mu_);
  Buckets& b = BucketsLocked(tenant, now);
  Queue& q = QueueLocked(r.model);
  AdmissionInputs in;
  in.tenant = tenant;
  in.request_wait = b.requests.WaitFor(1, now);
  in.token_wait = b.tokens.WaitFor(static_cast<double>(cost), now);
  in.request_burst = b.requests.burst();
  in.token_burst = b.tokens.burst();
  in.cost_tokens = cost;
  in.queued_requests = q.requests;
  in.queued_tokens = q.tokens;
  in.own_tokens = own;
  in.rate = q.meter.rate();
  const DecodeModel& decode = q.decode;
  absl::Duration slot_wait = absl::ZeroDuration();
  if (workers.slots > 0 && decode.tpot > absl::ZeroDuration()) {
    const double per_worker_rate =
        std::max(in.rate, 1e-9) / static_cast<double>(std::max(1, workers.workers));
    slot_wait = SlotWaitLocked(r.model, decode, workers.slots, per_worker_rate, now);
    in.slots = workers.slots;
    in.tpot = decode.tpot;
    in.slot_calibration = q.slot_calibration;
  }
  // Requests still waiting for their first token count too, at the ratio
  // they have reached (their true one is at least that): those past their
  // calibrated estimate raise the factor at once, before any first token
  // could report a slowdown (or ever does, from a stalled worker).
  const absl::Duration floor = CalibrationFloor();
  std::vector<double> overdue;
  std::vector<double> slot_overdue;
  std::vector<std::vector<double>> worker_overdue(r.workers.size());
  std::vector<const WorkerCalibration*> worker_cal(r.workers.size(), nullptr);
  for (size_t i = 0; i < r.workers.size(); ++i) {
    auto it = worker_calibration_.find({r.model, r.workers[i]});
    if (it != worker_calibration_.end() &&
        static_cast<int>(it->second.ratios.size()) >= kMinCalibrationSamples) {
      worker_cal[i] = &it->second;
    }
  }
  for (const auto& [id, t] : tickets_) {
    if (!t.queued || t.model != r.model) {
      continue;
    }
    const absl::Duration waited = now - t.admitted_at;
    if (t.estimate >= floor && t.estimate > absl::ZeroDuration()) {
      const double reached = absl::FDivDuration(waited, t.estimate);
      if (reached > q.calibration) {
        overdue.push_back(reached);
      }
      for (size_t i = 0; i < r.workers.size(); ++i) {
        if (worker_cal[i] != nullptr && reached > worker_cal[i]->factor &&
            std::find(t.workers.begin(), t.workers.end(), r.workers[i]) != t.workers.end()) {
          worker_overdue[i].push_back(reached);
        }
      }
    }
    if (t.slot_estimate >= floor && t.slot_estimate > absl::ZeroDuration()) {
      const double reached = absl::FDivDuration(waited, t.slot_estimate);
      if (reached > q.slot_calibration) {
        slot_overdue.push_back(reached);
      }
    }
  }
  auto with = [](const std::vector<double>& ratios, const std::vector<double>& more,
                 bool cold_margin) {
    std::vector<double> all = ratios;
    all.insert(all.end(), more.begin(), more.end());
    return CalibrationFactor(std::move(all), cold_margin);
  };
  // The picked workers' own factors, once each has enough samples; the
  // model's otherwise (and never under it: a worker's few fast samples must
  // not shorten what the pool learnt).
  double calibration =
      overdue.empty() ? q.calibration : std::max(q.calibration, with(q.ratios, overdue, true));
  for (size_t i = 0; i < r.workers.size(); ++i) {
    if (worker_cal[i] != nullptr) {
      calibration = std::max(calibration, worker_overdue[i].empty()
                                              ? worker_cal[i]->factor
                                              : with(worker_cal[i]->ratios, worker_overdue[i], true));
    }
  }
  const double slot_calibration =
      slot_overdue.empty() ? q.slot_calibration
                           : std::max(q.slot_calibration, with(q.slot_ratios, slot_overdue, false));
  if (in.slots > 0) {
    in.slot_calibration = slot_calibration;
  }
  in.overdue = static_cast<int32_t>(std::max(overdue.size(), slot_overdue.size()));
  in.estimate =
      EstimateTtft({q.tokens, workers, own, in.rate, calibration, slot_wait, slot_calibration});
  in.calibration_samples = static_cast<int32_t>(q.ratios.size());
  in.time_left = r.deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : r.deadline - now;
  AdmissionDecision d = DecideAdmission(config_, in);
  if (!d.admitted()) {
    return d;
  }
  b.requests.Take(1, now);
  b.tokens.Take(static_cast<double>(cost), now);
  if (q.requests == 0) {
    q.busy_since = now;
  }
  ++q.requests;
  q.tokens += own;
  ++q.version;
  q.peak_requests = std::max(q.peak_requests, q.requests);
  Ticket& t = tickets_[r.ticket];
  t = Ticket{r.model, own, now, in.estimate.queue_part, in.estimate.slot_part};
  t.max_tokens = r.max_tokens;
  t.n = n;
  t.workers = r.workers;
  return d;
}

absl::Duration AdmissionController::CalibrationFloor() const {
  return config_.max_ttft > absl::ZeroDuration() ? kCalibrationFloor * config_.max_ttft
                                                 : absl::Milliseconds(100);
}

absl::Duration AdmissionController::DecodeModel::Decode(int32_t max_tokens) const {
  int32_t tokens = max_tokens > 0 ? max_tokens : length;
  if (length > 0) {
    tokens = std::min(tokens, length);
  }
  return std::max(0, tokens - 1) * tpot;
}

void AdmissionController::Queue::UpdateDecodeModel() {
  if (tpots.empty()) {
    decode = DecodeModel();
    return;
  }
  double sum = 0;
  for (double t : tpots) {
    sum += t;
  }
  decode.tpot = absl::Seconds(sum / static_cast<double>(tpots.size()));
  std::vector<int32_t> sorted = lengths;
  const size_t k =
      static_cast<size_t>(kDecodeLengthQuantile * static_cast<double>(sorted.size() - 1));
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
  decode.length = std::max(1, sorted[k]);
}

absl::Duration AdmissionController::SlotWaitLocked(const std::string& model, const DecodeModel& m,
                                                   int32_t slots, double per_worker_rate,
                                                   absl::Time now) const {
  std::vector<absl::Duration> running_left;
  std::vector<absl::Duration> queued_hold;
  // tickets_ is ordered by ticket, i.e. in admission order.
  for (const auto& [id, t] : tickets_) {
    if (t.model != model) {
      continue;
    }
    const absl::Duration decode = m.Decode(t.max_tokens);
    if (t.queued) {
      const double prompt = static_cast<double>(t.tokens) / std::max(1, t.n);
      const absl::Duration hold = absl::Seconds(prompt / per_worker_rate) + decode;
      queued_hold.insert(queued_hold.end(), static_cast<size_t>(t.n), hold);
    } else {
      // Overdue (a longer decode than modelled): about to finish.
      const absl::Duration left = std::max(decode - (now - t.first_token_at), m.tpot);
      running_left.insert(running_left.end(), static_cast<size_t>(t.n), left);
    }
  }
  return SlotWait(slots, std::move(running_left), queued_hold);
}

void AdmissionController::LeaveLocked(uint64_t ticket, absl::Time now, bool first_token) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end() || !it->second.queued) {
    return;
  }
  Queue& q = QueueLocked(it->second.model);
  // Busy time since the last accounting point goes to this request's tokens
  // (a request that ended without a token leaves it to the next one).
  if (first_token) {
    q.meter.Add(static_cast<double>(it->second.tokens),
                std::max(absl::ZeroDuration(), now - q.busy_since));
    q.busy_since = now;
    const absl::Duration floor = CalibrationFloor();
    // The part that decided the estimate learns how far off it was.
    const absl::Duration actual = now - it->second.admitted_at;
    auto learn = [&](absl::Duration estimate, std::vector<double>& ratios, size_t& next) {
      if (estimate < floor || estimate <= absl::ZeroDuration()) {
        return false;
      }
      const double ratio = absl::FDivDuration(actual, estimate);
      if (static_cast<int>(ratios.size()) < kCalibrationSamples) {
        ratios.push_back(ratio);
      } else {
        ratios[next] = ratio;
      }
      next = (next + 1) % kCalibrationSamples;
      return true;
    };
    if (learn(it->second.estimate, q.ratios, q.next_ratio)) {
      q.calibration = CalibrationFactor(q.ratios);
      for (const std::string& w : it->second.workers) {
        WorkerCalibration& wc = worker_calibration_[{it->second.model, w}];
        learn(it->second.estimate, wc.ratios, wc.next);
        wc.factor = CalibrationFactor(wc.ratios);
      }
    }
    if (learn(it->second.slot_estimate, q.slot_ratios, q.next_slot_ratio)) {
      q.slot_calibration = CalibrationFactor(q.slot_ratios, /*cold_margin=*/false);
    }
  }
  --q.requests;
  q.tokens -= it->second.tokens;
  ++q.version;
  it->second.queued = false;
  if (first_token) {
    it->second.first_token_at = now;
    q.running += it->second.n;
  }
}

void AdmissionController::FirstToken(uint64_t ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  LeaveLocked(ticket, now, /*first_token=*/true);
}

void AdmissionController::Finished(uint64_t ticket, absl::Time now, int32_t completion_tokens,
                                   absl::Duration tpot) {
  absl::MutexLock lock(&mu_);
  LeaveLocked(ticket, now, /*first_token=*/false);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return;
  }
  Queue& q = QueueLocked(it->second.model);
  if (it->second.first_token_at != absl::InfiniteFuture()) {
    q.running -= it->second.n;
  }
  if (completion_tokens >= 2 && tpot > absl::ZeroDuration()) {
    if (static_cast<int>(q.tpots.size()) < kDecodeSamples) {
      q.tpots.push_back(absl::ToDoubleSeconds(tpot));
      q.lengths.push_back(completion_tokens);
    } else {
      q.tpots[q.next_decode] = absl::ToDoubleSeconds(tpot);
      q.lengths[q.next_decode] = completion_tokens;
    }
    q.next_decode = (q.next_decode + 1) % kDecodeSamples;
    q.UpdateDecodeModel();
  }
  tickets_.erase(it);
}

AdmissionController::QueueState AdmissionController::queue(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  QueueState s;
  s.rate = config_.initial_prefill_rate;
  auto it = queues_.find(model);
  if (it != queues_.end()) {
    s.requests = it->second.requests;
    s.tokens = it->second.tokens;
    s.rate = it->second.meter.rate();
    s.calibration = it->second.calibration;
    s.calibration_samples = static_cast<int32_t>(it->second.ratios.size());
    s.version = it->second.version;
    s.peak_requests = it->second.peak_requests;
    s.running = it->second.running;
    s.tpot = it->second.decode.tpot;
    s.slot_calibration = it->second.slot_calibration;
    s.slot_calibration_samples = static_cast<int32_t>(it->second.slot_ratios.size());
  }
  return s;
}

size_t AdmissionController::tenant_count() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

}  // namespace tandem::router
