#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer directory for a GGUF model, offline.

    python3 bench/compare/hf_tokenizer_dir.py MODEL.gguf OUT_DIR

GuideLLM (bench/compare/guidellm_check.sh) sizes its synthetic prompts with
AutoTokenizer.from_pretrained(OUT_DIR); no network to huggingface.co exists
here, so the tokenizer comes from the GGUF the servers load. The conversion is
tests/reference/gen_tokenizer_vectors.py's build_tokenizers (transformers' own
GGUF converter via the `gguf` package, no torch, with SmolLM2's digit-splitting
pre-tokenizer as in llama.cpp and SmolLM2's tokenizer.json), the tokenizer the
engine's tokenizer tests are checked against. Python: the python3 first on PATH
(pyenv; needs gguf, tokenizers, transformers: tests/reference/requirements-tokenizer.txt).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "reference"))

from gen_tokenizer_vectors import build_tokenizers  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hf_tokenizer_dir.py MODEL.gguf OUT_DIR")
    gguf_path, out = sys.argv[1], sys.argv[2]
    if not os.path.isfile(gguf_path):
        sys.exit(f"hf_tokenizer_dir: {gguf_path} does not exist")
    reference, _ = build_tokenizers(gguf_path)
    PreTrainedTokenizerFast(tokenizer_object=reference).save_pretrained(out)
    # Check: the saved directory loads and encodes as the reference does.
    text = "Tandem serves 2024 tokens: prefill, then decode."
    loaded = AutoTokenizer.from_pretrained(out)
    got = loaded(text, add_special_tokens=False)["input_ids"]
    want = reference.encode(text, add_special_tokens=False).ids
    if got != want:
        sys.exit(f"hf_tokenizer_dir: {out} encodes {text!r} as {got}, the reference as {want}")
    print(f"hf_tokenizer_dir: {out} ({len(loaded)} tokens) from {gguf_path}")


if __name__ == "__main__":
    main()
