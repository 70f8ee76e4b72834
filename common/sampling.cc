#include "common/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

constexpr int32_t kMaxTopLogprobs = 20;

// Uniform double in [0, 1) from the top 53 bits of one 64-bit output: the
// same value for a given engine state with every standard library (unlike
// std::uniform_real_distribution, whose algorithm is unspecified).
double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Lowest id among the maximal finite-or-infinite, non-NaN values; -1 if every
// value is NaN. -inf everywhere gives the lowest non-NaN id.
int32_t Argmax(const float* x, int32_t n) {
  int32_t best = -1;
  for (int32_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      continue;
    }
    if (best < 0 || x[i] > x[best]) {
      best = i;
    }
  }
  return best;
}

// log(sum(exp(x))) over non-NaN entries, shifted by the max for stability;
// exp in float, accumulation in double (relative error ~1e-7 on the sum).
double LogSumExp(absl::Span<const float> x) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : x) {
    if (v > m) {
      m = v;
    }
  }
  if (!std::isfinite(m)) {
    return m;
  }
  double sum = 0.0;
  for (float v : x) {
    if (!std::isnan(v)) {
      sum += std::exp(v - m);
    }
  }
  return static_cast<double>(m) + std::log(sum);
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", temperature));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be finite and > 0, got ", repetition_penalty));
  }
  if (repetition_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_window must be >= 0, got ", repetition_window));
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs must be in [0, ",
                                                   kMaxTopLogprobs, "], got ", top_logprobs));
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop_strings[", i, "] is empty"));
    }
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

SampleResult Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> history) {
  SampleResult result;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (vocab == 0) {
    return result;
  }

  // 1. Log-probabilities of the raw logits, before anything reshapes them.
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  const double log_z = want_logprobs ? LogSumExp(logits) : 0.0;
  if (params_.top_logprobs > 0) {
    index_scratch_.clear();
    for (int32_t i = 0; i < vocab; ++i) {
      if (!std::isnan(logits[i])) {
        index_scratch_.push_back(i);
      }
    }
    const size_t n = std::min<size_t>(params_.top_logprobs, index_scratch_.size());
    auto more_likely = [&logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(index_scratch_.begin(), index_scratch_.begin() + n, index_scratch_.end(),
                      more_likely);
    result.top_logprobs.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = index_scratch_[i];
      result.top_logprobs.push_back(
          TokenLogprob{t, static_cast<float>(static_cast<double>(logits[t]) - log_z)});
    }
  }

  // 2. Repetition penalty on a copy, each distinct id in the window once.
  const float* x = logits.data();
  const float penalty = params_.repetition_penalty;
  if (penalty != 1.0f && penalty > 0.0f && !history.empty()) {
    size_t start = 0;
    if (params_.repetition_window > 0 &&
        history.size() > static_cast<size_t>(params_.repetition_window)) {
      start = history.size() - static_cast<size_t>(params_.repetition_window);
    }
    index_scratch_.assign(history.begin() + start, history.end());
    std::sort(index_scratch_.begin(), index_scratch_.end());
    index_scratch_.erase(std::unique(index_scratch_.begin(), index_scratch_.end()),
                         index_scratch_.end());
    scratch_.assign(logits.begin(), logits.end());
    for (int32_t t : index_scratch_) {
      if (t < 0 || t >= vocab) {
        continue;
      }
      float& v = scratch_[t];
      v = v > 0.0f ? v / penalty : v * penalty;
    }
    x = scratch_.data();
  }

  auto finish = [&](int32_t token) {
    result.token = token;
    if (want_logprobs && token >= 0) {
      result.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
    }
    return result;
  };

  // 3. Greedy.
  if (params_.temperature <= 0.0f) {
    return finish(Argmax(x, vocab));
  }

  // 4. Candidates: finite-probability tokens (NaN and -inf never drawn).
  candidates_.clear();
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] > -std::numeric_limits<float>::infinity()) {  // false for NaN too
      candidates_.push_back(Candidate{i, x[i], 0.0f});
    }
  }
  if (candidates_.empty()) {
    return finish(Argmax(x, vocab));
  }
  auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(),
                     better);
    candidates_.resize(params_.top_k);
  }

  // Softmax at the temperature; the best candidate has weight exactly 1.
  float max_logit = candidates_[0].logit;
  for (const Candidate& c : candidates_) {
    max_logit = std::max(max_logit, c.logit);
  }
  if (!std::isfinite(max_logit)) {  // +inf logits: the softmax is undefined
    return finish(std::min_element(candidates_.begin(), candidates_.end(), better)->token);
  }
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = static_cast<float>(std::exp((static_cast<double>(c.logit) - max_logit) * inv_t));
    total += c.weight;
  }

  // min-p and top-p each keep a most-likely prefix of the candidates, and
  // min-p's threshold (relative to p_max) is unchanged by top-p's cut, so
  // applying min-p first (a linear filter) gives the same set and leaves less
  // to sort. top-p still measures mass against the pre-min-p total.
  if (params_.min_p > 0.0f) {
    const float threshold = std::min(params_.min_p, 1.0f);  // p / p_max == weight
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [threshold](const Candidate& c) {
                                       return c.weight < threshold;
                                     }),
                      candidates_.end());
  }
  if (params_.top_p < 1.0f) {
    // Sort only as far as the mass requires: grow a sorted prefix
    // geometrically (nth_element on the rest, then sort the new slice).
    const double target = static_cast<double>(params_.top_p) * total * 0.9;
    const size_t n = candidates_.size();
    size_t sorted = 0;
    double cumulative = 0.0;
    size_t keep = n;
    while (sorted < n && keep == n) {
      const size_t end = std::min(n, std::max<size_t>(256, 4 * sorted));
      if (end < n) {
        std::nth_element(candidates_.begin() + sorted, candidates_.begin() + end,
                         candidates_.end(), better);
      }
      std::sort(candidates_.begin() + sorted, candidates_.begin() + end, better);
      for (; sorted < end; ++sorted) {
        cumulative += candidates_[sorted].weight;
        if (cumulative >= target) {
          keep = sorted + 1;  // at least one
          break;
        }
      }
    }
    candidates_.resize(keep);
  }

  // 5. Draw from the renormalised survivors.
  double kept = 0.0;
  for (const Candidate& c : candidates_) {
    kept += c.weight;
  }
  const double u = UniformDouble(rng_) * kept;
  double acc = 0.0;
  int32_t chosen = -1;
  for (const Candidate& c : candidates_) {
    if (c.weight <= 0.0f) {
      continue;
    }
    acc += c.weight;
    chosen = c.token;
    if (acc > u) {
      break;
    }
  }
  // chosen is the last positive-weight candidate if rounding left acc <= u;
  // the best candidate always has weight 1, so one exists.
  return finish(chosen);
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) {
      max_len_ = std::max(max_len_, s.size());
      stops_.push_back(std::move(s));
    }
  }
}

std::string StopStringMatcher::Append(absl::string_view text, bool* stopped) {
  if (stopped_) {
    if (stopped != nullptr) {
      *stopped = true;
    }
    return "";
  }
  if (stopped != nullptr) {
    *stopped = false;
  }
  held_.append(text.data(), text.size());
  if (stops_.empty()) {
    return Flush();
  }
  // held_ holds no complete stop before this call, so any match involves the
  // new text; the one that ends first wins, the longest among equal ends.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) {
      continue;
    }
    const size_t end = pos + s.size();
    if (best_end == std::string::npos || end < best_end || (end == best_end && pos < best_start)) {
      best_start = pos;
      best_end = end;
    }
  }
  if (best_start != std::string::npos) {
    stopped_ = true;
    if (stopped != nullptr) {
      *stopped = true;
    }
    std::string out = held_.substr(0, best_start);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string;
  // a match can only start inside it.
  size_t hold = 0;
  const size_t max_hold = std::min(held_.size(), max_len_ - 1);
  for (size_t len = max_hold; len > 0 && hold == 0; --len) {
    const absl::string_view suffix = absl::string_view(held_).substr(held_.size() - len);
    for (const std::string& s : stops_) {
      if (s.size() > len && absl::string_view(s).substr(0, len) == suffix) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace tandem
