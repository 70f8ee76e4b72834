#!/usr/bin/env python3
"""Golden data for the engine's dequantization of ggml block types.

Writes tests/data/quants/<TYPE>.bin (raw ggml blocks: random bytes, with the
fp16 scale fields set to finite random values) and <TYPE>.npy (float32
[rows, cols]: those blocks dequantized by the `gguf` PyPI package's numpy code,
gguf.quants.dequantize -- an implementation independent of Tandem's C++).
For Q4_1/Q5_0/Q5_1 also <TYPE>.quant_in.npy (random floats) and
<TYPE>.quant_out.bin (gguf.quants.quantize of them).

Run with the first python3 on PATH (pyenv CPython 3.11.7 here) after
`pip install gguf==0.19.0 numpy`; deterministic (numpy PCG64 seed), so running
it twice gives byte-identical files.
"""

import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quants")

# Byte offsets of the fp16 scale fields in each block (ggml-common.h).
F16_FIELDS = {
    T.Q4_1: [0, 2],  # d, m
    T.Q5_0: [0],  # d
    T.Q5_1: [0, 2],  # d, m
    T.Q4_K: [0, 2],  # d, dmin
    T.Q5_K: [0, 2],  # d, dmin
    T.Q6_K: [208],  # d (after ql, qh, scales)
}

# Types whose quantizer the engine implements (ggml's *_ref rounding); gguf-py
# quantizes the same random floats for QuantizeRow to match byte for byte.
QUANTIZED = [T.Q4_1, T.Q5_0, T.Q5_1]

ROWS = 2
COLS = 512  # two K super-blocks or sixteen 32-blocks per row


def f16_values(rng, n):
    """Finite fp16 scales: mostly normal, some negative, a few subnormal / zero."""
    v = rng.normal(0.0, 0.05, n).astype(np.float32)
    v[rng.random(n) < 0.1] *= 1e-4  # fp16 subnormals (< 6.1e-5)
    v[rng.random(n) < 0.05] = 0.0
    return v.astype(np.float16)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(20261201))
    for qtype, fields in F16_FIELDS.items():
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        n_blocks = ROWS * COLS // block_size
        raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
        for off in fields:
            raw[:, off:off + 2] = f16_values(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        raw = raw.reshape(ROWS, COLS // block_size * type_size)
        values = quants.dequantize(raw, qtype).astype(np.float32)
        assert values.shape == (ROWS, COLS) and np.all(np.isfinite(values))
        name = qtype.name
        raw.tofile(os.path.join(OUT, f"{name}.bin"))
        np.save(os.path.join(OUT, f"{name}.npy"), values)
        print(f"{name}: {raw.nbytes} bytes of blocks -> {values.shape} floats")
    for qtype in QUANTIZED:
        x = rng.normal(0.0, 1.0, (ROWS, COLS)).astype(np.float32)
        x[0, :32] = 0.0  # an all-zero block (d = 0)
        x[1, 32:64] = 0.25  # a constant block (max == min)
        q = quants.quantize(x, qtype)
        np.save(os.path.join(OUT, f"{qtype.name}.quant_in.npy"), x)
        q.tofile(os.path.join(OUT, f"{qtype.name}.quant_out.bin"))


if __name__ == "__main__":
    main()
