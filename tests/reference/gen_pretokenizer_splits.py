#!/usr/bin/env python3
"""Expected BPE pre-tokenizer splits, computed with the PyPI `regex` module.

Writes tests/data/tokenizer/pretokenizer_splits.json, which
tests/common/engine/tokenizer/tokenizer_test.cc compares with the C++ matchers in
common/engine/tokenizer/internal/unicode.cc (they implement these regexes by hand).

Usage (from the repository root; needs `pip install regex`):
  python3 tests/reference/gen_pretokenizer_splits.py \
      [--inp ../shared/models/ggml-vocab/ggml-vocab-gpt-2.gguf.inp] \
      [--out tests/data/tokenizer/pretokenizer_splits.json]

Inputs: the 46 strings of llama.cpp's tokenizer test vectors (.inp) plus the
extra strings below. The regex strings are the upstream ones (GPT-2's
encoder.py, Llama 3's and Qwen2's tokenizer.json); "default" and "starcoder"
are llama.cpp's regex lists for those tokenizer.ggml.pre names, applied one
after another to the pieces of the previous one (unicode_regex_split).

The C++ tables come from Python's unicodedata (Unicode 14.0 in 3.11) while the
`regex` module carries its own, newer Unicode data. Every character of every
case is checked to get the same \\p{L} / \\p{N} / \\p{P} / \\s answer from both,
so the expectations never depend on that gap.
"""

import argparse
import json
import os
import sys
import unicodedata

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
         r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# tokenizer.ggml.pre name -> regexes applied in order.
PRE_TOKENIZERS = {
    "gpt-2": [GPT2],
    "llama-bpe": [LLAMA3],
    "qwen2": [QWEN2],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", GPT2],
}

EXTRA_CASES = [
    # contractions, upper and mixed case
    "DON'T I'M YOU'RE WE'VE THEY'LL HE'D SHE'S",
    "don't i'm you're we've they'll he'd she's",
    "Don'T I'm You'Re 'S 'Ll 'lL x's 'quoted' ''s it' '",
    # digit runs of 1..7 and mixed
    "1", "12", "123", "1234", "12345", "123456", "1234567",
    "a1b22c333d4444e55555 7 77 777 7777",
    "3.14159 1,000,000 -42 +7 1e10 0x1F",
    "\u0663\u0664\u0665\u0666 \u00bd \u2153 \u216b \u00b2",
    # CJK, Korean, Japanese
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u6f22\u5b57\u3068\u30ab\u30bf\u30ab\u30ca\u3002",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    # emoji: skin tone modifier, ZWJ family, flag, variation selector
    "\U0001f44b\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
    "\U0001f1fa\U0001f1f8 \u2764\ufe0f ok\U0001f44d",
    # combining marks
    "e\u0301 cafe\u0301 n\u0303o\u0308 \u0928\u092e\u0938\u094d\u0924\u0947 "
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",
    # \r\n, tabs, trailing and leading spaces, unicode spaces
    "line1\r\nline2\r\n\r\n  end",
    "a\n\n\nb \n x\r\r\ny",
    " \r\n x",
    "\tindented\t\tcode\t",
    "a \t b\t\t c",
    "trailing   ",
    "  leading and trailing  ",
    "   ",
    "a\u00a0b\u2003c\u3000d \u00a0 e\u2028f",
    "\x0b\x0c vt ff \x0b",
    # punctuation and symbols
    "Hello,   world!!! ... ?! (x) [y] {z}",
    "$100 + 5% = <tag> ^~| a|b a<=b",
    "\u00abHallo\u00bb\u2014sagte er\u2026 \u201cquote\u201d \u2018x\u2019",
    "@user #tag https://example.com/a?b=c&d=e",
    "\x01\x1f\x7f ctrl",
    "__init__ self.x_y = x-y",
]

INP_SEPARATOR = "\n__ggml_vocab_test__\n"


def read_inp(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    parts = text.split(INP_SEPARATOR)
    assert parts[-1] == "", "the .inp must end with the separator"
    return parts[:-1]


def split(text, regexes):
    """llama.cpp's unicode_regex_split: each regex splits every current piece;
    the text between matches stays as its own piece."""
    pieces = [text] if text else []
    for expr in regexes:
        compiled = regex.compile(expr)
        out = []
        for piece in pieces:
            start = 0
            for m in compiled.finditer(piece):
                if m.start() > start:
                    out.append(piece[start:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                start = m.end()
            if start < len(piece):
                out.append(piece[start:])
        pieces = out
    assert "".join(pieces) == text
    return pieces


CHECKS = [
    (r"\p{L}", lambda c: unicodedata.category(c).startswith("L")),
    (r"\p{N}", lambda c: unicodedata.category(c).startswith("N")),
    (r"\p{P}", lambda c: unicodedata.category(c).startswith("P")),
    (r"\s", None),  # White_Space: compared with the C++ generator's set
]
WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680] +
                  list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def check_unicode_agreement(text):
    for c in set(text):
        for expr, ours in CHECKS:
            theirs = bool(regex.match(expr, c))
            mine = ord(c) in WHITE_SPACE if ours is None else ours(c)
            if theirs != mine:
                sys.exit("U+%04X: regex says %s=%s but unicodedata %s disagrees; pick another "
                         "character" % (ord(c), expr, theirs, unicodedata.unidata_version))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser()
    parser.add_argument("--inp", default=os.path.join(
        root, "..", "shared", "models", "ggml-vocab", "ggml-vocab-gpt-2.gguf.inp"))
    parser.add_argument("--out", default=os.path.join(
        root, "tests", "data", "tokenizer", "pretokenizer_splits.json"))
    args = parser.parse_args()

    inp = read_inp(args.inp)
    assert len(inp) == 46, len(inp)
    cases = [("inp[%d]" % i, t) for i, t in enumerate(inp)]
    cases += [("extra[%d]" % i, t) for i, t in enumerate(EXTRA_CASES)]

    out_cases = []
    for name, text in cases:
        check_unicode_agreement(text)
        out_cases.append({
            "name": name,
            "text": text,
            "splits": {pre: split(text, exprs) for pre, exprs in PRE_TOKENIZERS.items()},
        })
    doc = {
        "generator": "tests/reference/gen_pretokenizer_splits.py",
        "regex_module_version": regex.__version__,
        "python_unicodedata_version": unicodedata.unidata_version,
        "pre_tokenizers": PRE_TOKENIZERS,
        "cases": out_cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="ascii") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(out_cases), args.out))


if __name__ == "__main__":
    main()
