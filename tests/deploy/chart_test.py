#!/usr/bin/env python3
"""deploy/helm/tandem, offline: `helm lint --strict` is clean and the chart
renders for the default values and every ci/*.yaml; every rendered object
validates against the Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail) of the oldest release the chart supports and of the
newest the package ships; CRDs (ServiceMonitor) are skipped with a message;
each tests/deploy/bad-values/*.yaml is refused by values.schema.json with the
offending field named.

    python3 tests/deploy/chart_test.py [--chart DIR]

Python: the python3 first on PATH, with helm-python-sdk==0.2.2 and
kubernetes-validate==1.37.0 (scripts/setup.sh installs them).
"""

import argparse
import os
import sys

import chart_render

# Chart.yaml's kubeVersion floor, and the newest schemas kubernetes-validate has.
KUBE_VERSIONS = ["1.30", "1.37"]
# Custom resources: no OpenAPI schema in kubernetes-validate.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
HERE = os.path.dirname(os.path.abspath(__file__))


def validate_objects(docs, label):
    try:
        import kubernetes_validate  # noqa: PLC0415
    except ImportError:
        sys.exit("kubernetes-validate is missing: python3 -m pip install "
                 "kubernetes-validate==1.37.0 (scripts/setup.sh does)")
    failures = []
    for doc in docs:
        what = f"{label}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if (doc.get("apiVersion"), doc.get("kind")) in CRD_KINDS:
            print(f"SKIP {what}: custom resource, no schema in kubernetes-validate")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                failures.append(f"{what} (Kubernetes {version}): {e.message} at "
                                f"{'/'.join(str(p) for p in e.path)}")
            except kubernetes_validate.SchemaNotFoundError:
                failures.append(f"{what} (Kubernetes {version}): no such kind/apiVersion")
    return failures


def check_wiring(docs, label):
    """The router's workers.dns names exactly the headless worker Services (by
    FQDN and gRPC port), and each selects one worker Deployment's pods."""
    import yaml  # noqa: PLC0415
    failures = []
    router_cm = next(d for d in docs if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"].endswith("-router"))
    dns = set(yaml.safe_load(router_cm["data"]["router.yaml"])["workers"]["dns"])
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    want = set()
    for svc in (d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"):
        name = svc["metadata"]["name"]
        grpc = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
        want.add(f"{name}.{chart_render.NAMESPACE}.svc.cluster.local:{grpc}")
        selected = [d for d in deployments if all(
            d["spec"]["template"]["metadata"]["labels"].get(k) == v
            for k, v in svc["spec"]["selector"].items())]
        if len(selected) != 1:
            failures.append(f"{label}: Service {name} selects {len(selected)} Deployments")
    if dns != want:
        failures.append(f"{label}: router workers.dns {sorted(dns)} != headless Services "
                        f"{sorted(want)}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", default=chart_render.CHART)
    args = parser.parse_args()

    failures = []
    cases = [("default values", None)] + [
        (os.path.relpath(f, args.chart), f) for f in chart_render.ci_value_files(args.chart)]
    if len(cases) < 4:
        failures.append(f"want at least three ci/*.yaml value files, found {len(cases) - 1}")
    for label, path in cases:
        values = chart_render.load_values(path)
        for problem in chart_render.lint(values, args.chart):
            failures.append(f"{label}: helm lint: {problem}")
        try:
            docs = chart_render.render_docs(values, args.chart)
        except Exception as e:  # noqa: BLE001 (the SDK's HelmError family)
            failures.append(f"{label}: render failed: {e}")
            continue
        kinds = sorted({d["kind"] for d in docs})
        print(f"{label}: {len(docs)} objects ({', '.join(kinds)})")
        failures += validate_objects(docs, label)
        failures += check_wiring(docs, label)
        if path is None:
            names = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Deployment")
            if names != ["t-tandem-default-decode", "t-tandem-default-prefill", "t-tandem-router"]:
                failures.append(f"default values deploy {names}, want the router, one prefill "
                                "and one decode Deployment")

    bad_dir = os.path.join(HERE, "bad-values")
    for name in sorted(os.listdir(bad_dir)):
        if not name.endswith(".yaml"):
            continue
        path = os.path.join(bad_dir, name)
        with open(path, encoding="utf-8") as f:
            want = f.readline().removeprefix("# expect:").strip()
        try:
            chart_render.render(chart_render.load_values(path), args.chart)
            failures.append(f"bad-values/{name}: rendered; the schema should refuse it")
        except Exception as e:  # noqa: BLE001
            if want not in str(e):
                failures.append(f"bad-values/{name}: refused, but the error does not name "
                                f"{want!r}: {e}")
            else:
                print(f"bad-values/{name}: refused ({want})")

    for f in failures:
        print("FAIL:", f)
    print("chart_test:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
