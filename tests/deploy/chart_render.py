"""Renders and lints deploy/helm/tandem offline, as `helm template` and
`helm lint --strict` do, through the Helm v4 Go SDK that the PyPI package
helm-python-sdk (0.2.2) bundles: no helm binary, no cluster.

Python: the python3 first on PATH, with helm-python-sdk==0.2.2 and PyYAML
(scripts/setup.sh installs them).
"""

import os
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "tandem")
NAMESPACE = "tandem"
RELEASE = "t"


def _helm():
    try:
        import helm_python  # noqa: PLC0415 (optional dependency: say how to get it)
    except ImportError:
        sys.exit("helm-python-sdk is missing: python3 -m pip install helm-python-sdk==0.2.2 "
                 "(scripts/setup.sh does)")
    return helm_python


def load_values(path):
    """A values file as a dict ({} for None)."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def render(values, chart=CHART):
    """The rendered manifest (a YAML stream), as `helm template` prints it.
    Raises the SDK's HelmError (schema or template errors)."""
    helm = _helm()
    config = helm.Config(namespace=NAMESPACE, storage_driver="memory")
    return config.install(chart, RELEASE, values, dry_run="client")["manifest"]


def render_docs(values, chart=CHART):
    """The rendered objects, as dicts."""
    return [d for d in yaml.safe_load_all(render(values, chart)) if d]


def lint(values, chart=CHART):
    """Problems `helm lint --strict` reports (warnings and errors), as strings."""
    helm = _helm()
    report = helm.lint(chart, values, strict=True, namespace=NAMESPACE)
    problems = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return problems + list(report.get("errors") or [])


def ci_value_files(chart=CHART):
    """deploy/helm/tandem/ci/*.yaml, sorted."""
    ci = os.path.join(chart, "ci")
    return sorted(os.path.join(ci, f) for f in os.listdir(ci) if f.endswith(".yaml"))
