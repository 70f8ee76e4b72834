#!/usr/bin/env python3
"""Writes deploy/grafana/tandem.json, the Grafana dashboard (schemaVersion 39),
from the panel list below: edit here, run, commit both.

    python3 deploy/grafana/make_dashboard.py

Every expression names only metrics a running cluster exports
(tests/deploy/metric_names_test.py checks them against /metrics).
Python: any python3 (standard library only).
"""

import json
import os

Q = "histogram_quantile({q}, sum by (le{by}) (rate({m}_bucket{sel}[$__rate_interval])))"


def quantiles(metric, by="", sel=""):
    """p50 and p99 targets of a histogram."""
    extra = f", {by}" if by else ""
    legend = "{{" + by + "}} " if by else ""
    return [{"expr": Q.format(q=q, m=metric, by=extra, sel=sel), "legendFormat": f"{legend}p{p}"}
            for q, p in ((0.5, 50), (0.99, 99))]


def t(expr, legend):
    return {"expr": expr, "legendFormat": legend}


# (title, unit, targets, description)
PANELS = [
    ("Time to first token (router)", "s",
     quantiles("tandem_router_time_to_first_token_seconds", "model"),
     "From admission to the first token sent to the client, per model."),
    ("Time per output token (router)", "s",
     quantiles("tandem_router_time_per_output_token_seconds", "model"),
     "Mean time between output tokens after the first, per request."),
    ("Inter-token latency (decode workers)", "s",
     quantiles("tandem_decode_inter_token_latency_seconds"),
     "Time between two consecutive output tokens of a request, on the decode workers."),
    ("End-to-end request latency (router)", "s",
     quantiles("tandem_router_request_duration_seconds", "model"),
     "From admission to the end of the request."),
    ("Requests running", "short",
     [t("sum(tandem_router_inflight_requests)", "router in flight"),
      t("sum(tandem_prefill_running_requests)", "prefill running"),
      t("sum(tandem_decode_running_requests)", "decode running")],
     "Admitted requests at the router; running batches of the workers, by role."),
    ("Requests waiting", "short",
     [t("sum(tandem_prefill_waiting_requests)", "prefill waiting"),
      t("sum(tandem_decode_waiting_requests)", "decode waiting"),
      t("sum(tandem_decode_reserved_requests)", "decode reserved (KV in flight)")],
     "Queued requests by role (vllm:num_requests_waiting has the same per pod)."),
    ("KV pool usage", "percentunit",
     [t("max by (pod) (vllm:kv_cache_usage_perc)", "{{pod}}"),
      t("sum(tandem_decode_kv_blocks_used) / sum(tandem_decode_kv_blocks_capacity)",
        "decode pools (all)")],
     "1 - free / total blocks per worker (vLLM's definition)."),
    ("KV transfer bytes", "Bps",
     [t("sum by (transport, direction) (rate(tandem_kv_transfer_bytes_total[$__rate_interval]))",
        "{{transport}} {{direction}}")],
     "KV bytes moved between prefill and decode workers."),
    ("KV transfer time", "s",
     quantiles("tandem_kv_transfer_seconds", "direction"),
     "Per request: decode from Commit to all bytes present; prefill from first write to last "
     "completion."),
    ("Prefix-cache hit rate", "percentunit",
     [t("sum(rate(tandem_prefill_cached_prompt_tokens_total[$__rate_interval])) / "
        "sum(rate(tandem_prefill_prompt_tokens_total[$__rate_interval]))", "prompt tokens cached")],
     "Share of prompt tokens found in the prefill workers' prefix cache."),
    ("Semantic-cache hit rate", "percentunit",
     [t("sum by (model, tier) (rate(tandem_semantic_cache_hits_total[$__rate_interval])) / "
        "(sum by (model, tier) (rate(tandem_semantic_cache_hits_total[$__rate_interval])) + "
        "sum by (model, tier) (rate(tandem_semantic_cache_misses_total[$__rate_interval])))",
        "{{model}} {{tier}}")],
     "Cacheable requests answered from the router's response cache, by model and tier "
     "(exact, semantic); a miss counts at the last tier consulted."),
    ("Route decisions per pool", "reqps",
     [t("sum by (model, route) (rate(tandem_router_route_decisions_total[$__rate_interval]))",
        "{{model}} {{route}}")],
     "Routing decisions by model (pool) and route kind."),
    ("429s (admission control)", "reqps",
     [t("sum(rate(tandem_router_rejected_requests_total[$__rate_interval]))", "rejected (429)"),
      t('sum by (model) (rate(tandem_router_requests_total{code="resource_exhausted"}'
        "[$__rate_interval]))", "{{model}} resource_exhausted")],
     "Requests refused by the router's admission control, and worker refusals."),
    ("Requests by status", "reqps",
     [t("sum by (code) (rate(tandem_router_requests_total[$__rate_interval]))", "{{code}}")],
     "Finished requests by status code."),
    ("Workers in rotation", "short",
     [t("sum by (role) (tandem_router_workers_up)", "{{role}}")],
     "Workers with a live Watch stream at the router, by role."),
]


def main():
    panels = []
    for i, (title, unit, targets, desc) in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title, "description": desc,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}},
            "targets": [dict(tg, refId=chr(ord("A") + j),
                             datasource={"type": "prometheus", "uid": "${datasource}"})
                        for j, tg in enumerate(targets)],
        })
    dashboard = {
        "title": "Tandem", "uid": "tandem-overview", "tags": ["tandem", "llm"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Data source"}]},
        "panels": panels,
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tandem.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(dashboard, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
