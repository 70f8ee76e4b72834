#!/usr/bin/env bash
# The README's main job: installs and builds (scripts/setup.sh), brings up a
# disaggregated cluster on loopback with `tandem up` (router + prefill worker +
# decode worker, KV over UCX; deploy/local/disaggregated.yaml, or the config
# given as $1), streams a completion through the OpenAI-compatible HTTP front
# with the official `openai` Python client (python3 first on PATH), streams
# another over gRPC with `tandem generate`, then shuts the cluster down.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=../shared/models/stories260K/stories260K.gguf
if [ ! -f "$MODEL" ]; then
  echo "demo: missing $MODEL: check out the shared models as ../shared next to this repository" >&2
  exit 1
fi
scripts/setup.sh
CONFIG=${1:-deploy/local/disaggregated.yaml}

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

echo "== OpenAI client, streaming completion from $base_url"
python3 - "$base_url" <<'PY'
import sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = client.models.list().data[0].id
stream = client.completions.create(model=model, prompt="Once upon a time", max_tokens=64,
                                   temperature=0, stream=True,
                                   stream_options={"include_usage": True})
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].text, end="", flush=True)
    if chunk.usage:
        print(f"\n[usage: {chunk.usage.prompt_tokens} prompt + "
              f"{chunk.usage.completion_tokens} completion tokens]")
PY

echo "== tandem generate over gRPC ($grpc)"
build/bin/tandem generate --router "$grpc" --prompt "Lily and her dog" --max-tokens 48
