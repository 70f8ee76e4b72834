#!/usr/bin/env python3
"""The official OpenAI Python client against the real tandem-router.

Starts a colocated worker (tandem-decode --role=colocated) and tandem-router
on 127.0.0.1 with free ports, then drives the OpenAI-compatible HTTP front
with the `openai` package: completions and chat completions, streaming and
not, stream_options.include_usage, n, logprobs, /v1/models, the OpenAI error
bodies for bad input (400 with message/type/param/code, tools on a model
whose template cannot show them), 429-free recovery
after errors, and an error surfacing mid-stream when the worker is killed.

Usage (ctest runs this):
  python3 tests/integration/openai_client_test.py --router-bin build/bin/tandem-router \
      --worker-bin build/bin/tandem-decode --model ../shared/models/stories260K/stories260K.gguf
Exits non-zero when any check fails. Needs `pip install openai`.
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

try:
    import openai
except ImportError:  # pragma: no cover - environment problem, reported clearly
    print("openai_client_test: the `openai` package is missing: pip install openai", file=sys.stderr)
    sys.exit(2)


class Proc:
    """A child process whose stdout is read for its READY line."""

    def __init__(self, argv, name, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def ready(self, timeout=60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r, _, _ = select.select([self.p.stdout], [], [], 0.2)
            if r:
                line = self.p.stdout.readline()
                if not line:
                    break
                if line.startswith("READY"):
                    return dict(kv.split("=", 1) for kv in line.split()[1:])
        raise RuntimeError(f"{self.name} did not print READY; log:\n{self.tail()}")

    def tail(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-3000:]

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def run(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"[ OK ] {name}")
        except Exception as e:  # noqa: BLE001 - every failure is reported
            self.failed.append(name)
            print(f"[FAIL] {name}: {e!r}")
            traceback.print_exc()


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def raw_post(base, path, body_bytes):
    req = urllib.request.Request(base + path, data=body_bytes,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router-bin", required=True)
    ap.add_argument("--worker-bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"openai_client_test: model {args.model} is missing (check out ../shared)",
              file=sys.stderr)
        return 2

    log_dir = tempfile.mkdtemp(prefix="openai_client_test_")
    worker = Proc([args.worker_bin, "--role=colocated", "--model=" + args.model,
                   "--listen=127.0.0.1:0", "--metrics_port=-1", "--threads=1",
                   "--kv_blocks=512"], "worker", log_dir)
    router = None
    try:
        wport = worker.ready()["grpc_port"]
        router = Proc([args.router_bin, "--model=stories260K=" + args.model,
                       "--workers=127.0.0.1:" + wport, "--grpc_address=127.0.0.1:0",
                       "--http_address=127.0.0.1:0"], "router", log_dir)
        hport = router.ready()["http_port"]
        base = f"http://127.0.0.1:{hport}"
        deadline = time.time() + 30
        while True:
            # /health is readiness: 503 (naming why) until the router sees a live worker.
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    health = json.loads(r.read())
                    if health["workers"]["colocated"] == 1 and health["status"] == "ok":
                        break
            except urllib.error.HTTPError as e:
                if e.code != 503:
                    raise
            if time.time() > deadline:
                raise RuntimeError("the router never saw the worker:\n" + router.tail())
            time.sleep(0.05)

        client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0,
                               timeout=60)
        c = Checks()
        prompt = "Once upon a time"

        def completion():
            r = client.completions.create(model="stories260K", prompt=prompt, max_tokens=16,
                                          temperature=0)
            expect(r.object == "text_completion", r.object)
            expect(r.model == "stories260K", r.model)
            expect(len(r.choices) == 1 and r.choices[0].text, r)
            expect(r.choices[0].finish_reason == "length", r.choices[0].finish_reason)
            expect(r.usage.completion_tokens == 16, r.usage)
            expect(r.usage.prompt_tokens > 0, r.usage)
            expect(r.usage.total_tokens == r.usage.prompt_tokens + 16, r.usage)
            return r.choices[0].text

        greedy = {}
        c.run("completions", lambda: greedy.setdefault("text", completion()))

        def completion_stream():
            chunks = list(client.completions.create(model="stories260K", prompt=prompt,
                                                    max_tokens=16, temperature=0, stream=True))
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
            expect(text == greedy.get("text"), f"streamed {text!r} != {greedy.get('text')!r}")
            finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
            expect(finals[-1] == "length", finals)
            expect(all(getattr(ch, "usage", None) is None for ch in chunks), "usage without asking")

        c.run("completions stream", completion_stream)

        def completion_stream_usage():
            chunks = list(client.completions.create(
                model="stories260K", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                stream_options={"include_usage": True}))
            last = chunks[-1]
            expect(last.choices == [], last)
            expect(last.usage is not None and last.usage.completion_tokens == 8, last.usage)
            expect(all(ch.usage is None for ch in chunks[:-1]), "usage before the last chunk")

        c.run("completions stream include_usage", completion_stream_usage)

        chat_messages = [{"role": "system", "content": "You tell stories."},
                         {"role": "user", "content": "Tell me a story."}]

        def chat():
            r = client.chat.completions.create(model="stories260K", max_tokens=12,
                                               temperature=0, messages=chat_messages)
            expect(r.object == "chat.completion", r.object)
            expect(len(r.choices) == 1, r.choices)
            m = r.choices[0].message
            expect(m.role == "assistant" and m.content, m)
            # "length" exactly when all 12 tokens came; "stop" only before that.
            finish, n = r.choices[0].finish_reason, r.usage.completion_tokens
            expect((finish == "length" and n == 12) or (finish == "stop" and 0 < n < 12),
                   (finish, r.usage))
            expect(r.usage.prompt_tokens > 0, r.usage)
            expect(r.usage.total_tokens == r.usage.prompt_tokens + n, r.usage)
            return r

        greedy_chat = {}
        c.run("chat completions", lambda: greedy_chat.setdefault("r", chat()))

        def chat_stream_usage():
            want = greedy_chat.get("r")
            expect(want is not None, "no non-streamed answer to compare with")
            chunks = list(client.chat.completions.create(
                model="stories260K", max_tokens=12, temperature=0, stream=True,
                stream_options={"include_usage": True}, messages=chat_messages))
            expect(chunks[0].choices[0].delta.role == "assistant", chunks[0])
            # Greedy: the same answer, finish reason and usage streamed or not.
            content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            expect(content == want.choices[0].message.content,
                   f"streamed {content!r} != {want.choices[0].message.content!r}")
            finish = [ch.choices[0].finish_reason for ch in chunks
                      if ch.choices and ch.choices[0].finish_reason]
            expect(finish == [want.choices[0].finish_reason], finish)
            last = chunks[-1]
            expect(last.usage is not None and last.choices == [], last)
            expect(last.usage.prompt_tokens == want.usage.prompt_tokens and
                   last.usage.completion_tokens == want.usage.completion_tokens,
                   (last.usage, want.usage))
            expect(all(ch.usage is None for ch in chunks[:-1]), "usage before the last chunk")

        c.run("chat stream include_usage", chat_stream_usage)

        def n_and_logprobs():
            r = client.completions.create(model="stories260K", prompt=prompt, max_tokens=5,
                                          n=2, logprobs=2, temperature=0.8, seed=7)
            expect(sorted(ch.index for ch in r.choices) == [0, 1], r.choices)
            for ch in r.choices:
                lp = ch.logprobs
                expect(lp is not None and len(lp.tokens) == 5, lp)
                expect(len(lp.token_logprobs) == 5 and all(x <= 0 for x in lp.token_logprobs), lp)
                # logprobs=2: the 2 most likely tokens at every position.
                expect(len(lp.top_logprobs) == 5 and all(len(t) == 2 for t in lp.top_logprobs),
                       lp.top_logprobs)
            r2 = client.chat.completions.create(
                model="stories260K", max_tokens=4, logprobs=True, top_logprobs=3,
                messages=[{"role": "user", "content": "Hi"}])
            content = r2.choices[0].logprobs.content
            expect(len(content) == r2.usage.completion_tokens, content)
            expect(all(len(t.top_logprobs) == 3 for t in content), content)

        c.run("n and logprobs", n_and_logprobs)

        def models():
            ids = [m.id for m in client.models.list()]
            expect(ids == ["stories260K"], ids)

        c.run("models", models)

        def bad_request(param, code=None, **kwargs):
            try:
                client.completions.create(**kwargs)
            except openai.BadRequestError as e:
                expect(e.status_code == 400, e.status_code)
                body = e.body
                expect(isinstance(body, dict), body)
                expect(body.get("type") == "invalid_request_error", body)
                expect(body.get("param") == param, f"param {body.get('param')!r} != {param!r}")
                expect(isinstance(body.get("message"), str) and param in body["message"], body)
                if code is not None:
                    expect(body.get("code") == code, body)
                return
            raise AssertionError("no BadRequestError")

        c.run("error: unknown model", lambda: bad_request(
            "model", "model_not_found", model="gpt-5", prompt="x", max_tokens=4))
        c.run("error: prompt + max_tokens over the context", lambda: bad_request(
            "max_tokens", "context_length_exceeded", model="stories260K", prompt=prompt,
            max_tokens=100000))
        c.run("error: max_tokens 0", lambda: bad_request(
            "max_tokens", model="stories260K", prompt=prompt, max_tokens=0))
        c.run("error: n over the cap", lambda: bad_request(
            "n", model="stories260K", prompt=prompt, max_tokens=4, n=1000))
        c.run("error: logprobs over the cap", lambda: bad_request(
            "logprobs", model="stories260K", prompt=prompt, max_tokens=4, logprobs=99))
        c.run("error: token id out of range", lambda: bad_request(
            "prompt", "invalid_token_id", model="stories260K", prompt=[1, 5, 999999],
            max_tokens=4))

        def chat_error():
            try:
                client.chat.completions.create(model="stories260K", messages=[], max_tokens=4)
            except openai.BadRequestError as e:
                expect(e.body.get("param") == "messages", e.body)
                return
            raise AssertionError("no BadRequestError")

        c.run("error: empty messages", chat_error)

        def tools_error():
            # stories260K's template has no tools section (a Qwen2.5 one does:
            # TandemUpTest.ChatWithQwen); the client sees a 400 naming `tools`.
            weather = {"type": "function", "function": {
                "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
            for kwargs, param in (({"tools": [weather]}, "tools"),
                                  ({"tools": [weather], "tool_choice": "required"}, "tool_choice")):
                try:
                    client.chat.completions.create(
                        model="stories260K", max_tokens=4,
                        messages=[{"role": "user", "content": "Weather?"}], **kwargs)
                except openai.BadRequestError as e:
                    expect(e.body.get("param") == param, e.body)
                    expect(param in e.body.get("message", ""), e.body)
                    continue
                raise AssertionError(f"no BadRequestError for {kwargs}")

        c.run("error: tools on a template without them", tools_error)

        def malformed():
            status, body = raw_post(base, "/v1/completions", b'{"prompt": "x", ')
            expect(status == 400, status)
            expect(body["error"]["type"] == "invalid_request_error", body)
            status, body = raw_post(base, "/v1/completions", b'{"prompt": "\xff\xfe"}')
            expect(status == 400, (status, body))
            expect(body["error"]["type"] == "invalid_request_error", body)

        c.run("error: malformed JSON and invalid UTF-8", malformed)
        c.run("still serving after errors", lambda: expect(
            completion() == greedy.get("text"), "another answer after the errors"))

        def killed_mid_stream():
            stream = client.completions.create(model="stories260K", prompt=prompt,
                                               max_tokens=1500, stream=True)
            got = 0
            start = None
            try:
                for _ in stream:
                    got += 1
                    if got == 2:
                        worker.stop(signal.SIGKILL)
                        start = time.time()
            except openai.APIError as e:
                expect(start is not None and time.time() - start < 5, "error took too long")
                expect("unavailable" in str(e).lower() or "worker" in str(e).lower(), str(e))
                return
            raise AssertionError(f"the stream ended without an error after {got} chunks")

        c.run("worker killed mid-stream surfaces as an APIError", killed_mid_stream)

        def unavailable_after():
            try:
                client.completions.create(model="stories260K", prompt=prompt, max_tokens=4)
            except openai.InternalServerError as e:
                expect(e.status_code == 503, e.status_code)
                return
            raise AssertionError("no 503 without workers")

        c.run("no workers: 503", unavailable_after)

        print(f"openai_client_test: {c.passed} passed, {len(c.failed)} failed")
        if c.failed:
            print("failed: " + ", ".join(c.failed))
            print("router log:\n" + router.tail())
            return 1
        return 0
    finally:
        if router is not None:
            router.stop()
        worker.stop()


if __name__ == "__main__":
    sys.exit(main())
