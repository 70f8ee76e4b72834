#!/usr/bin/env bash
# Admission control at twice a cluster's capacity (docs/benchmarks.md,
# section "Admission control at twice the capacity"; issue 11, item 5).
#
#   bench/compare/admission.sh [--model NAME] [--threads N] [--slots N]
#       [--input-tokens N] [--output-tokens N] [--seconds S] [--slo-ttft 2s]
#       [--max-queued N] [--out DIR]
#
# 1. capacity: a fresh colocated `tandem up` cluster (THREADS workers x 1
#    thread, SLOTS running sequences in all, as bench/compare/compare.sh)
#    served by a closed loop of SLOTS clients, 3 x SLOTS requests of fixed
#    lengths: its throughput_rps is the capacity C;
# 2. twice that: Poisson arrivals at 2 x C for --seconds, replayed by
#    tandem-replay over gRPC with --slo ttft=SLO, against a fresh cluster
#    without admission control (limits.max_inflight raised to 1024, so
#    nothing is refused) and then one with `admission: {max_ttft: SLO,
#    max_queued_requests: MAX_QUEUED}`; same seed, same prompts (the
#    ShareGPT sample in ../shared/traces/sharegpt-prompts-ml-energy).
# Prints one table (TTFT p50 / p99 of the OK requests, share refused with
# RESOURCE_EXHAUSTED, goodput) also written to DIR/table.md, with the
# machine's load (uptime) before and after each run.
#
# Nothing listens on or contacts anything but 127.0.0.1; every process
# started is stopped on exit. Needs build/bin/{tandem,tandem-router,
# tandem-decode,tandem-replay}. Helper Python (the table): the python3 first
# on PATH (stdlib only).
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=smollm2-135m-instruct
THREADS=2
SLOTS=8
INPUT_TOKENS=128
OUTPUT_TOKENS=32
SECONDS_PER_RUN=60
SLO_TTFT=2s
MAX_QUEUED=32
OUT=${TMPDIR:-/tmp}/tandem-admission-$(date -u +%Y%m%dT%H%M%SZ)

# shellcheck source=bench/compare/lib.sh
. bench/compare/lib.sh

parse_flags 2,26 --model=MODEL --threads=THREADS --slots=SLOTS --input-tokens=INPUT_TOKENS \
  --output-tokens=OUTPUT_TOKENS --seconds=SECONDS_PER_RUN --slo-ttft=SLO_TTFT \
  --max-queued=MAX_QUEUED --out=OUT -- "$@"
require_positive_ints "--threads:$THREADS" "--slots:$SLOTS" "--input-tokens:$INPUT_TOKENS" \
  "--output-tokens:$OUTPUT_TOKENS" "--seconds:$SECONDS_PER_RUN" "--max-queued:$MAX_QUEUED"
((SLOTS % THREADS == 0)) || die "--slots must be a multiple of --threads"
resolve_model
CTX=$((INPUT_TOKENS + OUTPUT_TOKENS + 16))
PROMPTS=$PWD/../shared/traces/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json
[ -f "$PROMPTS" ] || die "$PROMPTS missing (../shared, next to the repository)"

# lib.sh's cluster config, with the router's limits replaced by ROUTER_LIMITS.
eval "$(declare -f tandem_config | sed '1s/^tandem_config/lib_tandem_config/')"
tandem_config() {
  lib_tandem_config "$@" | sed "s/limits: {max_inflight: 64}}/$ROUTER_LIMITS}/"
}

mkdir -p "$OUT"
trap stop_server EXIT
trap 'exit 130' INT TERM

# run NAME ARGS...: a fresh colocated cluster, one tandem-replay run into
# $OUT/NAME, the cluster stopped.
run() {
  local name=$1
  shift
  local dir=$OUT/$name
  mkdir -p "$dir"
  LOG_DIR=$dir
  start_server colocated
  echo "admission: $name ($(uptime | sed 's/.*load/load/'))" >&2
  uptime >"$dir/uptime.before"
  build/bin/tandem-replay --target "$GRPC_TARGET" --protocol grpc --tokenizer "$GGUF" \
    --prompts "$PROMPTS" --input-tokens "$INPUT_TOKENS" --output-tokens "$OUTPUT_TOKENS" --seed 11 \
    --slo "ttft=$SLO_TTFT" --grace 60 --progress lines --plot=false --output "$dir" "$@" \
    >"$dir/stdout.txt" 2>"$dir/stderr.txt" ||
    die "tandem-replay failed ($dir/stderr.txt): $(tail -n 3 "$dir/stderr.txt")"
  uptime >"$dir/uptime.after"
  stop_server
}

lscpu | grep 'Model name' >"$OUT/cpu.txt" || true
ROUTER_LIMITS="limits: {max_inflight: 1024}"
run capacity --concurrency "$SLOTS" --max-requests $((3 * SLOTS))
CAPACITY=$(python3 -c "import json; print(json.load(open('$OUT/capacity/summary.json'))['throughput_rps'])")
RATE=$(python3 -c "print(round(2 * $CAPACITY, 3))")
echo "admission: capacity $CAPACITY requests/s; replaying at $RATE requests/s" >&2

run no-admission --arrival poisson --rate "$RATE" --duration "$SECONDS_PER_RUN"
ROUTER_LIMITS="limits: {max_inflight: 1024}, admission: {max_ttft: $SLO_TTFT, max_queued_requests: $MAX_QUEUED}"
run admission --arrival poisson --rate "$RATE" --duration "$SECONDS_PER_RUN"

python3 - "$OUT" "$CAPACITY" "$RATE" <<'PY' | tee "$OUT/table.md"
import json, os, sys
out, capacity, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print(f"capacity {capacity:.2f} req/s (closed loop), offered {rate:.2f} req/s (Poisson)\n")
print("| run | sent | OK | refused (429) | other errors | TTFT p50 OK (ms) | TTFT p99 OK (ms) "
      "| goodput (req/s) | load before / after |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ("no-admission", "admission"):
    d = os.path.join(out, name)
    s = json.load(open(os.path.join(d, "summary.json")))
    errors = s.get("errors", {})
    refused = errors.get("RESOURCE_EXHAUSTED", 0)
    other = sum(v for k, v in errors.items() if k != "RESOURCE_EXHAUSTED")
    sent = s["requests_sent"]
    t = s.get("ttft_s") or {}
    ms = lambda v: "-" if v is None else f"{1e3 * v:.0f}"
    load = lambda f: open(os.path.join(d, f)).read().split("load average:")[-1].split(",")[0].strip()
    print(f"| {name} | {sent} | {s['requests_ok']} | {refused} ({100.0 * refused / max(sent, 1):.0f} %) "
          f"| {other} | {ms(t.get('p50'))} | {ms(t.get('p99'))} | {s['goodput_rps']:.2f} "
          f"| {load('uptime.before')} / {load('uptime.after')} |")
PY
echo "admission: results in $OUT" >&2
