#!/usr/bin/env python3
"""The upgrade soak (issue 45 §3, B16): an upgrade of the Debian package
loses no message and answers none twice.

    scripts/upgrade-soak.py PREVIOUS.deb NEW.deb

1. The previous package is installed into a scratch root with the real dpkg
   and its real maintainer scripts (`dpkg --root … --force-script-chrootless`,
   as scripts/deb-check.sh does), and its gateway started the way the unit
   starts it: the unit's ExecStart, Environment= and EnvironmentFile=, its
   WorkingDirectory, as the hermes user.
2. Telegram users (a loopback Bot API: `getUpdates` with offsets as
   Telegram keeps them, `sendMessage` recorded) write one message each, a
   few a second, to a provider that takes a while to answer, so turns are
   running when the upgrade comes.
3. Mid-way the new package is installed over the running gateway (`dpkg -i`:
   the binary is replaced under it, the maintainer scripts run), then the
   service is restarted as the postinst's `systemctl try-restart` does: the
   old process gets SIGTERM and stops gracefully, the new binary starts,
   migrates the store and serves. Users keep writing throughout, also while
   no gateway runs.
4. After the last message, every user must have exactly one answer to their
   message (or, for a turn the graceful stop cut short, the stop notice
   after its partial answer, once); nothing may be answered twice. The
   counts are printed. Then the previous binary is run against the upgraded
   home: if the upgrade raised the store's schema, it must refuse with a
   clear message (a downgrade never corrupts), else it must still read it.

The machine's own /etc, /usr and dpkg database are not touched. Needs root
(the service user) and dpkg, like deb-check.sh. Exits 1 naming what failed.
"""
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

TOKEN = "123456789:AAHupgrade-soak-token-for-a-loopback-stub"
USERS = 60  # one message each: no user's turns interrupt each other
SPACING = 0.15  # seconds between two users' messages
UPGRADE_AT = 20  # the upgrade starts after this many messages
ANSWER_DELAY = 0.4  # the provider's time to answer
STOPPED_NOTICE = "The gateway was stopped before this answer was finished."
RESTART_NOTICE = "The gateway restarted before it finished answering this message"


def fail(msg):
    print(f"upgrade-soak: {msg}", file=sys.stderr)
    sys.exit(1)


class Peer:
    """The Bot API and the provider, on one loopback port."""

    def __init__(self):
        self.lock = threading.Condition()
        self.updates = []  # what users wrote, as Telegram queues it
        self.sent = []  # (chat_id, text) the bot sent
        self.next_message_id = 1000
        self.provider_calls = 0

    def write(self, user, text):
        with self.lock:
            update_id = len(self.updates) + 1
            self.next_message_id += 1
            self.updates.append({
                "update_id": update_id,
                "message": {
                    "message_id": self.next_message_id,
                    "date": int(time.time()),
                    "chat": {"id": user, "type": "private", "first_name": f"u{user}"},
                    "from": {"id": user, "is_bot": False, "first_name": f"u{user}"},
                    "text": text,
                },
            })
            self.lock.notify_all()

    def get_updates(self, body):
        offset = int(body.get("offset") or 0)
        hold = min(float(body.get("timeout") or 0), 1.0)
        deadline = time.time() + hold
        with self.lock:
            while True:
                ready = [u for u in self.updates if u["update_id"] >= offset]
                left = deadline - time.time()
                if ready or left <= 0:
                    return ready
                self.lock.wait(left)

    def send(self, body):
        with self.lock:
            self.next_message_id += 1
            self.sent.append((int(body.get("chat_id")), str(body.get("text", ""))))
            return {
                "message_id": self.next_message_id,
                "date": int(time.time()),
                "chat": {"id": int(body.get("chat_id")), "type": "private"},
                "text": body.get("text", ""),
            }

    def answer_for(self, request):
        with self.lock:
            self.provider_calls += 1
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        text = users[-1].get("content", "") if users else ""
        if isinstance(text, list):
            text = " ".join(p.get("text", "") for p in text if isinstance(p, dict))
        found = re.search(r"msg-(\d+)", text)
        time.sleep(ANSWER_DELAY)
        return f"answer to msg-{found.group(1)}" if found else "hello"


def serve(peer):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            if self.path.endswith("/chat/completions"):
                return self.completion(body)
            if self.path.endswith("/models"):
                return self.json({"object": "list", "data": [{"id": "hermes3", "object": "model"}]})
            if not self.path.startswith(f"/bot{TOKEN}/"):
                return self.json({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
            method = self.path.rsplit("/", 1)[-1]
            if method == "getMe":
                result = {"id": 1, "is_bot": True, "first_name": "hermes", "username": "hermes_bot"}
            elif method == "getUpdates":
                result = peer.get_updates(body)
            elif method == "sendMessage":
                result = peer.send(body)
            else:
                result = True
            self.json({"ok": True, "result": result})

        do_GET = do_POST

        def completion(self, body):
            text = peer.answer_for(body)
            if not body.get("stream"):
                return self.json({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "hermes3",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                })
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
            ]
            data = "".join(
                f"data: {json.dumps(dict(c, id='c', object='chat.completion.chunk', created=0, model='hermes3'))}\n\n"
                for c in chunks) + "data: [DONE]\n\n"
            self.reply(200, "text/event-stream", data.encode())

        def json(self, value, status=200):
            self.reply(status, "application/json", json.dumps(value).encode())

        def reply(self, status, kind, data):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # A gateway stopped mid-poll closes its connection: not worth a trace.
    server.handle_error = lambda request, address: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


class Scratch:
    """A scratch root with the package installed, and its service."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="hermes-upgrade-root.")
        os.chmod(self.root, 0o755)
        for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
            open(os.path.join(self.root, f), "a").close()
        self.log = open(os.path.join(self.root, "soak.log"), "a")
        self.process = None

    def install(self, deb):
        done = subprocess.run(
            ["dpkg", f"--root={self.root}", "--force-script-chrootless", "--force-depends",
             "--force-architecture", "--force-confold", "-i", deb],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log.write(done.stdout)
        if done.returncode != 0:
            fail(f"dpkg -i {deb} failed:\n{done.stdout}")

    def unit(self, key):
        path = os.path.join(self.root, "usr/lib/systemd/system/hermes-gateway.service")
        with open(path) as f:
            for line in f:
                if line.startswith(key + "="):
                    return line[len(key) + 1:].strip()
        fail(f"the unit has no {key}=")

    def in_root(self, value):
        return value.replace("=/var/lib/hermes", f"={self.root}/var/lib/hermes")

    def environment(self):
        env = {"PATH": "/usr/bin:/bin"}
        name, _, value = self.unit("Environment").partition("=")
        env[name] = value
        with open(self.root + self.unit("EnvironmentFile")) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, _, v = line.partition("=")
                    env[k] = v
        return {k: self.in_root(f"={v}")[1:] for k, v in env.items()}

    def ids(self):
        with open(os.path.join(self.root, "etc/passwd")) as f:
            for line in f:
                fields = line.split(":")
                if fields[0] == "hermes":
                    return fields[2], fields[3]
        fail("no hermes user in the scratch root")

    def as_service(self, args, **kw):
        uid, gid = self.ids()
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"] + args

    def binary(self):
        return os.path.join(self.root, "usr/bin/hermes")

    def start(self):
        command = self.unit("ExecStart").split()
        command[0] = self.binary()
        workdir = self.root + self.unit("WorkingDirectory")
        self.process = subprocess.Popen(
            self.as_service(command), env=self.environment(), cwd=workdir,
            stdout=self.log, stderr=self.log)

    def stop(self):
        """What systemd does to stop the unit: SIGTERM, then wait."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            fail("the gateway did not stop within 30 s of SIGTERM")
        self.process = None
        return code


def main():
    if len(sys.argv) != 3:
        fail("usage: scripts/upgrade-soak.py PREVIOUS.deb NEW.deb")
    previous, new = map(os.path.abspath, sys.argv[1:])
    peer = Peer()
    port = serve(peer)
    box = Scratch()
    try:
        box.install(previous)
        # Kept for the downgrade check at the end.
        shutil.copy2(box.binary(), os.path.join(box.root, "old-hermes"))
        with open(os.path.join(box.root, "etc/hermes/gateway.env"), "a") as f:
            f.write(f"TELEGRAM_BOT_TOKEN={TOKEN}\nTELEGRAM_API_URL=http://127.0.0.1:{port}\n"
                    f"TELEGRAM_POLL_TIMEOUT=1\nGATEWAY_ALLOW_ALL_USERS=true\n"
                    f"GATEWAY_STREAM_REPLIES=false\nHERMES_BASE_URL=http://127.0.0.1:{port}/v1\n"
                    f"HERMES_MODEL=hermes3\n")
        box.start()
        old_process = box.process
        started = time.time()
        for n in range(USERS):
            if n == UPGRADE_AT:
                box.install(new)  # replaces the binary under the running gateway
                stopped = box.stop()  # the postinst's try-restart: stop …
                print(f"upgrade-soak: old gateway stopped (exit {stopped}) "
                      f"{time.time() - started:.1f} s in, after {n} messages")
            if n == UPGRADE_AT + 5:
                box.start()  # … and start, on the new binary, after a gap
                print(f"upgrade-soak: new gateway started {time.time() - started:.1f} s in")
            peer.write(100 + n, f"msg-{n}: hello from user {100 + n}")
            time.sleep(SPACING)
        if old_process.poll() is None:
            fail("the old gateway still runs")
        deadline = time.time() + 60
        while time.time() < deadline:
            with peer.lock:
                answered = {chat for chat, text in peer.sent if "msg-" in text}
            if len(answered) >= USERS:
                break
            time.sleep(0.2)
        time.sleep(2)  # anything sent twice would arrive by now
        box.stop()
        check(peer)
        downgrade(box)
        print("upgrade-soak: ok")
    finally:
        if box.process is not None:
            box.process.kill()
        box.log.close()
        if os.environ.get("HERMES_UPGRADE_SOAK_KEEP"):
            print(f"upgrade-soak: kept {box.root}")
        else:
            shutil.rmtree(box.root, ignore_errors=True)


def check(peer):
    answers, stopped, restarted, problems = 0, 0, 0, []
    for n in range(USERS):
        user = 100 + n
        texts = [t for chat, t in peer.sent if chat == user]
        mine = [t for t in texts if f"answer to msg-{n}" in t]
        notices = [t for t in texts if STOPPED_NOTICE in t]
        restarts = [t for t in texts if RESTART_NOTICE in t]
        if len(mine) > 1:
            problems.append(f"user {user}: answered {len(mine)} times: {mine}")
        elif mine:
            answers += 1
        elif len(notices) == 1:
            stopped += 1
        elif len(restarts) == 1:
            restarted += 1
        else:
            problems.append(f"user {user}: lost (the bot sent {texts})")
        if len(notices) + len(restarts) > 1:
            problems.append(f"user {user}: {len(notices) + len(restarts)} notices")
    print(f"upgrade-soak: {USERS} messages, {answers} answered, {stopped} stopped by the "
          f"graceful stop (notice sent), {restarted} restart notices, "
          f"{len(problems)} lost or answered twice; {peer.provider_calls} model calls")
    if problems:
        fail("\n".join(problems))


def downgrade(box):
    """The previous binary against the upgraded home: refused clearly if
    the schema moved on, else it still reads it."""
    old = os.path.join(box.root, "old-hermes")
    if not os.path.exists(old):
        return
    done = subprocess.run(box.as_service([old, "sessions", "list"]), env=box.environment(),
                          cwd=box.root + box.unit("WorkingDirectory"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode == 0:
        print("upgrade-soak: the previous binary still reads the upgraded home (same schema)")
    elif re.search(r"newer|schema", done.stdout, re.I):
        print(f"upgrade-soak: the previous binary refuses the upgraded home: {done.stdout.strip()}")
    else:
        fail(f"the previous binary failed on the upgraded home without saying why: {done.stdout}")


if __name__ == "__main__":
    main()
