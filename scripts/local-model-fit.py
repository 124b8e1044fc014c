#!/usr/bin/env python3
"""Measures hermes against a real llama.cpp server at small windows (issue 38).

Given a `llama-server` binary and a GGUF model, starts the server with
`--jinja -c N` for each window, puts a recording proxy between it and hermes,
and runs hermes with the default configuration (a fresh HERMES_HOME each time)
through these cases:

  hello    `hermes -z "hello there"`
  task     a three-step task (write a file, read it back, search it)
  task-scripted  the same task, with the answers scripted (write_file,
           read_file, search_files, then an answer) as a model that follows it
           would give them; each request still goes to the server (with
           max_tokens 1) for its verdict and count, and a refusal goes back
           to hermes as the server wrote it. Measures whether each step of a
           three-step task fits, whatever the model's skill.
  compact  `--toolsets file,terminal,todo -z "hello there"`: tools the user
           chose are kept and only shortened (no lean set)
  compact-all  every default toolset chosen with --toolsets: all of them,
           shortened
  full     `HERMES_CONTEXT_LENGTH=131072`: hermes does not shrink anything,
           so the request is the unshrunk default prompt

For every request hermes sends it records the server's own prompt token count
(`usage.prompt_tokens`, or `n_prompt_tokens` in llama.cpp's
`exceed_context_size_error`), and for the first request of each case the
fixed part (system prompt + tool definitions) as the server renders and
tokenizes it (`/apply-template` with only the system message, then
`/tokenize`). Prints a Markdown table, then (with `--per-tool`) each tool
definition's tokens as the server renders it, full and shortened; `--log FILE` keeps every request and
response as JSON lines.

Not run by .ci/run: it needs a llama-server build (≈ 30 CPU-minutes) and a
model file. benchmarks/runs/2026-12-04-the-fixed-prompt-against-small-windows.md
("The real llama.cpp server") says how they were
made. Standard library only.

  scripts/local-model-fit.py --server build/bin/llama-server \\
      --model gemma-3-270m-q4_k_m.gguf --chat-template-file gemma3.jinja \\
      --hermes target/debug/hermes
"""
import argparse
import http.client
import http.server
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TASK = "Write 'water the plants' to plan.txt, read it back, then find 'water' in it."
ALL_TOOLSETS = "file,terminal,web,memory,todo,skills,delegate,cronjob,session_search,clarify"
CASES = {
    "hello": (["-z", "hello there"], {}),
    "task": (["-z", TASK], {}),
    "compact": (["--toolsets", "file,terminal,todo", "-z", "hello there"], {}),
    "task-scripted": (["-z", TASK], {}),
    "compact-all": (["--toolsets", ALL_TOOLSETS, "-z", "hello there"], {}),
    "full": (["-z", "hello there"], {"HERMES_CONTEXT_LENGTH": "131072"}),
}


SCRIPT = [
    ("write_file", {"path": "plan.txt", "content": "water the plants\n"}),
    ("read_file", {"path": "plan.txt"}),
    ("search_files", {"pattern": "water"}),
]


def scripted_sse(request):
    """The next step of the three-step task, as an OpenAI-style stream."""
    done = sum(1 for m in request["messages"] if m.get("role") == "tool")
    head = {"id": "scripted", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    if done < len(SCRIPT):
        name, arguments = SCRIPT[done]
        call = {"index": 0, "id": f"call{done}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        delta, finish = {"role": "assistant", "tool_calls": [call]}, "tool_calls"
    else:
        delta, finish = {"role": "assistant", "content": "Done: plan.txt says to water the plants."}, "stop"
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
    ]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def server_usage(status, text):
    """(prompt tokens, completion tokens, error) from a response body, JSON or SSE."""
    bodies = []
    if text.lstrip().startswith("{"):
        bodies.append(text)
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            bodies.append(line[5:].strip())
    prompt = completion = error = None
    for b in bodies:
        try:
            obj = json.loads(b)
        except ValueError:
            continue
        usage = obj.get("usage") or {}
        prompt = usage.get("prompt_tokens", prompt)
        completion = usage.get("completion_tokens", completion)
        err = obj.get("error")
        if isinstance(err, dict):
            error = f"{err.get('type')}: {err.get('message')}"
            prompt = err.get("n_prompt_tokens", prompt)
    if status >= 400 and error is None:
        error = f"HTTP {status}: {text[:200]}"
    return prompt, completion, error


class Recorder:
    """A proxy in front of llama-server that keeps each chat request and its outcome."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.records = []
        self.scripted = False
        self.lock = threading.Lock()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def forward(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                chat = method == "POST" and self.path.endswith("/chat/completions")
                if chat and recorder.scripted:
                    return self.scripted(body)
                conn = http.client.HTTPConnection("127.0.0.1", recorder.upstream, timeout=900)
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                conn.request(method, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                seen = bytearray()
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    seen += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
                conn.close()
                if method == "POST" and self.path.endswith("/chat/completions"):
                    recorder.keep(body, resp.status, seen.decode("utf-8", "replace"))

            def scripted(self, body):
                # The server's verdict on the request as hermes sent it.
                probe = {**json.loads(body), "stream": False, "max_tokens": 1}
                probe.pop("stream_options", None)
                conn = http.client.HTTPConnection("127.0.0.1", recorder.upstream, timeout=900)
                conn.request("POST", self.path, body=json.dumps(probe),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                verdict = resp.read().decode("utf-8", "replace")
                conn.close()
                recorder.keep(body, resp.status, verdict)
                if resp.status >= 400:
                    out, status, kind = verdict, resp.status, "application/json"
                else:
                    out, status, kind = scripted_sse(json.loads(body)), 200, "text/event-stream"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(out.encode())

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def keep(self, body, status, text):
        req = json.loads(body)
        prompt, completion, error = server_usage(status, text)
        with self.lock:
            self.records.append(
                {
                    "request": req,
                    "bytes": len(body),
                    "tools": [t["function"]["name"] for t in req.get("tools") or []],
                    "status": status,
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "error": error,
                    "response": text[-4000:],
                }
            )

    def take(self):
        with self.lock:
            out, self.records = self.records, []
        return out


def fixed_tokens(port, request):
    """The system prompt and tool definitions as the server renders and counts them."""
    system = [m for m in request["messages"] if m.get("role") == "system"][:1]
    body = {"messages": system + [{"role": "user", "content": "x"}]}
    if request.get("tools"):
        body["tools"] = request["tools"]
    prompt = post(port, "/apply-template", body)["prompt"]
    bare = post(port, "/apply-template", {"messages": [{"role": "user", "content": "x"}]})["prompt"]
    count = lambda p: len(post(port, "/tokenize", {"content": p, "add_special": True})["tokens"])
    return count(prompt) - count(bare), len(prompt.encode())


def per_tool(port, first):
    """Each tool's definition in tokens, as the server renders it: full and compact."""
    # What one more tool adds to a prompt that already lists tools (so the
    # template's tools preamble is not counted in each).
    base = {"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}
    body = {"messages": [{"role": "user", "content": "x"}]}

    def count(tools):
        prompt = post(port, "/apply-template", {**body, "tools": tools})["prompt"]
        return len(post(port, "/tokenize", {"content": prompt})["tokens"])

    def cost(tool):
        return count([base, tool]) - count([base]), len(json.dumps(tool, separators=(",", ":")).encode())
    full = {t["function"]["name"]: t for t in first.get("full", {}).get("tools", [])}
    short = {t["function"]["name"]: t for t in first.get("compact-all", {}).get("tools", [])}
    print()
    print("| tool | full: bytes, tokens | compact: bytes, tokens |")
    print("|---|---:|---:|")
    totals = [0, 0, 0, 0]
    for name in full:
        fb, ft = cost(full[name])[::-1]
        sb, st = cost(short[name])[::-1] if name in short else (0, 0)
        totals = [a + b for a, b in zip(totals, (fb, ft, sb, st))]
        print(f"| {name} | {fb:,} B, {ft} | {sb:,} B, {st} |")
    print(f"| **all** | **{totals[0]:,} B, {totals[1]}** | **{totals[2]:,} B, {totals[3]}** |")


def start_server(args, ctx):
    port = free_port()
    cmd = [args.server, "-m", args.model, "--jinja", "-c", str(ctx), "--host", "127.0.0.1",
           "--port", str(port), "-t", str(args.threads), "-np", "1", "-n", str(args.n_predict)]
    if args.chat_template_file:
        cmd += ["--chat-template-file", args.chat_template_file]
    log = open(args.server_log, "ab") if args.server_log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"llama-server exited ({proc.returncode}): {' '.join(cmd)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(1)
    proc.kill()
    sys.exit("llama-server did not become healthy in 300 s")


def run_hermes(args, proxy_port, argv, extra_env):
    home = tempfile.mkdtemp(prefix="hermes-fit-")
    work = pathlib.Path(home, "work")
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": home,
        "HERMES_HOME": home,
        "HERMES_BASE_URL": f"http://127.0.0.1:{proxy_port}/v1",
        "HERMES_MODEL": "local",
        **extra_env,
    }
    started = time.time()
    try:
        p = subprocess.run([args.hermes, *argv], env=env, cwd=work, capture_output=True,
                           text=True, timeout=args.timeout, stdin=subprocess.DEVNULL)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = "timeout", e.stdout or "", e.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    files = sorted(p.name for p in work.iterdir())
    shutil.rmtree(home, ignore_errors=True)
    return code, out, err, time.time() - started, files


def one_line(text, n=90):
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--model", required=True, help="GGUF model")
    ap.add_argument("--chat-template-file", help="for a model without a chat template")
    ap.add_argument("--hermes", default="hermes")
    ap.add_argument("--ctx", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-predict", type=int, default=96, help="the server's cap on each answer")
    ap.add_argument("--timeout", type=int, default=600, help="seconds for one hermes run")
    ap.add_argument("--log", help="JSON lines: every request and response")
    ap.add_argument("--server-log")
    ap.add_argument("--per-tool", action="store_true",
                    help="also count each tool definition of the full and compact-all cases")
    args = ap.parse_args()

    log = open(args.log, "a") if args.log else None
    first = {}
    print("| -c | case | requests: tools, server's prompt tokens (fixed part) → outcome | hermes | answer / what hermes said |")
    print("|---:|---|---|---|---|")
    for ctx in args.ctx:
        server, port = start_server(args, ctx)
        recorder = Recorder(port)
        try:
            for name in args.cases:
                argv, env = CASES[name]
                recorder.scripted = name == "task-scripted"
                code, out, err, secs, files = run_hermes(args, recorder.port, argv, env)
                records = recorder.take()
                parts = []
                if records:
                    first[name] = records[0]["request"]
                for i, r in enumerate(records):
                    fixed = ""
                    if i == 0:
                        try:
                            tokens, nbytes = fixed_tokens(port, r["request"])
                            fixed = f" (fixed part {tokens})"
                            r["fixed_tokens"], r["fixed_rendered_bytes"] = tokens, nbytes
                        except OSError as e:
                            fixed = f" (fixed part: {e})"
                    outcome = "fits" if r["error"] is None else f"**refused** ({r['error'][:60]})"
                    parts.append(f"{len(r['tools'])} tools, {r['prompt_tokens']} tok{fixed} → {outcome}")
                    if log:
                        log.write(json.dumps({"ctx": ctx, "case": name, "index": i, **r}) + "\n")
                notices = [l for l in err.splitlines() if "tokens" in l or "error" in l.lower()]
                said = one_line(out) if out.strip() else "(no answer) " + one_line(" / ".join(notices) or err, 140)
                if files:
                    said += f" [files: {', '.join(files)}]"
                print(f"| {ctx} | {name} | {'; '.join(parts) or '(none)'} | exit {code}, {secs:.0f} s | {said} |")
                if log:
                    log.write(json.dumps({"ctx": ctx, "case": name, "exit": code, "stdout": out,
                                          "stderr": err, "seconds": secs, "files": files}) + "\n")
                    log.flush()
                sys.stdout.flush()
            if args.per_tool and ctx == args.ctx[-1]:
                per_tool(port, first)
        finally:
            recorder.httpd.shutdown()
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
