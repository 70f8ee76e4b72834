#!/usr/bin/env bash
# Added time-to-first-token of disaggregated vs colocated serving at low load:
# one 512-token prompt at a time (max_tokens 1) on the TinyLlama-shaped Q4_0
# model that build/bin/engine_benchmark writes to build/bench-models/, through
# a `tandem up` cluster of each kind, alternating between them REPS times.
# Prints each TTFT the router reports and the medians and their ratio.
#
#   bench/cluster/ttft_bench.sh [REPS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-3}
THREADS=${2:-1}
MODEL=$PWD/build/bench-models/tinyllama-shape-Q4_0.gguf
if [ ! -f "$MODEL" ]; then
  echo "ttft_bench: $MODEL missing: run build/bin/engine_benchmark --benchmark_filter=BM_Prefill/type:2 once" >&2
  exit 1
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

worker_cfg="threads: $THREADS
    kv_blocks: 96
    chunk_size: 512
    token_budget: 512
    kv_dtype: f16"
cat >"$work/disaggregated.yaml" <<YAML
model: $MODEL
host: 127.0.0.1
health_timeout: 300s
router: {mode: disaggregated, limits: {max_inflight: 4}}
prefill:
  replicas: 1
  config:
    $worker_cfg
decode:
  replicas: 1
  config:
    $worker_cfg
YAML
cat >"$work/colocated.yaml" <<YAML
model: $MODEL
host: 127.0.0.1
health_timeout: 300s
router: {mode: colocated, limits: {max_inflight: 4}}
colocated:
  replicas: 1
  config:
    $worker_cfg
YAML

declare -A router
for kind in disaggregated colocated; do
  build/bin/tandem up "$work/$kind.yaml" >"$work/$kind.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 1500); do grep -q "cluster ready" "$work/$kind.log" && break; sleep 0.2; done
  grep -q "cluster ready" "$work/$kind.log" || { cat "$work/$kind.log" >&2; exit 1; }
  router[$kind]=$(sed -n 's/^  router *gRPC \([^ ]*\).*/\1/p' "$work/$kind.log" | head -1)
done

ids=$(python3 -c "print(','.join(['1'] + [str(100 + (i * 37) % 20000) for i in range(511)]))")
declare -A ttfts
for rep in $(seq 1 "$REPS"); do
  for kind in disaggregated colocated; do
    # A different first token per run keeps the prefix cache out of it.
    line=$(build/bin/tandem generate --router "${router[$kind]}" --prompt-ids "1,$((200 + rep)),${ids#1,}" \
             --max-tokens 1 --timeout 600s 2>&1 >/dev/null | grep -o 'ttft=[0-9.]*s')
    t=${line#ttft=}; t=${t%s}
    echo "rep $rep $kind ttft ${t}s"
    ttfts[$kind]+="$t "
  done
done
python3 - "${ttfts[disaggregated]}" "${ttfts[colocated]}" <<'PY'
import statistics, sys
d = [float(x) for x in sys.argv[1].split()]
c = [float(x) for x in sys.argv[2].split()]
md, mc = statistics.median(d), statistics.median(c)
print(f"median TTFT disaggregated {md:.3f}s colocated {mc:.3f}s: added {100 * (md / mc - 1):+.1f}%")
PY
