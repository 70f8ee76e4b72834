#!/usr/bin/env bash
# Builds the tests labelled `tsan` (thread pool, work queue, KV transports,
# both worker engines, the router's registry and watcher, the in-process
# router and the integration tests that fit) under ThreadSanitizer in
# build-tsan/, with the binaries they start, and runs them. Fails on a
# failing test and on any TSan report, the reports of worker and router
# subprocesses included (they are collected from build-tsan/tsan-logs/).
#
# Needs scripts/setup.sh --deps and ../shared (models) next to the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-tsan

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -G Ninja -DTANDEM_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTANDEM_BUILD_BENCHMARKS=OFF "${launcher[@]}"
cmake --build "$BUILD" -j2 --target tsan_tests

logs="$PWD/$BUILD/tsan-logs"
rm -rf "$logs"
mkdir -p "$logs"
# halt_on_error: a report ends the process (exit 66), so the test fails even
# where the report is a subprocess's. log_path: every process, subprocesses
# included, writes its reports to $logs/tsan.<pid>, checked below.
# ignore_noninstrumented_modules: memcpy, free, ... called from inside
# libraries not built with TSan (gRPC, UCX, Abseil, glog) are not checked;
# their locking still is. The rest is in tests/tsan.supp.
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 log_path=$logs/tsan"
# UCX's memory hooks (libucm) patch madvise, which glibc calls on a thread's
# way out after TSan has let the thread go: a crash in TSan's rwlock hook.
export UCX_MEM_MMAP_HOOK_MODE=none

status=0
ctest --test-dir "$BUILD" -L tsan -j2 --output-on-failure --no-tests=error --timeout 600 || status=$?

if compgen -G "$logs/tsan.*" >/dev/null; then
  echo "check_tsan: ThreadSanitizer reports:" >&2
  for f in "$logs"/tsan.*; do
    echo "--- $f" >&2
    cat "$f" >&2
  done
  status=1
fi
exit "$status"
