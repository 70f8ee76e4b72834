#!/usr/bin/env python3
"""The Grafana dashboard and the Prometheus alerts name only metrics that a
running cluster exports, and the exports are clean.

Starts `tandem up deploy/local/disaggregated.yaml` (router, prefill, decode on
loopback, stories260K), sends some completions (streamed and not), scrapes
/metrics from every process, then checks:

  - every metric name in every PromQL expression of deploy/grafana/tandem.json
    and deploy/prometheus/alerts.yaml is a sample name some process exports;
  - the vLLM-compatible gauges (vllm:num_requests_running,
    vllm:num_requests_waiting, vllm:kv_cache_usage_perc) are on both workers;
  - `promtool check metrics` is clean on every process's /metrics, but for
    its "metric names should not contain ':'" on those three vLLM names
    (vLLM's own names, which the scrapers written for vLLM look up);
  - `promtool check rules deploy/prometheus/alerts.yaml` accepts the rules.

    python3 tests/deploy/metric_names_test.py --tandem build/bin/tandem

Python: the python3 first on PATH (standard library only); promtool from
Debian's prometheus package.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VLLM = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "le", "sum", "min", "max", "avg", "count", "rate",
    "irate", "increase", "histogram_quantile", "max_over_time", "min_over_time", "topk",
    "bottomk", "quantile", "stddev", "abs", "clamp_min", "clamp_max", "absent", "vector",
    "scalar", "time", "sort", "sort_desc", "avg_over_time", "sum_over_time", "delta", "deriv",
}


def metric_names(expr):
    """The metric names an expression selects (label matchers, strings,
    ranges, grouping clauses and functions left out)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)              # strings
    e = re.sub(r"\{[^}]*\}", "", e)                          # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                         # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$__\w+|\$\{?\w+\}?", "", e)                # Grafana variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        following = e[m.end():].lstrip()
        if word in PROMQL_WORDS or following.startswith("("):
            continue
        names.add(word)
    return names


def dashboard_exprs():
    with open(os.path.join(REPO, "deploy", "grafana", "tandem.json"), encoding="utf-8") as f:
        d = json.load(f)
    return [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]


def alert_exprs():
    # The rules file is YAML; its expressions are the `expr:` blocks. Parsed
    # with PyYAML when present, else a plain-text reading of them.
    path = os.path.join(REPO, "deploy", "prometheus", "alerts.yaml")
    try:
        import yaml  # noqa: PLC0415
    except ImportError:
        sys.exit("PyYAML is missing: python3 -m pip install pyyaml")
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return [(r.get("alert") or r.get("record"), str(r["expr"]))
            for g in doc["groups"] for r in g["rules"]]


class Cluster:
    """`tandem up CONFIG`, with the endpoints it prints."""

    def __init__(self, tandem, config):
        self.p = subprocess.Popen([tandem, "up", config], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.output = []
        self.router_http = None
        self.metrics = {}  # process name -> host:port of /metrics
        # A silent cluster is stopped after 180 s (its stdout then closes).
        timer = threading.Timer(180, self.stop)
        timer.start()
        for line in self.p.stdout:
            self.output.append(line)
            if m := re.match(r"\s+router\s+gRPC \S+\s+HTTP http://(\S+)", line):
                self.router_http = m.group(1)
                self.metrics["router"] = m.group(1)
            elif m := re.match(r"\s+(\S+)\s+gRPC \S+\s+metrics http://(\S+)/metrics", line):
                self.metrics[m.group(1)] = m.group(2)
            if line.startswith("Ctrl-C stops the cluster"):
                timer.cancel()
                return
        timer.cancel()
        self.stop()
        sys.exit("tandem up did not come up:\n" + "".join(self.output[-40:]))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def post(address, path, body):
    req = urllib.request.Request(f"http://{address}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        return r.read().decode()


def sample_names(text):
    return {re.match(r"[^{\s]+", line).group(0) for line in text.splitlines()
            if line and not line.startswith("#")}


def promtool_findings(promtool, text):
    run = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         text=True, check=False)
    allowed = {f"{n} metric names should not contain ':'" for n in VLLM}
    findings = [l for l in (run.stdout + run.stderr).splitlines() if l and l not in allowed]
    if run.returncode not in (0, 3) or (run.returncode == 3 and findings):
        findings.append(f"(promtool exit {run.returncode})")
    return findings


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem", required=True, help="the tandem CLI (tandem up)")
    parser.add_argument("--config", default=os.path.join(REPO, "deploy", "local",
                                                         "disaggregated.yaml"))
    args = parser.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        sys.exit("promtool is not on PATH: install Debian's prometheus package "
                 "(scripts/setup.sh --deps)")

    failures = []
    run = subprocess.run([promtool, "check", "rules",
                          os.path.join(REPO, "deploy", "prometheus", "alerts.yaml")],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        failures.append(f"promtool check rules: {run.stdout}{run.stderr}")

    cluster = Cluster(args.tandem, args.config)
    try:
        for i in range(6):
            post(cluster.router_http, "/v1/completions",
                 {"model": "stories260K", "prompt": f"Once upon a time {i}", "max_tokens": 16,
                  "temperature": 0, "stream": i % 2 == 1})
        time.sleep(1.5)  # a load report / heartbeat after the last request
        exported = {}
        for name, address in sorted(cluster.metrics.items()):
            text = scrape(address)
            exported[name] = sample_names(text)
            for f in promtool_findings(promtool, text):
                failures.append(f"promtool check metrics on {name}: {f}")
    finally:
        cluster.stop()

    everything = set().union(*exported.values())
    print("scraped:", ", ".join(f"{n} ({len(s)} series names)" for n, s in exported.items()))
    for name in exported:
        if name.startswith(("prefill", "decode", "colocated")):
            for v in VLLM:
                if v not in exported[name]:
                    failures.append(f"{name} does not export {v}")
    checked = 0
    for source, exprs in (("dashboard", dashboard_exprs()), ("alerts", alert_exprs())):
        for title, expr in exprs:
            names = metric_names(expr)
            if not names:
                failures.append(f"{source} {title}: no metric name found in {expr!r}")
            for n in sorted(names):
                checked += 1
                if n not in everything:
                    failures.append(f"{source} {title}: {n} is not exported by any process")
    print(f"checked {checked} metric references")
    for f in failures:
        print("FAIL:", f)
    print("metric_names_test:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
