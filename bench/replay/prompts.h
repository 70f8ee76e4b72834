#pragma once
// Prompt synthesis for tandem-replay: text of an exact token count for the
// target tokenizer (no BOS, parse_special off), cut from a corpus of real
// prompts (ShareGPT) joined into one circular stream; Mooncake hash-id
// blocks; repeats and paraphrases (docs/replay.md, "Workload").
//
// Exactness: a cut of k corpus tokens, decoded and re-encoded, need not give
// k tokens (merges differ at the cut; partial UTF-8 is dropped). The solver
// measures the re-encoded text and moves k (then the start) until the count
// is exactly the target.
//
// Blocks: the block of a hash id is content + "\n", where the content starts
// and ends with no whitespace. For the byte-level BPE pre-tokenizers (gpt2,
// llama3, qwen2, smollm) a newline after non-space and before non-space is a
// piece boundary after it (it may join the punctuation before it, inside the
// block), and it is one piece whether text or the end follows; SentencePiece
// vocabularies rarely merge across a newline. So no token spans two blocks,
// and prompts sharing their first k hash ids share a byte-identical text
// prefix and their first k * block_tokens tokens. Each block is measured in
// place (TokensInRange between stand-in neighbours, rejected when a token
// crosses its edges), so it is exactly block_tokens tokens; the whole prompt
// is counted again at the end. (Two newlines would not do: at the end of a
// text the gpt2 pattern makes "\n\n" one token, before text two; nor would
// trailing spaces, which join the newline at the end of a text only.)
//
// Not thread-safe (a cache of blocks); one per workload build.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::replay {

// The prompts of a ShareGPT JSON file (an array of {"conversations":
// [{"from": "human", "value": TEXT}, ...]}; every human turn is taken).
// InvalidArgument naming the file and the element when malformed.
absl::StatusOr<std::vector<std::string>> LoadShareGptPrompts(const std::string& path);

// A few paragraphs of plain English written for this project, for runs
// without a prompt file.
std::vector<std::string> BuiltInPromptTexts();

// The smallest hash_block_tokens: room for some text and the "\n" separator.
inline constexpr int64_t kMinBlockTokens = 4;

// A prompt and its exact token count.
struct Prompt {
  std::string text;
  int64_t tokens = 0;
};

class PromptSynthesizer {
 public:
  // Tokenizes the corpus (each text followed by "\n\n"). Texts that are empty
  // or look like special-token markup ("<|", "<s>", "</s>") are skipped.
  // InvalidArgument when fewer than 64 tokens remain.
  static absl::StatusOr<std::unique_ptr<PromptSynthesizer>> Create(
      const engine::Tokenizer& tokenizer, const std::vector<std::string>& texts);

  // Token count of `text` as the target model sees it (no BOS, no special-token parsing).
  absl::StatusOr<int64_t> CountTokens(absl::string_view text) const;

  // A prompt of exactly `tokens` tokens (>= 1): the blocks of the first
  // hash ids that fit whole (tokens / block_tokens of them at most), then text
  // unique to `serial` (distinct serials start at distinct corpus positions),
  // never equal to an earlier prompt unless it is only blocks.
  // InvalidArgument when block_tokens < kMinBlockTokens.
  absl::StatusOr<Prompt> Compose(absl::Span<const uint64_t> hash_ids, int64_t block_tokens,
                                 int64_t tokens, int64_t serial);

  // `text` reworded deterministically (see Paraphrase in prompts.cc and
  // docs/replay.md): a lead-in sentence chosen by `variant`, and common words
  // of the first 64 replaced by synonyms. Then cut to at most `max_tokens`
  // (0: no cap).
  absl::StatusOr<Prompt> Paraphrase(absl::string_view text, uint64_t variant, int64_t max_tokens);

  // The text of a hash id's block (created on first use, exactly block_tokens
  // tokens measured at the position of that first use).
  absl::StatusOr<std::string> Block(uint64_t hash_id, int64_t block_tokens, bool first);

  // The number of tokens of `text` (encoded whole) whose bytes lie in
  // [begin, end), or -1 when a token crosses begin or end (text there merges
  // with its neighbours). A SentencePiece prefix-space token of its own
  // belongs to the start of the text.
  absl::StatusOr<int64_t> TokensInRange(absl::string_view text, size_t begin, size_t end) const;

  int64_t corpus_tokens() const { return static_cast<int64_t>(stream_.size()); }
  // Whole blocks Compose left out (their text replaced by unique text)
  // because no exact prompt could be made with them; 0 in the tests.
  int64_t blocks_dropped() const { return blocks_dropped_; }

 private:
  // How a cut is trimmed: leading ASCII whitespace always goes (so the text
  // never merges with a preceding newline); with `trim_end` trailing
  // whitespace too, then `suffix` is appended.
  struct Shape {
    bool trim_end = false;
    absl::string_view suffix;
  };

  PromptSynthesizer(const engine::Tokenizer& tokenizer, std::vector<engine::TokenId> stream)
      : tokenizer_(tokenizer), stream_(std::move(stream)) {}

  // Decodes stream_[start, start + count) (circular), drops ill-formed UTF-8
  // and trims as `shape` says.
  std::string Cut(int64_t start, int64_t count, const Shape& shape) const;
  // Text from corpus position `start` shaped by `shape` such that
  // before + text + after has exactly `tokens` tokens in [before.size(),
  // before.size() + text.size()).
  absl::StatusOr<std::string> Solve(absl::string_view before, absl::string_view after,
                                    int64_t tokens, int64_t start, const Shape& shape) const;
  // The prompt `head` (whole blocks) + a unique tail of `rest` tokens, `tokens`
  // in all, not equal to any prompt composed before.
  absl::StatusOr<Prompt> ComposeWith(absl::string_view head, int64_t rest, int64_t tokens,
                                     int64_t serial);
  // Distinct corpus start positions for distinct serials (a stride coprime
  // with the stream length).
  int64_t StartFor(uint64_t serial) const;

  const engine::Tokenizer& tokenizer_;
  std::vector<engine::TokenId> stream_;
  absl::flat_hash_map<std::pair<uint64_t, int64_t>, std::string> blocks_;  // (id, tokens)
  absl::flat_hash_set<std::string> block_texts_;  // different ids, different text
  absl::flat_hash_set<int64_t> block_starts_;
  absl::flat_hash_set<size_t> prompt_hashes_;  // every prompt Compose returned
  int64_t blocks_dropped_ = 0;
};

}  // namespace tandem::replay
