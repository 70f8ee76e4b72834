#include "bench/replay/prompts.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/utf8.h"
#include "nlohmann/json.hpp"

namespace tandem::replay {
namespace {

using engine::TokenId;

// Separates corpus texts.
constexpr absl::string_view kCorpusSeparator = "\n\n";
// Ends every block; see the header on why.
constexpr absl::string_view kBlockSeparator = "\n";
// Stand-ins for the end of the previous block and the start of the next text
// when a block or a tail is measured on its own.
constexpr absl::string_view kBlockBefore = "Word\n";
constexpr absl::string_view kBlockAfter = "Word";
constexpr int64_t kMinCorpusTokens = 64;
constexpr int kStartAttempts = 12;
constexpr int kSolveIterations = 12;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool IsAsciiSpaceByte(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

// `s` without ill-formed UTF-8 (a cut may split a code point at either end).
std::string DropIllFormedUtf8(absl::string_view s) {
  if (base::IsValidUtf8(s)) {
    return std::string(s);
  }
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const base::Utf8Sequence seq = base::DecodeUtf8(s, pos);
    if (seq.status == base::Utf8Status::kOk) {
      out.append(s.data() + pos, seq.length);
    }
    pos += seq.length;
  }
  return out;
}

// The synonym table of Paraphrase: common words of English prompts.
struct Synonym {
  absl::string_view word;
  absl::string_view replacement;
};
constexpr Synonym kSynonyms[] = {
    {"write", "compose"},     {"create", "produce"},     {"explain", "describe"},
    {"give", "provide"},      {"help", "assist"},        {"use", "employ"},
    {"make", "build"},        {"want", "wish"},          {"need", "require"},
    {"show", "demonstrate"},  {"list", "enumerate"},     {"find", "locate"},
    {"good", "fine"},         {"big", "large"},          {"small", "little"},
    {"simple", "basic"},      {"example", "sample"},     {"question", "query"},
    {"answer", "reply"},      {"about", "regarding"},    {"article", "piece"},
    {"story", "tale"},        {"please", "kindly"},      {"tell", "inform"},
    {"start", "begin"},       {"idea", "notion"},        {"problem", "issue"},
    {"important", "crucial"}, {"different", "distinct"}, {"also", "additionally"},
    {"very", "really"},       {"get", "obtain"},         {"change", "modify"},
    {"improve", "enhance"},   {"following", "below"},    {"quick", "fast"},
    {"code", "program"},      {"summarize", "sum up"},   {"should", "ought to"},
};
// Lead-in sentences of Paraphrase (chosen by `variant`).
constexpr absl::string_view kLeadIns[] = {
    "I have a question. ", "Here is what I need. ",    "Please help me with this. ",
    "A request for you. ", "Could you look at this? ", "Something I am working on. ",
};
constexpr int kParaphraseWords = 64;

// Case-preserving replacement of `word` (ASCII letters) from kSynonyms, or "".
std::string SynonymFor(absl::string_view word) {
  const std::string lower = absl::AsciiStrToLower(word);
  for (const Synonym& s : kSynonyms) {
    if (lower == s.word) {
      std::string out(s.replacement);
      if (absl::ascii_isupper(static_cast<unsigned char>(word[0]))) {
        out[0] = absl::ascii_toupper(static_cast<unsigned char>(out[0]));
      }
      return out;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> LoadShareGptPrompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open prompt file '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  if (!doc.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON array of ShareGPT conversations"));
  }
  std::vector<std::string> prompts;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& item = doc[i];
    const auto conversations = item.is_object() ? item.find("conversations") : item.end();
    if (!item.is_object() || conversations == item.end() || !conversations->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": element ", i, " has no \"conversations\" array"));
    }
    for (const nlohmann::json& turn : *conversations) {
      const auto from = turn.is_object() ? turn.find("from") : turn.end();
      const auto value = turn.is_object() ? turn.find("value") : turn.end();
      if (from == turn.end() || value == turn.end() || !from->is_string() || !value->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": element ", i, " has a turn without string \"from\" and \"value\""));
      }
      if (from->get<std::string>() == "human") {
        prompts.push_back(value->get<std::string>());
      }
    }
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no human prompts"));
  }
  return prompts;
}

std::vector<std::string> BuiltInPromptTexts() {
  return {
      "The river town woke slowly on market days. Before the sun cleared the hills, farmers "
      "carried baskets of apples, onions and bread across the old stone bridge, and the baker "
      "opened his shutters to let the smell of warm loaves drift over the square. Children ran "
      "between the stalls, counting coins they had saved for honey cakes, while their parents "
      "argued cheerfully about the price of wool.",
      "Write a short guide for someone who wants to start running. Explain how to choose shoes, "
      "how often to train in the first month, and why rest days matter as much as the runs "
      "themselves. Give three simple rules a beginner can remember, and describe the most common "
      "mistakes that lead to injuries.",
      "A lighthouse keeper kept a journal for forty years. In it he wrote down the weather every "
      "morning, the ships that passed, and the birds that rested on the gallery during storms. "
      "When the light was automated, the journal went to the town library, where students now "
      "read it to learn how the coast and its visitors changed over a lifetime.",
      "Explain the difference between a list and a dictionary in Python, with an example of "
      "when each one is the better choice. Then write a function that counts how many times each "
      "word appears in a sentence, and show what it returns for a sentence of your choice.",
      "Plan a three day trip to the mountains for a family with two young children. The plan "
      "should include easy walks, a place to swim, a rainy day activity and meals that can be "
      "cooked on a small camping stove. Keep the driving under two hours each day.",
      "Summarize the main causes of the tides for a class of twelve year olds. Use the moon, the "
      "sun and the rotation of the earth, avoid formulas, and end with a question the students "
      "could answer by watching the sea for a week.",
      "The committee met in the small room above the post office. On the agenda were the new "
      "bus timetable, the repairs to the school roof and a proposal to plant a row of cherry "
      "trees along the main road. Each item took longer than planned, and by nine in the evening "
      "only the trees had been decided.",
      "Compare two ways of storing vegetables through the winter: a cool cellar and a freezer. "
      "Discuss cost, taste, how long each vegetable keeps, and how much work each method takes "
      "in the autumn. Finish with a recommendation for a small household.",
  };
}

absl::StatusOr<std::unique_ptr<PromptSynthesizer>> PromptSynthesizer::Create(
    const engine::Tokenizer& tokenizer, const std::vector<std::string>& texts) {
  std::vector<TokenId> stream;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i];
    if (absl::StripAsciiWhitespace(text).empty() || absl::StrContains(text, "<|") ||
        absl::StrContains(text, "<s>") || absl::StrContains(text, "</s>")) {
      continue;
    }
    auto ids = tokenizer.Encode(absl::StrCat(text, kCorpusSeparator), /*add_bos=*/false,
                                /*parse_special=*/false);
    if (!ids.ok()) {
      return base::Annotate(ids.status(), absl::StrCat("prompt text ", i));
    }
    stream.insert(stream.end(), ids->begin(), ids->end());
  }
  if (static_cast<int64_t>(stream.size()) < kMinCorpusTokens) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt texts give ", stream.size(),
                                                   " tokens; at least ", kMinCorpusTokens,
                                                   " are needed"));
  }
  return std::unique_ptr<PromptSynthesizer>(new PromptSynthesizer(tokenizer, std::move(stream)));
}

absl::StatusOr<int64_t> PromptSynthesizer::CountTokens(absl::string_view text) const {
  ASSIGN_OR_RETURN(const std::vector<TokenId> ids,
                   tokenizer_.Encode(text, /*add_bos=*/false, /*parse_special=*/false));
  return static_cast<int64_t>(ids.size());
}

int64_t PromptSynthesizer::StartFor(uint64_t serial) const {
  const int64_t n = corpus_tokens();
  // A stride near n / golden ratio, coprime with n: serial -> start is a
  // bijection on [0, n), and consecutive serials land far apart.
  int64_t stride = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * 0.618034));
  while (std::gcd(stride, n) != 1) {
    ++stride;
  }
  const auto s = static_cast<int64_t>(serial % static_cast<uint64_t>(n));
  return static_cast<int64_t>((static_cast<__int128>(s) * stride) % n);
}

std::string PromptSynthesizer::Cut(int64_t start, int64_t count, const Shape& shape) const {
  const int64_t n = corpus_tokens();
  std::vector<TokenId> ids;
  ids.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(stream_[(start + i) % n]);
  }
  std::string text = DropIllFormedUtf8(tokenizer_.Decode(ids));
  size_t begin = 0;
  while (begin < text.size() && IsAsciiSpaceByte(text[begin])) {
    ++begin;
  }
  size_t end = text.size();
  if (shape.trim_end) {
    while (end > begin && IsAsciiSpaceByte(text[end - 1])) {
      --end;
    }
  }
  if (end == begin) {
    return "";
  }
  return absl::StrCat(absl::string_view(text).substr(begin, end - begin), shape.suffix);
}

absl::StatusOr<int64_t> PromptSynthesizer::TokensInRange(absl::string_view text, size_t begin,
                                                         size_t end) const {
  ASSIGN_OR_RETURN(const std::vector<TokenId> ids,
                   tokenizer_.Encode(text, /*add_bos=*/false, /*parse_special=*/false));
  size_t pieces_bytes = 0;
  std::vector<size_t> ends;  // end offset of each token in the pieces
  ends.reserve(ids.size());
  for (TokenId id : ids) {
    pieces_bytes += tokenizer_.TokenToPiece(id).size();
    ends.push_back(pieces_bytes);
  }
  // SPM tokenizers add a prefix space the text does not have.
  if (pieces_bytes < text.size() || pieces_bytes > text.size() + 1) {
    return absl::InternalError(
        absl::StrCat("tokens of a ", text.size(), "-byte text decode to ", pieces_bytes, " bytes"));
  }
  const size_t shift = pieces_bytes - text.size();
  int64_t count = 0;
  bool begin_found = begin == 0;
  bool end_found = end == 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    const size_t token_end = ends[i] - std::min(ends[i], shift);
    const size_t token_begin = i == 0 ? 0 : ends[i - 1] - std::min(ends[i - 1], shift);
    // A token of only the SPM prefix space (clamped to [0, 0)) belongs to
    // the text's start.
    const bool prefix_space_token = ends[i] <= shift;
    if (prefix_space_token ? begin == 0 && end > 0 : token_begin >= begin && token_end <= end) {
      ++count;
    }
    begin_found = begin_found || token_end == begin;
    end_found = end_found || token_end == end;
  }
  return begin_found && end_found ? count : -1;
}

absl::StatusOr<std::string> PromptSynthesizer::Solve(absl::string_view before,
                                                     absl::string_view after, int64_t tokens,
                                                     int64_t start, const Shape& shape) const {
  if (tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot make text of ", tokens, " tokens"));
  }
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    // Another start when this one gives no exact cut (a merge that the cut
    // splits can make the count jump by two).
    const int64_t from = (start + attempt * 7) % corpus_tokens();
    absl::flat_hash_set<int64_t> tried;
    int64_t take = tokens;
    for (int iteration = 0; iteration < kSolveIterations; ++iteration) {
      tried.insert(take);
      const std::string text = Cut(from, take, shape);
      int64_t got = 0;
      if (!text.empty()) {
        const absl::StatusOr<int64_t> in_range = TokensInRange(
            absl::StrCat(before, text, after), before.size(), before.size() + text.size());
        // A token crossing the edges (text that merges with its neighbours),
        // or text the vocabulary cannot give back byte for byte: another start.
        if (!in_range.ok() || *in_range < 0) {
          break;
        }
        got = *in_range;
      }
      if (got == tokens) {
        return text;
      }
      int64_t next = std::max<int64_t>(1, take + (tokens - got));
      if (tried.contains(next)) {
        next = std::max<int64_t>(1, take + (got < tokens ? 1 : -1));
      }
      if (tried.contains(next)) {
        break;
      }
      take = next;
    }
  }
  return absl::InternalError(
      absl::StrCat("could not cut text of exactly ", tokens, " tokens from the prompt corpus"));
}

absl::StatusOr<std::string> PromptSynthesizer::Block(uint64_t hash_id, int64_t block_tokens,
                                                     bool first) {
  if (const auto it = blocks_.find({hash_id, block_tokens}); it != blocks_.end()) {
    return it->second;
  }
  const int64_t n = corpus_tokens();
  const auto first_start = static_cast<int64_t>(SplitMix64(hash_id) % static_cast<uint64_t>(n));
  // Probe far from a start that fails or is taken; the stride is prime.
  constexpr int64_t kProbeStride = 7919;
  constexpr int kProbes = 64;
  for (int probe = 0; probe < kProbes; ++probe) {
    const int64_t start = (first_start + probe * kProbeStride) % n;
    if (!block_starts_.insert(start).second) {
      continue;
    }
    auto text = Solve(first ? "" : kBlockBefore, kBlockAfter, block_tokens, start,
                      Shape{.trim_end = true, .suffix = kBlockSeparator});
    if (text.ok() && block_texts_.insert(*text).second) {
      blocks_.emplace(std::make_pair(hash_id, block_tokens), *text);
      return *std::move(text);
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "hash id ", hash_id, ": no block of ", block_tokens, " tokens found in ", kProbes,
      " corpus positions (", blocks_.size(), " blocks made); use a larger prompt corpus"));
}

absl::StatusOr<Prompt> PromptSynthesizer::Compose(absl::Span<const uint64_t> hash_ids,
                                                  int64_t block_tokens, int64_t tokens,
                                                  int64_t serial) {
  if (tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a prompt of ", tokens, " tokens"));
  }
  if (block_tokens < kMinBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("hash_block_tokens ", block_tokens,
                                                   " is below the minimum ", kMinBlockTokens));
  }
  const int64_t whole =
      std::min<int64_t>(static_cast<int64_t>(hash_ids.size()), tokens / block_tokens);
  std::string prefix;
  std::vector<size_t> prefix_ends = {0};
  for (int64_t i = 0; i < whole; ++i) {
    ASSIGN_OR_RETURN(const std::string block, Block(hash_ids[i], block_tokens, i == 0));
    prefix += block;
    prefix_ends.push_back(prefix.size());
  }
  // Normally the first try fits; fewer blocks only when the text after the
  // last one cannot be made to fit exactly.
  for (int64_t blocks = whole; blocks >= 0; --blocks) {
    auto prompt = ComposeWith(absl::string_view(prefix).substr(0, prefix_ends[blocks]),
                              tokens - blocks * block_tokens, tokens, serial);
    if (prompt.ok()) {
      blocks_dropped_ += whole - blocks;
      return prompt;
    }
  }
  return absl::InternalError(
      absl::StrCat("could not compose a prompt of exactly ", tokens, " tokens"));
}

absl::StatusOr<Prompt> PromptSynthesizer::ComposeWith(absl::string_view head, int64_t rest,
                                                      int64_t tokens, int64_t serial) {
  // Another start when the prompt equals an earlier one (a start on a space
  // gives the same text as the next start).
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    const int64_t start = (StartFor(serial) + attempt * 13) % corpus_tokens();
    Prompt prompt;
    if (rest == 0) {
      prompt.text = std::string(head);
    } else {
      // Measured after a stand-in block end first (cheap), then in place.
      auto tail = Solve(head.empty() ? "" : kBlockBefore, "", rest, start, Shape{});
      if (!tail.ok()) {
        continue;
      }
      prompt.text = absl::StrCat(head, *tail);
      ASSIGN_OR_RETURN(prompt.tokens, CountTokens(prompt.text));
      if (prompt.tokens != tokens) {
        tail = Solve(head, "", rest, start, Shape{});
        if (!tail.ok()) {
          continue;
        }
        prompt.text = absl::StrCat(head, *tail);
      }
    }
    ASSIGN_OR_RETURN(prompt.tokens, CountTokens(prompt.text));
    if (prompt.tokens != tokens) {
      continue;
    }
    // Only blocks: the same ids give the same prompt, as in the trace.
    if (prompt_hashes_.insert(absl::HashOf(prompt.text)).second || rest == 0) {
      return prompt;
    }
  }
  return absl::InternalError(
      absl::StrCat("could not compose a new prompt of exactly ", tokens, " tokens"));
}

absl::StatusOr<Prompt> PromptSynthesizer::Paraphrase(absl::string_view text, uint64_t variant,
                                                     int64_t max_tokens) {
  std::string out(kLeadIns[variant % std::size(kLeadIns)]);
  int words = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!absl::ascii_isalpha(static_cast<unsigned char>(text[pos]))) {
      out += text[pos++];
      continue;
    }
    size_t end = pos;
    while (end < text.size() && absl::ascii_isalpha(static_cast<unsigned char>(text[end]))) {
      ++end;
    }
    const absl::string_view word = text.substr(pos, end - pos);
    const std::string synonym = words++ < kParaphraseWords ? SynonymFor(word) : "";
    absl::StrAppend(&out, synonym.empty() ? word : synonym);
    pos = end;
  }
  Prompt prompt;
  ASSIGN_OR_RETURN(prompt.tokens, CountTokens(out));
  if (max_tokens > 0 && prompt.tokens > max_tokens) {
    // Cut at a token boundary, re-measured (the cut may re-tokenize longer).
    ASSIGN_OR_RETURN(const std::vector<TokenId> ids,
                     tokenizer_.Encode(out, /*add_bos=*/false, /*parse_special=*/false));
    for (int64_t keep = max_tokens; keep > 0 && prompt.tokens > max_tokens; --keep) {
      out = DropIllFormedUtf8(tokenizer_.Decode(absl::MakeConstSpan(ids).subspan(0, keep)));
      ASSIGN_OR_RETURN(prompt.tokens, CountTokens(out));
    }
  }
  prompt.text = std::move(out);
  return prompt;
}

}  // namespace tandem::replay
