#!/usr/bin/env python3
"""Golden data for random llama / qwen2 models in the level types of issue 9.

For each architecture (llama: untied output; qwen2: Q/K/V biases, tied embeddings, NeoX
rope) one small random model (hidden 256, 2 layers, 4 heads / 2 KV heads of 64, FFN 512:
every row a multiple of 256, as K-quants need) is written as GGUF in each of Q4_1, Q5_0,
Q5_1, Q4_K, Q5_K, Q6_K (every 2-D weight in that type, token_embd and output included;
norms and biases F32) and in llama.cpp's mixed Q4_K_M recipe. The reference is the numpy
forward pass of gen_real_model_golden.py (`Model`) over the file's tensors dequantized by
the `gguf` PyPI package (gguf.quants.dequantize), so it shares no code with the C++ engine.

Quantization (which levels and scales a file holds; the reference does not depend on it):
  - Q4_1, Q5_0, Q5_1: gguf.quants.quantize.
  - Q4_K, Q5_K, Q6_K: gguf-py has no K-quant quantizer; `encode_k()` below is a plain
    round-to-nearest one written here (per-sub-block scale from the range, 6-bit /
    int8 sub-block scales against an fp16 super-block scale) and is checked by
    dequantizing its output with gguf.quants.dequantize.
  - Q4_K_M: Tandem's own `tandem-quantize F32.gguf OUT.gguf Q4_K_M` (build/bin, or
    --tandem-quantize PATH) from the F32 file; the reference reads the result back with
    gguf and dequantizes it with gguf, so it relies on our code only for which values
    were chosen, never for what they mean.

Writes tests/data/golden/quants/: <arch>-<type>.gguf, <arch>-<type>.seq0.npy (float32
logits [40, 512] at every position of make_golden.py's seq0) and manifest.json (tokens,
tensor types, greedy reference: 32 tokens continuing make_golden.py's seq2 with the
top-1/top-2 margin and the chosen token's log-softmax at each step). Also checks the numpy
reference against make_golden.py's transformers logits for its llama2 / qwen2 files (F32,
F16, BF16, Q8_0, Q4_0).

    python3 tests/reference/make_golden_quants.py [--int8-activations --out DIR]

First python3 on PATH (pyenv CPython 3.11.7): gguf, numpy, and what
gen_real_model_golden.py imports (jinja2, tokenizers, transformers; no torch).
Deterministic (numpy PCG64 seeds): a second run gives byte-identical files.
"""

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_real_model_golden import Model, top2_margin  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data")
OUT = os.path.join(DATA, "golden", "quants")
STORIES_GGUF = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.gguf")
TANDEM_QUANTIZE = os.path.join(REPO, "build", "bin", "tandem-quantize")

VOCAB, BOS = 512, 1
N_EMBD, N_LAYER, N_HEAD, N_KV, N_FF = 256, 2, 4, 2, 512
GREEDY_STEPS = 32

ARCHS = {  # name: (gguf arch, seed, tied embeddings, qkv bias, rope base, rms eps)
    "llama": (gguf.MODEL_ARCH.LLAMA, 2001, False, False, 10000.0, 1e-5),
    "qwen2": (gguf.MODEL_ARCH.QWEN2, 2002, True, True, 1000000.0, 1e-6),
}
TYPES = ["Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"]
FILE_TYPE = {"F32": 0, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18}


def sequences():
    """make_golden.py's seq0 (BOS + 39 tokens) and seq2 (BOS + 16), same seeds."""
    seq0 = [BOS] + np.random.default_rng(20240601).integers(3, VOCAB, size=39).tolist()
    seq2 = [BOS] + np.random.default_rng(17).integers(3, VOCAB, size=16).tolist()
    return [int(t) for t in seq0], [int(t) for t in seq2]


def random_tensors(arch):
    """GGUF name -> float32 array [out, in] (numpy order; ggml ne reversed).

    Scaled as make_golden.py does so activations and logits are O(1): linear weights
    N(0, 1/fan_in), norms 1 + 0.1 N(0,1), biases 0.3 N(0,1), embeddings N(0,1) (0.18 when
    tied), output 0.18 N(0,1) (logit std ~3 at hidden 256). Written in GGUF layout
    directly: for llama the Q/K rows are random, so there is no HF order to permute from."""
    _, seed, tied, bias, _, _ = ARCHS[arch]
    rng = np.random.default_rng(seed)
    head_dim = N_EMBD // N_HEAD
    t = {"token_embd.weight": rng.standard_normal((VOCAB, N_EMBD)) * (0.18 if tied else 1.0)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(N_EMBD)
        for name, rows in (("attn_q", N_EMBD), ("attn_k", N_KV * head_dim),
                           ("attn_v", N_KV * head_dim)):
            t[p + name + ".weight"] = rng.standard_normal((rows, N_EMBD)) / np.sqrt(N_EMBD)
            if bias:
                t[p + name + ".bias"] = 0.3 * rng.standard_normal(rows)
        t[p + "attn_output.weight"] = rng.standard_normal((N_EMBD, N_EMBD)) / np.sqrt(N_EMBD)
        t[p + "ffn_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(N_EMBD)
        t[p + "ffn_gate.weight"] = rng.standard_normal((N_FF, N_EMBD)) / np.sqrt(N_EMBD)
        t[p + "ffn_up.weight"] = rng.standard_normal((N_FF, N_EMBD)) / np.sqrt(N_EMBD)
        t[p + "ffn_down.weight"] = rng.standard_normal((N_EMBD, N_FF)) / np.sqrt(N_FF)
    t["output_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(N_EMBD)
    if not tied:
        t["output.weight"] = 0.18 * rng.standard_normal((VOCAB, N_EMBD))
    return {k: v.astype(np.float32) for k, v in t.items()}


# --------------------------------------------------------------------------------------
# K-quant encoders: the inverse of gguf.quants' Q4_K / Q5_K / Q6_K dequantize_blocks.
# --------------------------------------------------------------------------------------

QK_K = 256


def _fp16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def _pack_scales_6bit(sc, mn):
    """[n, 8] 6-bit scales and mins -> [n, 12] bytes (Q4_K.get_scale_min's layout):
    bytes 0-3 / 4-7 hold sc / mn of sub-blocks 0-3 in their low 6 bits and the top 2 bits
    of sub-blocks 4-7's; bytes 8-11 hold sub-blocks 4-7's low nibbles (sc low, mn high)."""
    lo_sc = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    lo_mn = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    hi = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    return np.concatenate([lo_sc, lo_mn, hi], axis=1).astype(np.uint8)


def _encode_q45_k(x, bits):
    """x [n, 256] -> Q4_K (bits 4) / Q5_K (bits 5) blocks [n, 144 | 176]."""
    n = x.shape[0]
    top = (1 << bits) - 1
    sub = x.reshape(n, 8, 32)
    mn = np.maximum(0.0, -sub.min(axis=2))                  # x >= -mn in each sub-block
    scale = (sub.max(axis=2) + mn) / top
    d = _fp16(scale.max(axis=1) / 63)
    dmin = _fp16(mn.max(axis=1) / 63)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63)
    m = np.clip(np.round(np.divide(mn, dminf, out=np.zeros_like(mn), where=dminf > 0)), 0, 63)
    step = (df * sc)[:, :, None]
    off = (dminf * m)[:, :, None]
    q = np.divide(sub + off, step, out=np.zeros_like(sub), where=step > 0)
    q = np.clip(np.round(q), 0, top).astype(np.uint8).reshape(n, 4, 2, 32)
    low = q & 0x0F
    qs = (low[:, :, 0, :] | (low[:, :, 1, :] << 4)).reshape(n, 128)   # element 64g+32s+j
    parts = [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2),
             _pack_scales_6bit(sc.astype(np.uint8), m.astype(np.uint8))]
    if bits == 5:                                            # bit 4 of element 32t+j
        high = (q.reshape(n, 8, 32) >> 4).astype(np.uint32)
        parts.append(sum(high[:, t, :] << t for t in range(8)).astype(np.uint8))
    parts.append(qs)
    return np.concatenate(parts, axis=1)


def _encode_q6_k(x):
    """x [n, 256] -> Q6_K blocks [n, 210]: ql[128], qh[64], int8 scales[16], fp16 d.

    Signs as ggml's quantize_row_q6_K_ref chooses them: a sub-block's scale is
    -(its largest-magnitude value) / 32, so that value is level -32; d is
    -(the largest-magnitude scale) / 128, so that sub-block's int8 scale is -128.
    Scales and d of both signs occur."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    peak = np.take_along_axis(sub, np.abs(sub).argmax(axis=2)[:, :, None], axis=2)[:, :, 0]
    scale = -peak / 32
    top = np.take_along_axis(scale, np.abs(scale).argmax(axis=1)[:, None], axis=1)
    d = _fp16(-top[:, 0] / 128)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df != 0)),
                 -128, 127)
    step = (df * sc)[:, :, None]
    q = np.divide(sub, step, out=np.zeros_like(sub), where=step != 0)
    q = (np.clip(np.round(q), -32, 31) + 32).astype(np.uint8).reshape(n, 2, 2, 64)
    low = q & 0x0F                                           # element 128h + 64s + j
    ql = (low[:, :, 0, :] | (low[:, :, 1, :] << 4)).reshape(n, 128)
    high = (q.reshape(n, 2, 4, 32) >> 4).astype(np.uint32)  # element 128h + 32t + j
    qh = sum(high[:, :, t, :] << (2 * t) for t in range(4)).astype(np.uint8).reshape(n, 64)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8),
                           d.view(np.uint8).reshape(n, 2)], axis=1)


def encode_k(w, qt):
    """float32 [rows, cols] (cols % 256 == 0) -> uint8 [rows, bytes per row] in `qt`."""
    rows, cols = w.shape
    blocks = w.reshape(-1, QK_K).astype(np.float32)
    if qt == QT.Q6_K:
        out = _encode_q6_k(blocks)
    else:
        out = _encode_q45_k(blocks, 4 if qt == QT.Q4_K else 5)
    return np.ascontiguousarray(out.reshape(rows, -1))


def quantize(w, qt):
    if qt in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        data = encode_k(w, qt)
    else:
        data = gguf.quants.quantize(np.ascontiguousarray(w), qt)
    # The encoding must mean what it was meant to under gguf's dequantization: relative
    # RMS error of a 4-6 bit round-to-nearest quantizer (~3-12%), never garbage.
    deq = gguf.quants.dequantize(data, qt).reshape(w.shape)
    rel = float(np.sqrt(np.mean((deq - w) ** 2) / np.mean(w ** 2)))
    assert rel < 0.15, (qt.name, rel)
    return data


# --------------------------------------------------------------------------------------
# GGUF writing
# --------------------------------------------------------------------------------------

def write_gguf(path, arch, tensors, wtype):
    garch, _, _, _, theta, eps = ARCHS[arch]
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[garch])
    for name, w in tensors.items():
        qt = QT[wtype] if w.ndim == 2 else QT.F32
        writer.add_tensor(name, w if qt == QT.F32 else quantize(w, qt), raw_dtype=qt)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"tandem-golden-quants-{arch}")
    writer.add_block_count(N_LAYER)
    writer.add_context_length(256)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_KV)
    writer.add_rope_freq_base(theta)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_file_type(FILE_TYPE[wtype])
    if garch == gguf.MODEL_ARCH.LLAMA:
        writer.add_vocab_size(VOCAB)
        writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # The 512-token SentencePiece vocabulary of stories260K (as make_golden.py copies it).
    reader = gguf.GGUFReader(STORIES_GGUF)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml."):
            vtype = field.types[0]
            sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_q4_k_m(path, arch, tensors, tandem_quantize):
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        write_gguf(f32, arch, tensors, "F32")
        subprocess.run([tandem_quantize, f32, path, "Q4_K_M"], check=True,
                       stdout=subprocess.DEVNULL)


# --------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------

def greedy(model, prompt):
    cache = {"n": 0}
    row = model.logits(model.forward(prompt, cache)[-1:])[0]
    ids, margins, logprobs = [], [], []
    for _ in range(GREEDY_STEPS):
        nxt = int(np.argmax(row))
        ids.append(nxt)
        margins.append(round(top2_margin(row), 5))
        log_z = row.max() + np.log(np.exp(row - row.max()).sum())
        logprobs.append(round(float(row[nxt] - log_z), 5))
        row = model.logits(model.forward([nxt], cache))[0]
    return {"prompt": prompt, "generated": ids, "top2_margins": margins, "logprobs": logprobs}


def check_against_transformers():
    """The numpy reference on make_golden.py's files reproduces its transformers logits."""
    manifest = json.load(open(os.path.join(DATA, "golden", "manifest.json")))
    worst = 0.0
    for c in manifest["cases"]:
        if not c["model"].startswith(("golden/llama2-", "golden/qwen2-")):
            continue
        model = Model(os.path.join(DATA, c["model"]))
        got = model.logits(model.forward(c["tokens"], {"n": 0}))
        diff = float(np.abs(got - np.load(os.path.join(DATA, c["logits"]))).max())
        worst = max(worst, diff)
        assert diff < 1e-3, (c["logits"], diff)
    print(f"numpy reference vs make_golden.py's transformers logits: max |diff| {worst:.2g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--tandem-quantize", default=TANDEM_QUANTIZE)
    ap.add_argument("--int8-activations", action="store_true",
                    help="diagnostics: round every quantized matmul's input as llama.cpp's "
                    "Q8_0 does (the committed data is without it)")
    args = ap.parse_args()
    check_against_transformers()
    os.makedirs(args.out, exist_ok=True)
    seq0, seq2 = sequences()
    cases = []
    for arch in ARCHS:
        tensors = random_tensors(arch)
        for wtype in TYPES:
            stem = f"{arch}-{wtype.lower()}"
            path = os.path.join(args.out, stem + ".gguf")
            if wtype == "Q4_K_M":
                write_q4_k_m(path, arch, tensors, args.tandem_quantize)
            else:
                write_gguf(path, arch, tensors, wtype)
            types = {}
            for t in gguf.GGUFReader(path).tensors:
                types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
            model = Model(path)
            model.int8_activations = args.int8_activations
            logits = model.logits(model.forward(seq0, {"n": 0})).astype(np.float32)
            rel = f"golden/quants/{stem}.seq0.npy"
            np.save(os.path.join(args.out, stem + ".seq0.npy"), logits)
            ref = greedy(model, seq2)
            cases.append({"model": f"golden/quants/{stem}.gguf", "arch": arch,
                          "weights": wtype, "tensor_types": dict(sorted(types.items())),
                          "tokens": seq0, "logits": rel,
                          "logit_std": round(float(logits.std()), 4),
                          "greedy": ref})
            print(f"{stem}: {os.path.getsize(path)} bytes {types}, logit std "
                  f"{logits.std():.3f}, greedy min margin {min(ref['top2_margins'])}")
    manifest = {
        "generator": "tests/reference/make_golden_quants.py",
        "reference": "gen_real_model_golden.Model: numpy float32 (norms, softmax, logits "
                     "float64) over gguf.quants.dequantize weights",
        "versions": {p: importlib.metadata.version(p) for p in ("gguf", "numpy")},
        "python": sys.version.split()[0],
        "cases": cases,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
