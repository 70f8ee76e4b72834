#!/usr/bin/env bash
# Starts llama.cpp's llama-server as the peer a user would otherwise pick, sized
# like a Tandem cluster under comparison (bench/compare): the same GGUF, the
# same total threads (-t, and -tb for prompt batches) and parallel slots (-np),
# CTX tokens of context per slot (-c PARALLEL*CTX, split evenly across the
# slots), listening on 127.0.0.1 only, without the web UI. Waits until /health
# answers, then prints the server's PID on stdout and returns; the server runs
# on (stop it with `kill PID`).
#
#   bench/peer/llama_server.sh MODEL_GGUF PORT THREADS PARALLEL [CTX]
#
# MODEL_GGUF is a path (the real models are in
# ${TANDEM_MODELS:-$HOME/.cache/tandem/models}, docs/models.md). CTX defaults
# to 2048. The binary comes from bench/peer/build_llama_cpp.sh (built on first
# use). The log goes to $TANDEM_PEER_LOG, default
# ${TMPDIR:-/tmp}/llama-server-PORT.log. $TANDEM_PEER_READY_S (default 300)
# bounds the wait for /health.
#
# Example, then an OpenAI completion against it:
#   pid=$(bench/peer/llama_server.sh ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf 8090 2 4)
#   curl -s 127.0.0.1:8090/v1/completions -H 'Content-Type: application/json' \
#     -d '{"prompt": "The capital of France is", "max_tokens": 16}'
#   kill "$pid"
set -euo pipefail

die() {
  echo "llama_server: error: $*" >&2
  exit 1
}

if [ "$#" -lt 4 ] || [ "$#" -gt 5 ]; then
  sed -n '10,10p' "$0" | sed 's/^# \{0,1\}/usage: /' >&2
  exit 2
fi
model=$1 port=$2 threads=$3 parallel=$4 ctx=${5:-2048}
for pair in "PORT:$port" "THREADS:$threads" "PARALLEL:$parallel" "CTX:$ctx"; do
  [[ ${pair#*:} =~ ^[1-9][0-9]*$ ]] || die "${pair%%:*} must be a positive integer, got '${pair#*:}'"
done
((port < 65536)) || die "PORT must be below 65536, got $port"

[ -f "$model" ] || die "model file '$model' does not exist (the real models: docs/models.md)"
command -v curl >/dev/null || die "'curl' is not on PATH (Debian: apt-get install curl)"
if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/health"; then
  die "something already answers on 127.0.0.1:$port"
fi

bin=$("$(dirname "$0")/build_llama_cpp.sh")
log=${TANDEM_PEER_LOG:-${TMPDIR:-/tmp}/llama-server-$port.log}
setsid "$bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" \
  -t "$threads" -tb "$threads" -np "$parallel" -c $((parallel * ctx)) --no-webui \
  </dev/null >"$log" 2>&1 &
pid=$!

deadline=$((SECONDS + ${TANDEM_PEER_READY_S:-300}))
until curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$port/health"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 20 "$log" >&2
    die "llama-server exited before it was ready (log: $log)"
  fi
  if ((SECONDS >= deadline)); then
    kill "$pid"
    die "llama-server was not ready within ${TANDEM_PEER_READY_S:-300} s (log: $log)"
  fi
  sleep 0.5
done
echo "llama_server: llama-server ready on 127.0.0.1:$port (pid $pid, log $log)" >&2
echo "$pid"
