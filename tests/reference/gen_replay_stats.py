#!/usr/bin/env python3
"""Independent reference for tandem-replay's statistics (bench/replay/stats.h).

Writes tests/data/replay_stats/records.jsonl (request records in the
requests.jsonl schema: 40 seeded random ones, OK and failed) and
expected.json (their summary computed here with numpy, not with the C++ code):

  TTFT = first_token_s - send_s; E2E = end_s - send_s (OK requests);
  TPOT = (E2E - TTFT) / (output_tokens - 1) for OK requests with >= 2 tokens;
  ITL  = consecutive differences of chunk_times_s, pooled over OK requests; a
         chunk of k tokens (chunk_tokens, when given) gives k gaps of gap/k;
  percentiles: numpy.percentile(..., method="linear") (numpy's default);
  duration = max(end_s) - min(send_s) over all requests sent;
  goodput = OK requests with TTFT <= slo_ttft and TPOT <= slo_tpot (no TPOT: met)
            and E2E <= slo_e2e, divided by the duration.

Run with the first python3 on PATH (pyenv CPython 3.11.7, numpy 2.x):
    python3 tests/reference/gen_replay_stats.py
Deterministic (numpy PCG64, seed 10): a rerun gives byte-identical files.
"""
import json
import os

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "replay_stats")
SLO = {"ttft_s": 0.8, "tpot_s": 0.05, "e2e_s": 4.0}


def records(rng):
    out = []
    statuses = ["UNAVAILABLE", "UNAVAILABLE", "RESOURCE_EXHAUSTED", "CANCELLED"]
    for i in range(40):
        send = round(float(i) * 0.25 + float(rng.uniform(0, 0.1)), 6)
        r = {"id": i, "kind": "trace", "source_line": i + 2, "protocol": "grpc",
             "scheduled_s": round(i * 0.25, 6), "send_s": send, "first_token_s": None,
             "chunk_times_s": [], "chunk_tokens": [], "end_s": send, "ok": True, "status": "OK", "error": "",
             "prompt_tokens": int(rng.integers(5, 200)), "prompt_tokens_from_server": True,
             "max_tokens": 0, "output_tokens": 0, "cached_prompt_tokens": 0,
             "cache_hit": False,
             "route": {"model": "m", "prefill_worker": "", "decode_worker": "",
                       "colocated": True},
             "finish_reason": "length"}
        if i % 7 == 3:
            r.update(ok=False, status=statuses[(i // 7) % len(statuses)], error="x",
                     end_s=round(send + float(rng.uniform(0, 0.5)), 6), finish_reason="")
            out.append(r)
            continue
        chunks = int(rng.integers(1, 12))
        # Odd ids: chunks of 1..3 tokens with counts (gRPC); even: no counts (HTTP).
        counts = [int(c) for c in rng.integers(1, 4, size=chunks)] if i % 2 else []
        n = sum(counts) if counts else chunks
        t = send + float(rng.uniform(0.1, 1.5))
        times = []
        for _ in range(chunks):
            times.append(round(t, 6))
            t += float(rng.exponential(0.04))
        r.update(first_token_s=times[0], chunk_times_s=times, chunk_tokens=counts,
                 end_s=round(times[-1] + 0.001, 6), max_tokens=n, output_tokens=n)
        out.append(r)
    return out


def describe(values):
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    return {"count": int(v.size), "mean": float(v.mean()),
            **{f"p{p}": float(np.percentile(v, p, method="linear")) for p in (50, 90, 99)}}


def summarize(recs):
    ok = [r for r in recs if r["ok"]]
    duration = max(r["end_s"] for r in recs) - min(r["send_s"] for r in recs)
    ttft = [r["first_token_s"] - r["send_s"] for r in ok]
    e2e = [r["end_s"] - r["send_s"] for r in ok]
    tpot = [(r["end_s"] - r["first_token_s"]) / (r["output_tokens"] - 1)
            for r in ok if r["output_tokens"] >= 2]
    itl = []
    for r in ok:
        gaps = np.diff(np.asarray(r["chunk_times_s"], dtype=np.float64))
        counts = r["chunk_tokens"][1:] if r["chunk_tokens"] else [1] * len(gaps)
        for g, k in zip(gaps, counts):
            itl += [float(g) / k] * k
    good = 0
    for r in ok:
        t = r["first_token_s"] - r["send_s"]
        e = r["end_s"] - r["send_s"]
        p = (e - t) / (r["output_tokens"] - 1) if r["output_tokens"] >= 2 else None
        if t <= SLO["ttft_s"] and (p is None or p <= SLO["tpot_s"]) and e <= SLO["e2e_s"]:
            good += 1
    errors = {}
    for r in recs:
        if not r["ok"]:
            errors[r["status"]] = errors.get(r["status"], 0) + 1
    out_tokens = sum(r["output_tokens"] for r in ok)
    return {"slo": SLO, "requests_sent": len(recs), "requests_ok": len(ok),
            "requests_error": len(recs) - len(ok), "errors": errors,
            "requests_meeting_slo": good, "duration_s": duration,
            "output_tokens": out_tokens,
            "throughput_rps": len(ok) / duration, "output_tokens_per_s": out_tokens / duration,
            "goodput_rps": good / duration, "ttft_s": describe(ttft), "tpot_s": describe(tpot),
            "itl_s": describe(itl), "e2e_s": describe(e2e)}


def main():
    os.makedirs(OUT, exist_ok=True)
    recs = records(np.random.Generator(np.random.PCG64(10)))
    with open(os.path.join(OUT, "records.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(summarize(recs), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
