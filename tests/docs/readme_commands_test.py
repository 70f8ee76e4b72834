#!/usr/bin/env python3
"""Runs the command lines the README files show, so the docs cannot rot.

Every README.md of the repository (top level and per folder) is read; every
command line in it that starts with `build/bin/` or `scripts/` (in a fenced
code block, or in inline backticks) is turned into runnable commands and run
from the repository root against the shared models. The README is the only
source: this file holds no list of commands, only how to fill placeholders.

- Synopsis syntax: `(a | b)` runs once per alternative, `[...]` is optional
  (run with every optional part, then once more with none and
  the first alternatives), `...` is dropped.
- Placeholders: FILE / MODEL / IN / M.gguf -> the stories260K model; OUT /
  PATH, and the value of a flag whose name ends in `out` -> a temp path; TEXT,
  N, T, K, P, R, S, STR, TYPE -> a valid value; HOST:PORT -> the gRPC address
  of a cluster that a README `tandem up` line started (run last; skipped when
  none did). Listen addresses (flags ending in `address`, `--listen`) get
  port 0, so runs never collide. A placeholder it cannot fill, or a file it
  names that does not exist, skips that command with the reason printed.
- Scripts that install, download, build or run the suite (`scripts/setup.sh`,
  `scripts/fetch_models.sh`, `scripts/test.sh`, `scripts/demo.sh`) are skipped
  with the reason printed.
- Each command gets a few seconds. One still running then (a server, or a
  big model written) has started and parsed its flags: it passes and is
  stopped; one that prints READY or "cluster ready" is a started server.

Fails when a command exits non-zero or prints "Unknown command line flag".
Standard library only; run with the python3 on PATH.
"""

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

# Scripts that must not run inside the test suite, and why.
SKIP_SCRIPTS = {
    "scripts/setup.sh": "installs packages and rebuilds build/",
    "scripts/test.sh": "runs the whole suite, this test included",
    "scripts/demo.sh": "installs, rebuilds build/ and runs a cluster demo",
    "scripts/fetch_models.sh": "downloads models from PyPI (tests/scripts/fetch_models_test.sh tests it offline)",
}

# Values for placeholder words of synopsis lines.
VALUES = {
    "TEXT": "Once upon a time",
    "N": "8",
    "T": "0.8",
    "K": "40",
    "P": "0.9",
    "R": "1.1",
    "S": "1",
    "STR": ".",
    "TYPE": "Q8_0",
}
MODEL_WORDS = {"FILE", "MODEL", "IN", "M.gguf"}
OUT_WORDS = {"OUT", "PATH"}
PLACEHOLDER = re.compile(r"^[A-Z]+(_[A-Z]+)*(:[A-Z]+)?(\.[a-z]+)?$")  # FILE, HOST:PORT, M.gguf; not Q4_0
UNKNOWN_FLAG = "Unknown command line flag"
STARTED = re.compile(r"^READY |cluster ready", re.M)
CLUSTER_ROUTER = re.compile(r"^\s*router\s+gRPC (\S+)", re.M)


# --- extraction ----------------------------------------------------------------


def readme_files(repo):
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build"))
        if "README.md" in files:
            yield os.path.join(root, "README.md")


def command_lines(text):
    """Command lines (build/bin/... or scripts/...) in fenced blocks and inline code."""
    found = []
    prose = []
    in_fence = False
    block = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if in_fence:
                found += fenced_commands(block)
                block = []
            in_fence = not in_fence
            prose.append("")
            continue
        (block if in_fence else prose).append(line)
    for span in re.findall(r"`([^`]+)`", "\n".join(prose)):
        found.append(" ".join(span.split()))
    return [c for c in found if c.startswith(("build/bin/", "scripts/"))]


def fenced_commands(block):
    """Logical lines of a code block: backslash and indented continuations joined."""
    lines = []
    for raw in block:
        line = raw.rstrip()
        if lines and (lines[-1].endswith("\\") or (line[:1].isspace() and line.strip())):
            lines[-1] = lines[-1].rstrip("\\").rstrip() + " " + line.strip()
        elif line.strip():
            lines.append(line.strip().removeprefix("$ "))
    return lines


# --- synopsis -> concrete argument lists -----------------------------------------


def tokenize(line):
    lexer = shlex.shlex(line, posix=True, punctuation_chars="()[]|")
    lexer.whitespace_split = True
    tokens = []
    for tok in lexer:
        # shlex groups adjacent punctuation ("])"): one token each.
        if tok and all(c in "()[]|" for c in tok):
            tokens += list(tok)
        elif tok != "...":
            tokens.append(tok)
    return tokens


def parse_seq(tokens, i, closer):
    """Parses until `closer`; returns (alternatives, next index).

    A sequence item is a token, ("opt", alternatives) or ("alt", alternatives);
    alternatives is a list of sequences (split on top-level `|`)."""
    alts = [[]]
    while i < len(tokens):
        tok = tokens[i]
        if tok == closer:
            return alts, i + 1
        if tok in ("(", "["):
            inner, i = parse_seq(tokens, i + 1, ")" if tok == "(" else "]")
            alts[-1].append(("alt" if tok == "(" else "opt", inner))
            continue
        if tok == "|":
            alts.append([])
        elif tok in (")", "]"):
            raise ValueError(f"unbalanced '{tok}'")
        else:
            alts[-1].append(tok)
        i += 1
    if closer is not None:
        raise ValueError(f"missing '{closer}'")
    return alts, i


def width(alts):
    """How many variants it takes to use every alternative at least once."""
    n = len(alts)
    for seq in alts:
        for item in seq:
            if isinstance(item, tuple):
                n = max(n, width(item[1]))
    return n


def expand(alts, k, optional):
    """The k-th alternative of every group (the last if fewer), optionals in or out."""
    out = []
    for item in alts[min(k, len(alts) - 1)]:
        if isinstance(item, str):
            out.append(item)
        elif item[0] == "alt" or optional:
            out += expand(item[1], k, optional)
    return out


def variants(line):
    alts, _ = parse_seq(tokenize(line), 0, None)
    result = []
    for k in range(width(alts)):
        result.append(expand(alts, k, optional=True))
    minimal = expand(alts, 0, optional=False)
    if minimal not in result:
        result.append(minimal)
    return result


class Skip(Exception):
    pass


def listens(flag):
    return flag.replace("_", "-").endswith("address") or flag == "listen"


def any_port(address):
    """A listen address with its port made 0 (any), so runs never collide."""
    return re.sub(r":\d+$", ":0", address)


def concrete(args, ctx):
    """Fills placeholders; raises Skip when it cannot."""
    out = []
    for i, arg in enumerate(args):
        prev = args[i - 1] if i > 0 else ""
        flag = prev.lstrip("-") if prev.startswith("-") and "=" not in prev else ""
        if arg == "HOST:PORT":
            if ctx.router is None:
                raise Skip("HOST:PORT: no `tandem up` cluster from a README is running")
            arg = ctx.router
        elif (flag.endswith("out") and PLACEHOLDER.match(arg)) or arg in OUT_WORDS:
            arg = ctx.temp_path(flag or arg.lower())
        elif arg in MODEL_WORDS:
            arg = ctx.model
        elif arg in VALUES:
            arg = VALUES[arg]
        elif PLACEHOLDER.match(arg) and not arg.startswith("-"):
            raise Skip(f"cannot fill placeholder {arg}")
        elif listens(flag):
            arg = any_port(arg)
        elif arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if listens(name):
                arg = f"--{name}={any_port(value)}"
        out.append(arg)
    for arg in out[1:]:
        value = arg.split("=")[-1]
        if re.search(r"\.(gguf|yaml|npy)$", value) and not value.startswith(ctx.tmp):
            if not os.path.exists(os.path.join(ctx.repo, value)):
                raise Skip(f"{value} does not exist (an example name)")
    return out


# --- running -------------------------------------------------------------------


class Context:
    def __init__(self, repo, bin_dir, model, tmp, timeout):
        self.repo, self.bin_dir, self.model, self.tmp = repo, bin_dir, model, tmp
        self.timeout = timeout
        self.router = None
        self.servers = []
        self.counter = 0

    def temp_path(self, stem):
        self.counter += 1
        return os.path.join(self.tmp, f"{stem}-{self.counter}")


def stop(proc, grace=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers (a cluster's workers)
    except ProcessLookupError:
        pass
    proc.wait()


def run(args, ctx):
    """Runs one command; returns (ok, summary, output)."""
    argv = list(args)
    if argv[0].startswith("build/bin/"):
        argv[0] = os.path.join(ctx.bin_dir, argv[0][len("build/bin/"):])
    out_path = ctx.temp_path("output")
    with open(out_path, "w+b") as out:
        proc = subprocess.Popen(argv, cwd=ctx.repo, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + ctx.timeout
        state = None
        while state is None:
            time.sleep(0.1)
            out.seek(0)
            text = out.read().decode(errors="replace")
            if proc.poll() is not None:
                state = "exited"
            elif STARTED.search(text):
                state = "started"
            elif time.monotonic() > deadline:
                state = "running"
        router = CLUSTER_ROUTER.search(text)
        if state == "started" and router:
            ctx.router = router.group(1)
            ctx.servers.append(proc)
            summary = f"started; cluster router {ctx.router} kept for HOST:PORT"
        else:
            if state != "exited":
                stop(proc)
            summary = {
                "exited": f"exit {proc.returncode}",
                "started": "server started; stopped",
                "running": f"still running after {ctx.timeout:g}s with no error; stopped",
            }[state]
        out.seek(0)
        text = out.read().decode(errors="replace")
    ok = UNKNOWN_FLAG not in text and (state != "exited" or proc.returncode == 0)
    return ok, summary, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--repo", default=os.path.normpath(os.path.join(here, "..", "..")))
    parser.add_argument("--bin-dir", help="the binaries (default: REPO/build/bin)")
    parser.add_argument("--model", help="default: REPO/../shared/models/stories260K/stories260K.gguf")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per command")
    opts = parser.parse_args()
    repo = os.path.abspath(opts.repo)
    bin_dir = os.path.abspath(opts.bin_dir or os.path.join(repo, "build", "bin"))
    model = os.path.abspath(
        opts.model or os.path.join(repo, "..", "shared", "models", "stories260K", "stories260K.gguf"))
    if not os.path.exists(model):
        print(f"readme_commands_test: missing model {model}", file=sys.stderr)
        return 1

    failures, ran, skipped = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="readme_commands_") as tmp:
        ctx = Context(repo, bin_dir, model, tmp, opts.timeout)
        # Lines with HOST:PORT run last, once the README's clusters have started.
        first, last = [], []
        for path in readme_files(repo):
            rel = os.path.relpath(path, repo)
            with open(path, encoding="utf-8") as f:
                for line in command_lines(f.read()):
                    (last if "HOST:PORT" in line else first).append((rel, line))
        if not first and not last:
            print("readme_commands_test: no command lines found in any README.md", file=sys.stderr)
            return 1
        done = set()
        try:
            for rel, line in first + last:
                script = line.split()[0]
                if script in SKIP_SCRIPTS:
                    print(f"SKIP {rel}: {line}\n     ({SKIP_SCRIPTS[script]})")
                    skipped += 1
                    continue
                try:
                    forms = variants(line)
                except ValueError as e:
                    print(f"SKIP {rel}: {line}\n     (cannot parse the synopsis: {e})")
                    skipped += 1
                    continue
                for args in forms:
                    try:
                        argv = concrete(args, ctx)
                    except Skip as e:
                        print(f"SKIP {rel}: {shlex.join(args)}\n     ({e})")
                        skipped += 1
                        continue
                    key = shlex.join(args)
                    if key in done:
                        continue
                    done.add(key)
                    ok, summary, text = run(argv, ctx)
                    ran += 1
                    print(f"{'OK  ' if ok else 'FAIL'} {rel}: {shlex.join(argv)}\n     ({summary})")
                    if not ok:
                        failures.append(f"{rel}: {shlex.join(argv)}")
                        print("     | " + "\n     | ".join(text.strip().splitlines()[-20:]))
        finally:
            for proc in ctx.servers:
                stop(proc)
    print(f"\n{ran} run, {skipped} skipped, {len(failures)} failed")
    for f in failures:
        print(f"FAILED {f}")
    if ran == 0:
        print("readme_commands_test: every command was skipped", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
