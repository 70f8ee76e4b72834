#!/usr/bin/env python3
"""Golden-data generator for Tandem's model tests (independent PyTorch + HF reference).

What it does (deterministically; CPU, float32, one thread, fixed seeds):

  1. Builds three small random models with Hugging Face transformers from config
     objects (no downloads): `llama2` (untied lm_head), `llama3` (llama3 rope scaling,
     tied embeddings) and `qwen2` (QKV bias, tied embeddings, NeoX rope).
  2. Writes each one as GGUF with the `gguf` package the way llama.cpp's
     convert_hf_to_gguf.py (+ llama-quantize for Q4_0) would lay it out: same metadata
     keys, tensor names, ggml dimension order, the Llama Q/K row permutation and the
     llama3 `rope_freqs.weight` tensor.  The tokenizer (a 512-token SentencePiece
     vocabulary) is copied from ../shared/models/stories260K/stories260K.gguf.
  3. Runs the HF model on three token sequences and saves the logits at every
     position as float32 .npy ([seq_len, 512]).  For F16/BF16/Q8_0/Q4_0 files the HF
     model is first given the weights dequantize(quantize(w)), so the remaining
     differences against an engine reading the file are only arithmetic.
  4. Does the same (logits only) for the real stories260K model (HF copy under
     ../shared/models/stories260K/hf) and checks it against the reference logits listed
     in that folder's reference_greedy.json.
  5. Writes tests/data/golden/manifest.json.

Run from anywhere:  python3 tests/reference/make_golden.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch
import transformers
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import LlamaFileType as FT
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
OUT = DATA / "golden"
SHARED = (REPO / ".." / "shared").resolve()
STORIES_GGUF = SHARED / "models" / "stories260K" / "stories260K.gguf"
STORIES_HF = SHARED / "models" / "stories260K" / "hf"
STORIES_REF = SHARED / "models" / "stories260K" / "reference_greedy.json"

VOCAB = 512
BOS = 1

# --------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------

torch.set_num_threads(1)
torch.set_num_interop_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
torch.set_default_dtype(torch.float32)


# --------------------------------------------------------------------------------------
# Token sequences (same for every model)
# --------------------------------------------------------------------------------------

def make_sequences() -> list[list[int]]:
    rng_a = np.random.default_rng(20240601)
    seq_a = [BOS] + rng_a.integers(3, VOCAB, size=39).tolist()    # 40 tokens: 3 blocks of 16
    seq_b = [1, 403, 407, 261]                                     # stories260K reference input
    rng_c = np.random.default_rng(17)
    seq_c = [BOS] + rng_c.integers(3, VOCAB, size=16).tolist()    # 17 tokens
    return [[int(t) for t in s] for s in (seq_a, seq_b, seq_c)]


# --------------------------------------------------------------------------------------
# Model definitions
# --------------------------------------------------------------------------------------

def llama2_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager")


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def llama3_config() -> LlamaConfig:
    # original_max_position_embeddings is also given at the top level: llama.cpp's
    # convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors) reads it from the top
    # level of config.json (default 8192), while transformers reads it from
    # rope_scaling / rope_parameters.  With both set, both agree on 32.
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE),
        original_max_position_embeddings=32, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager")


def qwen2_config() -> Qwen2Config:
    return Qwen2Config(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager")


MODELS = {
    # name: (config fn, HF class, gguf arch, seed, weight types to write)
    "llama2": (llama2_config, LlamaForCausalLM, gguf.MODEL_ARCH.LLAMA, 1001,
               ["F32", "F16", "BF16", "Q8_0", "Q4_0"]),
    "llama3": (llama3_config, LlamaForCausalLM, gguf.MODEL_ARCH.LLAMA, 1002, ["F32"]),
    "qwen2": (qwen2_config, Qwen2ForCausalLM, gguf.MODEL_ARCH.QWEN2, 1003, ["F32", "Q8_0"]),
}

FILE_TYPES = {"F32": FT.ALL_F32, "F16": FT.MOSTLY_F16, "BF16": FT.MOSTLY_BF16,
              "Q8_0": FT.MOSTLY_Q8_0, "Q4_0": FT.MOSTLY_Q4_0}
MAIN_QTYPE = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0}


def random_weights(model: torch.nn.Module, cfg, seed: int) -> dict[str, np.ndarray]:
    """Weights scaled so that activations and logits are O(1).

    HF's default init (std 0.02) gives near-zero logits, which would make a 1e-3
    tolerance meaningless.  Here: linear weights N(0, 1/fan_in) (so every projection
    keeps unit scale and attention scores are O(1)), norm weights 1 + 0.1 N(0,1),
    biases N(0, 0.3^2), input embeddings N(0,1) (untied) and the output matrix scaled
    to give a logit std of about 2-3.
    """
    rng = np.random.default_rng(seed)
    tied = bool(cfg.tie_word_embeddings)
    out: dict[str, np.ndarray] = {}
    for name, p in model.named_parameters():   # tied lm_head appears once (as embed)
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            std = 0.25 if tied else 1.0
            w = rng.standard_normal(shape) * std
        elif name == "lm_head.weight":
            w = rng.standard_normal(shape) * 0.25
        elif "norm" in name:
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = 0.3 * rng.standard_normal(shape)
        elif name.endswith(".weight") and len(shape) == 2:
            w = rng.standard_normal(shape) / math.sqrt(shape[1])
        else:
            raise ValueError(f"unexpected parameter {name} {shape}")
        out[name] = w.astype(np.float32)
    return out


def load_weights(model: torch.nn.Module, weights: dict[str, np.ndarray]) -> None:
    params = dict(model.named_parameters())
    assert set(params) == set(weights), (set(params) ^ set(weights))
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.from_numpy(weights[name]))


def build_model(name: str):
    cfg_fn, cls, _, seed, _ = MODELS[name]
    cfg = cfg_fn()
    torch.manual_seed(0)
    model = cls(cfg).to(torch.float32).eval()
    weights = random_weights(model, cfg, seed)
    load_weights(model, weights)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return cfg, model, weights


# --------------------------------------------------------------------------------------
# GGUF writing (what convert_hf_to_gguf.py does, restated)
# --------------------------------------------------------------------------------------

def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half layout -> ggml/Meta interleaved-pair layout (rows only).

    Within each head the HF rows are [x_0 .. x_{d/2-1}, y_0 .. y_{d/2-1}] where (x_i, y_i)
    is rotated by theta_i; llama.cpp's normal (non-NeoX) rope wants them adjacent:
    [x_0, y_0, x_1, y_1, ...].  Works for weights [out, in] and biases [out]."""
    rest = w.shape[1:]
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *rest)
             .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    rest = w.shape[1:]
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *rest)
             .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(cfg) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf.py computes it for rope_type llama3.

    One factor per rotated pair (head_dim/2 values); llama.cpp divides the pair's
    frequency by it: theta_i = pos * base^(-2i/d) / factor_i."""
    rp = cfg.rope_parameters
    base = rp["rope_theta"]
    dim = cfg.head_dim
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old_ctx = rp["original_max_position_embeddings"]
    lo_wavelen, hi_wavelen = old_ctx / lo, old_ctx / hi
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < hi_wavelen:
            out.append(1)
        elif wavelen > lo_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def gguf_tensors(name: str, cfg, weights: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, str]]:
    """(gguf name, float32 array in HF [out, in] row-major layout = ggml ne reversed,
    HF parameter name or '' for generated tensors) in convert's order: generated extra
    tensors first, then the checkpoint tensors."""
    arch = MODELS[name][2]
    tmap = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    out = []
    if arch == gguf.MODEL_ARCH.LLAMA and cfg.rope_parameters.get("rope_type") == "llama3":
        out.append((gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
                    llama3_rope_factors(cfg), ""))
    for hf_name, w in weights.items():
        gname = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gname is not None, hf_name
        if arch == gguf.MODEL_ARCH.LLAMA:   # LlamaModel.undo_permute; qwen2 is NeoX: none
            if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
                w = permute_qk(w, cfg.num_attention_heads)
            elif hf_name.endswith(("k_proj.weight", "k_proj.bias")):
                w = permute_qk(w, cfg.num_key_value_heads)
        out.append((gname, w, hf_name))
    return out


def tensor_qtype(gname: str, arr: np.ndarray, wtype: str, has_output: bool) -> QT:
    # 1-D tensors (norms, biases, rope_freqs) and *_norm stay F32 (convert + llama-quantize).
    if arr.ndim <= 1 or gname.endswith("_norm.weight"):
        return QT.F32
    if wtype == "Q4_0":
        # llama-quantize: the output matrix (token_embd when tied) wants Q6_K, which needs
        # rows that are a multiple of 256; n_embd = 128 is not, so it falls back to Q8_0.
        is_output = gname == "output.weight" or (not has_output and gname == "token_embd.weight")
        if is_output:
            return QT.Q8_0
    return MAIN_QTYPE[wtype]


def copy_tokenizer(writer: gguf.GGUFWriter) -> None:
    reader = gguf.GGUFReader(STORIES_GGUF)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)


def write_gguf(path: Path, name: str, cfg, weights: dict[str, np.ndarray], wtype: str):
    """Write one GGUF; return the HF-layout weights the file actually encodes
    (dequantize(quantize(w)), un-permuted back to HF layout)."""
    arch = MODELS[name][2]
    tensors = gguf_tensors(name, cfg, weights)
    has_output = any(g == "output.weight" for g, _, _ in tensors)
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])
    effective: dict[str, np.ndarray] = {}
    for gname, arr, hf_name in tensors:
        qt = tensor_qtype(gname, arr, wtype, has_output)
        data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt)
        writer.add_tensor(gname, data, raw_dtype=qt)
        if hf_name:
            deq = gguf.quants.dequantize(data, qt).astype(np.float32).reshape(arr.shape)
            if arch == gguf.MODEL_ARCH.LLAMA and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
                deq = unpermute_qk(deq, cfg.num_attention_heads)
            elif arch == gguf.MODEL_ARCH.LLAMA and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
                deq = unpermute_qk(deq, cfg.num_key_value_heads)
            effective[hf_name] = deq

    # --- metadata, in convert's order: type, model card, hparams, quant version, vocab ---
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"tandem-golden-{name}")
    total, shared, expert, n_expert = writer.get_total_parameter_count()
    writer.add_size_label(gguf.size_label(total, shared, expert, n_expert))

    hp = cfg.to_dict()           # what convert reads (AutoConfig(...).to_dict())
    rope = hp.get("rope_parameters") or {}
    writer.add_block_count(hp["num_hidden_layers"])
    writer.add_context_length(hp["max_position_embeddings"])
    writer.add_embedding_length(hp["hidden_size"])
    writer.add_feed_forward_length(hp["intermediate_size"])
    writer.add_head_count(hp["num_attention_heads"])
    writer.add_head_count_kv(hp["num_key_value_heads"])
    # rope_type default/llama3: no rope.scaling.* keys (llama3 is carried by rope_freqs)
    assert rope.get("rope_type") in ("default", "llama3"), rope
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    if hp.get("head_dim") is not None:           # present for Llama configs, not Qwen2
        writer.add_key_length(hp["head_dim"])
        writer.add_value_length(hp["head_dim"])
    writer.add_file_type(FILE_TYPES[wtype])
    if arch == gguf.MODEL_ARCH.LLAMA:            # LlamaModel.set_gguf_parameters
        writer.add_vocab_size(hp["vocab_size"])
        writer.add_rope_dimension_count(hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    copy_tokenizer(writer)

    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return effective


# --------------------------------------------------------------------------------------
# Reference logits
# --------------------------------------------------------------------------------------

@torch.no_grad()
def hf_logits(model: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    ids = torch.tensor([tokens], dtype=torch.long)
    out = model(input_ids=ids, use_cache=False)
    logits = out.logits[0].to(torch.float32).numpy()
    assert logits.shape == (len(tokens), VOCAB)
    return np.ascontiguousarray(logits, dtype=np.float32)


def save_case(cases: list, model_ref: str, arch: str, wtype: str, tokens: list[int],
              logits: np.ndarray, npy_rel: str) -> None:
    np.save(DATA / npy_rel, logits)
    std = float(logits.std())
    cases.append({"model": model_ref, "arch": arch, "weights": wtype, "tokens": tokens,
                  "logits": npy_rel, "logit_std": round(std, 4)})
    print(f"  {npy_rel:34s} T={len(tokens):3d} logit std {std:.3f}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    seqs = make_sequences()
    cases: list[dict] = []

    for name in MODELS:
        cfg, model, weights = build_model(name)
        arch = gguf.MODEL_ARCH_NAMES[MODELS[name][2]]
        for wtype in MODELS[name][4]:
            stem = f"{name}-{wtype.lower()}"
            path = OUT / f"{stem}.gguf"
            effective = write_gguf(path, name, cfg, weights, wtype)
            if wtype == "F32":
                for k, w in weights.items():     # F32 round trip must be exact
                    assert np.array_equal(effective[k], w), k
            load_weights(model, effective)
            print(f"{path.relative_to(DATA)}: {path.stat().st_size} bytes")
            for i, toks in enumerate(seqs):
                save_case(cases, f"golden/{stem}.gguf", arch, wtype, toks,
                          hf_logits(model, toks), f"golden/{stem}.seq{i}.npy")
            load_weights(model, weights)

    # --- the real model: stories260K (HF copy derived from the shared GGUF) ---
    model = LlamaForCausalLM.from_pretrained(STORIES_HF, torch_dtype=torch.float32,
                                             attn_implementation="eager").eval()
    print("shared:models/stories260K/stories260K.gguf")
    for i, toks in enumerate(seqs):
        logits = hf_logits(model, toks)
        save_case(cases, "shared:models/stories260K/stories260K.gguf", "llama", "F32", toks,
                  logits, f"golden/stories260K.seq{i}.npy")
        if toks == [1, 403, 407, 261]:
            ref = json.loads(STORIES_REF.read_text())["logits_first_4_positions"]
            ref = np.asarray(ref, dtype=np.float64).reshape(4, VOCAB)
            diff = float(np.abs(logits.astype(np.float64) - ref).max())
            print(f"  stories260K vs PROVENANCE reference logits: max |diff| = {diff:.3g}")
            if diff > 1e-4:
                print("ERROR: stories260K HF logits differ from reference_greedy.json", file=sys.stderr)
                return 1

    manifest = {
        "generator": "tests/reference/make_golden.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf": _version("gguf"),
        "numpy": np.__version__,
        "cases": cases,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {OUT / 'manifest.json'} ({len(cases)} cases)")
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import version
    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
