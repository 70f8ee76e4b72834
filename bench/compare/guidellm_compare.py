#!/usr/bin/env python3
"""GuideLLM vs tandem-replay medians of a bench/compare/guidellm_check.sh run.

    python3 bench/compare/guidellm_compare.py OUT_DIR

Reads OUT_DIR/guidellm-K.json (GuideLLM's JSON report) and OUT_DIR/replay-K/
(tandem-replay's summary.json and requests.jsonl) for every rep K and prints a
Markdown table. Definitions differ, so each statistic is also recomputed from
the other tool's per-request times:

  TTFT        GuideLLM: first_token_iteration - request_start;
              tandem-replay: first_token_s - send_s. Same definition.
  ITL (GL)    GuideLLM's "ITL": per request (last token - first token) /
              (output_tokens - 1), then the median over requests; this is
              what vLLM's benchmark_serving calls TPOT.
  TPOT (TR)   tandem-replay's TPOT: per request (end - first token) /
              (output_tokens - 1): the same but to the stream's end ([DONE])
              instead of the last token.
  ITL (TR)    tandem-replay's ITL: every gap between consecutive SSE events,
              pooled over requests (one gap per event on HTTP).
  TPOT (GL)   GuideLLM's "TPOT": (last token - request_start) / output_tokens,
              first token included.

With OUT_DIR/router.log (a Tandem system: the router's log, one line per
finished request with its own ttft_s, tpot_s and e2e_s, measured inside the
server from the request's arrival), the router's medians over each tool's
window are printed too: a third measurement, free of either client, that says
whether a difference between the tools is in the server or in a client. The
lines are split by order: one warm-up request, then per rep GuideLLM's
requests, then tandem-replay's (the runs do not overlap).

Standard library only (python3 first on PATH).
"""
import glob
import json
import os
import re
import statistics
import sys


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def guidellm_requests(path):
    """Per-request times (seconds) of a GuideLLM JSON report's successful requests."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    bench = report["benchmarks"][0]
    rows = []
    for r in bench["requests"]["successful"]:
        t = r["info"]["timings"]
        out = r.get("output_tokens") or r["output_metrics"].get("text_tokens")
        rows.append({
            "start": t["request_start"],
            "first": t["first_token_iteration"],
            "last": t["last_token_iteration"],
            "end": t["request_end"],
            "out": out,
            "chunks": t.get("token_iterations"),
        })
    metrics = bench["metrics"]
    own = {
        "ttft": metrics["time_to_first_token_ms"]["successful"]["median"] / 1000,
        "itl_gl": metrics["inter_token_latency_ms"]["successful"]["median"] / 1000,
        "tpot_gl": metrics["time_per_output_token_ms"]["successful"]["median"] / 1000,
    }
    errored = len(bench["requests"].get("errored", []))
    # Requests GuideLLM sent: its report can lack one still in flight when the
    # run ended (scheduler_state.processing_requests), which the server saw.
    sent = bench.get("scheduler_state", {}).get("created_requests", len(rows) + errored)
    return rows, own, errored, sent


def replay_requests(directory):
    """Per-request times (seconds) of tandem-replay's OK requests, and its own medians."""
    rows = []
    with open(os.path.join(directory, "requests.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if not r["ok"]:
                continue
            chunks = r.get("chunk_times_s") or []
            rows.append({
                "start": r["send_s"],
                "first": r["first_token_s"],
                "last": chunks[-1] if chunks else None,
                "end": r["end_s"],
                "out": r["output_tokens"],
                "chunks": len(chunks),
            })
    with open(os.path.join(directory, "summary.json"), encoding="utf-8") as f:
        s = json.load(f)
    own = {"ttft": s["ttft_s"]["p50"], "tpot_tr": s["tpot_s"]["p50"], "itl_tr": s["itl_s"]["p50"]}
    return rows, own, s["requests_error"], s["requests_sent"]


def router_windows(path, counts):
    """Router-side medians (seconds) of consecutive windows of `counts` requests."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if " request request_id=" in line:
                lines.append({k: float(re.search(f" {k}=([0-9.]+)", line).group(1))
                              for k in ("ttft_s", "tpot_s", "e2e_s")})
    lines = lines[1:]  # the warm-up request
    windows, start = [], 0
    for n in counts:
        w = lines[start:start + n]
        start += n
        windows.append({"ttft": median([r["ttft_s"] for r in w]),
                        "tpot_tr": median([r["tpot_s"] for r in w if r["tpot_s"] > 0]),
                        "e2e": median([r["e2e_s"] for r in w]), "n": len(w)})
    return windows


def derived(rows):
    """Every statistic, computed the same way from per-request times."""
    def per(f):
        return median([f(r) for r in rows if r["first"] is not None and r["out"]])

    return {
        "ttft": per(lambda r: r["first"] - r["start"]),
        "itl_gl": per(lambda r: (r["last"] - r["first"]) / (r["out"] - 1)
                      if r["out"] > 1 and r["last"] is not None else None),
        "tpot_tr": per(lambda r: (r["end"] - r["first"]) / (r["out"] - 1) if r["out"] > 1 else None),
        "tpot_gl": per(lambda r: (r["last"] - r["start"]) / r["out"] if r["last"] is not None else None),
        "e2e": per(lambda r: r["end"] - r["start"]),
        "tokens_per_chunk": per(lambda r: r["out"] / r["chunks"] if r["chunks"] else None),
    }


def fmt(v):
    return "–" if v is None else f"{1000 * v:.1f}"


def diff(a, b):
    return "–" if a is None or b is None or a == 0 else f"{100 * (b / a - 1):+.1f} %"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: guidellm_compare.py OUT_DIR")
    out = sys.argv[1]
    reps = sorted(int(p[len(os.path.join(out, "guidellm-")):-len(".json")])
                  for p in glob.glob(os.path.join(out, "guidellm-*.json")))
    if not reps:
        sys.exit(f"guidellm_compare: no guidellm-K.json in {out}")
    names = [
        ("ttft", "TTFT median"),
        ("itl_gl", "ITL median, GuideLLM's definition (per-request (last-first)/(n-1))"),
        ("tpot_tr", "TPOT median, tandem-replay's definition (per-request (end-first)/(n-1))"),
        ("tpot_gl", "TPOT median, GuideLLM's definition ((last-start)/n)"),
        ("e2e", "E2E median"),
    ]
    loaded = {}
    counts = []
    for rep in reps:
        g = guidellm_requests(os.path.join(out, f"guidellm-{rep}.json"))
        r = replay_requests(os.path.join(out, f"replay-{rep}"))
        loaded[rep] = (g, r)
        counts += [g[3], r[3]]
    router_log = os.path.join(out, "router.log")
    windows = router_windows(router_log, counts) if os.path.exists(router_log) else None
    for i, rep in enumerate(reps):
        (g_rows, g_own, g_err, g_sent), (r_rows, r_own, r_err, r_sent) = loaded[rep]
        g, r = derived(g_rows), derived(r_rows)
        print(f"### rep {rep}: GuideLLM {g_sent} sent, {len(g_rows)} ok / {g_err} errored in its "
              f"report; tandem-replay {r_sent} sent, {len(r_rows)} ok / {r_err} errored\n")
        print("| statistic (ms) | GuideLLM: its report | GuideLLM: from its requests "
              "| tandem-replay: its summary | tandem-replay: from its requests "
              "| tandem-replay vs GuideLLM |")
        print("|---|---|---|---|---|---|")
        for key, label in names:
            g_report = g_own.get(key)
            r_report = r_own.get(key)
            print(f"| {label} | {fmt(g_report)} | {fmt(g[key])} | {fmt(r_report)} | {fmt(r[key])} "
                  f"| {diff(g[key], r[key])} |")
        print(f"| ITL median, tandem-replay's definition (pooled SSE-event gaps) | – | – "
              f"| {fmt(r_own['itl_tr'])} | – | – |")
        if windows is not None:
            gw, rw = windows[2 * i], windows[2 * i + 1]
            print(f"\nThe router's own medians (router.log) in each tool's window "
                  f"({gw['n']} and {rw['n']} requests):\n")
            print("| statistic (ms) | router, GuideLLM's window | GuideLLM − router "
                  "| router, tandem-replay's window | tandem-replay − router |")
            print("|---|---|---|---|---|")
            for key, label, gv, rv in (("ttft", "TTFT median", g["ttft"], r["ttft"]),
                                       ("tpot_tr", "TPOT median ((end-first)/(n-1))",
                                        g["tpot_tr"], r["tpot_tr"]),
                                       ("e2e", "E2E median", g["e2e"], r["e2e"])):
                print(f"| {label} | {fmt(gw[key])} | {fmt(gv - gw[key])} | {fmt(rw[key])} "
                      f"| {fmt(rv - rw[key])} |")
        for tool in ("guidellm", "replay"):
            cpu = os.path.join(out, f"cpu.{tool}-{rep}")
            if os.path.exists(cpu):
                with open(cpu, encoding="utf-8") as f:
                    print(f"\nClient process ({tool}): {f.read().strip()}")
        print(f"\nTokens per SSE event (median over requests): GuideLLM "
              f"{g['tokens_per_chunk'] or 0:.2f}, tandem-replay {r['tokens_per_chunk'] or 0:.2f}\n")


if __name__ == "__main__":
    main()
