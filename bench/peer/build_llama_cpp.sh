#!/usr/bin/env bash
# Builds llama.cpp's llama-server, llama-bench, llama-batched-bench and
# llama-cli natively from the sources inside the llama-cpp-python sdist on PyPI,
# for side-by-side measurements (bench/peer/, docs/benchmarks.md). llama.cpp is
# never vendored in this repository: the sdist is downloaded, checked against a
# pinned SHA-256, unpacked and built outside it.
#
#   bench/peer/build_llama_cpp.sh           build once (a re-run with the stamp present is instant)
#   bench/peer/build_llama_cpp.sh --force   rebuild even when the stamp is present
#
# Prints the bin folder on success. The binaries land in
#   ${TANDEM_PEERS:-$HOME/.cache/tandem/peers}/llama.cpp-0.3.36/bin
# (the sources and build tree next to it, in src/ and build/). The build is
# CPU-only, Release, -march=native (GGML_NATIVE) less AMX (below), static, with no CUDA, BLAS,
# curl, OpenSSL or web UI (nothing is fetched at build time), niced, -j2
# ($TANDEM_PEER_JOBS overrides). About 12 minutes on 2 vCPUs.
#
# Needs: cmake (>= 3.14), a C and C++ compiler (g++), make or ninja, tar, and
# sha256sum; on Debian: apt-get install cmake g++ ninja-build coreutils tar.
# Python: the python3 first on PATH (or $PYTHON), whose pip downloads the sdist.
set -euo pipefail

VERSION=0.3.36
SDIST=llama_cpp_python-$VERSION.tar.gz
# SHA-256 of the sdist as PyPI serves it (pip also checks it against PyPI's index).
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
TARGETS=(llama-server llama-bench llama-batched-bench llama-cli)

PYTHON=${PYTHON:-python3}
ROOT=${TANDEM_PEERS:-$HOME/.cache/tandem/peers}/llama.cpp-$VERSION
JOBS=${TANDEM_PEER_JOBS:-2}

die() {
  echo "build_llama_cpp: error: $*" >&2
  exit 1
}

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h | --help)
      sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument '$arg' (try --help)" ;;
  esac
done

STAMP=$ROOT/bin/.built
# Without AMX: llama.cpp's AMX backend (ggml-cpu/amx, compiled in whenever -march=native
# has AMX-INT8) dies with a general protection fault in ggml_backend_amx_mul_mat on the
# Sapphire-Rapids-class VMs we measure on, for every quantized file (llama.cpp issue
# #20824; `--repack 0` avoids it but also drops its repacked Q4_0 layouts). The explicit
# -mno-amx-* win over -march=native in GCC and Clang whatever their order; every other
# feature of the CPU stays on.
NO_AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
stamp_text="llama-cpp-python==$VERSION sha256=$SDIST_SHA256 targets=${TARGETS[*]} flags=$NO_AMX_FLAGS"
if ((!force)) && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp_text" ]; then
  echo "$ROOT/bin"
  exit 0
fi

for tool in cmake c++ cc tar sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is not on PATH (Debian: apt-get install cmake g++ tar coreutils)"
done
command -v "$PYTHON" >/dev/null || die "'$PYTHON' is not on PATH (set \$PYTHON to a python3 with pip)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' does not run; install pip for $PYTHON"
generator=()
if command -v ninja >/dev/null; then
  generator=(-G Ninja)
elif ! command -v make >/dev/null; then
  die "neither 'ninja' nor 'make' is on PATH (Debian: apt-get install ninja-build)"
fi

mkdir -p "$ROOT"
if [ ! -f "$ROOT/$SDIST" ] || [ "$(sha256sum "$ROOT/$SDIST" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
  rm -f "$ROOT/$SDIST"
  echo "build_llama_cpp: downloading $SDIST from PyPI" >&2
  "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" \
    -d "$ROOT" || die "pip could not download the package llama-cpp-python==$VERSION"
  [ -f "$ROOT/$SDIST" ] || die "pip did not leave $SDIST in $ROOT"
fi
actual=$(sha256sum "$ROOT/$SDIST" | cut -d' ' -f1)
[ "$actual" = "$SDIST_SHA256" ] || die "$ROOT/$SDIST has SHA-256 $actual, want $SDIST_SHA256"

# Unpack once: sources already unpacked from this sdist keep their mtimes, so
# an interrupted build resumes where it stopped.
if [ "$(cat "$ROOT/src/.unpacked" 2>/dev/null)" != "$SDIST_SHA256" ]; then
  rm -rf "${ROOT:?}/src" "${ROOT:?}/build"
  mkdir -p "$ROOT/src"
  tar -xzf "$ROOT/$SDIST" -C "$ROOT/src" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp" || die "$SDIST has no vendor/llama.cpp"
  echo "$SDIST_SHA256" >"$ROOT/src/.unpacked"
fi
rm -rf "${ROOT:?}/bin"
mkdir -p "$ROOT/bin"

start=$(date +%s)
nice -n 19 cmake -S "$ROOT/src" -B "$ROOT/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_C_FLAGS="$NO_AMX_FLAGS" -DCMAKE_CXX_FLAGS="$NO_AMX_FLAGS" \
  -DGGML_CUDA=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON >"$ROOT/configure.log" 2>&1 ||
  die "cmake configure failed; see $ROOT/configure.log"
: >"$ROOT/build.log"
# The benchmarks first (they need neither the server nor its multimodal library).
for group in "llama-bench llama-batched-bench" "llama-server llama-cli"; do
  # shellcheck disable=SC2086 # a group is a list of targets
  nice -n 19 cmake --build "$ROOT/build" --config Release -j "$JOBS" --target $group \
    >>"$ROOT/build.log" 2>&1 || die "the llama.cpp build failed; see $ROOT/build.log"
done
for target in "${TARGETS[@]}"; do
  cp "$ROOT/build/bin/$target" "$ROOT/bin/" || die "the build did not produce $target"
done
echo "$stamp_text" >"$STAMP"
echo "build_llama_cpp: built ${TARGETS[*]} in $(($(date +%s) - start)) s" >&2
echo "$ROOT/bin"
