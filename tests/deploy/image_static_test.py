#!/usr/bin/env python3
"""deploy/image/Containerfile without building it (CI; the build itself is
tests/deploy/image_build_test.sh, label `image`):

  - every FROM is the registry-free base (ARG BASE, a localhost/ image) or an
    earlier stage: nothing is pulled from a container registry; no ADD of a URL;
  - the build and prebuilt stages produce, and the runtime stage installs in
    /usr/local/bin, exactly the five binaries; every /usr/local/bin/... command
    the Helm chart renders is one of them;
  - the runtime stage runs as the uid:gid the chart's securityContext sets;
  - each COPY source exists in the repository, and .containerignore keeps build/
    out of the context but for the five binaries;
  - with --bin-dir: every shared library the binaries link (ldd) comes from a
    package in the runtime stage's apt-get install list or from the minbase
    base (Priority: required, or apt's own dependencies), and every listed
    package is one the binaries need.

    python3 tests/deploy/image_static_test.py [--bin-dir build/bin]

Python: the python3 first on PATH, with helm-python-sdk and PyYAML (the
chart render); ldd, dpkg-query and apt-cache from the host (Debian bookworm).
"""

import argparse
import os
import re
import subprocess
import sys

import chart_render

REPO = chart_render.REPO
CONTAINERFILE = os.path.join(REPO, "deploy", "image", "Containerfile")
BINARIES = ["tandem", "tandem-decode", "tandem-generate", "tandem-prefill", "tandem-router"]


def instructions(path):
    """(keyword, argument) per instruction, continuation lines joined."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arg = line.partition(" ")
            out.append((keyword.upper(), " ".join(arg.split())))
    return out


def stages(instrs):
    """name -> list of instructions; plus the global ARG defaults."""
    args, result, current = {}, {}, None
    for keyword, arg in instrs:
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?: AS (\S+))?", arg, re.I)
            current = m.group(2) or f"stage{len(result)}"
            result[current] = [(keyword, arg)]
        elif current is None and keyword == "ARG":
            name, _, default = arg.partition("=")
            args[name] = default
        else:
            result[current].append((keyword, arg))
    return args, result


def apt_packages(stage):
    for keyword, arg in stage:
        if keyword == "RUN" and "apt-get install" in arg:
            tail = arg.split("apt-get install", 1)[1].split("&&", 1)[0]
            return [w for w in tail.split() if not w.startswith("-")]
    return []


def linked_packages(bin_dir):
    """package -> libraries of the binaries it provides (one dpkg-query for all)."""
    libs = {}
    for b in BINARIES:
        out = subprocess.run(["ldd", os.path.join(bin_dir, b)], capture_output=True, text=True,
                             check=True).stdout
        for m in re.finditer(r"(\S+) => (/\S+)", out):
            real = os.path.realpath(m.group(2))
            # dpkg knows a library by its path in the package (usrmerge: /lib or /usr/lib).
            for candidate in (real, real.replace("/usr/lib/", "/lib/", 1)):
                libs[candidate] = m.group(1)
    run = subprocess.run(["dpkg-query", "-S", *sorted(libs)], capture_output=True, text=True,
                         check=False)
    pkgs, owned = {}, set()
    for line in run.stdout.splitlines():
        owner, _, path = line.partition(": ")
        for pkg in owner.split(", "):
            pkgs.setdefault(pkg.split(":")[0], set()).add(libs[path])
        owned.add(libs[path])
    if missing := sorted(set(libs.values()) - owned):
        raise SystemExit(f"libraries that belong to no Debian package: {', '.join(missing)}")
    return pkgs


def in_minbase(pkg):
    """Priority: required packages and apt's dependencies are in debootstrap's minbase."""
    prio = subprocess.run(["dpkg-query", "-W", "-f=${Priority}", pkg], capture_output=True,
                          text=True, check=False).stdout
    if prio == "required":
        return True
    depends = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", "apt"], capture_output=True,
                             text=True, check=False).stdout
    return pkg in re.findall(r"[a-z0-9][a-z0-9.+-]+", depends)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", help="a build's bin/ (checks the runtime packages)")
    args = parser.parse_args()
    failures = []

    instrs = instructions(CONTAINERFILE)
    arg_defaults, st = stages(instrs)
    if not arg_defaults.get("BASE", "").startswith("localhost/"):
        failures.append(f"ARG BASE must default to a localhost/ image, not {arg_defaults.get('BASE')!r}")
    seen = []
    for name, body in st.items():
        image = body[0][1].split()[0]
        if image not in ("${BASE}", "${BINARIES}") and image not in seen:
            failures.append(f"stage {name}: FROM {image} would pull from a registry")
        if image == "${BINARIES}" and arg_defaults.get("BINARIES") not in seen:
            failures.append(f"ARG BINARIES={arg_defaults.get('BINARIES')} is no earlier stage")
        seen.append(name)
        for keyword, arg in body:
            if keyword == "ADD" and re.search(r"https?://", arg):
                failures.append(f"stage {name}: ADD of a URL: {arg}")
            if keyword == "COPY" and not arg.startswith("--from"):
                for src in arg.split()[:-1]:
                    if not src.startswith("build/") and not os.path.exists(os.path.join(REPO, src)):
                        failures.append(f"stage {name}: COPY {src}: no such path in the repository")
    for required in ("build", "prebuilt", "binaries", "runtime"):
        if required not in st:
            failures.append(f"no stage named {required}")
    if failures:
        return report(failures)

    # The five binaries, in every stage that makes or installs them.
    build_run = " ".join(a for k, a in st["build"] if k == "RUN")
    made = sorted(set(re.findall(r"/build/bin/(tandem[\w-]*)", build_run)))
    copied = sorted(os.path.basename(s) for k, a in st["prebuilt"] if k == "COPY"
                    for s in a.split()[:-1])
    for what, got in (("build stage", made), ("prebuilt stage", copied)):
        if got != BINARIES:
            failures.append(f"{what} makes {got}, want {BINARIES}")
    if ("COPY", "--from=binaries /out/ /usr/local/bin/") not in st["runtime"]:
        failures.append("runtime stage does not COPY --from=binaries /out/ to /usr/local/bin/")
    if st["runtime"][-1][0] != "CMD" and "USER" not in [k for k, _ in st["runtime"]]:
        failures.append("runtime stage has no USER")
    user = next((a for k, a in st["runtime"] if k == "USER"), "")

    # The chart: its commands and its uid.
    values = chart_render.load_values(os.path.join(chart_render.CHART, "values.yaml"))
    sc = values["securityContext"]
    if user != f"{sc['runAsUser']}:{sc['runAsGroup']}":
        failures.append(f"USER {user}; the chart runs as {sc['runAsUser']}:{sc['runAsGroup']}")
    for path in [None] + chart_render.ci_value_files():
        for doc in chart_render.render_docs(chart_render.load_values(path)):
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                cmd = (c.get("command") or [""])[0]
                if cmd.startswith("/usr/local/bin/") and os.path.basename(cmd) not in BINARIES:
                    failures.append(f"chart runs {cmd}, which the image does not have")

    with open(os.path.join(REPO, ".containerignore"), encoding="utf-8") as f:
        ignore = f.read().split()
    if "build*/" not in ignore or any(f"!build/bin/{b}" not in ignore for b in BINARIES):
        failures.append(".containerignore must exclude build*/ but for build/bin/<the five>")

    runtime = apt_packages(st["runtime"])
    if args.bin_dir:
        linked = linked_packages(args.bin_dir)
        for pkg, libs in sorted(linked.items()):
            if pkg not in runtime and not in_minbase(pkg):
                failures.append(f"runtime stage lacks {pkg} ({', '.join(sorted(libs))})")
        for pkg in runtime:
            if pkg not in linked:
                failures.append(f"runtime stage installs {pkg}, which no binary links")
        print(f"runtime packages: {len(runtime)} listed, {len(linked)} linked "
              f"(minbase has the rest)")
    else:
        print("SKIP: no --bin-dir, runtime packages not checked against ldd")
    return report(failures)


def report(failures):
    for f in failures:
        print("FAIL:", f)
    print("image_static_test:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
