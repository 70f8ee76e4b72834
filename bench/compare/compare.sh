#!/usr/bin/env bash
# Colocated vs disaggregated Tandem vs llama.cpp's llama-server, on one real
# model, replayed by the same tandem-replay (docs/benchmarks.md, section
# "Colocated vs disaggregated (tandem-replay)"; issue 10, part 2).
#
#   bench/compare/compare.sh [--model NAME] [--traces azure,mooncake]
#       [--systems colocated,disaggregated,llama-server] [--threads N]
#       [--slots N] [--max-requests N] [--seconds S] [--rates R1,R2,...]
#       [--slo ttft=2s,tpot=200ms] [--speedup-azure X] [--speedup-mooncake X]
#       [--out DIR]
#
# For each system in turn it brings the server up on 127.0.0.1 (a `tandem up`
# cluster shaped like deploy/local/colocated.yaml or disaggregated.yaml,
# written to a temp dir; or bench/peer/llama_server.sh), then for each trace:
#   1. replays a slice of the trace (its own arrival times, sped up / slowed
#      down for this machine, lengths scaled to the model): the "trace" row;
#   2. a rate sweep: Poisson arrivals at each --rates value with the same
#      trace's lengths, each run bounded by --max-requests and --seconds; the
#      best goodput over the sweep is the system's max goodput.
# Then it prints one side-by-side table per trace from the summary.json files
# and writes it to DIR/table.md.
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
# clusters, llama-server queues without bound.
#
# Defaults are sized for a 2-core machine and SmolLM2-135M (about 35 min in
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
MAX_REQUESTS=60
SECONDS_PER_RUN=60
RATES=0.5,1,2,4
SLO=ttft=2s,tpot=200ms
SPEEDUP_AZURE=1
SPEEDUP_MOONCAKE=1
OUT=${TMPDIR:-/tmp}/tandem-compare-$(date -u +%Y%m%dT%H%M%SZ)

die() {
  echo "compare: error: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2 ;;
    --traces) TRACES=$2 ;;
    --systems) SYSTEMS=$2 ;;
    --threads) THREADS=$2 ;;
    --slots) SLOTS=$2 ;;
    --max-requests) MAX_REQUESTS=$2 ;;
    --seconds) SECONDS_PER_RUN=$2 ;;
    --rates) RATES=$2 ;;
    --slo) SLO=$2 ;;
    --speedup-azure) SPEEDUP_AZURE=$2 ;;
    --speedup-mooncake) SPEEDUP_MOONCAKE=$2 ;;
    --out) OUT=$2 ;;
    -h | --help)
      sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  shift 2
done
for pair in "--threads:$THREADS" "--slots:$SLOTS" "--max-requests:$MAX_REQUESTS" \
  "--seconds:$SECONDS_PER_RUN"; do
  [[ ${pair#*:} =~ ^[1-9][0-9]*$ ]] || die "${pair%%:*} must be a positive integer, got '${pair#*:}'"
done
((THREADS % 2 == 0)) || die "--threads must be even (disaggregated splits it between prefill and decode)"
((SLOTS % THREADS == 0)) || die "--slots must be a multiple of --threads (colocated splits it between workers)"

# Model name -> GGUF file, as engine::ResolveModelPath (common/engine/model_store.cc).
MODELS_DIR=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
case "$MODEL" in
  smollm2-135m-instruct) GGUF=$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf ;;
  qwen2.5-coder-0.5b-instruct) GGUF=$MODELS_DIR/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf ;;
  qwen2.5-coder-1.5b-instruct) GGUF=$MODELS_DIR/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf ;;
  *) die "unknown model '$MODEL' (smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct; docs/models.md)" ;;
esac
[ -f "$GGUF" ] || die "$GGUF missing: run scripts/fetch_models.sh (docs/models.md)"
for b in tandem tandem-router tandem-prefill tandem-decode tandem-replay; do
  [ -x "build/bin/$b" ] || die "build/bin/$b missing: cmake --build build --target $b"
done
command -v curl >/dev/null || die "'curl' is not on PATH"

TRACE_DIR=$ROOT/../shared/traces
AZURE=$TRACE_DIR/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv
MOONCAKE=$TRACE_DIR/mooncake-fast25/conversation_trace.jsonl
PROMPTS=$TRACE_DIR/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json

# Lengths scaled to a small model on a 2-core CPU (the traces were served by
# large models on GPUs): the Azure code trace's prompts (median 1469 tokens)
# at 1/4, at most 1024, its outputs (median 13) as they are, at most 64; the
# Mooncake conversation trace's prompts (mean 12035) at 1/16 with 32-token
# hash blocks (512/16, so its prefix sharing is kept), at most 2048, outputs
# (mean 343) at 1/8, at most 64.
trace_args() {
  case "$1" in
    azure)
      echo "--trace $AZURE --input-scale 0.25 --max-input-tokens 1024 --max-output-tokens 64"
      ;;
    mooncake)
      echo "--trace $MOONCAKE --input-scale 0.0625 --hash-block-tokens 32 --max-input-tokens 2048
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
CTX=$((2048 + 64 + 16)) # llama-server context per slot: the longest prompt + output (+ BOS)

mkdir -p "$OUT"
work=$(mktemp -d)
server_pid=""
server_kind=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    # tandem up is our child; llama-server is not (setsid), so poll for it.
    wait "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts SYSTEM; sets server_pid, TARGET (HOST:PORT of the OpenAI front or
# gRPC front) and PROTOCOL.
start_server() {
  local kind=$1
  server_kind=$kind
  if [ "$kind" = llama-server ]; then
    local port
    port=$(free_port)
    server_pid=$(TANDEM_PEER_LOG="$OUT/llama-server.log" \
      bench/peer/llama_server.sh "$GGUF" "$port" "$THREADS" "$SLOTS" "$CTX")
    TARGET=127.0.0.1:$port
    PROTOCOL=http
    return
  fi
  local half=$((THREADS / 2)) per_worker=$((SLOTS / THREADS))
  # KV for every slot's longest sequence (CTX tokens) in 16-token blocks.
  local blocks_all=$(((SLOTS * CTX + 15) / 16))
  {
    echo "model: $MODEL"
    echo "host: 127.0.0.1"
    echo "internal_tls: dev"
    echo "health_timeout: 300s"
    echo "grace: 15s"
    echo "router: {grpc_port: 0, http_port: 0, mode: $kind, limits: {max_inflight: 64}}"
    if [ "$kind" = colocated ]; then
      cat <<YAML
colocated:
  replicas: $THREADS
  config:
    threads: 1
    kv_blocks: $(((per_worker * CTX + 15) / 16))
    block_size: 16
    max_running: $per_worker
    heartbeat_interval: 1s
YAML
    else
      cat <<YAML
prefill:
  replicas: 1
  config:
    threads: $half
    kv_blocks: $blocks_all
    block_size: 16
    chunk_size: 256
    heartbeat_interval: 1s
decode:
  replicas: 1
  config:
    threads: $half
    kv_blocks: $blocks_all
    block_size: 16
    max_running: $SLOTS
    reservation_deadline: 30s
    heartbeat_interval: 1s
YAML
    fi
  } >"$work/$kind.yaml"
  cp "$work/$kind.yaml" "$OUT/$kind.yaml"
  build/bin/tandem up "$work/$kind.yaml" >"$OUT/$kind.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 1500); do
    grep -q "cluster ready" "$OUT/$kind.log" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  grep -q "cluster ready" "$OUT/$kind.log" || {
    tail -n 30 "$OUT/$kind.log" >&2
    die "tandem up ($kind) did not become ready (log: $OUT/$kind.log)"
  }
  TARGET=$(sed -n 's/^  router *gRPC \([^ ]*\).*/\1/p' "$OUT/$kind.log" | head -1)
  PROTOCOL=grpc
}

# replay NAME ARGS...: one tandem-replay run into $OUT/$trace/$kind/NAME.
replay() {
  local name=$1
  shift
  local dir=$OUT/$trace/$server_kind/$name
  mkdir -p "$dir"
  echo "compare: $trace / $server_kind / $name ($(uptime | sed 's/.*load/load/'))" >&2
  uptime >"$dir/uptime.before"
  # shellcheck disable=SC2046 # trace_args is a list of flags
  build/bin/tandem-replay --target "$TARGET" --protocol "$PROTOCOL" --tokenizer "$GGUF" \
    --prompts "$PROMPTS" $(trace_args "$trace") --max-requests "$MAX_REQUESTS" \
    --slo "$SLO" --grace 30 --progress lines --plot=false --output "$dir" "$@" \
    >"$dir/stdout.txt" 2>"$dir/stderr.txt" ||
    die "tandem-replay failed ($dir/stderr.txt): $(tail -n 3 "$dir/stderr.txt")"
  uptime >"$dir/uptime.after"
}

IFS=, read -r -a systems <<<"$SYSTEMS"
IFS=, read -r -a traces <<<"$TRACES"
IFS=, read -r -a rates <<<"$RATES"
echo "compare: $MODEL ($GGUF), $THREADS threads and $SLOTS slots per system, results in $OUT" >&2
lscpu | grep 'Model name' >"$OUT/cpu.txt" || true
for kind in "${systems[@]}"; do
  case "$kind" in colocated | disaggregated | llama-server) ;; *) die "unknown system '$kind'" ;; esac
  start_server "$kind"
  for trace in "${traces[@]}"; do
    case "$trace" in azure | mooncake) ;; *) die "unknown trace '$trace'" ;; esac
    speedup=$(speedup_of "$trace")
    # Trace time: SECONDS_PER_RUN of wall time is SECONDS_PER_RUN * speedup of trace.
    replay trace --speedup "$speedup" \
      --duration "$(python3 -c "print($SECONDS_PER_RUN * $speedup)")"
    for rate in "${rates[@]}"; do
      replay "rate-$rate" --arrival poisson --rate "$rate" --duration "$SECONDS_PER_RUN"
    done
  done
  stop_server
done

python3 "$ROOT/bench/compare/compare_table.py" "$OUT" | tee "$OUT/table.md"
