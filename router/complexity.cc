#include "router/complexity.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "router/readiness.h"

namespace tandem::router {
namespace {

constexpr size_t kFeatureBytes = 16 << 10;  // features read this much of the text

double Clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }

bool IsWordChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Whether `marker` occurs in `text` as a word: a marker starting (ending)
// with a letter or digit must not be preceded (followed) by one, so "def"
// does not match "define" while "optimiz" still matches "optimize" (markers
// meant as prefixes end with a non-word character or are written so).
bool HasMarker(absl::string_view text, absl::string_view marker, bool prefix) {
  size_t at = 0;
  while ((at = text.find(marker, at)) != absl::string_view::npos) {
    const bool start_ok = at == 0 || !IsWordChar(marker.front()) || !IsWordChar(text[at - 1]);
    const size_t end = at + marker.size();
    const bool end_ok =
        prefix || end == text.size() || !IsWordChar(marker.back()) || !IsWordChar(text[end]);
    if (start_ok && end_ok) {
      return true;
    }
    ++at;
  }
  return false;
}

// Distinct markers present: a long text repeating one word counts once.
int CountMarkers(absl::string_view lower, std::initializer_list<absl::string_view> words,
                 std::initializer_list<absl::string_view> prefixes = {}) {
  int n = 0;
  for (absl::string_view w : words) {
    n += HasMarker(lower, w, /*prefix=*/false) ? 1 : 0;
  }
  for (absl::string_view w : prefixes) {
    n += HasMarker(lower, w, /*prefix=*/true) ? 1 : 0;
  }
  return n;
}

double CodeTerm(absl::string_view text, absl::string_view lower) {
  if (text.find("```") != absl::string_view::npos) {
    return 1;
  }
  const int keywords = CountMarkers(
      lower,
      {"def", "class", "return", "#include", "import", "function", "const", "=>", "->", "std::",
       "lambda", "printf", "console.log", "public", "void", "int main", "fn", "elif", "self.",
       "nullptr", "async", "await", "struct", "template<", "select", "println", "malloc", "sql",
       "regex", "api", "json", "python", "c++", "javascript", "typescript", "java", "rust", "golang",
       "bash"},
      {"func"});
  int symbols = 0;
  int chars = 0;
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      continue;
    }
    ++chars;
    symbols += absl::string_view("{}[]();=<>*&|^%\\").find(c) != absl::string_view::npos ? 1 : 0;
  }
  const double density = chars == 0 ? 0 : static_cast<double>(symbols) / chars;
  return Clamp01(std::max(keywords / 3.0, (density - 0.02) / 0.06));
}

// A request to write code (a verb and a code artifact): 1, else 0.
int CodeRequest(absl::string_view lower) {
  const int verbs = CountMarkers(lower, {"write", "generate", "create", "build", "implement",
                                         "make", "code for", "configure", "set up"});
  const int artifacts = CountMarkers(
      lower, {"code", "program", "script", "function", "query", "class", "module", "api",
              "server", "bot", "app", "application", "model", "pseudo code", "pseudocode"});
  return verbs > 0 && artifacts > 0 ? 1 : 0;
}

}  // namespace

PromptFeatures ExtractPromptFeatures(absl::string_view text, int32_t tokens) {
  text = text.substr(0, kFeatureBytes);
  const std::string lower = absl::AsciiStrToLower(text);
  PromptFeatures f;
  f.tokens = tokens;
  f.length = Clamp01(std::log2(std::max(1, tokens) / 32.0) / std::log2(1024.0 / 32.0));
  f.code = CodeTerm(text, lower);
  f.math = Clamp01(
      CountMarkers(lower,
                   {"integral", "derivative", "prove", "proof", "theorem", "lemma", "equation",
                    "probability", "matrix", "eigenvalue", "polynomial", "modulo", "prime",
                    "sqrt", "\\frac", "\\sum", "\\int", "x^2", "n^2", "log(", "sin(", "cos(",
                    "limit", "converge", "induction", "permutation", "expected value",
                    "variance", "solve for", "factorial", "gcd", "vector space", "= 0",
                    "inequality", "asymptotic", "recurrence", "big-o", "geometric", "calculus"},
                   {"combinator", "differentia", "integrat"}) /
      2.0);
  f.reasoning = Clamp01(
      CountMarkers(lower,
                   {"step by step", "step-by-step", "design", "trade-off", "tradeoff",
                    "trade-offs", "tradeoffs", "explain why", "derive", "algorithm",
                    "complexity", "implement", "refactor", "debug", "distributed",
                    "thread-safe", "edge cases", "edge case", "justify", "evaluate",
                    "strategy", "reason about", "pros and cons", "efficient", "efficiently",
                    "race condition", "deadlock", "multi-step", "simulate", "recursive",
                    "dynamic programming", "lock-free", "data structure", "benchmark",
                    "latency", "architecture", "scalable", "scalability", "fault-tolerant",
                    "production-ready", "correctness", "invariant", "compare", "analyze",
                    "analyse", "migrate", "schema", "protocol", "consistency", "parallel",
                    "optimal", "minimize", "maximize"},
                   {"optimiz", "optimis", "concurren", "architect"}) /
          2.0 +
      CodeRequest(lower) / 2.0);
  int list_items = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(line, "- ") || absl::StartsWith(line, "* ") ||
        absl::StartsWith(line, "\xe2\x80\xa2")) {
      ++list_items;
    } else if (line.size() >= 2 && absl::ascii_isdigit(static_cast<unsigned char>(line[0])) &&
               (line[1] == '.' || line[1] == ')')) {
      ++list_items;
    }
  }
  f.constraints = Clamp01(
      (std::min(list_items, 4) +
       CountMarkers(lower, {"must", "must not", "without using", "at most", "at least",
                            "exactly", "no more than", "o(", "only use", "do not use",
                            "don't use", "ensure", "requirements", "constraint", "constraints",
                            "guarantee", "handle", "support", "in-place", "in place"})) /
      4.0);
  f.simple_task = Clamp01(
      CountMarkers(lower,
                   {"summarize", "summarise", "summary", "tl;dr", "translate", "translation",
                    "grammar", "typo", "typos", "spelling", "proofread", "rephrase",
                    "paraphrase", "rewrite", "reword", "what is", "what's", "who is", "who was",
                    "when did", "where is", "define", "definition of", "meaning of",
                    "capital of", "synonym", "shorten", "title for", "headline", "tweet",
                    "in one sentence", "eli5", "sentiment", "extract", "bullet points",
                    "key points", "main points", "thank you", "hello", "joke", "poem",
                    "fun fact", "recommend", "suggest a name", "convert this", "list the"}) /
      2.0);
  return f;
}

double FeatureScore(const PromptFeatures& f) {
  return Clamp01(0.10 * f.length + 0.30 * f.code + 0.30 * f.math + 0.40 * f.reasoning +
                 0.25 * f.constraints - 0.35 * f.simple_task);
}

double KnnSimilarity(absl::Span<const float> v, const std::vector<std::vector<float>>& rows,
                     int k) {
  if (rows.empty()) {
    return -1;
  }
  std::vector<double> sims;
  sims.reserve(rows.size());
  for (const std::vector<float>& r : rows) {
    double dot = 0;
    for (size_t i = 0; i < v.size() && i < r.size(); ++i) {
      dot += static_cast<double>(v[i]) * r[i];
    }
    sims.push_back(dot);
  }
  const size_t take = std::min(rows.size(), static_cast<size_t>(std::max(1, k)));
  std::partial_sort(sims.begin(), sims.begin() + static_cast<std::ptrdiff_t>(take), sims.end(),
                    std::greater<double>());
  double sum = 0;
  for (size_t i = 0; i < take; ++i) {
    sum += sims[i];
  }
  return sum / static_cast<double>(take);
}

double ExemplarScore(absl::Span<const double> similarity, double temperature) {
  double best = -2;
  for (double s : similarity) {
    best = std::max(best, s);
  }
  const size_t pools = similarity.size();
  double total = 0;
  double rank = 0;
  for (size_t p = 0; p < pools; ++p) {
    if (similarity[p] < -0.5) {
      continue;  // no exemplars
    }
    const double w = std::exp((similarity[p] - best) / temperature);  // stable softmax
    total += w;
    rank += w * (pools > 1 ? static_cast<double>(p) / static_cast<double>(pools - 1) : 0.0);
  }
  return total > 0 ? rank / total : 0.0;
}

size_t PoolForScore(const RoutingConfig& config, double score) {
  size_t pool = 0;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    if (config.pools[i].min_score <= score) {
      pool = i;
    }
  }
  return pool;
}

absl::StatusOr<PoolChoice> ChoosePool(const RoutingConfig& config, double score,
                                      absl::Span<const PoolHealth> health) {
  const size_t want = PoolForScore(config, score);
  std::vector<size_t> order;
  for (size_t i = want; i < config.pools.size(); ++i) {
    order.push_back(i);
  }
  for (size_t i = want; i-- > 0;) {
    order.push_back(i);
  }
  PoolChoice choice;
  for (size_t i : order) {
    if (i < health.size() && health[i].live) {
      choice.pool = i;
      return choice;
    }
    choice.skipped.push_back(i);
  }
  std::vector<std::string> why;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    why.push_back(absl::StrCat(config.pools[i].name, " (", config.pools[i].model, ": ",
                               i < health.size() ? health[i].reason : "unknown", ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "model '", config.alias, "': no model pool has a live worker: ", absl::StrJoin(why, "; "),
      " (complexity score ", absl::SixDigits(score), " chose pool ", config.pools[want].name,
      ")"));
}

absl::StatusOr<std::unique_ptr<ComplexityRouter>> ComplexityRouter::Create(
    const RoutingConfig& config, const ModelCatalog& catalog, Embedder* embedder,
    base::MetricsRegistry& metrics) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<ComplexityRouter> r(new ComplexityRouter(config, catalog, embedder));
  int pools_with_exemplars = 0;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    const RoutingPoolConfig& p = config.pools[i];
    const std::string at = absl::StrCat("routing.pools[", i, "]");
    absl::StatusOr<const ServedModel*> model = catalog.Find(p.model);
    if (p.model.empty() || !model.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".model: '", p.model, "' is not a served model (",
          model.ok() ? absl::string_view("empty") : model.status().message(), ")"));
    }
    r->models_.push_back(*model);
    std::vector<std::string> texts = p.exemplars;
    if (!p.exemplars_file.empty()) {
      std::ifstream in(p.exemplars_file);
      if (!in) {
        return absl::NotFoundError(
            absl::StrCat(at, ".exemplars_file: cannot read ", p.exemplars_file));
      }
      std::string line;
      while (std::getline(in, line)) {
        absl::string_view t = absl::StripAsciiWhitespace(line);
        if (!t.empty() && t.front() != '#') {
          texts.emplace_back(t);
        }
      }
    }
    std::vector<std::vector<float>> vectors;
    if (embedder != nullptr && !texts.empty()) {
      absl::StatusOr<std::vector<Embedding>> e = embedder->EmbedAll(texts);
      if (!e.ok()) {
        return base::Annotate(e.status(), absl::StrCat(at, ".exemplars"));
      }
      for (Embedding& x : *e) {
        vectors.push_back(std::move(x.vector));
      }
      ++pools_with_exemplars;
    }
    r->exemplars_.push_back(std::move(vectors));
    const std::string help_decisions =
        "Complexity routing decisions by the pool chosen (none: no pool had a live worker).";
    r->decisions_.push_back(
        metrics.GetCounter("tandem_route_decisions_total", help_decisions, {{"pool", p.name}}));
    r->skipped_.push_back(metrics.GetCounter(
        "tandem_route_pool_skipped_total",
        "Complexity routing: times a pool was skipped for want of a live worker.",
        {{"pool", p.name}}));
    if (i + 1 == config.pools.size()) {
      r->decisions_.push_back(
          metrics.GetCounter("tandem_route_decisions_total", help_decisions, {{"pool", "none"}}));
    }
  }
  r->use_embeddings_ = embedder != nullptr && pools_with_exemplars >= 2;
  if (r->use_embeddings_) {
    LOG(INFO) << "routing: model '" << config.alias << "' routes over " << config.pools.size()
              << " pools on prompt features and exemplar similarity (embedding weight "
              << config.embedding_weight << ")";
  } else {
    LOG(WARNING) << "routing: model '" << config.alias << "' routes on prompt features alone ("
                 << (embedder == nullptr ? "no embedding model: set embedding.model"
                                         : "fewer than two pools have exemplars")
                 << ")";
  }
  return r;
}

absl::StatusOr<ComplexityScore> ComplexityRouter::Score(absl::string_view text) const {
  ComplexityScore s;
  const absl::string_view head = text.substr(0, kFeatureBytes);
  absl::StatusOr<std::vector<engine::TokenId>> ids =
      models_[0]->tokenizer().Encode(head, /*add_bos=*/false, /*parse_special=*/false);
  const int32_t tokens = ids.ok() ? static_cast<int32_t>(ids->size())
                                  : static_cast<int32_t>(head.size() / 4);
  s.features = ExtractPromptFeatures(head, tokens);
  s.features_score = FeatureScore(s.features);
  s.score = s.features_score;
  if (!use_embeddings_) {
    return s;
  }
  ASSIGN_OR_RETURN(Embedding e, embedder_->Embed(head));
  std::vector<double> sims;
  for (const auto& rows : exemplars_) {
    sims.push_back(KnnSimilarity(e.vector, rows, config_.neighbors));
  }
  s.exemplar_score = ExemplarScore(sims, config_.temperature);
  s.score = config_.embedding_weight * s.exemplar_score +
            (1 - config_.embedding_weight) * s.features_score;
  return s;
}

absl::StatusOr<RoutingDecision> ComplexityRouter::Route(absl::string_view text, RoutingMode mode,
                                                        const RegistrySnapshot& snapshot,
                                                        absl::Time now) const {
  ASSIGN_OR_RETURN(ComplexityScore score, Score(text));
  const std::vector<ModelReadiness> ready = CheckReadiness(catalog_, mode, snapshot, now);
  std::vector<PoolHealth> health(config_.pools.size());
  for (size_t i = 0; i < config_.pools.size(); ++i) {
    for (const ModelReadiness& m : ready) {
      if (m.model == models_[i]->name()) {
        health[i] = PoolHealth{m.ready, m.reason};
      }
    }
  }
  absl::StatusOr<PoolChoice> choice = ChoosePool(config_, score.score, health);
  if (!choice.ok()) {
    decisions_.back()->Increment();
    return choice.status();
  }
  RoutingDecision d;
  for (size_t i : choice->skipped) {
    skipped_[i]->Increment();
    d.skipped.push_back(config_.pools[i].name);
    LOG_EVERY_N(WARNING, 100) << "routing: pool " << config_.pools[i].name << " (model "
                              << config_.pools[i].model << ") skipped: " << health[i].reason;
  }
  decisions_[choice->pool]->Increment();
  d.pool = config_.pools[choice->pool].name;
  d.model = models_[choice->pool];
  d.score = score;
  return d;
}

}  // namespace tandem::router
