#!/usr/bin/env python3
"""Decode saturation table from engine_benchmark's batch sweep on the real models.

    build/bin/engine_benchmark --benchmark_filter='BM_MemoryReadBandwidth|BM_Decode/type:[456]/' \\
        --benchmark_repetitions=3 --benchmark_out=sat.json --benchmark_out_format=json
    python3 bench/common/engine/decode_saturation.py sat.json [more.json ...]

For every model and thread count it prints, per batch size, the step time
(the fastest repetition: on a shared machine the least disturbed one), the
CPU time per step, the cores the step really got, the bandwidth floor (weights
+ KV read per step at the read bandwidth measured in the same run), and the
ratios that locate the saturation point:

  T(b)/T(1)    the step's cost relative to batch 1: ~1 while decode is
               memory-bound (every sequence rides on the same weight read);
  T(2b)/T(b)   what doubling the batch costs: -> 2 once it is compute-bound.

The saturation batch is given two ways: the smallest b from which every
doubling costs >= 1.5x (T(2b)/T(b) >= 1.5: most of the step is per-sequence
work), and the knee a/c of the line T(b) = a + c*b fitted to batches >= 32. `--cpu`
uses CPU time per step instead of wall time (for a loaded machine, 1 thread).
Python: any python3 (standard library only).
"""

import argparse
import collections
import json
import re
import sys


def load(paths, metric):
    rows = collections.defaultdict(list)  # (label model, threads) -> {batch: [values]}
    bandwidth = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            if b["name"].startswith("BM_MemoryReadBandwidth"):
                threads = int(re.search(r"threads:(\d+)", b["name"]).group(1))
                bandwidth[threads] = max(bandwidth.get(threads, 0), b["GB/s"])
                continue
            m = re.match(r"(.*) batch (\d+) threads (\d+)", b.get("label", ""))
            if not b["name"].startswith("BM_Decode") or m is None:
                continue
            rows[(m.group(1), int(m.group(3)))].append((int(m.group(2)), b))
    table = {}
    for key, runs in rows.items():
        by_batch = collections.defaultdict(list)
        for batch, b in runs:
            by_batch[batch].append(b)
        best = {}
        for batch, bs in by_batch.items():
            best[batch] = min(bs, key=lambda b: b[metric])
        table[key] = best
    return table, bandwidth


def saturation(times):
    """Smallest b from which every doubling of the batch costs >= 1.5x."""
    batches = sorted(times)
    doublings = [b for b in batches if 2 * b in times]
    for i, b in enumerate(doublings):
        if all(times[2 * d] / times[d] >= 1.5 for d in doublings[i:]):
            return b
    return None


def knee(times):
    """Roofline knee a / c of the line T(b) = a + c*b fitted (least squares) to
    the batches >= 32: a is what a step costs whatever the batch (reading the
    weights), c what each sequence adds; past a / c sequences, per-sequence
    work is most of the step."""
    points = [(b, t) for b, t in times.items() if b >= 32]
    if len(points) < 2:
        return None
    mb = sum(b for b, _ in points) / len(points)
    mt = sum(t for _, t in points) / len(points)
    c = sum((b - mb) * (t - mt) for b, t in points) / sum((b - mb) ** 2 for b, _ in points)
    a = mt - c * mb
    return (a, c) if c > 0 and a > 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", nargs="+")
    parser.add_argument("--cpu", action="store_true", help="rank by CPU ms per step")
    args = parser.parse_args()
    metric = "cpu_ms/step" if args.cpu else "ms/step"
    table, bandwidth = load(args.json, metric)
    if not table:
        sys.exit("decode_saturation: no BM_Decode runs of the real models in " + ", ".join(args.json))
    print("read bandwidth (best pass): " +
          ", ".join(f"{t} thread(s) {bw:.1f} GB/s" for t, bw in sorted(bandwidth.items())))
    for (model, threads), best in sorted(table.items()):
        times = {b: r[metric] for b, r in best.items()}
        sat, fit = saturation(times), knee(times)
        fit_text = (f"T(b) = {fit[0]:.1f} + {fit[1]:.2f} b ms, knee a/c = {fit[0] / fit[1]:.0f}"
                    if fit else "no linear part")
        print(f"\n{model}, {threads} thread(s), {best[min(best)]['weights_MB']:.0f} MB of weights;"
              f" by {metric}: doubling >= 1.5x from batch {sat if sat else '(never)'}; {fit_text}\n")
        print("| batch | ms/step | CPU ms/step | cores | floor ms | KV MB | tok/s | "
              "T(b)/T(1) | T(2b)/T(b) | GOP/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        t1 = times[min(times)]
        for b in sorted(best):
            r = best[b]
            double = f"{times[2 * b] / times[b]:.2f}" if 2 * b in times else ""
            print(f"| {b} | {r['ms/step']:.1f} | {r['cpu_ms/step']:.1f} | {r['cores_used']:.2f} | "
                  f"{r['bw_floor_ms']:.1f} | {r['kv_MB/step']:.0f} | {b / times[b] * 1e3:.1f} | "
                  f"{times[b] / t1:.2f} | {double} | {r['GOP/s']:.1f} |")


if __name__ == "__main__":
    main()
