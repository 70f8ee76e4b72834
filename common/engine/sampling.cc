#include "common/engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem::engine {
namespace {

constexpr int32_t kMaxTopLogprobs = 20;

// Uniform double in [0, 1) from the top 53 bits of one 64-bit output: the
// same value for a given engine state with every standard library (unlike
// std::uniform_real_distribution, whose algorithm is unspecified).
double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// The vocabulary-wide passes (max, exp) run 4 lanes at a time through the
// GCC/Clang generic vector extension: SSE2 on the x86-64 baseline, NEON on
// Arm, no ISA-specific code. GCC 12 at -O2 does not vectorize these loops by
// itself, and they are most of a sampling step at 150k tokens.
using V4f = float __attribute__((vector_size(16)));
using V4i = int32_t __attribute__((vector_size(16)));

ABSL_ATTRIBUTE_ALWAYS_INLINE inline V4f Load4(const float* p) {
  V4f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline V4f Select4(V4i mask, V4f a, V4f b) {  // mask lanes are all ones or zero
  return reinterpret_cast<V4f>((reinterpret_cast<V4i>(a) & mask) |
                               (reinterpret_cast<V4i>(b) & ~mask));
}

// exp(x) for x <= 0, 0 for x < -86 (below e^-86 ~ 4e-38), -inf and NaN.
// Cody-Waite reduction x = n ln2 + g, |g| <= ln2/2, and Cephes' expf
// polynomial for e^g; relative error under 1e-7 over [-86, 0] (measured
// against std::exp; the logprob tests bound it end to end at 1e-5).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline V4f ExpNonPositive4(V4f x) {
  const V4i keep = x >= -86.0f;  // false for NaN
  const V4f xc = Select4(keep, x, V4f{} - 86.0f);
  const V4f magic = V4f{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V4f n = (xc * 1.44269504088896341f + magic) - magic;
  const V4f g = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  V4f p = V4f{} + 1.9875691500e-4f;
  p = p * g + 1.3981999507e-3f;
  p = p * g + 8.3334519073e-3f;
  p = p * g + 4.1665795894e-2f;
  p = p * g + 1.6666665459e-1f;
  p = p * g + 5.0000001201e-1f;
  const V4f y = p * g * g + g + 1.0f;
  const V4i scaled = reinterpret_cast<V4i>(y) + (__builtin_convertvector(n, V4i) << 23);
  return reinterpret_cast<V4f>(scaled & keep);
}

// w[i] = exp((x[i] - shift) * scale) for x[i] <= shift (0 for NaN and -inf);
// returns the sum in double.
double ExpWeights(const float* x, int32_t n, float shift, float scale, float* w) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const V4f e = ExpNonPositive4((Load4(x + i) - shift) * scale);
    std::memcpy(w + i, &e, sizeof(e));
    s0 += e[0];
    s1 += e[1];
    s2 += e[2];
    s3 += e[3];
  }
  if (i < n) {
    float tail[4];
    std::fill(tail, tail + 4, -std::numeric_limits<float>::infinity());
    std::copy(x + i, x + n, tail);
    const V4f e = ExpNonPositive4((Load4(tail) - shift) * scale);
    for (int32_t j = 0; i + j < n; ++j) {
      w[i + j] = e[j];
      s0 += e[j];
    }
  }
  return (s0 + s1) + (s2 + s3);
}

// Largest non-NaN value; -inf if there is none.
float MaxNonNan(const float* x, int32_t n) {
  V4f m4 = V4f{} - std::numeric_limits<float>::infinity();
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const V4f v = Load4(x + i);
    m4 = Select4(v > m4, v, m4);  // NaN compares false: skipped
  }
  float m = std::max(std::max(m4[0], m4[1]), std::max(m4[2], m4[3]));
  for (; i < n; ++i) {
    if (x[i] > m) {
      m = x[i];
    }
  }
  return m;
}

// Lowest id holding the largest non-NaN value (-inf everywhere: the lowest
// non-NaN id); -1 if every value is NaN.
int32_t Argmax(const float* x, int32_t n) {
  // Per lane: the max and the first index holding it (strict > keeps the
  // earliest); then the lowest index among lanes holding the overall max.
  V4f m4 = V4f{} - std::numeric_limits<float>::infinity();
  V4i idx4 = V4i{} - 1;
  V4i i4 = V4i{0, 1, 2, 3};
  int32_t i = 0;
  for (; i + 4 <= n; i += 4, i4 += 4) {
    const V4f v = Load4(x + i);
    const V4i better = v > m4;
    m4 = Select4(better, v, m4);
    idx4 = (i4 & better) | (idx4 & ~better);
  }
  float m = -std::numeric_limits<float>::infinity();
  int32_t best = -1;
  for (int lane = 0; lane < 4; ++lane) {
    if (idx4[lane] >= 0 && (m4[lane] > m || (m4[lane] == m && idx4[lane] < best))) {
      m = m4[lane];
      best = idx4[lane];
    }
  }
  for (; i < n; ++i) {
    if (x[i] > m) {
      m = x[i];
      best = i;
    }
  }
  if (best >= 0) {
    return best;
  }
  for (int32_t j = 0; j < n; ++j) {  // nothing above -inf
    if (!std::isnan(x[j])) {
      return j;
    }
  }
  return -1;
}

// log(sum(exp(x))) over non-NaN entries, shifted by the max for stability;
// accumulated in double (relative error ~1e-7 on the sum).
double LogSumExp(absl::Span<const float> x, std::vector<float>* scratch) {
  const float m = MaxNonNan(x.data(), static_cast<int32_t>(x.size()));
  if (!std::isfinite(m)) {
    return m;
  }
  scratch->resize(x.size());
  const double sum = ExpWeights(x.data(), static_cast<int32_t>(x.size()), m, 1.0f, scratch->data());
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

void Sampler::SkipSteps(int64_t steps) {
  if (params_.temperature > 0.0f && steps > 0) {
    rng_.discard(static_cast<unsigned long long>(steps));
  }
}

// Most likely first; equal logits: lower id first. A total order (ids are unique).
bool Sampler::Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

size_t Sampler::TopPCut(double target) {
  // Weighted quickselect: partition around a pivot by Better and keep the
  // side that holds the cut, like nth_element but steering by mass instead of
  // rank. Expected O(n) with no sort; the survivors stay unordered, which the
  // draw does not mind. Invariant: [0, lo) is kept, its mass `before` is below
  // `target`, and the cut lies in [lo, hi).
  auto begin = candidates_.begin();
  size_t lo = 0;
  size_t hi = candidates_.size();
  double before = 0.0;
  while (hi - lo > 16) {
    const Candidate& a = candidates_[lo];
    const Candidate& b = candidates_[lo + (hi - lo) / 2];
    const Candidate& c = candidates_[hi - 1];
    const Candidate pivot = Better(a, b) ? (Better(b, c) ? b : (Better(a, c) ? c : a))
                                         : (Better(a, c) ? a : (Better(b, c) ? c : b));
    const auto split_it = std::partition(begin + lo, begin + hi, [&pivot](const Candidate& x) {
      return Better(x, pivot);
    });
    const size_t split = static_cast<size_t>(split_it - begin);  // pivot is in [split, hi)
    double upper = 0.0;
    for (size_t i = lo; i < split; ++i) {
      upper += candidates_[i].weight;
    }
    if (before + upper >= target) {
      hi = split;  // the cut is among the strictly better ones
      continue;
    }
    // Everything better than the pivot is kept; the pivot comes next.
    before += upper;
    std::iter_swap(begin + split,
                   std::find_if(begin + split, begin + hi, [&pivot](const Candidate& x) {
                     return x.token == pivot.token;
                   }));
    before += pivot.weight;
    if (before >= target) {
      return split + 1;
    }
    lo = split + 1;
  }
  std::sort(begin + lo, begin + hi, Better);
  for (size_t i = lo; i < hi; ++i) {
    before += candidates_[i].weight;
    if (before >= target) {
      return i + 1;
    }
  }
  return std::max<size_t>(hi, 1);  // rounding kept the mass just short: keep the range
}

void Sampler::SelectTop(const float* x, int32_t n, size_t k, bool finite_only,
                        std::vector<Candidate>* out) {
  out->clear();
  auto eligible = [finite_only](float v) {
    return finite_only ? v > -std::numeric_limits<float>::infinity() : !std::isnan(v);
  };
  if (k == 0) {
    return;
  }
  if (k >= static_cast<size_t>(n) / 8) {
    // A large share of the vocabulary: select in place.
    for (int32_t i = 0; i < n; ++i) {
      if (eligible(x[i])) {
        out->push_back(Candidate{i, x[i], 0.0f});
      }
    }
    if (k < out->size()) {
      std::nth_element(out->begin(), out->begin() + k, out->end(), Better);
      out->resize(k);
    }
    return;
  }
  // A few: one pass with a heap whose front is the worst kept. Most tokens
  // fail the first comparison, so this costs about one compare per token.
  for (int32_t i = 0; i < n; ++i) {
    if (!eligible(x[i])) {
      continue;
    }
    const Candidate c{i, x[i], 0.0f};
    if (out->size() < k) {
      out->push_back(c);
      std::push_heap(out->begin(), out->end(), Better);
    } else if (x[i] >= out->front().logit && Better(c, out->front())) {
      std::pop_heap(out->begin(), out->end(), Better);
      out->back() = c;
      std::push_heap(out->begin(), out->end(), Better);
    }
  }
}

SampleResult Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> history) {
  SampleResult result;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (vocab == 0) {
    return result;
  }

  // 1. Log-probabilities of the raw logits, before anything reshapes them.
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  const double log_z = want_logprobs ? LogSumExp(logits, &weights_) : 0.0;
  if (params_.top_logprobs > 0) {
    SelectTop(logits.data(), vocab, static_cast<size_t>(params_.top_logprobs),
              /*finite_only=*/false, &candidates_);
    std::sort(candidates_.begin(), candidates_.end(), Better);
    result.top_logprobs.reserve(candidates_.size());
    for (const Candidate& c : candidates_) {
      result.top_logprobs.push_back(
          TokenLogprob{c.token, static_cast<float>(static_cast<double>(c.logit) - log_z)});
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
  const float max_logit = MaxNonNan(x, vocab);
  if (!std::isfinite(max_logit)) {
    // All NaN or -inf (nothing has probability), or +inf (the softmax is
    // undefined): fall back to the argmax.
    return finish(Argmax(x, vocab));
  }
  const float inv_t = 1.0f / params_.temperature;
  const bool top_k = params_.top_k > 0 && params_.top_k < vocab;
  const bool top_p = params_.top_p < 1.0f;
  const bool min_p = params_.min_p > 0.0f;

  // 4. Candidates and their softmax weights at the temperature (unnormalised;
  // the most likely token weighs exactly 1). `total` is the mass top-p
  // measures against: after top-k, before top-p and min-p.
  double total = 0.0;
  if (top_k) {
    SelectTop(x, vocab, static_cast<size_t>(params_.top_k), /*finite_only=*/true, &candidates_);
    for (Candidate& c : candidates_) {
      c.weight = ExpNonPositive4(V4f{} + (c.logit - max_logit) * inv_t)[0];
      total += c.weight;
    }
  } else {
    weights_.resize(vocab);
    total = ExpWeights(x, vocab, max_logit, inv_t, weights_.data());
    if (!top_p && !min_p) {
      // Plain temperature sampling: draw straight from the weights.
      const double u = UniformDouble(rng_) * total;
      double acc = 0.0;
      int32_t chosen = -1;
      for (int32_t i = 0; i < vocab; ++i) {
        if (weights_[i] > 0.0f) {
          acc += weights_[i];
          chosen = i;
          if (acc > u) {
            break;
          }
        }
      }
      return finish(chosen);  // the last positive weight if rounding left acc <= u
    }
    // Only tokens that can survive become candidates. min-p keeps
    // w >= min_p. A token t in the top-p set has less than top_p * total
    // mass strictly before it, so t and the at most `vocab` tokens after it
    // hold more than (1 - top_p) * total, each weighing at most w_t:
    // w_t > (1 - top_p) * total / vocab. Half that bound leaves room for
    // rounding; it usually discards most of the vocabulary.
    float floor = 0.0f;
    if (min_p) {
      floor = std::min(params_.min_p, 1.0f);
    }
    if (top_p) {
      floor = std::max(
          floor, static_cast<float>(0.5 * (1.0 - params_.top_p) * total / vocab));
    }
    candidates_.clear();
    for (int32_t i = 0; i < vocab; ++i) {
      if (weights_[i] >= floor && weights_[i] > 0.0f) {
        candidates_.push_back(Candidate{i, x[i], weights_[i]});
      }
    }
  }

  // 5. min-p, then top-p. Each keeps a most-likely prefix of the candidates
  // and min-p's threshold (relative to p_max) is unchanged by top-p's cut, so
  // this order gives the same set as top-p first, with less left to select.
  if (min_p) {
    const float threshold = std::min(params_.min_p, 1.0f);  // p / p_max == weight
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [threshold](const Candidate& c) {
                                       return c.weight < threshold;
                                     }),
                      candidates_.end());
  }
  if (top_p && !candidates_.empty()) {
    candidates_.resize(TopPCut(static_cast<double>(params_.top_p) * total));
  }

  // 6. Draw from the renormalised survivors.
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
  // the most likely token weighs 1 and always survives, so one exists.
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
      if (s.size() > len && absl::StartsWith(s, suffix)) {
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

}  // namespace tandem::engine
