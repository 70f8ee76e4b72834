#!/usr/bin/env bash
# The README's main job: installs and builds (scripts/setup.sh, which also
# fetches SmolLM2-135M-Instruct into the model cache), brings up a
# disaggregated cluster on loopback with `tandem up` (router + prefill worker +
# decode worker, KV over UCX, internal mTLS; deploy/local/chat.yaml, or the
# config given as $1), asks the model a question through the OpenAI-compatible
# HTTP front with the official `openai` Python client (python3 first on PATH;
# a chat completion for an instruct model, a plain completion otherwise),
# streams a completion over gRPC with `tandem generate`, then shuts the
# cluster down.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
CONFIG=${1:-deploy/local/chat.yaml}

log=$(mktemp)
build/bin/tandem up "$CONFIG" >"$log" 2>&1 &
up_pid=$!
cleanup() {
  kill -TERM "$up_pid" 2>/dev/null || true
  wait "$up_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  grep -q "cluster ready" "$log" && break
  if ! kill -0 "$up_pid" 2>/dev/null; then
    cat "$log" >&2
    exit 1
  fi
  sleep 0.2
done
grep -q "cluster ready" "$log" || { cat "$log" >&2; echo "demo: cluster not ready" >&2; exit 1; }
cat "$log"
base_url=$(grep -o 'OpenAI base_url http://[^ ,)]*' "$log" | head -1 | sed 's/OpenAI base_url //')
grpc=$(sed -n 's/^  router *gRPC \([^ ]*\).*/\1/p' "$log" | head -1)

echo "== OpenAI client, streaming from $base_url"
python3 - "$base_url" <<'PY'
import sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = client.models.list().data[0].id
common = dict(model=model, max_tokens=96, temperature=0, stream=True,
              stream_options={"include_usage": True})
if "instruct" in model:
    question = "What is the capital of France, and what is it famous for?"
    print(f"user: {question}\nassistant: ", end="")
    stream = client.chat.completions.create(
        messages=[{"role": "user", "content": question}], **common)
    text = lambda c: c.choices[0].delta.content or ""
else:  # stories260K: a story model, no chat
    stream = client.completions.create(prompt="Once upon a time", **common)
    text = lambda c: c.choices[0].text
for chunk in stream:
    if chunk.choices:
        print(text(chunk), end="", flush=True)
    if chunk.usage:
        print(f"\n[usage: {chunk.usage.prompt_tokens} prompt + "
              f"{chunk.usage.completion_tokens} completion tokens]")
PY

echo "== tandem generate over gRPC ($grpc)"
build/bin/tandem generate --router "$grpc" --prompt "The three primary colors are" --max-tokens 48
