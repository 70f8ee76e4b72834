#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang with
# -fsanitize=fuzzer,address,undefined) in build-fuzz/ and runs each for
# SECONDS_EACH seconds (default 60) on a fresh copy of its committed seed
# corpus (the committed corpus never grows here). Fails on any crash, leak,
# UBSan or ASan report, timeout, out-of-memory or failed property; prints
# each fuzzer's executions and final corpus size. docs/fuzzing.md has the
# longer runs and how to reproduce a crash.
#
#   scripts/check_fuzz.sh [SECONDS_EACH] [FUZZER...]   (default: all five)
#
# Needs clang (libclang_rt.fuzzer), scripts/setup.sh --deps and ../shared (models).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-fuzz
seconds="${1:-60}"
shift || true
fuzzers=("$@")
if [ ${#fuzzers[@]} -eq 0 ]; then
  fuzzers=(gguf_reader_fuzzer tokenizer_fuzzer openai_request_fuzzer chat_template_fuzzer
    worker_rpc_fuzzer)
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DTANDEM_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_BUILD_BENCHMARKS=OFF "${launcher[@]}"
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${fuzzers[@]}"

work="$PWD/$BUILD/fuzz-run"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
summary=()
for f in "${fuzzers[@]}"; do
  corpus="$work/$f/corpus"
  rm -rf "${work:?}/$f"
  mkdir -p "$corpus" "$work/$f/artifacts"
  cp tests/fuzz/corpus/"$f"/* "$corpus"/
  args=(-max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1
    -artifact_prefix="$work/$f/artifacts/")
  if [ -f tests/fuzz/"$f".dict ]; then
    args+=(-dict=tests/fuzz/"$f".dict)
  fi
  log="$work/$f/log"
  echo "check_fuzz: $f for ${seconds}s (log: $log)"
  rc=0
  "$BUILD/bin/$f" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  size=$(find "$corpus" -type f | wc -l)
  bytes=$(du -sb "$corpus" | cut -f1)
  summary+=("$f: ${execs:-?} executions, corpus $size files, $bytes bytes")
  if [ "$rc" -ne 0 ] || compgen -G "$work/$f/artifacts/*" >/dev/null; then
    echo "check_fuzz: $f FAILED (exit $rc); its log ends:" >&2
    tail -60 "$log" >&2
    ls "$work/$f/artifacts" >&2
    status=1
  fi
done
printf 'check_fuzz: %s\n' "${summary[@]}"
if [ "$status" -eq 0 ]; then
  echo "check_fuzz: OK"
fi
exit "$status"
