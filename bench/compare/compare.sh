#!/usr/bin/env bash
# Colocated vs disaggregated Tandem vs llama.cpp's llama-server, on one real
# model, replayed by the same tandem-replay (docs/benchmarks.md, section
# "Colocated vs disaggregated (tandem-replay)"; issue 10, part 2).
#
#   bench/compare/compare.sh [--model NAME] [--traces azure,mooncake]
#       [--systems colocated,disaggregated,llama-server] [--threads N]
#       [--slots N] [--max-requests N] [--seconds S] [--rates R1,R2,...]
#       [--slo ttft=2s,tpot=200ms] [--speedup-azure X] [--speedup-mooncake X]
#       [--tandem-protocol http|grpc] [--out DIR]
#
# For each trace, it replays
#   1. a slice of the trace (its own arrival times, slowed down or sped up for
#      this machine, lengths scaled to the model): the "trace" row;
#   2. a rate sweep: Poisson arrivals at each --rates value with the same
#      trace's lengths in the same order; the best goodput over the sweep is
#      the system's max goodput;
# against each system in turn (interleaved, so a change in the machine's load
# falls on all of them alike). Every run gets a fresh server on 127.0.0.1 (a
# `tandem up` cluster shaped like deploy/local/colocated.yaml or
# disaggregated.yaml, or bench/peer/llama_server.sh) and one warm-up request,
# so no run finds an earlier one's prompts in the prefix cache or its KV pools
# still full (all runs use the same seed, so the same prompts). Each run is bounded by --max-requests and --seconds (+ 30 s
# grace for requests in flight). Then it prints one side-by-side table per
# trace from the summary.json files, also written to DIR/table.md.
#
# Same resources for every system: THREADS compute threads in all
# (--threads, default 2: the cores of this machine) and SLOTS concurrent
# sequences in all (--slots, default 16):
#   colocated      THREADS workers x 1 thread, max_running SLOTS/THREADS each
#                  (deploy/local/colocated.yaml's shape: 2 x 1 thread)
#   disaggregated  1 prefill worker (THREADS/2 threads) + 1 decode worker
#                  (THREADS/2 threads, max_running SLOTS)
#   llama-server   -t THREADS -np SLOTS, CTX tokens of context per slot
# Every request is open-loop; the router's max_inflight is 64 for both Tandem
# clusters, llama-server queues without bound. Every system is replayed over
# its OpenAI /v1/completions front (SSE; the same client code for all three
# rows); --tandem-protocol grpc replays the Tandem clusters over gRPC instead.
#
# Defaults are sized for a 2-core machine and SmolLM2-135M (about 17 min in
# all); --max-requests / --seconds / --rates shrink it. Nothing listens on or
# contacts anything but 127.0.0.1; every process started is stopped on exit.
# Needs build/bin/{tandem,tandem-router,tandem-prefill,tandem-decode,
# tandem-replay}; llama-server is built by bench/peer/build_llama_cpp.sh on
# first use. Helper Python (the table): the python3 first on PATH (stdlib only).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

MODEL=smollm2-135m-instruct
TRACES=azure,mooncake
SYSTEMS=colocated,disaggregated,llama-server
THREADS=2
SLOTS=16
MAX_REQUESTS=30
SECONDS_PER_RUN=30
RATES=0.25,0.5,1,2
SLO=ttft=2s,tpot=200ms
SPEEDUP_AZURE=1
SPEEDUP_MOONCAKE=0.25
TANDEM_PROTOCOL=http
OUT=${TMPDIR:-/tmp}/tandem-compare-$(date -u +%Y%m%dT%H%M%SZ)

# shellcheck source=bench/compare/lib.sh
. bench/compare/lib.sh

parse_flags 2,46 --model=MODEL --traces=TRACES --systems=SYSTEMS --threads=THREADS \
  --slots=SLOTS --max-requests=MAX_REQUESTS --seconds=SECONDS_PER_RUN --rates=RATES --slo=SLO \
  --speedup-azure=SPEEDUP_AZURE --speedup-mooncake=SPEEDUP_MOONCAKE \
  --tandem-protocol=TANDEM_PROTOCOL --out=OUT -- "$@"
require_positive_ints "--threads:$THREADS" "--slots:$SLOTS" "--max-requests:$MAX_REQUESTS" \
  "--seconds:$SECONDS_PER_RUN"
((THREADS % 2 == 0)) || die "--threads must be even (disaggregated splits it between prefill and decode)"
((SLOTS % THREADS == 0)) || die "--slots must be a multiple of --threads (colocated splits it between workers)"

resolve_model

TRACE_DIR=$ROOT/../shared/traces
AZURE=$TRACE_DIR/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv
MOONCAKE=$TRACE_DIR/mooncake-fast25/conversation_trace.jsonl
PROMPTS=$TRACE_DIR/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json

# Lengths scaled to SmolLM2-135M on a 2-core CPU (the traces were served by
# large models on GPUs): the Azure code trace's prompts (median 1469 tokens)
# at 1/8, at most 512, its outputs (median 13) as they are, at most 64; the
# Mooncake conversation trace's prompts (mean 12035) at 1/32 with 16-token
# hash blocks (512/32, so its prefix sharing is kept), at most 1024, outputs
# (mean 343) at 1/8, at most 64.
trace_args() {
  case "$1" in
    azure)
      echo "--trace $AZURE --input-scale 0.125 --max-input-tokens 512 --max-output-tokens 64"
      ;;
    mooncake)
      echo "--trace $MOONCAKE --input-scale 0.03125 --hash-block-tokens 16 --max-input-tokens 1024
            --output-scale 0.125 --max-output-tokens 64"
      ;;
  esac
}
speedup_of() {
  case "$1" in
    azure) echo "$SPEEDUP_AZURE" ;;
    mooncake) echo "$SPEEDUP_MOONCAKE" ;;
  esac
}
CTX=$((1024 + 64 + 16)) # context per slot: the longest prompt + output (+ BOS)

mkdir -p "$OUT"
trap stop_server EXIT
trap 'exit 130' INT TERM

# replay KIND NAME ARGS...: a fresh KIND server, one tandem-replay run into
# $OUT/$trace/KIND/NAME, the server stopped.
replay() {
  local kind=$1 name=$2
  shift 2
  local dir=$OUT/$trace/$kind/$name
  mkdir -p "$dir"
  LOG_DIR=$dir
  start_server "$kind"
  echo "compare: $trace / $kind / $name ($(uptime | sed 's/.*load/load/'))" >&2
  uptime >"$dir/uptime.before"
  local target=$HTTP_TARGET protocol=http
  if [ "$TANDEM_PROTOCOL" = grpc ] && [ -n "$GRPC_TARGET" ]; then
    target=$GRPC_TARGET protocol=grpc
  fi
  # shellcheck disable=SC2046 # trace_args is a list of flags
  build/bin/tandem-replay --target "$target" --protocol "$protocol" --tokenizer "$GGUF" \
    --prompts "$PROMPTS" $(trace_args "$trace") --max-requests "$MAX_REQUESTS" \
    --slo "$SLO" --grace 30 --progress lines --plot=false --output "$dir" "$@" \
    >"$dir/stdout.txt" 2>"$dir/stderr.txt" ||
    die "tandem-replay failed ($dir/stderr.txt): $(tail -n 3 "$dir/stderr.txt")"
  uptime >"$dir/uptime.after"
  stop_server
}

IFS=, read -r -a systems <<<"$SYSTEMS"
IFS=, read -r -a traces <<<"$TRACES"
IFS=, read -r -a rates <<<"$RATES"
echo "compare: $MODEL ($GGUF), $THREADS threads and $SLOTS slots per system, results in $OUT" >&2
lscpu | grep 'Model name' >"$OUT/cpu.txt" || true
for kind in "${systems[@]}"; do
  case "$kind" in colocated | disaggregated | llama-server) ;; *) die "unknown system '$kind'" ;; esac
done
for trace in "${traces[@]}"; do
  case "$trace" in azure | mooncake) ;; *) die "unknown trace '$trace'" ;; esac
  speedup=$(speedup_of "$trace")
  for kind in "${systems[@]}"; do
    # Trace time: SECONDS_PER_RUN of wall time is SECONDS_PER_RUN * speedup of trace.
    replay "$kind" trace --speedup "$speedup" \
      --duration "$(python3 -c "print($SECONDS_PER_RUN * $speedup)")"
  done
  for rate in "${rates[@]}"; do
    for kind in "${systems[@]}"; do
      replay "$kind" "rate-$rate" --arrival poisson --rate "$rate" --duration "$SECONDS_PER_RUN"
    done
  done
done

python3 "$ROOT/bench/compare/compare_table.py" "$OUT" | tee "$OUT/table.md"
