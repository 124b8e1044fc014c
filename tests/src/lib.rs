//! Test support shared by the crates' process-level tests: a scripted,
//! loopback, OpenAI-compatible provider ([`FakeProvider`]).
//!
//! It speaks just enough HTTP/1.1 (one request per connection, `Connection:
//! close`) and checks the protocol rules a real provider enforces on every
//! request: `POST /…/chat/completions`, a JSON body with `model` and a
//! `messages` array whose first entry is the system prompt, every tool call
//! answered by a tool message. A request that breaks a rule gets a 400 with
//! the reason, and the reason is recorded so the test fails loudly.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A plain text answer (`finish_reason: stop`).
    Text(String),
    /// Tool calls: `(id, name, arguments JSON)`.
    ToolCalls(Vec<(String, String, String)>),
    /// Text streamed in `pieces`, `delay` apart (non-streaming requests get it whole after the delays).
    SlowText {
        /// The pieces.
        pieces: Vec<String>,
        /// The pause before each piece.
        delay: Duration,
    },
    /// An HTTP error status with a provider-style error body.
    Status(u16, String),
}

impl Reply {
    /// A text reply.
    pub fn text(s: impl Into<String>) -> Self {
        Reply::Text(s.into())
    }

    /// A single tool call.
    pub fn tool(id: &str, name: &str, args: &str) -> Self {
        Reply::ToolCalls(vec![(id.into(), name.into(), args.into())])
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Value>,
    violations: Vec<String>,
}

/// A scripted provider on `127.0.0.1`. Dropping it stops the server.
pub struct FakeProvider {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeProvider")
            .field("addr", &self.addr)
            .finish()
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeProvider {
    /// Starts a server that answers with `script`, in order. When the script
    /// runs out it answers `Reply::Text("(script exhausted)")`.
    pub fn start(script: Vec<Reply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        thread::spawn(move || {
            while !sp.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let st = st.clone();
                        thread::spawn(move || {
                            let _ = serve(stream, &st);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(FakeProvider { addr, state, stop })
    }

    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Adds replies to the end of the script.
    pub fn push(&self, reply: Reply) {
        lock(&self.state).script.push_back(reply);
    }

    /// The JSON bodies of the chat requests received so far.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.state).requests.clone()
    }

    /// Protocol violations seen so far (should be empty).
    pub fn violations(&self) -> Vec<String> {
        lock(&self.state).violations.clone()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut content_length = 0usize;
    let mut has_json_type = false;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "content-length" {
                content_length = v.trim().parse().unwrap_or(0);
            }
            if k == "content-type" && v.contains("application/json") {
                has_json_type = true;
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));

    if method == "GET" && path.ends_with("/models") {
        let body = json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]});
        return respond_json(&mut out, 200, &body);
    }
    // Other metadata endpoints (llama.cpp's /props, Ollama's /api/…) are
    // probed for the context window; this provider has none, like OpenAI.
    if (method == "GET" && !path.ends_with("/chat/completions")) || path.contains("/api/") {
        return respond_json(&mut out, 404, &json!({"error": {"message": "not found"}}));
    }
    let violation = if method != "POST" || !path.ends_with("/chat/completions") {
        Some(format!("unexpected request {method} {path}"))
    } else if !has_json_type {
        Some("missing Content-Type: application/json".into())
    } else {
        None
    };
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let violation = violation.or_else(|| match &parsed {
        Err(e) => Some(format!("body is not JSON: {e}")),
        Ok(v) => check_request(v).err(),
    });
    if let Some(v) = violation {
        lock(state).violations.push(v.clone());
        return respond_json(&mut out, 400, &json!({"error": {"message": v}}));
    }
    let request = parsed.unwrap_or(Value::Null);
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let reply = {
        let mut st = lock(state);
        st.requests.push(request);
        st.script
            .pop_front()
            .unwrap_or_else(|| Reply::text("(script exhausted)"))
    };
    match reply {
        Reply::Status(code, message) => respond_json(
            &mut out,
            code,
            &json!({"error": {"message": message, "code": code}}),
        ),
        Reply::Text(t) => answer(&mut out, stream, &[t], Duration::ZERO, None),
        Reply::SlowText { pieces, delay } => answer(&mut out, stream, &pieces, delay, None),
        Reply::ToolCalls(calls) => answer(&mut out, stream, &[], Duration::ZERO, Some(&calls)),
    }
}

/// The rules a real provider enforces.
fn check_request(v: &Value) -> Result<(), String> {
    if v.get("model")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("missing model".into());
    }
    let msgs = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages must be an array")?;
    if msgs
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        != Some("system")
    {
        return Err("messages[0] must be the system prompt".into());
    }
    let mut pending: VecDeque<String> = VecDeque::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "system" && i > 0 {
            return Err(format!("messages[{i}]: a second system message"));
        }
        if role == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            if pending.pop_front().as_deref() != Some(id) {
                return Err(format!(
                    "messages[{i}]: tool result {id} answers no pending call"
                ));
            }
            continue;
        }
        if !pending.is_empty() {
            return Err(format!("messages[{i}]: tool calls {pending:?} unanswered"));
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                pending.push_back(c["id"].as_str().unwrap_or("").to_owned());
            }
        }
        for forbidden in ["reasoning", "usage", "timestamp", "finish_reason"] {
            if m.get(forbidden).is_some() {
                return Err(format!("messages[{i}] carries ledger field {forbidden}"));
            }
        }
    }
    Ok(())
}

fn respond_json(out: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

fn tool_calls_json(calls: &[(String, String, String)]) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, (id, name, args))| {
                json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect(),
    )
}

fn answer(
    out: &mut TcpStream,
    stream: bool,
    pieces: &[String],
    delay: Duration,
    calls: Option<&[(String, String, String)]>,
) -> std::io::Result<()> {
    let finish = if calls.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19});
    if !stream {
        for _ in pieces {
            thread::sleep(delay);
        }
        let mut message = json!({"role": "assistant", "content": pieces.concat()});
        if let Some(c) = calls {
            message["content"] = Value::Null;
            message["tool_calls"] = tool_calls_json(c);
        }
        let body = json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
            "usage": usage,
        });
        return respond_json(out, 200, &body);
    }
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    )?;
    out.flush()?;
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut send = |v: Value| -> std::io::Result<()> {
        write!(out, "data: {v}\n\n")?;
        out.flush()
    };
    send(chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    ))?;
    for p in pieces {
        thread::sleep(delay);
        send(chunk(json!({"content": p}), Value::Null))?;
    }
    if let Some(c) = calls {
        send(chunk(
            json!({"tool_calls": tool_calls_json(c)}),
            Value::Null,
        ))?;
    }
    send(chunk(json!({}), json!(finish)))?;
    send(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model", "choices": [], "usage": usage}),
    )?;
    write!(out, "data: [DONE]\n\n")?;
    out.flush()
}
