#!/usr/bin/env bash
# llama.cpp (llama-bench) against Tandem's engine (tandem-generate) on the same
# GGUF files, at the same thread counts: prefill of a 512-token prompt (pp512)
# and decode of 128 tokens after it (tg128 at depth 512: llama-bench -d 512),
# batch 1, KV cache F16 in both. With --batched also the total decode rate of
# 4, 8 and 32 sequences of 128 prompt tokens each generating 128
# (llama-batched-bench -npp 128 -ntg 128, against engine_benchmark's BM_Decode
# of the same model: 128-256 tokens of context; the three real models only).
# Runs are interleaved (rep 1 of every case,
# then rep 2, ...) so that load on a shared machine hits both engines alike;
# prints one markdown table of medians with the ratio Tandem / llama.cpp and
# the load average before and after.
#
#   bench/peer/compare_engine.sh [--reps N] [--threads "1 2"] [--batched] [--out DIR] [MODEL_GGUF ...]
#
# Models default to the three real models in
# ${TANDEM_MODELS:-$HOME/.cache/tandem/models} (SmolLM2-135M Q4_1, Qwen2.5-
# Coder-0.5B and -1.5B Q4_K_M; scripts/fetch_models.sh --qwen). llama.cpp comes
# from bench/peer/build_llama_cpp.sh (or the folder $TANDEM_LLAMA_CPP_BIN names),
# tandem-generate and engine_benchmark from ${BUILD:-build}/bin.
# Raw results (one line per run: engine model threads test rep tok/s) go to
# DIR/runs.tsv (default: a new temporary folder). Python: the python3 first on
# PATH computes the medians.
set -euo pipefail

die() {
  echo "compare_engine: error: $*" >&2
  exit 1
}

reps=3
threads_list="1 2"
batched=0
out=""
models=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --threads) threads_list=${2:?--threads needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --batched) batched=1; shift ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) models+=("$1"); shift ;;
  esac
done
if [ "${#models[@]}" -eq 0 ]; then
  cache=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
  models=("$cache/SmolLM2-135M-Instruct.Q4_1.gguf" "$cache/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
    "$cache/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf")
fi
for m in "${models[@]}"; do
  [ -f "$m" ] || die "model file '$m' does not exist (scripts/fetch_models.sh --qwen fetches the real ones)"
done
generate=${BUILD:-build}/bin/tandem-generate
[ -x "$generate" ] || die "$generate is missing; build it: cmake --build ${BUILD:-build} --target tandem-generate"
bin=${TANDEM_LLAMA_CPP_BIN:-$("$(dirname "$0")/build_llama_cpp.sh")}
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/compare_engine.XXXXXX")
mkdir -p "$out"
runs=$out/runs.tsv
: >"$runs"

# 512 prompt token ids, the pattern engine_benchmark uses (valid in every vocab here).
prompt_ids=$(seq 0 511 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), 100 + ($1 * 37) % 20000 }')

# llama_bench MODEL THREADS TEST ARGS...: one llama-bench run, its tok/s.
llama_bench() {
  local model=$1 threads=$2
  shift 2
  "$bin/llama-bench" -m "$model" -t "$threads" -r 1 -o jsonl "$@" 2>>"$out/llama-bench.log" |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["avg_ts"])'
}

# engine_benchmark's type for a real model file (BM_Decode/type:N), or nothing.
bench_type() {
  case "$(basename "$1")" in
    Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf) echo 4 ;;
    SmolLM2-135M-Instruct.Q4_1.gguf) echo 5 ;;
    Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf) echo 6 ;;
  esac
}

# batched MODEL NAME THREADS REP: llama-batched-bench and BM_Decode at 4, 8, 32.
batched() {
  local model=$1 name=$2 t=$3 rep=$4 type
  type=$(bench_type "$model")
  [ -n "$type" ] || return 0
  "$bin/llama-batched-bench" -m "$model" -t "$t" -tb "$t" -c 8192 -npp 128 -ntg 128 -npl 4,8,32 \
    --output-format jsonl 2>>"$out/llama-batched-bench.log" |
    python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        print("llama.cpp\t%s\t%s\tbatch%d\t%s\t%f" % (sys.argv[1], sys.argv[2], r["pl"], sys.argv[3], r["speed_tg"]))
' "$name" "$t" "$rep" >>"$runs" || die "llama-batched-bench failed (log: $out/llama-batched-bench.log)"
  "${BUILD:-build}/bin/engine_benchmark" --benchmark_filter="BM_Decode/type:$type/batch:(4|8|32)/threads:$t/" \
    --benchmark_out="$out/engine_benchmark.json" --benchmark_out_format=json >/dev/null 2>&1 ||
    die "engine_benchmark failed"
  python3 -c '
import json, re, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    batch = re.search(r"batch:(\d+)", b["name"]).group(1)
    print("tandem\t%s\t%s\tbatch%s\t%s\t%f" % (sys.argv[2], sys.argv[3], batch, sys.argv[4], b["tok/s"]))
' "$out/engine_benchmark.json" "$name" "$t" "$rep" >>"$runs"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq 1 "$reps"); do
  for model in "${models[@]}"; do
    name=$(basename "$model" .gguf)
    for t in $threads_list; do
      echo "compare_engine: rep $rep/$reps $name threads $t" >&2
      pp=$(llama_bench "$model" "$t" -p 512 -n 0) || die "llama-bench failed (log: $out/llama-bench.log)"
      tg=$(llama_bench "$model" "$t" -p 0 -n 128 -d 512) || die "llama-bench failed (log: $out/llama-bench.log)"
      printf 'llama.cpp\t%s\t%s\tpp512\t%s\t%s\nllama.cpp\t%s\t%s\ttg128\t%s\t%s\n' \
        "$name" "$t" "$rep" "$pp" "$name" "$t" "$rep" "$tg" >>"$runs"
      "$generate" --model "$model" --prompt-ids "$prompt_ids" -n 128 --ignore_eos --threads "$t" \
        --kv_dtype F16 >/dev/null 2>"$out/generate.log" || die "tandem-generate failed (log: $out/generate.log)"
      awk -v name="$name" -v t="$t" -v rep="$rep" '
        /^prefill:/ { gsub(/[(]/, "", $7); printf "tandem\t%s\t%s\tpp512\t%s\t%s\n", name, t, rep, $7 }
        /^decode:/ { gsub(/[(]/, "", $7); printf "tandem\t%s\t%s\ttg128\t%s\t%s\n", name, t, rep, $7 }' \
        "$out/generate.log" >>"$runs"
      if ((batched)); then batched "$model" "$name" "$t" "$rep"; fi
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$runs" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    engine, model, threads, test, _, tps = line.split("\t")
    runs[(model, int(threads), test, engine)].append(float(tps))
order = lambda test: (0, 0) if test == "pp512" else (1, 0) if test == "tg128" else (2, int(test[5:]))
keys = sorted({k[:3] for k in runs}, key=lambda k: (k[0], order(k[2]), k[1]))
print("| model | test | threads | llama.cpp tok/s | Tandem tok/s | Tandem / llama.cpp | runs (llama.cpp; Tandem) |")
print("|---|---|---|---|---|---|---|")
for model, threads, test in keys:
    l, t = runs.get((model, threads, test, "llama.cpp")), runs.get((model, threads, test, "tandem"))
    if not l or not t:
        print(f"| {model} | {test} | {threads} | {'missing' if not l else ''} | {'missing' if not t else ''} | | |")
        continue
    ml, mt = statistics.median(l), statistics.median(t)
    spread = lambda v: ", ".join(f"{x:.1f}" for x in v)
    print(f"| {model} | {test} | {threads} | {ml:.1f} | {mt:.1f} | {mt / ml:.2f}x | {spread(l)}; {spread(t)} |")
EOF
echo "load average before: $load_before; after: $load_after; runs: $runs"
