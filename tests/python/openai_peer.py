"""The official `openai` Python client as a real peer of hermes's API server.

Run by gateway/tests/api_server_python.rs against a real `hermes gateway run`
whose provider is the loopback fake; it answers every request with
"echo: " followed by the last user message, streamed in pieces.

Environment: HERMES_API_BASE (http://127.0.0.1:PORT/v1), HERMES_API_KEY,
HERMES_API_MODEL. Exits non-zero (an AssertionError or the client's
exception) on any mismatch.
"""

import os
import threading

import openai

BASE = os.environ["HERMES_API_BASE"]
KEY = os.environ["HERMES_API_KEY"]
MODEL = os.environ["HERMES_API_MODEL"]

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)

# models.list()
ids = [m.id for m in client.models.list()]
assert ids == [MODEL], ids

# A plain completion: the typed response object parses and carries the answer.
plain = client.chat.completions.create(
    model=MODEL,
    messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello plain"},
    ],
)
assert plain.object == "chat.completion", plain
assert plain.choices[0].message.role == "assistant"
assert plain.choices[0].message.content == "echo: hello plain", plain
assert plain.choices[0].finish_reason == "stop", plain
assert plain.usage is not None and plain.usage.total_tokens > 0, plain

# Streaming, with usage at the end.
stream = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "hello stream"}],
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage, chunks = "", None, None, 0
for chunk in stream:
    chunks += 1
    assert chunk.object == "chat.completion.chunk", chunk
    if chunk.choices:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage is not None:
        usage = chunk.usage
assert text == "echo: hello stream", text
assert finish == "stop", finish
assert usage is not None and usage.completion_tokens >= 0, usage
assert chunks >= 3, chunks

# A wrong key is the client's AuthenticationError.
wrong = openai.OpenAI(base_url=BASE, api_key="sk-not-the-key", max_retries=0)
try:
    wrong.models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401, e
    assert KEY not in str(e), "the key leaked into the error"

# An unknown model and a bad body are the client's typed errors.
try:
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}]
    )
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.code == "model_not_found", e
try:
    client.chat.completions.create(model=MODEL, messages=[])
    raise AssertionError("empty messages were accepted")
except openai.BadRequestError as e:
    assert "at least one" in str(e), e

# Four concurrent clients, each with its own conversation, two of them
# streaming (the server's default limit is four runs at once).
results = {}
errors = []


def ask(i):
    try:
        own = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
        msg = [{"role": "user", "content": f"client {i}"}]
        if i % 2:
            out = "".join(
                c.choices[0].delta.content or ""
                for c in own.chat.completions.create(model=MODEL, messages=msg, stream=True)
                if c.choices
            )
        else:
            out = own.chat.completions.create(model=MODEL, messages=msg).choices[0].message.content
        results[i] = out
    except Exception as e:  # reported below, with the client's number
        errors.append((i, repr(e)))


threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
assert results == {i: f"echo: client {i}" for i in range(4)}, results

print("openai client peer: all checks passed")
