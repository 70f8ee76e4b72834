#!/usr/bin/env python3
"""Reference sentence embeddings of all-MiniLM-L6-v2 for tests/common/engine/encoder_test.cc.

    python3 tests/reference/gen_minilm_embeddings.py [--out tests/data/minilm]

Python: the python3 first on PATH (pyenv) with numpy, safetensors and tokenizers (no torch: PyPI's torch pulls GBs of CUDA packages and the
CPU-only index is not reachable here). The model folder is the one scripts/fetch_models.sh
--minilm unpacks into the model cache (model.safetensors checked against its pinned SHA-256).

The pipeline is sentence-transformers' for this model (modules.json: Transformer ->
Pooling(mean) -> Normalize), re-implemented in numpy float64 over the safetensors weights
(not our GGUF, so the converter is checked too):
  * ids: HF tokenizers' BertWordPieceTokenizer from vocab.txt (BertNormalizer: lowercase,
    strip accents, Chinese characters split; BertPreTokenizer; WordPiece; [CLS] ... [SEP]),
    truncated to max_seq_length 256 (sentence_bert_config.json); cross-checked against the
    wheel's own tokenizer.json (what sentence-transformers' AutoTokenizer loads). (transformers
    5's BertTokenizerFast(vocab_file=...) ignores the file and is not used);
  * BertModel: word + position + token-type-0 embeddings, LayerNorm (eps from config.json),
    6 post-LN layers of 12-head bidirectional self-attention and an erf-GELU FFN;
  * mean over the tokens (the attention mask is all ones for one unpadded sentence), then
    x / max(|x|, 1e-12).

Writes DIR/cases.json (the sentences and their ids) and DIR/embeddings.npy (float32
[20, 384], row i for sentence i). Deterministic.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models import cache_dir, sha256  # noqa: E402

SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAREGPT = os.path.join(REPO, "..", "shared", "traces", "sharegpt-prompts-ml-energy",
                        "ShareGPT_V3_filtered_1000.json")
# ShareGPT conversations whose first human turn is used (index into the file): short,
# medium, code, and one past 256 tokens (truncated like sentence-transformers does).
SHAREGPT_PICKS = 8

HAND_WRITTEN = [
    "Hi",
    "What is 2 + 2?",
    "What is 2 + 3?",
    "How do I reverse a list in Python?",
    "How do I not reverse a list in Python?",
    "The meeting is on 12/03/2024 at 10:45 a.m., room #221B.",
    "Wait... what?! No way -- really??? (yes; really.)",
    "Café naïve résumé: Ünïcödé àccents get stripped.",
    "机器学习是人工智能的一个分支。",
    "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)",
    "Pi is approximately 3.14159265358979, e is 2.71828.",
    "Translate to French: the quick brown fox jumps over the lazy dog.",
]


def sharegpt_prompts():
    with open(SHAREGPT) as f:
        convs = json.load(f)
    prompts = []
    for conv in convs:
        turns = conv.get("conversations", [])
        if turns and turns[0].get("from") == "human" and turns[0]["value"].strip():
            prompts.append(turns[0]["value"])
    # A deterministic spread: sorted by length, every len/PICKS-th, so short to very long.
    prompts.sort(key=lambda p: (len(p), p))
    step = len(prompts) // SHAREGPT_PICKS
    return [prompts[i * step + step // 2] for i in range(SHAREGPT_PICKS)]


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def embed(ids, t, config):
    def p(name):
        return t[name].astype(np.float64)

    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    n = len(ids)
    x = (p("embeddings.word_embeddings.weight")[ids] +
         p("embeddings.position_embeddings.weight")[:n] +
         p("embeddings.token_type_embeddings.weight")[0])
    x = layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)
    d = x.shape[1]
    hd = d // heads
    for i in range(config["num_hidden_layers"]):
        pre = f"encoder.layer.{i}."

        def lin(name, v):
            return v @ p(pre + name + ".weight").T + p(pre + name + ".bias")

        q = lin("attention.self.query", x).reshape(n, heads, hd).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, hd).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, d)
        x = layer_norm(x + lin("attention.output.dense", a),
                       p(pre + "attention.output.LayerNorm.weight"),
                       p(pre + "attention.output.LayerNorm.bias"), eps)
        h = gelu(lin("intermediate.dense", x))
        x = layer_norm(x + lin("output.dense", h), p(pre + "output.LayerNorm.weight"),
                       p(pre + "output.LayerNorm.bias"), eps)
    pooled = x.mean(0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "minilm"))
    args = ap.parse_args()

    model_dir = os.path.join(cache_dir(), "all-MiniLM-L6-v2")
    st = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(st):
        sys.exit(f"{st} is missing: run scripts/fetch_models.sh --minilm")
    if sha256(st) != SAFETENSORS_SHA256:
        sys.exit(f"{st}: SHA-256 is not the pinned {SAFETENSORS_SHA256}")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(model_dir, "sentence_bert_config.json")) as f:
        max_len = json.load(f)["max_seq_length"]

    tok = BertWordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=True)
    tok.enable_truncation(max_len)
    wheel_tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    wheel_tok.enable_truncation(max_len)
    wheel_tok.no_padding()
    tensors = load_file(st)

    sentences = HAND_WRITTEN + sharegpt_prompts()
    assert len(sentences) == 20
    cases, embeddings = [], []
    for text in sentences:
        ids = tok.encode(text).ids
        if ids != wheel_tok.encode(text).ids:
            sys.exit(f"vocab.txt's and tokenizer.json's tokenizers disagree on {text[:60]!r}")
        cases.append({"text": text, "ids": ids})
        embeddings.append(embed(np.array(ids), tensors, config))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"model": "all-MiniLM-L6-v2", "safetensors_sha256": SAFETENSORS_SHA256,
                   "max_seq_length": max_len, "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    np.save(os.path.join(args.out, "embeddings.npy"), np.array(embeddings, dtype="<f4"))
    lengths = [len(c["ids"]) for c in cases]
    print(f"gen_minilm_embeddings: {len(cases)} sentences, {min(lengths)}..{max(lengths)} tokens "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
