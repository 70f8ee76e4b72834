#!/usr/bin/env python3
"""Counts tandem-replay prompts with Hugging Face `tokenizers` (an independent check of their exact lengths).

Reads JSON Lines with at least {"model": NAME, "prompt": TEXT, "prompt_tokens": N}
(NAME as in real_models.MODELS, e.g. "smollm2-135m-instruct") and checks that the
reference tokenizer of tests/reference/gen_tokenizer_vectors.py (transformers'
GGUF conversion, llama.cpp's smollm pre-tokenizer) gives exactly N tokens for
TEXT without BOS and without special-token parsing, as bench/replay/prompts.h
promises. Prints the count checked per model; exits 1 listing the first
mismatches.

Usage (from the repository root; models from scripts/fetch_models.sh --qwen-small):
  pip install -r tests/reference/requirements-tokenizer.txt
  python3 tests/reference/check_replay_prompt_lengths.py PROMPTS.jsonl

Python: the first python3 on PATH (pyenv CPython 3.11.7); no torch.
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_models  # noqa: E402
from gen_tokenizer_vectors import build_tokenizers, encode  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prompts", help="JSON Lines: model, prompt, prompt_tokens")
    parser.add_argument("--models", default=real_models.cache_dir())
    args = parser.parse_args()

    references = {}
    checked = collections.Counter()
    mismatches = []
    with open(args.prompts, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            model = row["model"]
            if model not in references:
                references[model], _ = build_tokenizers(real_models.verified_path(model, args.models))
            got = len(encode(references[model], row["prompt"], parse_special=False))
            checked[model] += 1
            if got != row["prompt_tokens"]:
                mismatches.append(f"{args.prompts}:{line_number}: {model}: prompt_tokens "
                                  f"{row['prompt_tokens']}, Hugging Face counts {got}")
    for model, n in sorted(checked.items()):
        print(f"{model}: {n} prompts checked")
    if mismatches:
        print(f"{len(mismatches)} mismatches:", *mismatches[:20], sep="\n")
        sys.exit(1)
    print("all prompt_tokens equal the Hugging Face counts")


if __name__ == "__main__":
    main()
