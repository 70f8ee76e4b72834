#!/usr/bin/env bash
# Runs the whole test suite from a clean checkout (.ci/run runs exactly this):
#   1. installs dependencies, builds (Release; fails if the compiler printed
#      any warning) and runs ctest: every label (unit, parser, integration, docs);
#   2. rebuilds the untrusted-input parsers (GGUF, tokenizer, UTF-8) under
#      AddressSanitizer + UBSan and runs their tests (label parser);
#   3. builds the whole tree with clang -Wthread-safety -Werror=thread-safety
#      (scripts/check_thread_safety.sh);
#   4. builds and runs the tests labelled tsan under ThreadSanitizer
#      (scripts/check_tsan.sh);
#   5. builds the libFuzzer harnesses (clang, ASan + UBSan) and runs each for
#      60 s from its committed seed corpus (scripts/check_fuzz.sh 60;
#      docs/fuzzing.md).
#
# Needs ../shared (models and traces) next to the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d ../shared/models ]; then
  echo "test: ../shared/models is missing: check out the shared models next to this repository" >&2
  exit 1
fi

# The build must print no warnings. From a clean checkout every file compiles
# here (and ccache, when it is the compiler launcher, replays a cached file's
# warnings); in an incremental build only recompiled files are checked.
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
# The tokenizer tests read the Qwen2.5-Coder-0.5B vocabulary: fetch it too
# (491 MB, about 25 s; docs/models.md).
TANDEM_FETCH_QWEN="${TANDEM_FETCH_QWEN:-1}" scripts/setup.sh 2>&1 | tee "$build_log"
if grep -q ": warning: " "$build_log"; then
  echo "test: the build printed compiler warnings; fix them (silence a false positive at the" \
    "narrowest scope, with a comment saying why):" >&2
  grep ": warning: " "$build_log" | sort -u >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j2 --timeout 900 --no-tests=error

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTANDEM_ASAN=ON \
  -DTANDEM_BUILD_BENCHMARKS=OFF
cmake --build build-asan -j2 --target gguf_test tokenizer_test utf8_test
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j2 -L parser --no-tests=error \
  --timeout 900

scripts/check_thread_safety.sh
scripts/check_tsan.sh
scripts/check_fuzz.sh 60
