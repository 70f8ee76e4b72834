# shellcheck shell=bash
# Shared by bench/compare/compare.sh and bench/compare/guidellm_check.sh
# (sourced, from the repository root): model resolution and starting and
# stopping a `tandem up` cluster or llama-server on 127.0.0.1.
#
# Callers set MODEL, THREADS, SLOTS, CTX and LOG_DIR (configs and server
# logs), and call `trap stop_server EXIT` (or a cleanup that calls it).

die() {
  echo "$(basename "$0" .sh): error: $*" >&2
  exit 1
}

# parse_flags HELP_LINES --flag=VAR ... -- "$@": sets each VAR from a
# "--flag VALUE" pair of the command line; -h / --help prints lines
# HELP_LINES (sed range) of the script's header.
parse_flags() {
  local help=$1
  shift
  local -A vars=()
  while [ "$1" != -- ]; do
    vars[${1%%=*}]=${1#*=}
    shift
  done
  shift
  while [ $# -gt 0 ]; do
    if [ "$1" = -h ] || [ "$1" = --help ]; then
      sed -n "${help}p" "$0" | sed 's/^# \{0,1\}//'
      exit 0
    fi
    [ -n "${vars[$1]:-}" ] || die "unknown argument '$1' (try --help)"
    [ $# -ge 2 ] || die "$1 needs a value"
    printf -v "${vars[$1]}" '%s' "$2"
    shift 2
  done
}

# require_positive_ints --flag:VALUE ...: dies naming the first flag whose
# value is not a positive integer.
require_positive_ints() {
  local pair
  for pair in "$@"; do
    [[ ${pair#*:} =~ ^[1-9][0-9]*$ ]] || die "${pair%%:*} must be a positive integer, got '${pair#*:}'"
  done
}

# resolve_model: GGUF = the file of model name MODEL, as engine::ResolveModelPath
# (common/engine/model_store.cc); checks the binaries the scripts run.
resolve_model() {
  local dir=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
  case "$MODEL" in
    smollm2-135m-instruct) GGUF=$dir/SmolLM2-135M-Instruct.Q4_1.gguf ;;
    qwen2.5-coder-0.5b-instruct) GGUF=$dir/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf ;;
    qwen2.5-coder-1.5b-instruct) GGUF=$dir/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf ;;
    *) die "unknown model '$MODEL' (smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct; docs/models.md)" ;;
  esac
  [ -f "$GGUF" ] || die "$GGUF missing: run scripts/fetch_models.sh (docs/models.md)"
  local b
  for b in tandem tandem-router tandem-prefill tandem-decode tandem-replay; do
    [ -x "build/bin/$b" ] || die "build/bin/$b missing: cmake --build build --target $b"
  done
  command -v curl >/dev/null || die "'curl' is not on PATH"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# tandem_config KIND: the `tandem up` YAML on stdout for KIND colocated or
# disaggregated, THREADS compute threads and SLOTS running sequences in all:
#   colocated      THREADS workers x 1 thread, max_running SLOTS/THREADS each
#   disaggregated  1 prefill (THREADS/2 threads) + 1 decode worker (THREADS/2
#                  threads, max_running SLOTS)
# KV for every slot's longest sequence (CTX tokens) in 16-token blocks.
tandem_config() {
  local kind=$1
  echo "model: $MODEL"
  echo "host: 127.0.0.1"
  echo "internal_tls: dev"
  echo "health_timeout: 300s"
  echo "grace: 15s"
  echo "router: {grpc_port: 0, http_port: 0, mode: $kind, limits: {max_inflight: 64}}"
  if [ "$kind" = colocated ]; then
    local per_worker=$((SLOTS / THREADS))
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
    local half=$((THREADS / 2)) blocks=$(((SLOTS * CTX + 15) / 16))
    cat <<YAML
prefill:
  replicas: 1
  config:
    threads: $half
    kv_blocks: $blocks
    block_size: 16
    chunk_size: 256
    heartbeat_interval: 1s
decode:
  replicas: 1
  config:
    threads: $half
    kv_blocks: $blocks
    block_size: 16
    max_running: $SLOTS
    reservation_deadline: 30s
    heartbeat_interval: 1s
YAML
  fi
}

server_pid=""

# start_server KIND: brings up KIND (colocated, disaggregated: `tandem up`;
# llama-server: bench/peer/llama_server.sh with -t THREADS -np SLOTS) and sets
# server_pid, GRPC_TARGET (Tandem only) and HTTP_TARGET (HOST:PORT); then
# sends one short warm-up completion (pages the model in; its prompt shares no
# prefix with tandem-replay's).
start_server() {
  local kind=$1
  # shellcheck disable=SC2034 # GRPC_TARGET is for the caller
  GRPC_TARGET=""
  if [ "$kind" = llama-server ]; then
    local port
    port=$(free_port)
    server_pid=$(TANDEM_PEER_LOG="$LOG_DIR/llama-server.log" \
      bench/peer/llama_server.sh "$GGUF" "$port" "$THREADS" "$SLOTS" "$CTX")
    HTTP_TARGET=127.0.0.1:$port
    warm_up
    return
  fi
  tandem_config "$kind" >"$LOG_DIR/$kind.yaml"
  build/bin/tandem up "$LOG_DIR/$kind.yaml" >"$LOG_DIR/$kind.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 1500); do
    grep -qs "cluster ready" "$LOG_DIR/$kind.log" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  grep -q "cluster ready" "$LOG_DIR/$kind.log" || {
    tail -n 30 "$LOG_DIR/$kind.log" >&2
    die "tandem up ($kind) did not become ready (log: $LOG_DIR/$kind.log)"
  }
  # shellcheck disable=SC2034 # GRPC_TARGET is for the caller
  GRPC_TARGET=$(sed -n 's/^  router *gRPC \([^ ]*\).*/\1/p' "$LOG_DIR/$kind.log" | head -1)
  HTTP_TARGET=$(sed -n 's/^  router *gRPC [^ ]* *HTTP http:\/\/\([^ ]*\).*/\1/p' "$LOG_DIR/$kind.log" | head -1)
  warm_up
}

warm_up() {
  curl -sf -o /dev/null --max-time 120 "http://$HTTP_TARGET/v1/completions" \
    -H 'Content-Type: application/json' \
    -d '{"prompt": "Warm-up: 1 2 3 4 5 6 7 8", "max_tokens": 4, "temperature": 0}' ||
    die "the warm-up completion on http://$HTTP_TARGET failed"
}

# stop_server: stops what start_server started (SIGTERM, then SIGKILL after 20 s).
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    # tandem up is our child; llama-server is not (setsid), so poll for it too.
    wait "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
