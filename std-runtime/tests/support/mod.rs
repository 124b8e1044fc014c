//! Test support shared by the integration tests of `hermes-runtime`:
//!
//! - [`ScriptedServer`]: a loopback HTTP/1.1 server (std `TcpListener` +
//!   threads, hand-written responses, chunked SSE) that plays a script of
//!   replies and checks the OpenAI protocol rules on **every** request;
//! - the aimock emulator is started by the one launcher every crate's tests
//!   share, `hermes_tests::aimock`.
//!
//! Use it from a test file with `mod support;`. Each test binary uses a
//! subset, hence the `dead_code` allowance.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod mcp_servers;
pub mod proxy;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// One step of a streamed (chunked) reply.
#[derive(Clone, Debug)]
pub enum Step {
    /// Raw bytes sent as one HTTP chunk (write SSE framing yourself, or use
    /// [`Step::data`]).
    Chunk(String),
    /// Wait before the next step (a slow stream).
    Sleep(Duration),
    /// Close the socket abruptly, without the terminating chunk.
    Drop,
    /// The same raw chunk, `times` times (a runaway server).
    Repeat(String, usize),
}

impl Step {
    /// One SSE event `data: {json}\n\n`.
    pub fn data(json: impl AsRef<str>) -> Step {
        Step::Chunk(format!("data: {}\n\n", json.as_ref()))
    }

    /// The `data: [DONE]` terminator.
    pub fn done() -> Step {
        Step::Chunk("data: [DONE]\n\n".into())
    }
}

/// What the server does with one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete response with `Content-Length`.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// A `200` `text/event-stream` response sent with chunked encoding,
    /// step by step.
    Stream {
        headers: Vec<(String, String)>,
        steps: Vec<Step>,
    },
    /// Wait, then send nothing and close the connection.
    Hang(Duration),
    /// `reply`, then, `after` it (when the client has read it to its end),
    /// `bytes` written raw on the same connection: what a broken server
    /// sends after a complete answer. Counted by
    /// [`ScriptedServer::trailers_sent`] once written.
    Trailing {
        reply: Box<Reply>,
        after: Duration,
        bytes: String,
    },
}

impl Reply {
    /// `200 application/json` with `body`.
    pub fn json(body: impl Into<String>) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// An error status with an OpenAI-shaped error body.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::json!({"error": {"message": message, "type": "test_error"}})
                .to_string(),
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Full { headers, .. } | Reply::Stream { headers, .. } => {
                headers.push((name.into(), value.into()));
            }
            Reply::Hang(_) => {}
            Reply::Trailing { reply, .. } => **reply = reply.clone().with_header(name, value),
        }
        self
    }

    /// This reply, then `bytes` on its connection `after` it
    /// ([`Reply::Trailing`]).
    pub fn then_raw(self, after: Duration, bytes: &str) -> Reply {
        Reply::Trailing {
            reply: Box::new(self),
            after,
            bytes: bytes.into(),
        }
    }

    /// A streamed reply.
    pub fn stream(steps: Vec<Step>) -> Reply {
        Reply::Stream {
            headers: Vec::new(),
            steps,
        }
    }

    /// A streamed answer: one chunk per text piece, a `stop` chunk, a usage
    /// chunk and `[DONE]`.
    pub fn text_stream(pieces: &[&str]) -> Reply {
        let mut steps = vec![Step::data(chunk_json(
            serde_json::json!({"role": "assistant", "content": ""}),
            None,
        ))];
        for piece in pieces {
            steps.push(Step::data(chunk_json(
                serde_json::json!({"content": piece}),
                None,
            )));
        }
        steps.push(Step::data(chunk_json(serde_json::json!({}), Some("stop"))));
        steps.push(Step::data(
            serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
            .to_string(),
        ));
        steps.push(Step::done());
        Reply::stream(steps)
    }

    /// A non-streaming answer with `content`.
    pub fn text_body(content: &str) -> Reply {
        Reply::json(
            serde_json::json!({
                "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            })
            .to_string(),
        )
    }
}

/// One `chat.completion.chunk` JSON with a delta and an optional finish reason.
pub fn chunk_json(delta: serde_json::Value, finish_reason: Option<&str>) -> String {
    serde_json::json!({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    })
    .to_string()
}

/// A request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the request head was complete.
    pub at: Instant,
    /// Which accepted connection carried it (0-based).
    pub connection: usize,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// The protocol rules every request is checked against.
#[derive(Clone, Debug)]
pub struct Rules {
    /// Path prefix the client must use, e.g. `/v1`.
    pub prefix: String,
    /// `Some(key)`: `Authorization: Bearer key` is required. `None`: no
    /// `Authorization` header may be sent.
    pub api_key: Option<String>,
    /// `Some(b64)`: `Authorization: Basic b64` is required instead (the
    /// client was given a base URL with `user:password@`).
    pub basic_auth: Option<String>,
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    trailers_sent: usize,
}

/// A loopback HTTP server that plays a script and checks protocol rules.
///
/// Rules checked on every request (violations are collected, and the request
/// is answered `400` so the client sees something is wrong):
/// - `POST {prefix}/chat/completions` or `GET {prefix}/models`, nothing else;
/// - a POST has `Content-Type: application/json`, a `Content-Length` body
///   that is valid JSON, a non-empty `model`, a `messages` array whose first
///   element has `role: "system"`, and no role outside
///   system/user/assistant/tool; every tool call's `arguments` is a JSON
///   object; no assistant message has neither text nor tool calls;
/// - the `Authorization` header is `Bearer <key>` exactly when a key is
///   configured, and absent otherwise.
pub struct ScriptedServer {
    addr: SocketAddr,
    rules: Rules,
    state: Arc<Mutex<State>>,
    connections: Arc<AtomicUsize>,
}

impl ScriptedServer {
    /// Starts a server on `127.0.0.1:0` playing `script` in order.
    pub fn start(rules: Rules, script: Vec<Reply>) -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            ..State::default()
        }));
        let connections = Arc::new(AtomicUsize::new(0));
        let (st, conns, rl) = (state.clone(), connections.clone(), rules.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let id = conns.fetch_add(1, Ordering::SeqCst);
                let (st, rl) = (st.clone(), rl.clone());
                thread::spawn(move || serve_connection(stream, id, &rl, &st));
            }
        });
        ScriptedServer {
            addr,
            rules,
            state,
            connections,
        }
    }

    /// The usual rules: prefix `/v1`, the given key (or none).
    pub fn openai(api_key: Option<&str>, script: Vec<Reply>) -> ScriptedServer {
        Self::start(
            Rules {
                prefix: "/v1".into(),
                api_key: api_key.map(str::to_owned),
                basic_auth: None,
            },
            script,
        )
    }

    /// `http://127.0.0.1:PORT{prefix}`.
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, self.rules.prefix)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    /// Connections accepted so far.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// How many [`Reply::Trailing`] bytes have been written in full.
    pub fn trailers_sent(&self) -> usize {
        self.state.lock().unwrap().trailers_sent
    }

    /// Replies not yet played.
    pub fn remaining_script(&self) -> usize {
        self.state.lock().unwrap().script.len()
    }

    /// Panics with every protocol violation seen, if any.
    pub fn assert_clean(&self) {
        let violations = self.state.lock().unwrap().violations.clone();
        assert!(
            violations.is_empty(),
            "protocol violations:\n{}",
            violations.join("\n")
        );
    }
}

fn serve_connection(stream: TcpStream, connection: usize, rules: &Rules, state: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = write_half;
    loop {
        let Some(request) = read_request(&mut reader, connection) else {
            return;
        };
        let problems = check_rules(&request, rules);
        let reply = {
            let mut st = state.lock().unwrap();
            st.requests.push(request.clone());
            if problems.is_empty() {
                st.script.pop_front().unwrap_or_else(|| {
                    st.violations.push(format!(
                        "{} {}: unexpected request, the script is exhausted",
                        request.method, request.path
                    ));
                    Reply::error(500, "script exhausted")
                })
            } else {
                let text = problems.join("; ");
                st.violations.extend(
                    problems
                        .iter()
                        .map(|p| format!("{} {}: {p}", request.method, request.path)),
                );
                Reply::error(400, &format!("protocol violation: {text}"))
            }
        };
        let trailing = matches!(reply, Reply::Trailing { .. });
        if !send_reply(&mut writer, reply) {
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
        if trailing {
            state.lock().unwrap().trailers_sent += 1;
        }
    }
}

/// Reads one request; `None` at EOF or on garbage (the connection is closed).
fn read_request(reader: &mut BufReader<TcpStream>, connection: usize) -> Option<Recorded> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let at = Instant::now();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        method,
        path,
        headers,
        body,
        at,
        connection,
    })
}

fn check_rules(req: &Recorded, rules: &Rules) -> Vec<String> {
    let mut problems = Vec::new();
    let chat = format!("{}/chat/completions", rules.prefix);
    let models = format!("{}/models", rules.prefix);
    let transcriptions = format!("{}/audio/transcriptions", rules.prefix);
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", p) if p == chat => check_chat_body(req, &mut problems),
        ("POST", p) if p == transcriptions => check_transcription(req, &mut problems),
        ("GET", p) if p == models => {}
        (m, p) => problems.push(format!(
            "unexpected {m} {p} (want POST {chat}, POST {transcriptions} or GET {models})"
        )),
    }
    let auth = req.header("authorization");
    if let Some(b64) = &rules.basic_auth {
        if auth != Some(format!("Basic {b64}").as_str()) {
            problems.push("missing or wrong Basic Authorization header".into());
        }
        return problems;
    }
    match (&rules.api_key, auth) {
        (Some(key), Some(v)) if v == format!("Bearer {key}") => {}
        (Some(_), Some(v)) => {
            problems.push(format!("wrong Authorization header ({} bytes)", v.len()))
        }
        (Some(_), None) => problems.push("missing Authorization header".into()),
        (None, Some(_)) => problems.push("Authorization header sent although no key is set".into()),
        (None, None) => {}
    }
    problems
}

fn check_chat_body(req: &Recorded, problems: &mut Vec<String>) {
    match req.header("content-type") {
        Some(ct) if ct.starts_with("application/json") => {}
        other => problems.push(format!("content-type is {other:?}, want application/json")),
    }
    if req.header("transfer-encoding").is_some() {
        problems.push("request body is not sent with Content-Length".into());
    }
    let body: serde_json::Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("body is not valid JSON: {e}"));
            return;
        }
    };
    if body["model"].as_str().is_none_or(str::is_empty) {
        problems.push("`model` missing or empty".into());
    }
    let Some(messages) = body["messages"].as_array() else {
        problems.push("`messages` is not an array".into());
        return;
    };
    if messages.first().and_then(|m| m["role"].as_str()) != Some("system") {
        problems.push("messages[0].role is not \"system\"".into());
    }
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("system" | "user" | "assistant" | "tool") => {}
            other => problems.push(format!("messages[{i}].role is {other:?}")),
        }
        if let Some(parts) = m["content"].as_array() {
            check_content_parts(i, parts, problems);
        }
        if m["role"] == "tool" && !m["tool_call_id"].is_string() {
            problems.push(format!(
                "messages[{i}] is a tool result without tool_call_id"
            ));
        }
        let calls = m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
        for c in calls {
            let args = c["function"]["arguments"].as_str().unwrap_or("");
            if !serde_json::from_str::<serde_json::Value>(args).is_ok_and(|v| v.is_object()) {
                problems.push(format!(
                    "messages[{i}]: tool call arguments {args:?} are not a JSON object"
                ));
            }
        }
        if m["role"] == "assistant"
            && calls.is_empty()
            && !(m["content"].as_str().is_some_and(|c| !c.is_empty())
                || m["content"].as_array().is_some_and(|parts| {
                    parts.iter().any(|p| {
                        p["type"] == "text" && p["text"].as_str().is_some_and(|t| !t.is_empty())
                    })
                }))
        {
            problems.push(format!(
                "messages[{i}]: an assistant message with neither content nor tool calls"
            ));
        }
    }
}

/// Content parts: text parts with text, image parts with a `data:` URL of
/// an image type whose base64 decodes to something that starts like an
/// image (what OpenAI accepts; a broken URL is a 400 there).
fn check_content_parts(i: usize, parts: &[serde_json::Value], problems: &mut Vec<String>) {
    use base64::Engine as _;
    if parts.is_empty() {
        problems.push(format!("messages[{i}]: an empty content array"));
    }
    for part in parts {
        match part["type"].as_str() {
            Some("text") if part["text"].is_string() => {}
            Some("image_url") => {
                let url = part["image_url"]["url"].as_str().unwrap_or("");
                let Some((head, data)) = url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"))
                else {
                    problems.push(format!("messages[{i}]: image_url is not a base64 data URL"));
                    continue;
                };
                if !head.starts_with("image/") {
                    problems.push(format!("messages[{i}]: image data URL of type {head:?}"));
                }
                match base64::engine::general_purpose::STANDARD.decode(data) {
                    Ok(bytes) if bytes.len() >= 8 => {}
                    _ => problems.push(format!("messages[{i}]: image data is not valid base64")),
                }
            }
            other => problems.push(format!("messages[{i}]: content part of type {other:?}")),
        }
    }
}

/// `POST /audio/transcriptions`: a `multipart/form-data` body with a `file`
/// part (a file name and bytes) and a `model` field, as OpenAI requires.
fn check_transcription(req: &Recorded, problems: &mut Vec<String>) {
    let fields = multipart_fields(req);
    match fields.iter().find(|f| f.name == "file") {
        Some(f) if f.file_name.as_deref().is_some_and(|n| !n.is_empty()) && !f.data.is_empty() => {}
        Some(_) => problems.push("the `file` part has no file name or no bytes".into()),
        None => problems.push("no `file` part".into()),
    }
    if !fields
        .iter()
        .any(|f| f.name == "model" && !f.data.is_empty())
    {
        problems.push("no `model` field".into());
    }
}

pub use hermes_tests::multipart::FormField;

/// The parts of a `multipart/form-data` request (empty when it is not one).
pub fn multipart_fields(req: &Recorded) -> Vec<FormField> {
    hermes_tests::multipart::fields(req.header("content-type").unwrap_or(""), &req.body)
}

/// Writes one reply. Returns whether the connection may be reused.
fn send_reply(w: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (n, v) in &headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            w.write_all(head.as_bytes()).is_ok() && w.write_all(body.as_bytes()).is_ok()
        }
        Reply::Stream { headers, steps } => {
            let mut head = String::from(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
            );
            for (n, v) in &headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("\r\n");
            if w.write_all(head.as_bytes()).is_err() || w.flush().is_err() {
                return false;
            }
            for step in steps {
                match step {
                    Step::Chunk(data) => {
                        let framed = format!("{:x}\r\n{data}\r\n", data.len());
                        if w.write_all(framed.as_bytes()).is_err() || w.flush().is_err() {
                            return false;
                        }
                    }
                    Step::Sleep(d) => thread::sleep(d),
                    Step::Drop => return false,
                    Step::Repeat(data, times) => {
                        let framed = format!("{:x}\r\n{data}\r\n", data.len());
                        for _ in 0..times {
                            if w.write_all(framed.as_bytes()).is_err() {
                                return false;
                            }
                        }
                    }
                }
            }
            w.write_all(b"0\r\n\r\n").is_ok()
        }
        Reply::Hang(d) => {
            thread::sleep(d);
            false
        }
        Reply::Trailing {
            reply,
            after,
            bytes,
        } => {
            if !send_reply(w, *reply) {
                return false;
            }
            thread::sleep(after);
            w.write_all(bytes.as_bytes()).is_ok() && w.flush().is_ok()
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// A port on 127.0.0.1 with nothing listening (bound, then released).
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit`
/// (a hang guard, not a speed assertion: limits are generous).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let handle = thread::spawn(f);
    let deadline = Instant::now() + limit;
    while !handle.is_finished() {
        assert!(
            Instant::now() < deadline,
            "did not finish within {limit:?} (hung?)"
        );
        thread::sleep(Duration::from_millis(10));
    }
    match handle.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
