#!/usr/bin/env python3
"""Token ids of the bge WordPiece vocabulary (ggml-vocab-bert-bge.gguf), from Hugging Face `tokenizers`.

Writes tests/data/tokenizer/wordpiece_vectors.json, which
tests/common/engine/tokenizer/tokenizer_test.cc (TokenizerWordPieceTest)
compares with the C++ WordPiece tokenizer built from the same GGUF.

Usage (from the repository root):
  pip install -r tests/reference/requirements-tokenizer.txt
  python3 tests/reference/gen_wordpiece_vectors.py \
      [--shared ../shared] [--out tests/data/tokenizer/wordpiece_vectors.json]

Python: the first python3 on PATH (here pyenv CPython 3.11.7). No torch.

The reference tokenizer is bge-small-en's tokenizer.json pipeline rebuilt with
`tokenizers`: BertNormalizer(clean_text, handle_chinese_chars, lowercase,
strip_accents following lowercase), BertPreTokenizer, WordPiece("[UNK]",
continuing_subword_prefix "##", max_input_chars_per_word 100), the control
tokens ([PAD] [UNK] [CLS] [SEP] [MASK]) as special added tokens. Its vocabulary
is the GGUF's, read with the `gguf` package and turned back from llama.cpp's
phantom-space form ("▁hello" -> "hello", "llo" -> "##llo", "[CLS]" unchanged).
The script checks that this reference reproduces llama.cpp's .out vectors for
the 46 .inp strings before writing anything.

Cases: gen_tokenizer_vectors.load_cases (its edge cases, llama.cpp's 46 test
strings, ShareGPT prompts referenced by id) plus the WordPiece edge cases below
(accents composed and decomposed, Turkish dotted I, Hangul, CJK compatibility
ideographs, format and control characters, Unicode whitespace, punctuation vs
symbols, words of 100 and 101 characters, U+2581 in the text, special tokens).
Encoding modes as in gen_tokenizer_vectors.py: "special" (parse_special = true,
HF's default) and "plain" (HF's encode_special_tokens = True); no [CLS]/[SEP].
"""

import argparse
import importlib.metadata
import json
import os
import sys

import gguf
import tokenizers
from tokenizers import models, normalizers, pre_tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tokenizer_vectors import SHAREGPT, encode, load_cases  # noqa: E402

VOCAB = "models/ggml-vocab/ggml-vocab-bert-bge.gguf"
PHANTOM = "\u2581"

EDGE_CASES = [
    "Crème Brûlée à la MODE", "Cre\u0300me bru\u0302le\u0301e", "e\u0301\u0301\u0301",
    "\u0301start", "İstanbul ıi IİI", "ǄǅǆDŽ Ǳ", "ΣΊΣΥΦΟΣ ὅτι ἄνθρωπος",
    "안녕하세요 세계! 한국어", "\uf900\uf901\ufa0e 豈", "𠀀𠀁 \U0002b820\U0002b920 〇",
    "a\u0000b\u200bc\u00add\u007fe\ufffdf\u2060g", "a\u3000b\u00a0c\u2028d\u001ce\u0085f\u1680g",
    "¿Qué? ¡Sí! «quote» — dash… $100+50=150 ^_^ `x` ~y|z",
    "don't U.S.A. e-mail 3.14 x^2 a/b\\c @user #tag 50% &amp;",
    "ＡＢＣ１２３ ｈｅｌｌｏ", "ﬁ ligature ẞ ß Ⅻ ⅻ", "नमस्ते दुनिया", "مَرْحَبًا بِالْعَالَمِ",
    "สวัสดีครับ ไทย", "👍🏽 👨‍👩‍👧 🇩🇪", "a" * 100, "a" * 101, "b" + "\u0301" * 120,
    "hello\u2581world \u2581x \u2581", "[CLS] hi [MASK] [SEP][PAD] [UNK]x [cls]", "[unused0] [unused",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789",
    "tab\there\nnewline\r\ncrlf   spaces", "a\u000bb\u000cc\u000bd e", "Ωmega ℃ ℉ µ Å K", "x\u0338 a\u20dd",
]


def read_vocab(path):
    """The GGUF's tokens as HF WordPiece vocab, and its control tokens."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    vocab, control = {}, []
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if text.startswith(PHANTOM):
            hf = text[len(PHANTOM):]
        elif text.startswith("[") and text.endswith("]"):
            hf = text
        else:
            hf = "##" + text
        assert hf not in vocab, (i, text)
        vocab[hf] = i
        if kind == gguf.TokenType.CONTROL:
            control.append(hf)
    return vocab, control


def build_tokenizer(path):
    vocab, control = read_vocab(path)
    tok = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in control])
    return tok


def check_llama_cpp_vectors(tok, shared):
    base = os.path.join(shared, VOCAB)
    with open(base + ".inp", encoding="utf-8") as f:
        parts = f.read().split("\n__ggml_vocab_test__\n")
    parts.pop()
    with open(base + ".out", encoding="utf-8") as f:
        expected = [[int(x) for x in line.split()] for line in f.read().split("\n")[:len(parts)]]
    for i, (text, ids) in enumerate(zip(parts, expected)):
        got = encode(tok, text, parse_special=True)
        if got != ids:
            sys.exit(f"reference differs from llama.cpp's vector {i} {text!r}: {got} vs {ids}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    parser.add_argument("--out", default=os.path.join(root, "tests/data/tokenizer/wordpiece_vectors.json"))
    args = parser.parse_args()

    tok = build_tokenizer(os.path.join(args.shared, VOCAB))
    check_llama_cpp_vectors(tok, args.shared)
    cases = load_cases(args.shared)
    cases += [{"name": f"wpm{i}", "text": t} for i, t in enumerate(EDGE_CASES)]
    out = {
        "generator": "tests/reference/gen_wordpiece_vectors.py",
        "versions": {name: importlib.metadata.version(name) for name in ("tokenizers", "gguf")},
        "vocab": VOCAB,
        "sharegpt": SHAREGPT,
        "cases": [],
    }
    for case in cases:
        entry = {"name": case["name"]}
        if "sharegpt_id" in case:
            entry["sharegpt_id"] = case["sharegpt_id"]
        else:
            entry["text"] = case["text"]
        special = encode(tok, case["text"], parse_special=True)
        plain = encode(tok, case["text"], parse_special=False)
        entry["special"] = " ".join(map(str, special))
        if plain != special:
            entry["plain"] = " ".join(map(str, plain))
        out["cases"].append(entry)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases -> {args.out}")


if __name__ == "__main__":
    main()
