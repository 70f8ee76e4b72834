#!/usr/bin/env python3
"""Converts all-MiniLM-L6-v2 (a sentence-transformers BERT folder: model.safetensors,
config.json, vocab.txt, 1_Pooling/config.json) into one F32 GGUF in llama.cpp's
BERT layout (convert_hf_to_gguf.py's BertModel), which common/engine/encoder loads.

    python3 scripts/convert_minilm.py MODEL_DIR OUT.gguf

Run once by scripts/fetch_models.sh --minilm. Python: the python3 first on PATH
(pyenv) with the PyPI packages gguf, safetensors and numpy.

Layout: arch "bert"; tensors token_embd, token_types, position_embd,
token_embd_norm, blk.N.attn_q/k/v/output (+bias), attn_output_norm,
ffn_up/down (+bias), layer_output_norm; weights stay F32 (the safetensors'
own values, so the GGUF is exact). Vocabulary as llama.cpp writes it for
WordPiece: "[X]" kept, "##piece" -> "piece", any other word gets the phantom
space "\u2581word"; [PAD] [UNK] [CLS] [SEP] [MASK] are CONTROL tokens.
"""

import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import load_file

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# HF name inside encoder.layer.N. -> GGUF name inside blk.N.
LAYER_TENSORS = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
EMBEDDING_TENSORS = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.LayerNorm": "token_embd_norm",
}


def gguf_name(hf_name):
    base, _, kind = hf_name.rpartition(".")
    if base in EMBEDDING_TENSORS:
        return f"{EMBEDDING_TENSORS[base]}.{kind}"
    prefix = "encoder.layer."
    if base.startswith(prefix):
        layer, _, rest = base[len(prefix):].partition(".")
        if rest in LAYER_TENSORS:
            return f"blk.{layer}.{LAYER_TENSORS[rest]}.{kind}"
    return None


def phantom(token):
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    model_dir, out = argv[1], argv[2]
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(model_dir, "1_Pooling", "config.json")) as f:
        pooling = json.load(f)
    if not pooling.get("pooling_mode_mean_tokens"):
        sys.exit(f"{model_dir}: pooling is not mean pooling ({pooling})")
    if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
        sys.exit(f"{model_dir}: not a BERT model with erf GELU ({config})")
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    if len(vocab) != config["vocab_size"]:
        sys.exit(f"vocab.txt has {len(vocab)} tokens, config.json says {config['vocab_size']}")

    w = gguf.GGUFWriter(out, "bert")
    w.add_name("all-MiniLM-L6-v2")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_token_type_count(config["type_vocab_size"])

    w.add_tokenizer_model("bert")
    # The uncased BERT vocabulary and pre-tokenizer of bge-small-en (the
    # ggml-vocab-bert-bge.gguf test vectors), which this model shares.
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list([phantom(t) for t in vocab])
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL
                       for t in vocab])
    # Key names as llama.cpp spells them ("seperator" included).
    for key, token in (("unknown", "[UNK]"), ("seperator", "[SEP]"), ("padding", "[PAD]"),
                       ("cls", "[CLS]"), ("mask", "[MASK]")):
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", vocab.index(token))

    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    written = 0
    for hf_name in sorted(tensors):
        if hf_name == "embeddings.position_ids" or hf_name.startswith("pooler."):
            continue
        name = gguf_name(hf_name)
        if name is None:
            sys.exit(f"unexpected tensor {hf_name} in model.safetensors")
        w.add_tensor(name, np.ascontiguousarray(tensors[hf_name], dtype=np.float32))
        written += 1
    want = 5 + 16 * config["num_hidden_layers"]
    if written != want:
        sys.exit(f"wrote {written} tensors, want {want}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"convert_minilm: wrote {out} ({written} tensors)")


if __name__ == "__main__":
    main(sys.argv)
