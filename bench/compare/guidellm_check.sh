#!/usr/bin/env bash
# Cross-checks tandem-replay against GuideLLM, the load generator users
# already trust (docs/benchmarks.md, section "tandem-replay vs GuideLLM";
# issue 10): both run at the same fixed rate with the same prompt and output
# lengths against the same router's OpenAI front, and their TTFT and
# inter-token latency medians are compared (target: within 15 %).
#
#   bench/compare/guidellm_check.sh [--model NAME]
#       [--system colocated|disaggregated|llama-server|mock]
#       [--rate R] [--prompt-tokens P] [--output-tokens O] [--requests N]
#       [--reps K] [--out DIR] [--server-cpus LIST --client-cpus LIST]
#
# 1. GuideLLM 0.8.1 (PyPI, pinned) in a venv under
#    ${TANDEM_VENVS:-$HOME/.cache/tandem/venvs}/guidellm-0.8.1 (installed on
#    first use, by the python3 first on PATH; it pulls torch, ~4 GB), never in
#    the repository.
# 2. A Hugging Face tokenizer directory for the served GGUF, built offline
#    (bench/compare/hf_tokenizer_dir.py, python3 first on PATH) under
#    ${TANDEM_HF_TOKENIZERS:-$HOME/.cache/tandem/hf-tokenizers}/MODEL; GuideLLM
#    runs with HF_HUB_OFFLINE=1.
# 3. The system (default a colocated `tandem up` cluster as bench/compare/compare.sh
#    brings up: 2 workers x 1 thread) on 127.0.0.1.
#    --system mock is GuideLLM's own mock server (`guidellm mock-server`) with
#    a known TTFT (200 ms) and ITL (20 ms): the ground truth that tells which
#    tool measures wrong where they disagree.
# 4. K times, alternating: GuideLLM unchanged (`guidellm run`, openai_http
#    backend on /v1/completions, constant profile at R requests/s, synthetic
#    text of P prompt tokens and O output tokens, N requests), then
#    tandem-replay --protocol http at R requests/s with evenly spaced arrivals
#    (gamma, burstiness 1e6: coefficient of variation 0.001), the same P, O, N.
#    With --server-cpus / --client-cpus (taskset CPU lists, e.g. 1 and 0) the
#    server and every process it starts run on the first set and both tools
#    on the second, so a client's own CPU use cannot slow the server it
#    measures (GuideLLM uses ~0.4 of a core at 0.5 rps; on a 2-core machine
#    that alone changes the server's latencies).
# 5. bench/compare/guidellm_compare.py prints the medians side by side (both
#    tools' own numbers, and each statistic recomputed from the other tool's
#    per-request times, so definitions and measurements are told apart), and,
#    on a Tandem system, the router's own medians over each tool's window
#    (router.log): whether a difference is in the server or in a client.
#
# Everything stays on 127.0.0.1; every process started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=smollm2-135m-instruct
SYSTEM=colocated
RATE=1
PROMPT_TOKENS=256
OUTPUT_TOKENS=64
REQUESTS=40
REPS=1
THREADS=2
SLOTS=16
OUT=${TMPDIR:-/tmp}/tandem-guidellm-$(date -u +%Y%m%dT%H%M%SZ)
SERVER_CPUS=
CLIENT_CPUS=
GUIDELLM_VERSION=0.8.1

# shellcheck source=bench/compare/lib.sh
. bench/compare/lib.sh

parse_flags 2,42 --model=MODEL --system=SYSTEM --rate=RATE --prompt-tokens=PROMPT_TOKENS \
  --output-tokens=OUTPUT_TOKENS --requests=REQUESTS --reps=REPS --out=OUT \
  --server-cpus=SERVER_CPUS --client-cpus=CLIENT_CPUS -- "$@"
if [ -n "$SERVER_CPUS$CLIENT_CPUS" ] && { [ -z "$SERVER_CPUS" ] || [ -z "$CLIENT_CPUS" ]; }; then
  die "--server-cpus and --client-cpus go together"
fi
client=()
[ -z "$CLIENT_CPUS" ] || client=(taskset -c "$CLIENT_CPUS")
require_positive_ints "--prompt-tokens:$PROMPT_TOKENS" "--output-tokens:$OUTPUT_TOKENS" \
  "--requests:$REQUESTS" "--reps:$REPS"
[[ $RATE =~ ^[0-9]*\.?[0-9]+$ ]] || die "--rate must be a positive number, got '$RATE'"
case "$SYSTEM" in colocated | disaggregated | llama-server | mock) ;; *) die "unknown --system '$SYSTEM'" ;; esac
resolve_model
CTX=$((PROMPT_TOKENS + OUTPUT_TOKENS + 16))

venv=${TANDEM_VENVS:-$HOME/.cache/tandem/venvs}/guidellm-$GUIDELLM_VERSION
if ! "$venv/bin/guidellm" --version 2>/dev/null | grep -q "$GUIDELLM_VERSION"; then
  echo "guidellm_check: installing guidellm==$GUIDELLM_VERSION into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "guidellm==$GUIDELLM_VERSION"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
tokdir=${TANDEM_HF_TOKENIZERS:-$HOME/.cache/tandem/hf-tokenizers}/$MODEL
if [ ! -f "$tokdir/tokenizer.json" ]; then
  python3 bench/compare/hf_tokenizer_dir.py "$GGUF" "$tokdir"
fi

mkdir -p "$OUT"
LOG_DIR=$OUT
trap stop_server EXIT
trap 'exit 130' INT TERM
model_flag=()
if [ "$SYSTEM" = mock ]; then
  # The mock answers with a 200 ms TTFT and 20 ms between tokens; it needs
  # the model named in each request.
  port=$(free_port)
  setsid "$venv/bin/guidellm" mock-server --host 127.0.0.1 --port "$port" --model "$MODEL" \
    --ttft-ms 200 --itl-ms 20 --output-tokens "$OUTPUT_TOKENS" </dev/null >"$OUT/mock.log" 2>&1 &
  server_pid=$!
  HTTP_TARGET=127.0.0.1:$port
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null --max-time 2 "http://$HTTP_TARGET/health" && break
    kill -0 "$server_pid" 2>/dev/null || die "guidellm mock-server exited (log: $OUT/mock.log)"
    sleep 0.5
  done
  model_flag=(--model "$MODEL")
else
  # Processes inherit the CPU set: the server gets SERVER_CPUS, then this
  # shell goes back to every CPU.
  [ -z "$SERVER_CPUS" ] || taskset -cp "$SERVER_CPUS" $$ >/dev/null
  start_server "$SYSTEM"
  [ -z "$SERVER_CPUS" ] || taskset -cp "0-$(($(nproc --all) - 1))" $$ >/dev/null
fi
echo "guidellm_check: $SYSTEM on http://$HTTP_TARGET, $MODEL, $RATE rps, $PROMPT_TOKENS in," \
  "$OUTPUT_TOKENS out, $REQUESTS requests x $REPS, results in $OUT" >&2
lscpu | grep 'Model name' >"$OUT/cpu.txt" || true
[ -z "$SERVER_CPUS" ] || echo "server on CPUs $SERVER_CPUS, clients on CPUs $CLIENT_CPUS" >>"$OUT/cpu.txt"

for rep in $(seq 1 "$REPS"); do
  echo "guidellm_check: rep $rep: guidellm ($(uptime | sed 's/.*load/load/'))" >&2
  uptime >"$OUT/uptime.guidellm-$rep"
  # CPU seconds each client used (/usr/bin/time): on a small machine the
  # client competes with the server for the same cores.
  /usr/bin/time -o "$OUT/cpu.guidellm-$rep" -f "%e s wall, %U s user, %S s sys" \
    "${client[@]}" "$venv/bin/guidellm" run \
    --backend "kind=openai_http,target=http://$HTTP_TARGET,request_format=/v1/completions" \
    --profile "kind=constant,rate=$RATE" \
    --data "kind=synthetic_text,prompt_tokens=$PROMPT_TOKENS,output_tokens=$OUTPUT_TOKENS" \
    --tokenizer "kind=hf_auto,model=$tokdir" \
    --constraint "kind=max_requests,count=$REQUESTS" \
    --output "kind=json,path=$OUT/guidellm-$rep.json" \
    --disable-console-interactive >"$OUT/guidellm-$rep.log" 2>&1 ||
    die "guidellm failed (log: $OUT/guidellm-$rep.log): $(tail -n 5 "$OUT/guidellm-$rep.log")"
  echo "guidellm_check: rep $rep: tandem-replay ($(uptime | sed 's/.*load/load/'))" >&2
  uptime >"$OUT/uptime.replay-$rep"
  /usr/bin/time -o "$OUT/cpu.replay-$rep" -f "%e s wall, %U s user, %S s sys" \
    "${client[@]}" build/bin/tandem-replay --target "$HTTP_TARGET" --protocol http --tokenizer "$GGUF" \
    --arrival gamma --burstiness 1e6 --rate "$RATE" --input-tokens "$PROMPT_TOKENS" \
    --output-tokens "$OUTPUT_TOKENS" --max-requests "$REQUESTS" --grace 60 "${model_flag[@]}" \
    --progress lines --plot=false --output "$OUT/replay-$rep" \
    >"$OUT/replay-$rep.log" 2>&1 ||
    die "tandem-replay failed (log: $OUT/replay-$rep.log): $(tail -n 5 "$OUT/replay-$rep.log")"
done
stop_server
# The router's log (one line per request with its own TTFT, TPOT, E2E).
if [ "$SYSTEM" = colocated ] || [ "$SYSTEM" = disaggregated ]; then
  logs=$(sed -n 's/^tandem up: starting .*; logs in \(.*\)$/\1/p' "$LOG_DIR/$SYSTEM.log" | head -1)
  cp "$logs/router.log" "$OUT/router.log" 2>/dev/null || echo "guidellm_check: no router.log in '$logs'" >&2
fi

python3 bench/compare/guidellm_compare.py "$OUT" | tee "$OUT/compare.md"
