#!/usr/bin/env bash
# KV-aware vs least-load placement on the same cluster, replayed with the
# same arrivals (docs/benchmarks.md, section "KV-aware placement (Mooncake
# conversation trace)"; issue 11, item 3).
#
#   bench/compare/placement.sh [--model NAME] [--workers N] [--window S]
#       [--every M] [--speedup X] [--max-requests N] [--repeats R] [--out DIR]
#
# Replays a sample of the Mooncake conversation trace: the first --window
# seconds of it (default 1200), every M-th conversation (--every, default
# 40: the rows whose hash_ids[1], the first block after the system prompt
# every row shares, is a multiple of M; a conversation's later turns share
# that block, so each sampled conversation keeps all its turns). A
# contiguous slice short enough to replay here holds almost no second turns
# (the turns of a conversation are minutes apart: 3-7 % of the blocks of any
# 60 consecutive requests repeat an earlier prefix, against 28 % in the
# default sample). The sample is written to DIR/trace.jsonl and replayed at
# its own arrival times sped up by --speedup (default 12), lengths scaled to
# the model as compare.sh does (prompts at 1/32 with 16-token hash blocks,
# at most 1024 tokens; outputs at 1/8, at most 64), against a `tandem up`
# cluster of N colocated workers
# (1 thread each, deploy/local/colocated.yaml's shape; KV for 8 sequences of
# 1104 tokens each, 552 blocks of 16) whose router places by `placement:
# kv_aware`, then `least_load`, alternating R times (so a change in the
# machine's load falls on both alike). Every run gets a fresh cluster and the
# same seed, so the same prompts at the same times; no run finds another's
# blocks in a prefix cache. Each run is bounded by --max-requests and the
# window (+ 30 s grace for requests in flight).
#
# Prints one table (also DIR/table.md): per placement and run, the
# prefix-cache hit rate (cached prompt tokens / prompt tokens, from the
# router's usage.cached_prompt_tokens in tandem-replay's records), TTFT
# mean / p50 / p90, requests ok / sent, and the load average before the run.
#
# Nothing listens on or contacts anything but 127.0.0.1; every process
# started is stopped on exit. Needs build/bin/{tandem,tandem-router,
# tandem-prefill,tandem-decode,tandem-replay}. Helper Python (the table): the
# python3 first on PATH (stdlib only).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

MODEL=smollm2-135m-instruct
WORKERS=2
WINDOW=1200
EVERY=40
SPEEDUP=12
MAX_REQUESTS=200
REPEATS=2
OUT=${TMPDIR:-/tmp}/tandem-placement-$(date -u +%Y%m%dT%H%M%SZ)

# shellcheck source=bench/compare/lib.sh
. bench/compare/lib.sh

parse_flags 2,40 --model=MODEL --workers=WORKERS --window=WINDOW --every=EVERY \
  --speedup=SPEEDUP --max-requests=MAX_REQUESTS --repeats=REPEATS --out=OUT -- "$@"
require_positive_ints "--workers:$WORKERS" "--window:$WINDOW" "--every:$EVERY" \
  "--max-requests:$MAX_REQUESTS" "--repeats:$REPEATS"
((WORKERS >= 2)) || die "--workers must be at least 2 (placement needs a choice)"
resolve_model

# lib.sh's colocated cluster: THREADS workers x 1 thread, SLOTS / THREADS
# sequences each, KV for CTX tokens per sequence.
THREADS=$WORKERS
SLOTS=$((8 * WORKERS))
CTX=$((1024 + 64 + 16))
MOONCAKE=$ROOT/../shared/traces/mooncake-fast25/conversation_trace.jsonl
PROMPTS=$ROOT/../shared/traces/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json
PLACEMENT=kv_aware

# lib.sh's config with the router's placement key added.
eval "lib_$(declare -f tandem_config)"
tandem_config() {
  lib_tandem_config "$@" | sed "s/^router: {\(.*\)}\$/router: {\1, placement: $PLACEMENT}/"
}

mkdir -p "$OUT"
# The sample (see the header): rows of the window whose hash_ids[1] % EVERY == 0.
python3 - "$MOONCAKE" "$WINDOW" "$EVERY" >"$OUT/trace.jsonl" <<'PY'
import json, sys
path, window_ms, every = sys.argv[1], float(sys.argv[2]) * 1000, int(sys.argv[3])
for line in open(path):
    row = json.loads(line)
    if row["timestamp"] >= window_ms:
        break
    ids = row.get("hash_ids", [])
    if len(ids) > 1 and ids[1] % every == 0:
        sys.stdout.write(line)
PY
[ -s "$OUT/trace.jsonl" ] || die "the sample of $MOONCAKE is empty (--window $WINDOW --every $EVERY)"
echo "placement: $(wc -l <"$OUT/trace.jsonl") requests in the sample" >&2
trap stop_server EXIT
trap 'exit 130' INT TERM
echo "placement: $MODEL ($GGUF), $WORKERS colocated workers, results in $OUT" >&2
lscpu | grep 'Model name' >"$OUT/cpu.txt" || true

for run in $(seq 1 "$REPEATS"); do
  for PLACEMENT in kv_aware least_load; do
    dir=$OUT/$PLACEMENT/run-$run
    mkdir -p "$dir"
    LOG_DIR=$dir
    start_server colocated
    grep -q "placement: $PLACEMENT" "$dir/colocated.yaml" || die "placement missing from $dir/colocated.yaml"
    uptime >"$dir/uptime.before"
    echo "placement: $PLACEMENT run $run ($(uptime | sed 's/.*load/load/'))" >&2
    build/bin/tandem-replay --target "$HTTP_TARGET" --protocol http --tokenizer "$GGUF" \
      --prompts "$PROMPTS" --trace "$OUT/trace.jsonl" --input-scale 0.03125 \
      --hash-block-tokens 16 --max-input-tokens 1024 --output-scale 0.125 \
      --max-output-tokens 64 --max-requests "$MAX_REQUESTS" --speedup "$SPEEDUP" \
      --duration "$WINDOW" --grace 30 --progress lines --plot=false --output "$dir" \
      >"$dir/stdout.txt" 2>"$dir/stderr.txt" ||
      die "tandem-replay failed ($dir/stderr.txt): $(tail -n 3 "$dir/stderr.txt")"
    uptime >"$dir/uptime.after"
    stop_server
  done
done

python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, pathlib, sys

out = pathlib.Path(sys.argv[1])
print("| placement | run | prefix-cache hit rate | cached / prompt tokens | TTFT mean ms "
      "| TTFT p50 ms | TTFT p90 ms | ok / sent | load before |")
print("|---|---|---|---|---|---|---|---|---|")
totals = {}
for placement in ("kv_aware", "least_load"):
    for run in sorted((out / placement).glob("run-*"), key=lambda p: int(p.name[4:])):
        s = json.loads((run / "summary.json").read_text())
        t = s["ttft_s"]
        ms = lambda v: "–" if v is None else f"{1000 * v:.0f}"
        rate = s["cached_prompt_tokens"] / s["input_tokens"] if s["input_tokens"] else 0
        load = (run / "uptime.before").read_text().split("load average:")[-1].strip()
        print(f"| {placement} | {run.name[4:]} | {100 * rate:.1f} % | "
              f"{s['cached_prompt_tokens']} / {s['input_tokens']} | {ms(t['mean'])} | "
              f"{ms(t['p50'])} | {ms(t['p90'])} | {s['requests_ok']} / {s['requests_sent']} | {load} |")
        agg = totals.setdefault(placement, [0, 0, [], []])
        agg[0] += s["cached_prompt_tokens"]
        agg[1] += s["input_tokens"]
        if t["mean"] is not None:
            agg[2].append(t["mean"])
            agg[3].append(t["p50"])
print()
print("| placement | hit rate, all runs | mean of runs' TTFT mean ms | mean of runs' TTFT p50 ms |")
print("|---|---|---|---|")
for placement, (cached, prompt, means, p50s) in totals.items():
    avg = lambda xs: f"{1000 * sum(xs) / len(xs):.0f}" if xs else "–"
    print(f"| {placement} | {100 * cached / max(prompt, 1):.1f} % | {avg(means)} | {avg(p50s)} |")
PY
