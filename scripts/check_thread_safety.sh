#!/usr/bin/env bash
# Builds the whole tree (libraries, binaries, tests, benchmarks) with clang and
# -Wthread-safety(-beta) as errors (TANDEM_THREAD_SAFETY=ON), so a
# guarded field touched without its lock, or a ...Locked() helper called
# without it, fails the build. Debug: the analysis needs no optimizer.
#
# Usage: scripts/check_thread_safety.sh [build dir, default build-clang]
# Uses ccache when installed; set JOBS to change the parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${1:-build-clang}"
jobs="${JOBS:-2}"

for tool in clang clang++ cmake ninja; do
  if ! command -v "$tool" >/dev/null; then
    echo "check_thread_safety: $tool is not installed" >&2
    exit 1
  fi
done

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DTANDEM_THREAD_SAFETY=ON -DTANDEM_BUILD_TESTS=ON -DTANDEM_BUILD_BENCHMARKS=ON "${launcher[@]}"

log="$build_dir/thread_safety_build.log"
if ! cmake --build "$build_dir" -j "$jobs" 2>&1 | tee "$log"; then
  if grep -q -E 'error: .*\[-Werror,-Wthread-safety' "$log"; then
    echo "check_thread_safety: FAILED: thread-safety errors:" >&2
    grep -E 'error: .*\[-Werror,-Wthread-safety' "$log" | sort -u >&2
  else
    echo "check_thread_safety: FAILED: the clang build failed (see $log)" >&2
  fi
  exit 1
fi
echo "check_thread_safety: OK (no thread-safety findings)"
