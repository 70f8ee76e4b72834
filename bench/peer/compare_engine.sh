#!/usr/bin/env bash
# llama.cpp (llama-bench) against Tandem's engine (tandem-generate) on the same
# GGUF files, at the same thread counts: prefill of a 512-token prompt (pp512)
# and decode of 128 tokens after it (tg128 at depth 512: llama-bench -d 512),
# batch 1, KV cache F16 in both. With --batched also the total decode rate of
# 4, 8 and 32 sequences of 128 prompt tokens each generating 128
# (llama-batched-bench -npp 128 -ntg 128, against engine_benchmark's BM_Decode
# of the same model: 128-256 tokens of context). With --context "4096 16384"
# also batch-1 decode after that many tokens of context (llama-bench -d N -n
# 64 against BM_DecodeContext; the real Qwen models only: the TinyLlama-shape
# files have a 2048-token context). With --tiny the TinyLlama-1.1B-shape
# files (dim 2048, 22 layers, 32 heads, 4 KV heads, ffn 5632, Llama-2 vocab;
# random weights) in F16, Q8_0, Q4_0 (tandem-mkmodel) and Q4_K_M (tandem-
# quantize of the F16 one) are written to ${BUILD:-build}/bench-models (where
# engine_benchmark reads them too) and measured before the models given.
# Runs are interleaved (rep 1 of every case, then rep 2, ...) so that load on
# a shared machine hits both engines alike; prints one markdown table of
# medians with the ratio Tandem / llama.cpp, and for batch-1 decode rows the
# fraction of the read-bandwidth bound each engine reaches (weight bytes read
# per token, plus the F16 KV of the context, x tok/s / the read bandwidth
# engine_benchmark measures at that thread count in the same run), and the
# load average before and after.
#
#   bench/peer/compare_engine.sh [--reps N] [--threads "1 2"] [--batched] [--context "4096 16384"]
#                                [--tiny] [--out DIR] [MODEL_GGUF ...]
#
# Models default to the three real models in
# ${TANDEM_MODELS:-$HOME/.cache/tandem/models} (SmolLM2-135M Q4_1, Qwen2.5-
# Coder-0.5B and -1.5B Q4_K_M; scripts/fetch_models.sh --qwen) when neither
# --tiny nor a model is given. The issue's table (docs/benchmarks.md):
#   bench/peer/compare_engine.sh --tiny --batched --context "4096 16384" \
#     ~/.cache/tandem/models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
# llama.cpp comes from bench/peer/build_llama_cpp.sh (or the folder
# $TANDEM_LLAMA_CPP_BIN names); tandem-generate, tandem-mkmodel, tandem-
# quantize and engine_benchmark from ${BUILD:-build}/bin. Raw results (one
# line per run: engine model threads test rep tok/s) go to DIR/runs.tsv
# (default: a new temporary folder). Python: the python3 first on PATH
# computes the medians and reads the GGUF tensor sizes (its `gguf` package,
# installed by scripts/setup.sh).
set -euo pipefail

die() {
  echo "compare_engine: error: $*" >&2
  exit 1
}

reps=3
threads_list="1 2"
batched=0
contexts=""
tiny=0
out=""
models=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --threads) threads_list=${2:?--threads needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --batched) batched=1; shift ;;
    --context) contexts=${2:?--context needs a value}; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) models+=("$1"); shift ;;
  esac
done
for c in $contexts; do
  case "$c" in
    512 | 4096 | 16384) ;;
    *) die "--context takes 512, 4096 and/or 16384 (engine_benchmark's BM_DecodeContext cases), not '$c'" ;;
  esac
done
if ((tiny)); then
  bin_dir=${BUILD:-build}/bin
  for tool in tandem-mkmodel tandem-quantize; do
    [ -x "$bin_dir/$tool" ] || die "$bin_dir/$tool is missing; build it: cmake --build ${BUILD:-build} --target $tool"
  done
  vocab=$(dirname "$0")/../../../shared/models/ggml-vocab/ggml-vocab-llama-spm.gguf
  [ -f "$vocab" ] || die "missing $vocab: check out ../shared next to the repository"
  tiny_dir=${BUILD:-build}/bench-models
  mkdir -p "$tiny_dir"
  tiny_models=()
  for dtype in F16 Q8_0 Q4_0 Q4_K_M; do
    f=$tiny_dir/tinyllama-shape-$dtype.gguf
    if [ ! -f "$f" ]; then
      echo "compare_engine: writing $f" >&2
      if [ "$dtype" = Q4_K_M ]; then
        "$bin_dir/tandem-quantize" "$tiny_dir/tinyllama-shape-F16.gguf" "$f.tmp" Q4_K_M >/dev/null
      else
        "$bin_dir/tandem-mkmodel" --out "$f.tmp" --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
          --ffn 5632 --context 2048 --vocab-from "$vocab" --dtype "$dtype" >/dev/null
      fi
      mv "$f.tmp" "$f"
    fi
    tiny_models+=("$f")
  done
  models=("${tiny_models[@]}" "${models[@]}")
fi
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

# engine_benchmark's type for a model file (BM_Decode/type:N), or nothing.
bench_type() {
  case "$(basename "$1")" in
    tinyllama-shape-F16.gguf) echo 0 ;;
    tinyllama-shape-Q8_0.gguf) echo 1 ;;
    tinyllama-shape-Q4_0.gguf) echo 2 ;;
    tinyllama-shape-Q4_K_M.gguf) echo 3 ;;
    Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf) echo 4 ;;
    SmolLM2-135M-Instruct.Q4_1.gguf) echo 5 ;;
    Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf) echo 6 ;;
  esac
}

# Weight bytes a decode step reads (every 2-D weight; the token embedding
# only when it is also the output matrix), and bytes of F16 KV per token of
# context, for the bandwidth fractions: "WEIGHT_BYTES KV_BYTES_PER_TOKEN".
model_bytes() {
  python3 - "$1" <<'PY'
import sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
names = {t.name for t in r.tensors}
tied = "output.weight" not in names
w = sum(int(t.n_bytes) for t in r.tensors
        if len(t.shape) >= 2 and (t.name != "token_embd.weight" or tied))
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
def val(key):
    f = r.fields[f"{arch}.{key}"]
    return int(f.parts[f.data[0]][0])
heads = val("attention.head_count")
kv_heads = val("attention.head_count_kv") if f"{arch}.attention.head_count_kv" in r.fields else heads
head_dim = val("embedding_length") // heads
print(w, val("block_count") * 2 * kv_heads * head_dim * 2)
PY
}

# bandwidth THREADS: engine_benchmark's read bandwidth (bytes/s), measured now.
bandwidth() {
  "${BUILD:-build}/bin/engine_benchmark" --benchmark_filter="BM_MemoryReadBandwidth/threads:$1/" \
    --benchmark_format=json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["benchmarks"][0]["GB/s"] * 1e9)'
}

# context MODEL NAME THREADS REP: batch-1 decode after each --context length.
context() {
  local model=$1 name=$2 t=$3 rep=$4 type c tps
  type=$(bench_type "$model")
  case "$type" in 4 | 6) ;; *) return 0 ;; esac
  for c in $contexts; do
    tps=$(llama_bench "$model" "$t" -p 0 -n 64 -d "$c") || die "llama-bench failed (log: $out/llama-bench.log)"
    printf 'llama.cpp\t%s\t%s\tctx%s\t%s\t%s\n' "$name" "$t" "$c" "$rep" "$tps" >>"$runs"
    "${BUILD:-build}/bin/engine_benchmark" --benchmark_filter="BM_DecodeContext/type:$type/context:$c/threads:$t/" \
      --benchmark_out="$out/engine_benchmark.json" --benchmark_out_format=json >/dev/null 2>&1 ||
      die "engine_benchmark failed"
    python3 -c '
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    print("tandem\t%s\t%s\tctx%s\t%s\t%f" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], b["tok/s"]))
' "$out/engine_benchmark.json" "$name" "$t" "$c" "$rep" >>"$runs"
  done
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

sizes=$out/sizes.tsv
: >"$sizes"
for model in "${models[@]}"; do
  printf '%s\t%s\n' "$(basename "$model" .gguf)" "$(model_bytes "$model" | tr ' ' '\t')" >>"$sizes" ||
    die "cannot read the tensor sizes of $model (python3 -c 'import gguf' must work: scripts/setup.sh)"
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq 1 "$reps"); do
  for t in $threads_list; do
    printf 'bandwidth\t-\t%s\tread\t%s\t%s\n' "$t" "$rep" "$(bandwidth "$t")" >>"$runs"
  done
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
      if [ -n "$contexts" ]; then context "$model" "$name" "$t" "$rep"; fi
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$runs" "$sizes" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    engine, model, threads, test, _, tps = line.rstrip("\n").split("\t")
    if not tps:  # a measurement that printed nothing (its log says why)
        print(f"compare_engine: no value for {engine} {model} {threads} {test}", file=sys.stderr)
        continue
    runs[(model, int(threads), test, engine)].append(float(tps))
sizes = {}
for line in open(sys.argv[2]):
    model, weights, kv = line.split("\t")
    sizes[model] = (float(weights), float(kv))
bw = {t: statistics.median(v) for (m, t, test, e), v in runs.items() if e == "bandwidth"}
def order(test):
    if test == "pp512": return (0, 0)
    if test == "tg128": return (1, 0)
    if test.startswith("batch"): return (2, int(test[5:]))
    return (3, int(test[3:]))
def bytes_per_token(model, test):  # weights + the F16 KV read (mean context)
    weights, kv = sizes[model]
    if test == "tg128": return weights + kv * (512 + 64)
    if test.startswith("ctx"): return weights + kv * (int(test[3:]) + 32)
    return None
keys = sorted({k[:3] for k in runs if k[3] != "bandwidth"}, key=lambda k: (k[0], order(k[2]), k[1]))
print("| model | test | threads | llama.cpp tok/s | Tandem tok/s | Tandem / llama.cpp | of bw bound (llama.cpp / Tandem) | runs (llama.cpp; Tandem) |")
print("|---|---|---|---|---|---|---|---|")
for model, threads, test in keys:
    l, t = runs.get((model, threads, test, "llama.cpp")), runs.get((model, threads, test, "tandem"))
    if not l or not t:
        print(f"| {model} | {test} | {threads} | {'missing' if not l else ''} | {'missing' if not t else ''} | | | |")
        continue
    ml, mt = statistics.median(l), statistics.median(t)
    b = bytes_per_token(model, test)
    frac = f"{ml * b / bw[threads]:.0%} / {mt * b / bw[threads]:.0%}" if b and threads in bw else ""
    spread = lambda v: ", ".join(f"{x:.1f}" for x in v)
    print(f"| {model} | {test} | {threads} | {ml:.1f} | {mt:.1f} | {mt / ml:.2f}x | {frac} | {spread(l)}; {spread(t)} |")
print()
print("read bandwidth (engine_benchmark BM_MemoryReadBandwidth, median of the runs): " +
      ", ".join(f"{t} thread{'s' if t > 1 else ''} {v / 1e9:.1f} GB/s" for t, v in sorted(bw.items())))
EOF
echo "load average before: $load_before; after: $load_after; runs: $runs"
