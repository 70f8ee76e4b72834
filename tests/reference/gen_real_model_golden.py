#!/usr/bin/env python3
"""Reference logits and greedy text for the real models, as shipped.

An independent forward pass in numpy over weights dequantized by the `gguf` PyPI package
(gguf.quants.dequantize; no code shared with the C++ engine, no torch), for
SmolLM2-135M-Instruct (Q4_1, llama) and Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, qwen2). Writes
tests/data/golden_real/<model>.json (see tests/reference/README.md, "Real-model golden data").

    python3 tests/reference/gen_real_model_golden.py [--models smollm2,qwen]

Reads the GGUFs from ${TANDEM_MODELS:-~/.cache/tandem/models} (scripts/fetch_models.sh, --qwen
for the Qwen model) and checks their SHA-256. Uses the first python3 on PATH (pyenv CPython
3.11.7) with gguf, numpy, jinja2, tokenizers, transformers (tokenizer conversion only).
"""

import argparse
import importlib.metadata
import json
import os
import sys

import gguf
import jinja2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tokenizer_vectors import build_tokenizers, encode  # noqa: E402
import real_models  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO, "tests", "data", "golden_real")

MODELS = {  # --models key -> real_models name
    "smollm2": "smollm2-135m-instruct",
    "qwen": "qwen2.5-coder-0.5b-instruct",
}

CHAT = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
LAST_POSITIONS = 4  # logits stored for the last 4 positions of each sequence
TOP_K = 64  # restricted to the reference's top-64 ids there
GREEDY_STEPS = 40


class Model:
    """float32 numpy llama / qwen2 over the gguf package's dequantized tensors."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        field = lambda k: r.fields[k].contents()  # noqa: E731
        self.arch = field("general.architecture")
        a = self.arch
        self.n_layer = field(f"{a}.block_count")
        self.n_embd = field(f"{a}.embedding_length")
        self.n_head = field(f"{a}.attention.head_count")
        self.n_kv = field(f"{a}.attention.head_count_kv")
        self.eps = field(f"{a}.attention.layer_norm_rms_epsilon")
        self.theta = field(f"{a}.rope.freq_base")
        self.head_dim = self.n_embd // self.n_head
        chat = r.fields.get("tokenizer.chat_template")  # none in make_golden_quants.py's models
        self.template = chat.contents() if chat is not None else None
        self.t = {}
        self.int8_activations = False
        self.quantized = {t.name for t in r.tensors if t.tensor_type not in (
            gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)}
        for t in r.tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            # ggml ne = [in, out]: numpy shape [out, in] (reversed), row-major as stored.
            self.t[t.name] = w.reshape([int(d) for d in reversed(t.shape)])
        self.output = self.t.get("output.weight", self.t["token_embd.weight"])
        self.vocab = self.output.shape[0]
        half = self.head_dim // 2
        self.freqs = self.theta ** (-2.0 * np.arange(half, dtype=np.float64) / self.head_dim)

    def rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + self.eps)).astype(
            np.float32) * w

    def rope(self, x, pos):
        # x: [n, heads, head_dim]; llama.cpp's normal rope (the GGUF's llama Q/K rows are
        # permuted to adjacent pairs 2i, 2i+1) for llama, NeoX (i, i + d/2) for qwen2.
        ang = np.outer(pos, self.freqs)  # [n, half]
        cos = np.cos(ang)[:, None, :].astype(np.float32)
        sin = np.sin(ang)[:, None, :].astype(np.float32)
        half = self.head_dim // 2
        if self.arch == "qwen2":
            a, b = x[..., :half], x[..., half:]
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        out = np.empty_like(x)
        if self.arch == "qwen2":
            out[..., :half], out[..., half:] = ra, rb
        else:
            out[..., 0::2], out[..., 1::2] = ra, rb
        return out

    def lin(self, x, name):
        if self.int8_activations and name + ".weight" in self.quantized:
            x = quantize_activations(x)
        y = x @ self.t[name + ".weight"].T
        if name + ".bias" in self.t:
            y = y + self.t[name + ".bias"]
        return y

    def forward(self, tokens, cache):
        """Hidden states after the final norm for `tokens`, appended after `cache`."""
        start = cache["n"]
        n = len(tokens)
        pos = np.arange(start, start + n)
        x = self.t["token_embd.weight"][np.asarray(tokens)]
        group = self.n_head // self.n_kv
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.rms(x, self.t[p + "attn_norm.weight"])
            q = self.rope(self.lin(h, p + "attn_q").reshape(n, self.n_head, self.head_dim), pos)
            k = self.rope(self.lin(h, p + "attn_k").reshape(n, self.n_kv, self.head_dim), pos)
            v = self.lin(h, p + "attn_v").reshape(n, self.n_kv, self.head_dim)
            cache.setdefault(i, (np.zeros((0, self.n_kv, self.head_dim), np.float32),) * 2)
            K = np.concatenate([cache[i][0], k])
            V = np.concatenate([cache[i][1], v])
            cache[i] = (K, V)
            kh = np.repeat(K, group, axis=1).transpose(1, 0, 2).astype(np.float64)
            vh = np.repeat(V, group, axis=1).transpose(1, 0, 2).astype(np.float64)
            s = q.transpose(1, 0, 2).astype(np.float64) @ kh.transpose(0, 2, 1)
            s /= np.sqrt(self.head_dim)
            mask = np.arange(start + n)[None, :] > pos[:, None]
            s[:, mask] = -np.inf
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            o = (s @ vh).transpose(1, 0, 2).reshape(n, self.n_embd).astype(np.float32)
            x = x + self.lin(o, p + "attn_output")
            h = self.rms(x, self.t[p + "ffn_norm.weight"])
            g = self.lin(h, p + "ffn_gate")
            g = g / (1.0 + np.exp(-g))
            x = x + self.lin(g * self.lin(h, p + "ffn_up"), p + "ffn_down")
        cache["n"] = start + n
        return self.rms(x, self.t["output_norm.weight"])

    def logits(self, hidden):
        if self.int8_activations:
            hidden = quantize_activations(hidden)
        return (hidden.astype(np.float64) @ self.output.T.astype(np.float64))


def quantize_activations(x):
    """Diagnostics only (--int8-activations): llama.cpp's Q8_0 rounding of a matmul's input,
    per 32-block d = amax / 127, q = round(x / d)."""
    b = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32)
    d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
    q = np.round(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
    return (q * d).reshape(x.shape).astype(np.float32)


def render_chat(template, messages):
    # transformers' apply_chat_template environment (trim_blocks, lstrip_blocks).
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def top2_margin(row):
    a, b = np.partition(row, -2)[-2:]
    return float(abs(a - b))


def run(key, cache_dir, out_dir, int8_activations):
    name = MODELS[key]
    spec = real_models.MODELS[name]
    path = real_models.verified_path(name, cache_dir)
    model = Model(path)
    model.int8_activations = int8_activations
    tok, _ = build_tokenizers(path)
    prompt = render_chat(model.template, CHAT)
    chat_ids = encode(tok, prompt, parse_special=True)
    rng = np.random.default_rng(20261201)
    fixed_ids = [int(i) for i in rng.integers(1000, min(model.vocab, 49152), size=12)]
    sequences = [{"name": "chat_prompt", "text": prompt, "tokens": chat_ids},
                 {"name": "fixed_ids", "tokens": fixed_ids}]
    for seq in sequences:
        cache = {"n": 0}
        hidden = model.forward(seq["tokens"], cache)
        logits = model.logits(hidden)  # [n, vocab] float64
        rows = []
        for p in range(len(seq["tokens"]) - LAST_POSITIONS, len(seq["tokens"])):
            row = logits[p]
            ids = np.argsort(-row, kind="stable")[:TOP_K]
            rows.append({"position": p, "ids": [int(i) for i in ids],
                         "logits": [round(float(row[i]), 5) for i in ids],
                         "std": round(float(row.std()), 5), "max": round(float(row.max()), 5),
                         "top2_margin": round(top2_margin(row), 5)})
        seq["last_positions"] = rows
        print(f"{key} {seq['name']}: {len(seq['tokens'])} tokens, std {rows[-1]['std']}")
    # Greedy continuation of the chat prompt (EOS not special: keep going), KV cache.
    cache = {"n": 0}
    row = model.logits(model.forward(chat_ids, cache)[-1:])[0]
    generated, margins = [], []
    for _ in range(GREEDY_STEPS):
        nxt = int(np.argmax(row))
        generated.append(nxt)
        margins.append(round(top2_margin(row), 5))
        row = model.logits(model.forward([nxt], cache))[0]
    print(f"{key} greedy: {tok.decode(generated, skip_special_tokens=False)!r}")
    print(f"{key} min margin {min(margins)} at step {int(np.argmin(margins))}")
    out = {
        "generator": "tests/reference/gen_real_model_golden.py",
        "versions": {p: importlib.metadata.version(p)
                     for p in ("gguf", "numpy", "jinja2", "tokenizers", "transformers")},
        "python": sys.version.split()[0],
        "model": name, "file": spec["file"], "sha256": spec["sha256"],
        "reference": "numpy float32 (attention softmax and norms float64, logits float64) "
                     "over gguf.quants.dequantize weights",
        "sequences": sequences,
        "greedy": {"prompt_tokens": chat_ids, "generated_ids": generated,
                   "top2_margins": margins,
                   "text": tok.decode(generated, skip_special_tokens=False)},
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,qwen")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--int8-activations", action="store_true",
                    help="diagnostics: round every quantized matmul's input as llama.cpp's Q8_0 "
                    "does (the committed data is without it)")
    args = ap.parse_args()
    cache_dir = real_models.cache_dir()
    for key in args.models.split(","):
        run(key, cache_dir, args.out, args.int8_activations)


if __name__ == "__main__":
    main()
