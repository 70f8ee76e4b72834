#!/usr/bin/env python3
"""Side-by-side tables of a bench/compare/compare.sh run (Markdown on stdout).

    python3 bench/compare/compare_table.py OUT_DIR

OUT_DIR/<trace>/<system>/<run>/summary.json are tandem-replay summaries
(docs/replay.md); <run> is `trace` (the trace slice at its own arrival times)
or `rate-R` (Poisson arrivals at R requests/s). Standard library only.

Goodput is tandem-replay's `goodput_rps` (requests meeting every SLO per second
of the run, first send to last end, as vLLM's benchmark_serving); "max
goodput" is its largest value over the sweep. A short run's span is noisy
(a few Poisson arrivals), so the sweep also gives the share of requests
meeting the SLO, and "SLO rate" is the highest offered rate at which at least
90 % did (DistServe's goodput).
"""

ATTAINMENT = 0.9
import json
import os
import sys

SYSTEM_ORDER = ["colocated", "disaggregated", "llama-server"]


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ms(summary, metric, pct):
    value = summary.get(metric, {}).get(pct)
    return "–" if value is None else f"{1000 * value:.0f}"


def errors(summary):
    errs = summary.get("errors", {})
    return ", ".join(f"{k} {v}" for k, v in sorted(errs.items())) or "0"


def share(summary):
    sent = summary["requests_sent"]
    return "–" if not sent else f"{100 * summary['requests_meeting_slo'] / sent:.0f} %"


def rate_of(run):
    return float(run[len("rate-"):])


def table(out, trace):
    base = os.path.join(out, trace)
    systems = sorted(os.listdir(base),
                     key=lambda s: (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99, s))
    lines = [f"### {trace}", ""]
    lines.append("| system | sent | ok | meet SLO | goodput rps | TTFT p50 ms | TTFT p99 ms "
                 "| TPOT p50 ms | TPOT p99 ms | throughput rps | output tok/s | errors "
                 "| max goodput rps (at rate) | SLO rate (≥ 90 % meet SLO) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    sweep = {}
    for system in systems:
        runs = os.listdir(os.path.join(base, system))
        rates = sorted((r for r in runs if r.startswith("rate-")), key=rate_of)
        sweep[system] = {}
        for r in rates:
            path = os.path.join(base, system, r, "summary.json")
            if os.path.exists(path):
                sweep[system][rate_of(r)] = load(path)
        best = max(sweep[system].items(), key=lambda kv: kv[1]["goodput_rps"], default=None)
        best_text = "–" if best is None else f"{best[1]['goodput_rps']:.2f} (at {best[0]:g})"
        meeting = [rate for rate, x in sweep[system].items()
                   if x["requests_sent"] and x["requests_meeting_slo"] >= ATTAINMENT * x["requests_sent"]]
        best_text += f" | {max(meeting):g}" if meeting else " | below the sweep"
        path = os.path.join(base, system, "trace", "summary.json")
        if not os.path.exists(path):
            lines.append(f"| {system} | – | – | – | – | – | – | – | – | – | – | – | {best_text} |")
            continue
        s = load(path)
        lines.append(
            f"| {system} | {s['requests_sent']} | {s['requests_ok']} "
            f"| {s.get('requests_meeting_slo', '–')} | {s['goodput_rps']:.2f} "
            f"| {ms(s, 'ttft_s', 'p50')} | {ms(s, 'ttft_s', 'p99')} "
            f"| {ms(s, 'tpot_s', 'p50')} | {ms(s, 'tpot_s', 'p99')} "
            f"| {s['throughput_rps']:.2f} | {s['output_tokens_per_s']:.1f} | {errors(s)} "
            f"| {best_text} |")
    all_rates = sorted({r for runs in sweep.values() for r in runs})
    if all_rates:
        lines += ["", f"Rate sweep ({trace} lengths, Poisson arrivals): goodput rps "
                  "(share meeting the SLO; TTFT p50 / TPOT p50 ms; ok/sent)", ""]
        lines.append("| offered rps | " + " | ".join(systems) + " |")
        lines.append("|---" * (len(systems) + 1) + "|")
        for rate in all_rates:
            cells = []
            for system in systems:
                s = sweep[system].get(rate)
                cells.append("–" if s is None else
                             f"{s['goodput_rps']:.2f} ({share(s)}; {ms(s, 'ttft_s', 'p50')} / "
                             f"{ms(s, 'tpot_s', 'p50')}; {s['requests_ok']}/{s['requests_sent']})")
            lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compare_table.py OUT_DIR")
    out = sys.argv[1]
    slo = None
    for trace in sorted(os.listdir(out)):
        if not os.path.isdir(os.path.join(out, trace)):
            continue
        print(table(out, trace))
        for root, _, files in os.walk(os.path.join(out, trace)):
            if "summary.json" in files and slo is None:
                slo = load(os.path.join(root, "summary.json")).get("slo")
    if slo is not None:
        print(f"SLO: {json.dumps(slo)}")


if __name__ == "__main__":
    main()
