#!/usr/bin/env python3
"""The cost side of complexity routing: latency per pool on a running two-pool cluster.

    tandem up deploy/local/two-pool.yaml          # prints the router's HTTP address
    python3 bench/router/routing_cost.py --url http://127.0.0.1:PORT [--per-label 12]
        [--max-tokens 16] [--out routing_cost.json]

Python: the python3 first on PATH (pyenv); standard library only.

Takes --per-label easy and --per-label hard prompts from tests/data/routing/prompts.jsonl
(every k-th of each label, so each class is represented; deterministic) and sends each,
one at a time, as a chat completion (temperature 0, max_tokens fixed, ignore nothing) three
ways: model `auto` (the router chooses: X-Tandem-Route-Pool), then explicitly to every
pool's model. Prints, per way: mean and p50 end-to-end latency, and for `auto` the share
sent to each pool, the mean latency per pool, and routing accuracy on the sample. Requests
run one at a time so that latency is the model's, not the queue's.
"""

import argparse
import json
import os
import statistics
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = os.path.join(HERE, "..", "..", "tests", "data", "routing", "prompts.jsonl")


def sample(per_label):
    rows = [json.loads(line) for line in open(PROMPTS, encoding="utf-8")]
    out = []
    for label in ("easy", "hard"):
        of_label = [r for r in rows if r["label"] == label]
        step = max(1, len(of_label) // per_label)
        out += of_label[::step][:per_label]
    return out


def chat(url, model, text, max_tokens):
    body = json.dumps({"model": model, "temperature": 0, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as res:
        payload = json.loads(res.read())
        pool = res.headers.get("X-Tandem-Route-Pool", "")
        score = float(res.headers.get("X-Tandem-Complexity", "nan"))
    return time.monotonic() - start, pool, score, payload


def summary(latencies):
    if not latencies:
        return {"n": 0}
    return {"n": len(latencies), "mean_s": round(statistics.mean(latencies), 3),
            "p50_s": round(statistics.median(latencies), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--per-label", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    with urllib.request.urlopen(args.url + "/v1/models", timeout=30) as res:
        models = json.loads(res.read())["data"]
    alias = [m for m in models if m.get("routes_to")]
    assert alias, "the router serves no routed alias (routing: in its config)"
    alias = alias[0]
    rows = sample(args.per_label)
    result = {"prompts": len(rows), "max_tokens": args.max_tokens, "ways": {}}

    per_pool = {}
    right = 0
    auto_lat = []
    for r in rows:
        lat, pool, score, _ = chat(args.url, alias["id"], r["text"], args.max_tokens)
        auto_lat.append(lat)
        per_pool.setdefault(pool, []).append(lat)
        right += (pool == "large") == (r["label"] == "hard")
    result["ways"][alias["id"]] = dict(summary(auto_lat), **{
        "accuracy": round(right / len(rows), 3),
        "share": {p: round(len(v) / len(rows), 3) for p, v in per_pool.items()},
        "per_pool": {p: summary(v) for p, v in per_pool.items()}})
    for model in alias["routes_to"]:
        lat = [chat(args.url, model, r["text"], args.max_tokens)[0] for r in rows]
        result["ways"][model] = summary(lat)
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
