#include "common/engine/tokenizer/internal/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

#include "absl/strings/str_format.h"
#include "common/base/utf8.h"

namespace tandem::engine::internal {
namespace {

constexpr uint32_t kNoCodepoint = 0xFFFFFFFF;

uint8_t LookupFlags(uint32_t cp) {
  const CodepointRange* begin = kCodepointRanges;
  const CodepointRange* end = kCodepointRanges + kNumCodepointRanges;
  const CodepointRange* it = std::upper_bound(
      begin, end, cp, [](uint32_t value, const CodepointRange& r) { return value < r.start; });
  return (it - 1)->flags;  // the first range starts at 0
}

// Flags of the Basic Multilingual Plane, where almost all text lives, in one
// flat table; astral code points use the binary search.
const std::array<uint8_t, 0x10000>& BmpFlags() {
  static const auto* table = [] {
    auto* t = new std::array<uint8_t, 0x10000>();
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      (*t)[cp] = LookupFlags(cp);
    }
    return t;
  }();
  return *table;
}

struct ByteMapping {
  std::string byte_to_utf8[256];
  std::array<int16_t, 512> cp_to_byte;  // every mapped code point is < 512
};

const ByteMapping& GetByteMapping() {
  static const ByteMapping* mapping = [] {
    auto* m = new ByteMapping();
    m->cp_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? b : next++;
      AppendUtf8(cp, &m->byte_to_utf8[b]);
      m->cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return *mapping;
}

// A chunk [begin, end) of the code points being split, and the lengths of the
// pieces emitted so far for it.
class ChunkSplitter {
 public:
  ChunkSplitter(const std::vector<uint32_t>& cpts, size_t begin, size_t end,
                std::vector<size_t>* out)
      : cpts_(cpts), begin_(begin), end_(end), prev_end_(begin), out_(out) {}

  uint32_t Cpt(size_t pos) const { return pos >= begin_ && pos < end_ ? cpts_[pos] : kNoCodepoint; }
  CodepointFlags Flags(size_t pos) const {
    return pos >= begin_ && pos < end_ ? GetCodepointFlags(cpts_[pos]) : CodepointFlags{};
  }
  // Emits the piece [prev_end, end); returns its length (0 emits nothing).
  size_t Emit(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) {
      out_->push_back(len);
    }
    prev_end_ = end;
    return len;
  }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  const std::vector<uint32_t>& cpts_;
  const size_t begin_;
  const size_t end_;
  size_t prev_end_;
  std::vector<size_t>* out_;
};

uint32_t AsciiLower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp; }

// 's|'t|'re|'ve|'m|'ll|'d at `pos` (case-insensitively when `ignore_case`):
// the length matched, or 0.
size_t MatchContraction(const ChunkSplitter& s, size_t pos, bool ignore_case) {
  if (s.Cpt(pos) != '\'' || pos + 1 >= s.end()) {
    return 0;
  }
  auto fold = [&](uint32_t cp) { return ignore_case ? AsciiLower(cp) : cp; };
  const uint32_t next = fold(s.Cpt(pos + 1));
  if (next == 's' || next == 't' || next == 'm' || next == 'd') {
    return 2;
  }
  if (pos + 2 < s.end()) {
    const uint32_t next2 = fold(s.Cpt(pos + 2));
    if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') ||
        (next == 'l' && next2 == 'l')) {
      return 3;
    }
  }
  return 0;
}

bool IsOtherSymbol(CodepointFlags f) {  // [^\s\p{L}\p{N}], and a code point at all
  return f.is_defined() && !(f.is_whitespace() || f.is_letter() || f.is_number());
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void SplitGpt2(ChunkSplitter& s) {
  for (size_t pos = s.begin(); pos < s.end();) {
    const uint32_t cpt = s.Cpt(pos);
    const CodepointFlags flags = s.Flags(pos);

    if (const size_t n = MatchContraction(s, pos, /*ignore_case=*/false); n > 0) {
      pos += s.Emit(pos + n);
      continue;
    }
    // An optional leading space belongs to the letter / number / symbol run after it.
    const bool space = cpt == ' ';
    const CodepointFlags first = space ? s.Flags(pos + 1) : flags;
    if (first.is_letter()) {
      pos += space ? 2 : 1;
      while (s.Flags(pos).is_letter()) {
        ++pos;
      }
      s.Emit(pos);
      continue;
    }
    if (first.is_number()) {
      pos += space ? 2 : 1;
      while (s.Flags(pos).is_number()) {
        ++pos;
      }
      s.Emit(pos);
      continue;
    }
    if (IsOtherSymbol(first)) {
      pos += space ? 2 : 1;
      while (IsOtherSymbol(s.Flags(pos))) {
        ++pos;
      }
      s.Emit(pos);
      continue;
    }
    size_t num_whitespaces = 0;
    while (s.Flags(pos + num_whitespaces).is_whitespace()) {
      ++num_whitespaces;
    }
    // \s+(?!\S): a whitespace run followed by more text leaves its last
    // character to start the next word.
    if (num_whitespaces > 1 && s.Cpt(pos + num_whitespaces) != kNoCodepoint) {
      pos += num_whitespaces - 1;
      s.Emit(pos);
      continue;
    }
    if (num_whitespaces > 0) {  // \s+
      pos += num_whitespaces;
      s.Emit(pos);
      continue;
    }
    s.Emit(++pos);  // unreachable for defined code points; keeps progress
  }
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
void SplitLlama3(ChunkSplitter& s, size_t max_digits) {
  auto is_newline = [](uint32_t cp) { return cp == '\r' || cp == '\n'; };
  for (size_t pos = s.begin(); pos < s.end();) {
    const uint32_t cpt = s.Cpt(pos);
    const CodepointFlags flags = s.Flags(pos);

    if (const size_t n = MatchContraction(s, pos, /*ignore_case=*/true); n > 0) {
      pos += s.Emit(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(is_newline(cpt) || flags.is_number())) {
      if (flags.is_letter() || s.Flags(pos + 1).is_letter()) {
        ++pos;
        while (s.Flags(pos).is_letter()) {
          ++pos;
        }
        s.Emit(pos);
        continue;
      }
    }
    // \p{N}{1,max_digits}
    if (flags.is_number()) {
      size_t run_start = pos;
      while (s.Flags(pos).is_number()) {
        if (++pos - run_start >= max_digits) {
          s.Emit(pos);
          run_start = pos;
        }
      }
      s.Emit(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const bool space = cpt == ' ';
    const CodepointFlags first = space ? s.Flags(pos + 1) : flags;
    if (IsOtherSymbol(first) || (space && !first.is_defined())) {
      // A lone trailing space also lands here in llama.cpp; \s+ would give it
      // the same piece.
      pos += space ? 1 : 0;
      while (IsOtherSymbol(s.Flags(pos))) {
        ++pos;
      }
      while (is_newline(s.Cpt(pos))) {
        ++pos;
      }
      s.Emit(pos);
      continue;
    }
    size_t num_whitespaces = 0;
    size_t last_newline_end = 0;
    while (s.Flags(pos + num_whitespaces).is_whitespace()) {
      if (is_newline(s.Cpt(pos + num_whitespaces))) {
        last_newline_end = pos + num_whitespaces + 1;
      }
      ++num_whitespaces;
    }
    if (last_newline_end > 0) {  // \s*[\r\n]+
      pos = last_newline_end;
      s.Emit(pos);
      continue;
    }
    if (num_whitespaces > 1 && s.Cpt(pos + num_whitespaces) != kNoCodepoint) {  // \s+(?!\S)
      pos += num_whitespaces - 1;
      s.Emit(pos);
      continue;
    }
    if (num_whitespaces > 0) {  // \s+
      pos += num_whitespaces;
      s.Emit(pos);
      continue;
    }
    s.Emit(++pos);
  }
}

// A regex that matches runs (or single code points, when `single`) of the
// code points `in_class` accepts; the text between matches stays whole.
template <typename InClass>
void SplitClassRuns(ChunkSplitter& s, InClass in_class, bool single) {
  size_t pos = s.begin();
  while (pos < s.end()) {
    if (!in_class(s.Cpt(pos))) {
      ++pos;
      continue;
    }
    s.Emit(pos);  // the gap before the match
    ++pos;
    while (!single && pos < s.end() && in_class(s.Cpt(pos))) {
      ++pos;
    }
    s.Emit(pos);
  }
  s.Emit(s.end());
}

void SplitAsciiDigitTriples(ChunkSplitter& s) {
  auto digit = [&](size_t pos) {
    const uint32_t cp = s.Cpt(pos);
    return cp >= '0' && cp <= '9';
  };
  size_t pos = s.begin();
  while (pos < s.end()) {
    if (pos + 3 <= s.end() && digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      s.Emit(pos);
      pos += 3;
      s.Emit(pos);
    } else {
      ++pos;
    }
  }
  s.Emit(s.end());
}

void SplitChunk(SplitRule rule, ChunkSplitter& s) {
  switch (rule) {
    case SplitRule::kGpt2:
      SplitGpt2(s);
      return;
    case SplitRule::kLlama3:
      SplitLlama3(s, 3);
      return;
    case SplitRule::kQwen2:
      SplitLlama3(s, 1);
      return;
    case SplitRule::kPunctuationRuns:
      SplitClassRuns(
          s,
          [](uint32_t cp) {
            return cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' ||
                   cp == '~' || cp == '|' || GetCodepointFlags(cp).is_punctuation();
          },
          /*single=*/false);
      return;
    case SplitRule::kNumberRuns:
      SplitClassRuns(
          s, [](uint32_t cp) { return GetCodepointFlags(cp).is_number(); }, /*single=*/false);
      return;
    case SplitRule::kSingleNumbers:
      SplitClassRuns(
          s, [](uint32_t cp) { return GetCodepointFlags(cp).is_number(); }, /*single=*/true);
      return;
    case SplitRule::kAsciiDigitTriples:
      SplitAsciiDigitTriples(s);
      return;
  }
}

}  // namespace

CodepointFlags GetCodepointFlags(uint32_t cp) {
  if (cp < 0x10000) {
    return CodepointFlags{BmpFlags()[cp]};
  }
  if (cp > 0x10FFFF) {
    return CodepointFlags{CodepointFlags::kControl};
  }
  return CodepointFlags{LookupFlags(cp)};
}

void AppendBertNormalized(uint32_t cp, std::vector<uint32_t>* out) {
  // Hangul syllables: Unicode 3.12 "Hangul Syllable Decomposition".
  constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr uint32_t kTCount = 28, kNCount = 21 * kTCount, kSCount = 19 * kNCount;
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) {
      out->push_back(kTBase + s % kTCount);
    }
    return;
  }
  const CodepointSpan* marks_end = kNonspacingMarks + kNumNonspacingMarks;
  const CodepointSpan* mark =
      std::upper_bound(kNonspacingMarks, marks_end, cp,
                       [](uint32_t c, const CodepointSpan& span) { return c < span.first; });
  if (mark != kNonspacingMarks && cp <= (mark - 1)->last) {
    return;
  }
  const BertMapping* mappings_end = kBertMappings + kNumBertMappings;
  const BertMapping* m =
      std::lower_bound(kBertMappings, mappings_end, cp,
                       [](const BertMapping& mapping, uint32_t c) { return mapping.cp < c; });
  if (m != mappings_end && m->cp == cp) {
    out->insert(out->end(), m->to, m->to + m->length);
    return;
  }
  out->push_back(cp);
}

absl::Status ValidateUtf8(absl::string_view text) {
  size_t pos = 0;
  if (base::IsValidUtf8(text, &pos)) {
    return absl::OkStatus();
  }
  const bool truncated = base::DecodeUtf8(text, pos).status == base::Utf8Status::kIncomplete;
  return absl::InvalidArgumentError(
      absl::StrFormat("invalid UTF-8 at byte offset %d (0x%02X)%s", pos,
                      static_cast<uint8_t>(text[pos]),
                      truncated ? ": truncated sequence at end of text" : ""));
}

std::vector<uint32_t> CodepointsFromUtf8(absl::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const base::Utf8Sequence seq = base::DecodeUtf8(text, pos);
    out.push_back(seq.status == base::Utf8Status::kOk ? seq.codepoint : 0xFFFD);
    pos += seq.length;
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::string& ByteToUnicode(uint8_t byte) { return GetByteMapping().byte_to_utf8[byte]; }

int UnicodeToByte(uint32_t cp) { return cp < 512 ? GetByteMapping().cp_to_byte[cp] : -1; }

std::string ByteEncode(absl::string_view text) {
  const ByteMapping& mapping = GetByteMapping();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) {
    out += mapping.byte_to_utf8[static_cast<uint8_t>(c)];
  }
  return out;
}

std::vector<std::string> SplitWords(absl::string_view text, absl::Span<const SplitRule> rules) {
  const std::vector<uint32_t> cpts = CodepointsFromUtf8(text);
  if (cpts.empty()) {
    return {};
  }
  std::vector<size_t> lengths = {cpts.size()};
  for (SplitRule rule : rules) {
    std::vector<size_t> next;
    next.reserve(lengths.size());
    size_t start = 0;
    for (size_t len : lengths) {
      ChunkSplitter splitter(cpts, start, start + len, &next);
      SplitChunk(rule, splitter);
      start += len;
    }
    lengths = std::move(next);
  }
  std::vector<std::string> words;
  words.reserve(lengths.size());
  size_t start = 0;
  for (size_t len : lengths) {
    std::string word;
    for (size_t i = start; i < start + len; ++i) {
      AppendUtf8(cpts[i], &word);
    }
    words.push_back(std::move(word));
    start += len;
  }
  return words;
}

}  // namespace tandem::engine::internal
