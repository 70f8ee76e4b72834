#!/usr/bin/env python3
"""Render -> run: the Helm chart's wiring, proven by running what it renders.

Renders deploy/helm/tandem with tests/deploy/render-run-values.yaml, then for
every rendered Deployment starts its init containers (to completion) and its
containers as local processes, with exactly the command, args and env the
manifest gives them (Kubernetes $(VAR) expansion included) and the ConfigMap
and Secret contents mounted where the manifest mounts them. What a pod on its
own network namespace would have, a local process gets this way:

  - each pod's container ports get free loopback ports; "host:PORT" (and a
    bare PORT under a YAML key) naming a container port of the pod, in args
    and mounted files, becomes 127.0.0.1:<its port>;
  - Service DNS names (name, name.ns, name.ns.svc, name.ns.svc.<domain>) with
    a Service port become 127.0.0.1:<the backing pod's target port>;
  - a volume's mount path becomes a local folder: ConfigMaps and Secrets
    written out, the models volume -> --model-dir, emptyDirs fresh;
  - /usr/local/bin/<binary> (the image's layout) runs from --bin-dir;
  - status.podIP is 127.0.0.1; the probes are checked on the ports they name.

Then it asks the router's Service (its HTTP port) for a greedy completion
and compares the text with tandem-generate's on the same model. A mistyped
config key, port or Service name in the chart makes it fail.

    python3 tests/deploy/render_run_test.py --bin-dir build/bin \
        --model-dir ../shared/models

Python: the python3 first on PATH, with helm-python-sdk==0.2.2 and PyYAML.
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import json
import urllib.error
import urllib.request

import yaml

import chart_render

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "Once upon a time"
MAX_TOKENS = 24
API_KEY = "render-run-key-0123456789"
# The Secret the values name (router.apiKeys.existingSecret): made by the
# test, as an operator would with kubectl create secret.
SECRETS = {"tandem-api-keys": {"api-keys": f"render-run={API_KEY}"}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class Pod:
    """One replica of a Deployment, as local processes."""

    def __init__(self, deployment, work):
        self.name = deployment["metadata"]["name"]
        self.spec = deployment["spec"]["template"]["spec"]
        self.labels = deployment["spec"]["template"]["metadata"]["labels"]
        replicas = deployment["spec"].get("replicas", 1)
        if replicas != 1:
            raise SystemExit(f"{self.name}: the test runs one replica per Deployment, "
                             f"the values give {replicas}")
        self.dir = os.path.join(work, self.name)
        os.makedirs(self.dir)
        # containerPort -> local port; port name -> containerPort.
        self.ports = {}
        self.port_names = {}
        for c in self.spec["containers"]:
            for p in c.get("ports", []):
                self.ports[p["containerPort"]] = free_port()
                if "name" in p:
                    self.port_names[p["name"]] = p["containerPort"]
        self.procs = []

    def local_port(self, target):
        """The local port of a container port given by number or name."""
        port = self.port_names.get(target, target)
        if port not in self.ports:
            raise KeyError(f"{self.name}: no container port {target!r}")
        return self.ports[port]


class Cluster:
    def __init__(self, docs, args, work):
        self.args = args
        self.work = work
        self.docs = docs
        self.configmaps = {d["metadata"]["name"]: d.get("data", {})
                           for d in docs if d["kind"] == "ConfigMap"}
        self.services = [d for d in docs if d["kind"] == "Service"]
        self.pods = [Pod(d, work) for d in docs if d["kind"] == "Deployment"]
        self.dns = self._dns_map()

    def _dns_map(self):
        """'svc[.ns[.svc[.domain]]]:port' -> '127.0.0.1:local'."""
        m = {}
        for svc in self.services:
            name = svc["metadata"]["name"]
            backing = [p for p in self.pods if matches(svc["spec"]["selector"], p.labels)]
            if len(backing) != 1:
                raise SystemExit(f"Service {name} selects {len(backing)} pods, want 1")
            pod = backing[0]
            for sp in svc["spec"]["ports"]:
                local = pod.local_port(sp.get("targetPort", sp["port"]))
                for host in (name, f"{name}.{chart_render.NAMESPACE}",
                             f"{name}.{chart_render.NAMESPACE}.svc",
                             f"{name}.{chart_render.NAMESPACE}.svc.cluster.local"):
                    m[f"{host}:{sp['port']}"] = f"127.0.0.1:{local}"
        return m

    def service_address(self, kind_suffix, port_name):
        for svc in self.services:
            if svc["metadata"]["name"].endswith(kind_suffix):
                port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == port_name)
                return self.dns[f"{svc['metadata']['name']}:{port}"]
        raise SystemExit(f"no Service named *{kind_suffix}")

    # --- what a container sees ------------------------------------------------

    def mounts(self, pod, container):
        """mountPath -> local folder, longest first."""
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        out = {}
        for vm in container.get("volumeMounts", []):
            v = volumes[vm["name"]]
            local = os.path.join(pod.dir, "volumes", vm["name"])
            if "configMap" in v or "secret" in v:
                if "configMap" in v:
                    data = self.configmaps[v["configMap"]["name"]]
                else:
                    data = SECRETS[v["secret"]["secretName"]]
                os.makedirs(local, exist_ok=True)
                for key, text in data.items():
                    with open(os.path.join(local, key), "w", encoding="utf-8") as f:
                        f.write(text)
            elif vm["name"] == "models":
                local = os.path.abspath(self.args.model_dir)
            elif "emptyDir" in v:
                os.makedirs(local, exist_ok=True)
            else:
                raise SystemExit(f"{pod.name}: volume {vm['name']} of an unknown kind")
            out[vm["mountPath"]] = local
        return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))

    def rewrite(self, pod, text, mounts):
        """Addresses and paths in one string (an arg or a mounted file), in one
        pass (a replacement is never rewritten again)."""
        table = {}
        for name, local in self.dns.items():
            table[name] = local
        for port, local in pod.ports.items():
            for host in ("0.0.0.0", "127.0.0.1", "[::]"):
                table[f"{host}:{port}"] = f"127.0.0.1:{local}"
        for mount, local in mounts.items():
            table[mount] = local
        keys = sorted(table, key=len, reverse=True)
        pattern = "|".join(rf"(?<![\w.-]){re.escape(k)}(?![\w.-])" if not k.startswith("/")
                           else rf"(?<![\w/.-]){re.escape(k)}(?=/|$|[^\w.-])" for k in keys)
        return re.sub(pattern, lambda m: table[m.group(0)], text)

    def rewrite_yaml_ports(self, pod, text):
        """A YAML file's bare port numbers (key: PORT) that name a container port."""
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            return text

        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if isinstance(v, int) and not isinstance(v, bool) and v in pod.ports:
                        node[k] = pod.ports[v]
                    else:
                        walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(doc)
        return yaml.safe_dump(doc, sort_keys=False)

    def env(self, container):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.work}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[e["name"]] = "127.0.0.1"
            elif "secretKeyRef" in e.get("valueFrom", {}):
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = SECRETS[ref["name"]][ref["key"]]
            else:
                raise SystemExit(f"env {e['name']}: unsupported source {e}")
        return env

    def start(self, pod, container, wait):
        mounts = self.mounts(pod, container)
        # Mounted files: addresses and paths as this pod sees them.
        for mount, local in mounts.items():
            if local.startswith(pod.dir):
                for f in os.listdir(local):
                    path = os.path.join(local, f)
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                    text = self.rewrite(pod, text, mounts)
                    if f.endswith((".yaml", ".yml")):
                        text = self.rewrite_yaml_ports(pod, text)
                    with open(path, "w", encoding="utf-8") as fh:
                        fh.write(text)
        env = self.env(container)
        argv = [expand(a, env) for a in container.get("command", []) + container.get("args", [])]
        argv = [self.rewrite(pod, a, mounts) for a in argv]
        if argv[0].startswith("/usr/local/bin/"):
            argv[0] = os.path.join(self.args.bin_dir, os.path.basename(argv[0]))
        env = {k: self.rewrite(pod, v, mounts) for k, v in env.items()}
        log_path = os.path.join(pod.dir, container["name"] + ".log")
        print(f"start {pod.name}/{container['name']}: {' '.join(argv)}", flush=True)
        log = open(log_path, "w", encoding="utf-8")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            rc = p.wait(timeout=60)
            if rc != 0:
                raise SystemExit(f"{pod.name}: init container {container['name']} failed "
                                 f"({rc}):\n{tail(log_path)}")
            return None
        pod.procs.append((container["name"], p, log_path))
        return p

    def start_all(self):
        for pod in self.pods:
            for c in pod.spec.get("initContainers", []):
                self.start(pod, c, wait=True)
        for pod in self.pods:
            for c in pod.spec["containers"]:
                self.start(pod, c, wait=False)

    def probes_pass(self, pod):
        """Every container's readiness probe, on the local ports it names. A
        gRPC probe is checked as a TCP connect to its port plus the pod's HTTP
        health endpoint (/health/ready) that reports the same state (the
        workers' and the router's grpc.health.v1 and /health/ready share it)."""
        for c in pod.spec["containers"]:
            probe = c.get("readinessProbe")
            if probe is None:
                continue
            if "httpGet" in probe:
                if not http_ok(pod.local_port(probe["httpGet"]["port"]), probe["httpGet"]["path"]):
                    return False
            elif "grpc" in probe:
                port = pod.local_port(probe["grpc"]["port"])
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    return False
                http_port = next((pod.local_port(n) for n in ("http", "metrics")
                                  if n in pod.port_names), None)
                if http_port is None or not http_ok(http_port, "/health/ready"):
                    return False
        return True

    def dead(self):
        return [(pod.name, name, log) for pod in self.pods for name, p, log in pod.procs
                if p.poll() is not None]

    def stop(self):
        for pod in self.pods:
            for _, p, _ in pod.procs:
                if p.poll() is None:
                    p.terminate()
        for pod in self.pods:
            for _, p, _ in pod.procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


def expand(s, env):
    """Kubernetes $(VAR) expansion ($$ escapes; unknown names stay)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), s)


def http_ok(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def tail(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()[-3000:]


def completion(router_http):
    body = json.dumps({"model": "stories260K", "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://{router_http}/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["text"]


def reference(args):
    model = os.path.join(args.model_dir, "stories260K", "stories260K.gguf")
    out = subprocess.run([os.path.join(args.bin_dir, "tandem-generate"), f"--model={model}",
                          f"--prompt={PROMPT}", f"--n={MAX_TOKENS}", "--threads=1"],
                         check=True, capture_output=True, text=True).stdout
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True, help="folder the models volume maps to")
    parser.add_argument("--chart", default=chart_render.CHART)
    parser.add_argument("--values", default=os.path.join(HERE, "render-run-values.yaml"))
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = parser.parse_args()

    docs = chart_render.render_docs(chart_render.load_values(args.values), args.chart)
    work = tempfile.mkdtemp(prefix="tandem-render-run-")
    cluster = Cluster(docs, args, work)
    ok = False
    try:
        cluster.start_all()
        deadline = time.time() + args.timeout
        while True:
            if dead := cluster.dead():
                for pod, name, log in dead:
                    print(f"FAIL: {pod}/{name} exited:\n{tail(log)}")
                return 1
            if all(cluster.probes_pass(p) for p in cluster.pods):
                break
            if time.time() > deadline:
                for pod in cluster.pods:
                    for name, _, log in pod.procs:
                        print(f"--- {pod.name}/{name}:\n{tail(log)}")
                print(f"FAIL: not every pod ready after {args.timeout:.0f} s")
                return 1
            time.sleep(0.3)
        router_http = cluster.service_address("-router", "http")
        got = completion(router_http)
        want = reference(args)
        print(f"router ({router_http}): {got!r}\ntandem-generate: {want!r}")
        ok = bool(got) and want.rstrip("\n").endswith(got) and PROMPT in want
        print("render_run_test:", "OK" if ok else "FAILED (greedy texts differ)")
        return 0 if ok else 1
    finally:
        cluster.stop()
        if args.keep or not ok:
            print("logs in", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
