#include "router/semantic_cache.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/logging.h"
#include "common/engine/encoder_ops/encoder_ops.h"
#include "hnswlib/hnswlib.h"
#include "router/api_error.h"
#include "router/request.h"

namespace tandem::router {
namespace {

// HNSW parameters: hnswlib's recommended M / ef_construction for ~400-d
// embeddings; ef and the candidate count bound a lookup's work (ef 128: 149 of
// 160 paraphrases found among 100 000 random vectors, 138 with ef 64;
// docs/benchmarks.md "Semantic cache").
constexpr size_t kM = 16;
constexpr size_t kEfConstruction = 100;
constexpr size_t kEfSearch = 128;
constexpr size_t kCandidates = 8;
constexpr size_t kInitialNodes = 1024;

// Length-prefixed fields into one SHA-256: no two field lists share bytes.
class KeyHasher {
 public:
  KeyHasher& Add(absl::string_view s) {
    const uint64_t n = s.size();
    buf_.append(reinterpret_cast<const char*>(&n), sizeof(n));
    buf_.append(s.data(), s.size());
    return *this;
  }
  template <typename T>
  KeyHasher& AddPod(T v) {
    return Add(absl::string_view(reinterpret_cast<const char*>(&v), sizeof(v)));
  }
  std::string Digest() const {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    CHECK(EVP_Digest(buf_.data(), buf_.size(), out, &len, EVP_sha256(), nullptr) == 1);
    return std::string(reinterpret_cast<const char*>(out), len);
  }

 private:
  std::string buf_;
};

// Chat content as the cache compares it: surrounding whitespace dropped, CRLF
// as LF (inner whitespace is kept: it matters in code).
std::string NormalizeContent(absl::string_view content) {
  return absl::StrReplaceAll(absl::StripAsciiWhitespace(content), {{"\r\n", "\n"}});
}

void AddParams(const PreparedRequest& p, KeyHasher& h) {
  const engine::SamplingParams& s = p.sampling;
  h.AddPod(p.max_tokens).AddPod(p.n).AddPod(s.temperature).AddPod(s.top_k).AddPod(s.top_p);
  h.AddPod(s.min_p).AddPod(s.repetition_penalty).AddPod(s.repetition_window);
  h.AddPod(p.has_seed).AddPod(p.has_seed ? s.seed : uint64_t{0}).AddPod(s.ignore_eos);
  h.AddPod(s.stop_token_ids.size());
  for (int32_t id : s.stop_token_ids) {
    h.AddPod(id);
  }
  h.AddPod(p.stop_strings.size());
  for (const std::string& stop : p.stop_strings) {
    h.Add(stop);
  }
}

// The conversation; `skip` (a message index, or -1) is left out (the vector
// tier's text).
void AddConversation(const GenerationRequest& r, int64_t skip, KeyHasher& h) {
  if (r.prompt_text.has_value()) {
    h.Add("text").AddPod(r.add_special_tokens).Add(skip < 0 ? *r.prompt_text : "");
  } else if (r.prompt_ids.has_value()) {
    h.Add("ids").Add(absl::string_view(reinterpret_cast<const char*>(r.prompt_ids->data()),
                                       r.prompt_ids->size() * sizeof(int32_t)));
  } else if (r.messages.has_value()) {
    h.Add("chat").AddPod(r.messages->size());
    for (size_t i = 0; i < r.messages->size(); ++i) {
      const ChatMessage& m = (*r.messages)[i];
      h.Add(m.role);
      h.Add(static_cast<int64_t>(i) == skip ? "" : NormalizeContent(m.content));
      h.AddPod(m.tool_calls.size());
      for (const ToolCall& call : m.tool_calls) {
        h.Add(call.name).Add(call.arguments);
      }
    }
    h.AddPod(r.tools.size());
    for (const std::string& tool : r.tools) {
      h.Add(tool);
    }
  }
}

bool IsNumberWord(absl::string_view w, std::string* digits) {
  static const auto* const kWords = new absl::flat_hash_map<std::string, std::string>{
      {"zero", "0"},       {"one", "1"},        {"two", "2"},         {"three", "3"},
      {"four", "4"},       {"five", "5"},       {"six", "6"},         {"seven", "7"},
      {"eight", "8"},      {"nine", "9"},       {"ten", "10"},        {"eleven", "11"},
      {"twelve", "12"},    {"thirteen", "13"},  {"fourteen", "14"},   {"fifteen", "15"},
      {"sixteen", "16"},   {"seventeen", "17"}, {"eighteen", "18"},   {"nineteen", "19"},
      {"twenty", "20"},    {"thirty", "30"},    {"forty", "40"},      {"fifty", "50"},
      {"sixty", "60"},     {"seventy", "70"},   {"eighty", "80"},     {"ninety", "90"},
      {"hundred", "100"},  {"thousand", "1000"}, {"million", "1000000"},
      {"billion", "1000000000"}, {"dozen", "12"}, {"half", "0.5"},  {"twice", "x2"},
      {"first", "1st"},    {"second", "2nd"},   {"third", "3rd"},     {"fourth", "4th"},
      {"fifth", "5th"},    {"sixth", "6th"},    {"seventh", "7th"},   {"eighth", "8th"},
      {"ninth", "9th"},    {"tenth", "10th"},   {"last", "last"}};
  auto it = kWords->find(absl::AsciiStrToLower(w));
  if (it == kWords->end()) {
    return false;
  }
  *digits = it->second;
  return true;
}

bool IsNegation(absl::string_view lower) {
  static const auto* const kNegations = new absl::flat_hash_set<std::string>{
      "not",     "no",   "never", "none",  "nobody", "nothing", "neither",
      "nor",     "nowhere", "without", "cannot", "dont", "doesnt", "isnt",
      "cant",    "wont", "shouldnt", "wouldnt", "couldnt", "arent", "wasnt",
      "werent",  "didnt", "hasnt", "havent", "mustnt", "except", "exclude", "excluding"};
  if (absl::EndsWith(lower, "n't") || absl::EndsWith(lower, "n\xE2\x80\x99t")) {
    return true;
  }
  return kNegations->contains(lower);
}

// Words that often start a sentence capitalised without being a name. Any
// other capitalised word is an entity wherever it stands ("Python code for
// X" and "Give me Python code for X" share the entity "python").
bool IsCommonStarter(absl::string_view lower) {
  static const auto* const kStarters = new absl::flat_hash_set<std::string>{
      "what", "how", "why", "when", "where", "who", "whom", "whose", "which", "what's",
      "whats", "how's", "is", "are", "was", "were", "am", "be", "can", "could", "would",
      "should", "shall", "will", "may", "might", "must", "do", "does", "did", "have", "has",
      "had", "i", "i'm", "i'd", "i'll", "i've", "im", "the", "a", "an", "this", "that", "these",
      "those", "it", "it's", "its", "my", "me", "we", "our", "you", "your", "they", "their",
      "he", "she", "his", "her", "there", "here", "hi", "hello", "hey", "dear", "please",
      "thanks", "thank", "let's", "lets", "let", "if", "in", "on", "at", "for", "from", "to",
      "of", "with", "by", "about", "as", "and", "or", "but", "so", "now", "then", "also",
      "ok", "okay", "yes", "well", "quick", "question", "some", "any", "all", "each", "every",
      "one", "write", "explain", "give", "create", "generate", "list", "describe", "tell",
      "make", "suggest", "summarize", "summarise", "provide", "show", "help", "find",
      "translate", "design", "compose", "draft", "teach", "recommend", "outline", "compare",
      "plan", "build", "act", "pretend", "imagine", "assume", "consider", "implement",
      "simulate", "rewrite", "analyze", "analyse", "convert", "continue", "answer", "code",
      "calculate", "solve", "fix", "debug", "define", "name", "use", "add", "remove", "check",
      "review", "edit", "improve", "prepare", "produce", "play", "draw", "read", "say", "ask",
      "need", "want", "like", "know", "think", "see", "look", "try", "keep", "get",
      "go", "put", "set", "run", "take", "send", "identify", "evaluate", "discuss"};
  return kStarters->contains(lower);
}

bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '\'' || c == '_' ||
         (static_cast<unsigned char>(c) >= 0x80);
}

}  // namespace

absl::StatusOr<CachePolicy> ParseCacheControl(absl::string_view value) {
  CachePolicy p;
  for (absl::string_view d : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    d = absl::StripAsciiWhitespace(d);
    const std::string lower = absl::AsciiStrToLower(d);
    p.given = true;
    if (lower == "no-store") {
      p.no_store = true;
    } else if (lower == "no-cache") {
      p.no_cache = true;
    } else if (absl::StartsWith(lower, "max-age=")) {
      int64_t seconds = 0;
      if (!absl::SimpleAtoi(absl::string_view(lower).substr(8), &seconds) || seconds < 0) {
        return InvalidParam("Cache-Control",
                            absl::StrCat("max-age wants a whole number of seconds >= 0, got \"",
                                         d, "\""));
      }
      p.max_age = absl::Seconds(seconds);
    } else {
      return InvalidParam("Cache-Control",
                          absl::StrCat("unknown cache directive \"", d,
                                       "\"; this router knows no-store, no-cache and max-age=N"));
    }
  }
  return p;
}

absl::StatusOr<CacheRequest> MakeCacheRequest(const GenerationRequest& request,
                                              const PreparedRequest& prepared) {
  CacheRequest c;
  absl::StatusOr<CachePolicy> policy = ParseCacheControl(request.cache_control);
  if (!policy.ok()) {
    return policy.status();
  }
  c.policy = *policy;
  c.tenant = prepared.tenant;
  c.model = prepared.model->name();
  const engine::SamplingParams& s = prepared.sampling;
  // n > 1 wants different choices; logprobs are not stored.
  c.eligible = prepared.n == 1 && !s.logprobs && s.top_logprobs == 0 &&
               (s.temperature == 0.0f || c.policy.given);
  if (!c.eligible) {
    return c;
  }
  KeyHasher exact;
  exact.Add(c.tenant).Add(c.model);
  AddParams(prepared, exact);
  AddConversation(request, -1, exact);
  c.exact_key = exact.Digest();

  // The vector tier's text: the prompt, or a last user message without tools.
  int64_t skip = -1;
  if (request.prompt_text.has_value()) {
    c.text = std::string(absl::StripAsciiWhitespace(*request.prompt_text));
    skip = 0;
  } else if (request.messages.has_value() && !request.messages->empty() &&
             request.tools.empty()) {
    const ChatMessage& last = request.messages->back();
    if (last.role == "user" && last.tool_calls.empty()) {
      c.text = NormalizeContent(last.content);
      skip = static_cast<int64_t>(request.messages->size()) - 1;
    }
  }
  if (c.text.empty()) {
    return c;
  }
  KeyHasher partition;
  partition.Add("partition").Add(c.tenant).Add(c.model);
  AddParams(prepared, partition);
  AddConversation(request, skip, partition);
  c.partition_key = partition.Digest();
  return c;
}

GuardFeatures ExtractGuardFeatures(absl::string_view text) {
  GuardFeatures f;
  absl::flat_hash_set<std::string> entities;
  bool sentence_start = true;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    // Quoted spans are entities as a whole: "sesh", `ls -la`.
    if (c == '"' || c == '`') {
      const size_t end = text.find(c, i + 1);
      if (end != absl::string_view::npos && end > i + 1 && end - i <= 64) {
        entities.insert(absl::AsciiStrToLower(text.substr(i + 1, end - i - 1)));
      }
    }
    if (c == '.' || c == '!' || c == '?' || c == ':' || c == '\n' || c == ';') {
      sentence_start = true;
      ++i;
      continue;
    }
    // Numbers: 1,000 -> 1000; 3.14 stays.
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      std::string num;
      size_t j = i;
      while (j < text.size()) {
        const char d = text[j];
        if (absl::ascii_isdigit(static_cast<unsigned char>(d))) {
          num.push_back(d);
        } else if ((d == ',' || d == '.') && j + 1 < text.size() &&
                   absl::ascii_isdigit(static_cast<unsigned char>(text[j + 1]))) {
          if (d == '.') {
            num.push_back(d);
          }
        } else {
          break;
        }
        ++j;
      }
      // Digits inside a word (mp3, GPT4, B2B) make it an entity instead.
      if (j < text.size() && absl::ascii_isalpha(static_cast<unsigned char>(text[j]))) {
        size_t k = j;
        while (k < text.size() && IsWordChar(text[k])) {
          ++k;
        }
        entities.insert(absl::AsciiStrToLower(text.substr(i, k - i)));
        j = k;
      } else {
        f.numbers.push_back(num);
      }
      i = j;
      sentence_start = false;
      continue;
    }
    if (!IsWordChar(c)) {
      ++i;
      continue;
    }
    size_t j = i;
    bool inner_upper = false;
    bool has_digit = false;
    while (j < text.size() && (IsWordChar(text[j]) || (text[j] == '-' && j + 1 < text.size() &&
                                                       IsWordChar(text[j + 1])))) {
      const unsigned char ch = static_cast<unsigned char>(text[j]);
      inner_upper = inner_upper || (j > i && absl::ascii_isupper(ch));
      has_digit = has_digit || absl::ascii_isdigit(ch);
      ++j;
    }
    absl::string_view word = text.substr(i, j - i);
    const std::string lower = absl::AsciiStrToLower(word);
    std::string digits;
    if (IsNegation(lower)) {
      ++f.negations;
    } else if (IsNumberWord(word, &digits)) {
      f.numbers.push_back(digits);
    } else if (inner_upper || has_digit ||
               (absl::ascii_isupper(static_cast<unsigned char>(word[0])) &&
                !(sentence_start && IsCommonStarter(lower)) && word != "I" &&
                !absl::StartsWith(word, "I'"))) {
      entities.insert(lower);
    }
    sentence_start = false;
    i = j;
  }
  std::sort(f.numbers.begin(), f.numbers.end());
  f.entities.assign(entities.begin(), entities.end());
  std::sort(f.entities.begin(), f.entities.end());
  return f;
}

const char* CacheStatusName(CacheStatus s) {
  switch (s) {
    case CacheStatus::kBypass:
      return "bypass";
    case CacheStatus::kMiss:
      return "miss";
    case CacheStatus::kHitExact:
      return "hit-exact";
    case CacheStatus::kHitSemantic:
      return "hit-semantic";
  }
  return "bypass";
}

const char* CacheTierName(CacheTier tier) {
  return tier == CacheTier::kExact ? "exact" : "semantic";
}

struct SemanticCache::Entry {
  std::string exact_key;
  std::string partition_key;  // "" = not in the vector tier
  std::string tenant;
  std::string model;
  GuardFeatures features;
  absl::Time created;
  int64_t slot = -1;  // HNSW label, -1 = none
  std::shared_ptr<const CachedAnswer> answer;
};

// hnswlib's inner-product space with the dot product picked at run time
// (engine::encoder_ops: AVX-512, AVX2 or baseline by the ISA active when the
// index is made). hnswlib's own InnerProductSpace picks its SIMD width at
// compile time, and this target is built for the baseline ISA (SSE: 4 floats
// per instruction), where the distance took 75 % of the samples of building
// and searching a 100 000-entry index.
class DotSpace : public hnswlib::SpaceInterface<float> {
 public:
  explicit DotSpace(size_t dim)
      : param_{static_cast<int64_t>(dim), engine::encoder_ops::Ops().dot},
        size_(dim * sizeof(float)) {}
  size_t get_data_size() override { return size_; }
  hnswlib::DISTFUNC<float> get_dist_func() override { return &Distance; }
  void* get_dist_func_param() override { return &param_; }

 private:
  struct Param {
    int64_t dim;
    float (*dot)(const float* a, const float* b, int64_t n);
  };
  static float Distance(const void* a, const void* b, const void* param) {
    const Param& p = *static_cast<const Param*>(param);
    return 1.0f - p.dot(static_cast<const float*>(a), static_cast<const float*>(b), p.dim);
  }
  Param param_;
  size_t size_;
};

// hnswlib behind a non-throwing face. Labels are slots in [0, capacity).
class SemanticCache::Index {
 public:
  Index(int dim, size_t capacity)
      : space_(dim),
        capacity_(capacity),
        hnsw_(&space_, std::min(capacity, kInitialNodes), kM, kEfConstruction) {
    hnsw_.setEf(kEfSearch);
  }

  // Adds, or reuses the (deleted) node of `slot`.
  absl::Status Add(const float* v, uint32_t slot) {
    try {
      if (hnsw_.cur_element_count >= hnsw_.max_elements_ && slot >= hnsw_.cur_element_count) {
        hnsw_.resizeIndex(std::min(capacity_, hnsw_.max_elements_ * 2));
      }
      hnsw_.addPoint(v, slot);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("hnswlib addPoint: ", e.what()));
    }
    return absl::OkStatus();
  }
  void Remove(uint32_t slot) {
    try {
      hnsw_.markDelete(slot);
    } catch (const std::exception& e) {
      LOG(ERROR) << "semantic cache: hnswlib markDelete(" << slot << "): " << e.what();
    }
  }
  // (cosine, slot), best first.
  std::vector<std::pair<float, uint32_t>> Search(const float* v, size_t k) const {
    std::vector<std::pair<float, uint32_t>> out;
    const size_t live = hnsw_.cur_element_count - hnsw_.num_deleted_;
    if (live == 0) {
      return out;
    }
    try {
      auto q = hnsw_.searchKnn(v, std::min(k, live));
      while (!q.empty()) {
        out.emplace_back(1.0f - q.top().first, static_cast<uint32_t>(q.top().second));
        q.pop();
      }
    } catch (const std::exception& e) {
      LOG(ERROR) << "semantic cache: hnswlib searchKnn: " << e.what();
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t nodes() const { return hnsw_.cur_element_count; }

 private:
  DotSpace space_;
  const size_t capacity_;
  hnswlib::HierarchicalNSW<float> hnsw_;
};

SemanticCache::SemanticCache(SemanticCacheConfig config, int dim, base::Clock& clock)
    : config_(std::move(config)), dim_(config_.exact_only ? 0 : dim), clock_(clock) {
  if (dim_ > 0) {
    index_ = std::make_unique<Index>(dim_, static_cast<size_t>(config_.capacity));
  }
}

SemanticCache::~SemanticCache() = default;

float SemanticCache::Threshold(absl::string_view model) const {
  auto it = config_.thresholds.find(std::string(model));
  return it != config_.thresholds.end() ? it->second : config_.threshold;
}

bool SemanticCache::WantsEmbedding(const CacheRequest& req) const {
  return req.eligible && dim_ > 0 && !req.text.empty() && !req.partition_key.empty();
}

bool SemanticCache::FreshLocked(const Entry& e, const CachePolicy& policy, absl::Time now) const {
  const absl::Duration age = now - e.created;
  return age < config_.ttl && (!policy.max_age.has_value() || age <= *policy.max_age);
}

std::optional<CacheHit> SemanticCache::LookupExact(const CacheRequest& req) {
  if (!req.eligible || req.policy.no_cache) {
    return std::nullopt;
  }
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = by_exact_.find(req.exact_key);
  if (it == by_exact_.end()) {
    return std::nullopt;
  }
  Lru::iterator e = it->second;
  if (now - e->created >= config_.ttl) {
    EraseLocked(e);
    return std::nullopt;
  }
  // The key holds tenant and model already; checked again all the same.
  if (e->tenant != req.tenant || e->model != req.model || !FreshLocked(*e, req.policy, now)) {
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, e);
  return CacheHit{CacheTier::kExact, 1.0f, e->answer};
}

std::optional<CacheHit> SemanticCache::LookupSemantic(const CacheRequest& req,
                                                      const Embedding& embedding) {
  if (!WantsEmbedding(req) || req.policy.no_cache || embedding.truncated ||
      static_cast<int>(embedding.vector.size()) != dim_) {
    return std::nullopt;
  }
  const GuardFeatures features = ExtractGuardFeatures(req.text);
  const float threshold = Threshold(req.model);
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  std::vector<Lru::iterator> expired;
  std::optional<CacheHit> hit;
  for (const auto& [similarity, slot] : index_->Search(embedding.vector.data(), kCandidates)) {
    if (similarity < threshold) {
      break;  // best first
    }
    Lru::iterator e = by_slot_[slot];
    if (e == lru_.end()) {
      continue;
    }
    if (now - e->created >= config_.ttl) {
      expired.push_back(e);
      continue;
    }
    if (e->partition_key != req.partition_key || e->tenant != req.tenant ||
        e->model != req.model || !FreshLocked(*e, req.policy, now) || !(e->features == features)) {
      continue;
    }
    lru_.splice(lru_.begin(), lru_, e);
    hit = CacheHit{CacheTier::kSemantic, similarity, e->answer};
    break;
  }
  for (Lru::iterator e : expired) {
    EraseLocked(e);
  }
  return hit;
}

void SemanticCache::Insert(const CacheRequest& req, const Embedding* embedding,
                           CachedAnswer answer) {
  if (!req.eligible || req.policy.no_store) {
    return;
  }
  const bool vector = WantsEmbedding(req) && embedding != nullptr && !embedding->truncated &&
                      static_cast<int>(embedding->vector.size()) == dim_;
  Entry entry;
  entry.exact_key = req.exact_key;
  entry.tenant = req.tenant;
  entry.model = req.model;
  if (vector) {
    entry.partition_key = req.partition_key;
    entry.features = ExtractGuardFeatures(req.text);
  }
  entry.created = clock_.Now();
  entry.answer = std::make_shared<const CachedAnswer>(std::move(answer));

  absl::MutexLock lock(&mu_);
  if (auto it = by_exact_.find(req.exact_key); it != by_exact_.end()) {
    EraseLocked(it->second);
  }
  while (static_cast<int64_t>(lru_.size()) >= config_.capacity) {
    EraseLocked(std::prev(lru_.end()));
  }
  lru_.push_front(std::move(entry));
  Lru::iterator e = lru_.begin();
  by_exact_[e->exact_key] = e;
  if (!vector) {
    return;
  }
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(by_slot_.size());
    by_slot_.push_back(lru_.end());
  }
  if (absl::Status s = index_->Add(embedding->vector.data(), slot); !s.ok()) {
    LOG(ERROR) << "semantic cache: kept in the exact tier only: " << s;
    free_slots_.push_back(slot);
    e->partition_key.clear();
    return;
  }
  e->slot = slot;
  by_slot_[slot] = e;
}

void SemanticCache::EraseLocked(Lru::iterator it) {
  if (it->slot >= 0) {
    index_->Remove(static_cast<uint32_t>(it->slot));
    by_slot_[it->slot] = lru_.end();
    free_slots_.push_back(static_cast<uint32_t>(it->slot));
  }
  by_exact_.erase(it->exact_key);
  lru_.erase(it);
}

int64_t SemanticCache::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(lru_.size());
}

int64_t SemanticCache::index_nodes() const {
  absl::MutexLock lock(&mu_);
  return index_ == nullptr ? 0 : static_cast<int64_t>(index_->nodes());
}

}  // namespace tandem::router
