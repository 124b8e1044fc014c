//! Test support shared by the crates' process-level tests: a scripted,
//! loopback, OpenAI-compatible provider ([`FakeProvider`]), the launcher of
//! the third-party aimock emulator ([`aimock`]), and a private PostgreSQL
//! server ([`postgres`]).
//!
//! It speaks just enough HTTP/1.1 (keep-alive: JSON answers carry a
//! `Content-Length`, event streams are chunked; [`FakeProvider::connections`]
//! counts the connections clients opened) and checks the protocol rules a real provider enforces on every
//! request: `POST /…/chat/completions`, a JSON body with `model` and a
//! `messages` array whose first entry is the system prompt, every tool call
//! answered by a tool message, every tool call's `arguments` a JSON object,
//! no assistant message without text and without tool calls, content parts
//! only of text and of images as base64 `data:` URLs. It also serves
//! `POST /…/audio/transcriptions` (a multipart upload with a named `file`
//! and a `model`, checked) when a transcript is set. A request that
//! breaks a rule gets a 400 with the reason, and the reason is recorded so
//! the test fails loudly.
//!
//! It can also enforce a context window ([`Window`]) the way real providers
//! do: every request is counted by the provider's own rule (the bytes of its
//! JSON body / 3 — stricter than hermes's estimate, so hermes cannot pass by
//! agreeing with itself), the count is reported as `prompt_tokens`, and a
//! request over the limit is refused with the error body of a real provider
//! ([`Overflow`]; the wordings of `tests/fixtures/context-overflow/`), or,
//! like llama-cpp-python, with an empty event stream when streamed. The
//! window can be advertised where that provider advertises it
//! ([`Advertise`]). A [`Responder`] answers when the script is empty, for
//! conversations whose number of calls is not known in advance.

pub mod aimock;
pub mod fuzz_inputs;
pub mod http;
pub mod multipart;
pub mod postgres;

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
    /// `reply` with `extra` fields merged into the assistant message (the
    /// first delta when streaming) — `reasoning_content`, `reasoning`,
    /// `reasoning_details` — and, when given, this `usage` object instead
    /// of the default one.
    With {
        /// The answer.
        reply: Box<Reply>,
        /// Fields added to the message.
        extra: Value,
        /// The usage object to report.
        usage: Option<Value>,
    },
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

    /// This reply with `extra` fields in its message.
    pub fn with(self, extra: Value) -> Self {
        Reply::With {
            reply: Box::new(self),
            extra,
            usage: None,
        }
    }

    /// This reply reporting `usage`.
    pub fn with_usage(self, usage: Value) -> Self {
        match self {
            Reply::With { reply, extra, .. } => Reply::With {
                reply,
                extra,
                usage: Some(usage),
            },
            other => Reply::With {
                reply: Box::new(other),
                extra: json!({}),
                usage: Some(usage),
            },
        }
    }
}

/// Answers a request (its JSON body) when the script is empty.
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// How a request over the window is refused: the wording and status of a
/// real provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// OpenAI: 400, `context_length_exceeded`.
    OpenAi,
    /// OpenRouter: 400, "This endpoint's maximum context length is …".
    OpenRouter,
    /// Anthropic-style: 400, "prompt is too long: N tokens > M maximum".
    Anthropic,
    /// llama.cpp's server: 400, `exceed_context_size_error` with `n_ctx`.
    LlamaCpp,
    /// vLLM: 400, "… your request has N input tokens …".
    Vllm,
    /// llama-cpp-python: a streamed request gets `200` and an event stream
    /// that closes without an event; without streaming, OpenAI's 400.
    LlamaCppPython,
}

/// Where the provider says how big its window is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advertise {
    /// Nowhere (OpenAI, llama-cpp-python).
    Nowhere,
    /// `GET /models` entry `context_length` (OpenRouter).
    ModelsContextLength,
    /// `GET /models` entry `max_model_len` (vLLM).
    ModelsMaxModelLen,
    /// `GET /props` `default_generation_settings.n_ctx` (llama.cpp).
    Props,
    /// `POST /api/show` parameters `num_ctx` (Ollama).
    OllamaShow,
}

/// A context window the provider enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// The limit, in this provider's tokens (request JSON bytes / 3).
    pub tokens: u64,
    /// How a request over it is refused.
    pub overflow: Overflow,
    /// Where it is advertised.
    pub advertise: Advertise,
}

impl Window {
    /// A window of `tokens` refused in OpenAI's words, advertised nowhere.
    pub fn openai(tokens: u64) -> Self {
        Window {
            tokens,
            overflow: Overflow::OpenAi,
            advertise: Advertise::Nowhere,
        }
    }
}

/// The provider's token count of a request body.
pub fn provider_tokens(body: &[u8]) -> u64 {
    body.len() as u64 / 3
}

struct State {
    script: VecDeque<Reply>,
    requests: Vec<Value>,
    violations: Vec<String>,
    responder: Option<Responder>,
    window: Option<Window>,
    refused: Vec<u64>,
    counts: Vec<u64>,
    /// What `GET /models` lists.
    models: Vec<String>,
    /// Whether answers report token usage (some local servers do not).
    usage: bool,
    /// The `Authorization` header of each request, `None` when absent.
    auth: Vec<Option<String>>,
    /// An error status `GET /models` answers with instead of the list.
    models_status: Option<u16>,
    /// Connections accepted so far.
    connections: usize,
    /// What `POST /audio/transcriptions` answers; `None`: 404.
    transcript: Option<Reply>,
    /// The uploads of the transcription requests, in order.
    transcriptions: Vec<Vec<multipart::FormField>>,
}

impl Default for State {
    fn default() -> Self {
        State {
            script: VecDeque::new(),
            requests: Vec::new(),
            violations: Vec::new(),
            responder: None,
            window: None,
            refused: Vec::new(),
            counts: Vec::new(),
            models: vec!["fake-model".to_owned()],
            usage: true,
            auth: Vec::new(),
            models_status: None,
            connections: 0,
            transcript: None,
            transcriptions: Vec::new(),
        }
    }
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
        Self::start_with(script, None, None)
    }

    /// Like [`FakeProvider::start`], enforcing `window` when given, and
    /// asking `responder` (instead of answering "(script exhausted)") once
    /// the script is empty.
    pub fn start_with(
        script: Vec<Reply>,
        window: Option<Window>,
        responder: Option<Responder>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            window,
            responder,
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        thread::spawn(move || {
            while !sp.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        lock(&st).connections += 1;
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

    /// Sets what `GET /models` lists (default: `fake-model`).
    pub fn set_models(&self, ids: &[&str]) {
        lock(&self.state).models = ids.iter().map(|s| (*s).to_owned()).collect();
    }

    /// Makes `GET /models` fail with `status` (a provider refusing the key).
    pub fn fail_models(&self, status: u16) {
        lock(&self.state).models_status = Some(status);
    }

    /// Whether answers carry a `usage` object (default: yes).
    pub fn set_usage(&self, on: bool) {
        lock(&self.state).usage = on;
    }

    /// The `Authorization` header of every request so far (models listings included).
    pub fn auth_headers(&self) -> Vec<Option<String>> {
        lock(&self.state).auth.clone()
    }

    /// How many connections clients have opened so far (a client that keeps
    /// its connection alive opens one for a whole conversation).
    pub fn connections(&self) -> usize {
        lock(&self.state).connections
    }

    /// Answers `POST /audio/transcriptions` with `reply` (a [`Reply::Text`]
    /// is the transcript, a [`Reply::Status`] an OpenAI-style error).
    pub fn set_transcription(&self, reply: Reply) {
        lock(&self.state).transcript = Some(reply);
    }

    /// The form fields of every transcription request so far.
    pub fn transcriptions(&self) -> Vec<Vec<multipart::FormField>> {
        lock(&self.state).transcriptions.clone()
    }

    /// The provider's token count of every chat request, in order.
    pub fn counts(&self) -> Vec<u64> {
        lock(&self.state).counts.clone()
    }

    /// The counts of the requests refused as over the window.
    pub fn refused(&self) -> Vec<u64> {
        lock(&self.state).refused.clone()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Answers the requests of one connection in turn (HTTP/1.1 keep-alive)
/// until the client closes it.
fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    while !reader.fill_buf()?.is_empty() {
        serve_request(&mut reader, &mut out, state)?;
    }
    Ok(())
}

/// Reads one request and answers it with a self-delimited response
/// (`Content-Length`, or chunked for event streams).
fn serve_request(
    reader: &mut BufReader<TcpStream>,
    out: &mut TcpStream,
    state: &Mutex<State>,
) -> std::io::Result<()> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        // Closed before a request (a client killed after connecting): no
        // request, so nothing to judge.
        return Ok(());
    }
    let mut content_length = 0usize;
    let mut has_json_type = false;
    let mut content_type = String::new();
    let mut auth = None;
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
            if k == "authorization" {
                auth = Some(v.trim().to_owned());
            }
            if k == "content-type" {
                has_json_type = v.contains("application/json");
                content_type = v.trim().to_owned();
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));

    let (window, models, models_status) = {
        let mut st = lock(state);
        st.auth.push(auth);
        (st.window, st.models.clone(), st.models_status)
    };
    if method == "GET" && path.ends_with("/models") {
        if let Some(code) = models_status {
            let body = json!({"error": {"message": "Invalid API key provided", "code": code}});
            return respond_json(out, code, &body);
        }
        let data: Vec<Value> = models
            .iter()
            .map(|id| {
                let mut entry = json!({"id": id, "object": "model"});
                match window {
                    Some(w) if w.advertise == Advertise::ModelsContextLength => {
                        entry["context_length"] = w.tokens.into();
                    }
                    Some(w) if w.advertise == Advertise::ModelsMaxModelLen => {
                        entry["max_model_len"] = w.tokens.into();
                    }
                    _ => {}
                }
                entry
            })
            .collect();
        let body = json!({"object": "list", "data": data});
        return respond_json(out, 200, &body);
    }
    if let Some(w) = window {
        if method == "GET" && path == "/props" && w.advertise == Advertise::Props {
            let body =
                json!({"default_generation_settings": {"n_ctx": w.tokens}, "total_slots": 1});
            return respond_json(out, 200, &body);
        }
        if method == "POST" && path == "/api/show" && w.advertise == Advertise::OllamaShow {
            let body = json!({
                "parameters": format!("stop \"<|im_end|>\"\nnum_ctx {}", w.tokens),
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
            });
            return respond_json(out, 200, &body);
        }
    }
    if method == "POST" && path.ends_with("/audio/transcriptions") {
        return transcribe(out, state, &content_type, &body);
    }
    // Other metadata endpoints (llama.cpp's /props, Ollama's /api/…) are
    // probed for the context window; this provider has none, like OpenAI.
    if (method == "GET" && !path.ends_with("/chat/completions")) || path.contains("/api/") {
        return respond_json(out, 404, &json!({"error": {"message": "not found"}}));
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
        return respond_json(out, 400, &json!({"error": {"message": v}}));
    }
    let request = parsed.unwrap_or(Value::Null);
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let count = provider_tokens(&body);
    let (reply, responder, usage) = {
        let mut st = lock(state);
        st.requests.push(request.clone());
        st.counts.push(count);
        if let Some(w) = st.window
            && count > w.tokens
        {
            st.refused.push(count);
            drop(st);
            return refuse(out, w, count, stream);
        }
        (st.script.pop_front(), st.responder.clone(), st.usage)
    };
    let count = usage.then_some(count);
    let reply = reply.unwrap_or_else(|| match responder {
        Some(r) => r(&request),
        None => Reply::text("(script exhausted)"),
    });
    let (reply, extra, usage) = match reply {
        Reply::With {
            reply,
            extra,
            usage,
        } => (*reply, extra, usage),
        other => (other, json!({}), None),
    };
    let decoration = Decoration {
        extra: &extra,
        usage: usage.as_ref(),
        prompt_tokens: count,
    };
    match reply {
        Reply::Status(code, message) => respond_json(
            out,
            code,
            &json!({"error": {"message": message, "code": code}}),
        ),
        Reply::Text(t) => answer(out, stream, &[t], Duration::ZERO, None, &decoration),
        Reply::SlowText { pieces, delay } => answer(out, stream, &pieces, delay, None, &decoration),
        Reply::ToolCalls(calls) => {
            answer(out, stream, &[], Duration::ZERO, Some(&calls), &decoration)
        }
        Reply::With { .. } => respond_json(
            out,
            500,
            &json!({"error": {"message": "nested Reply::With in the test script"}}),
        ),
    }
}

/// What an answer reports and adds: a [`Reply::With`]'s fields and usage,
/// else the provider's own prompt count (`None`: no usage at all).
struct Decoration<'a> {
    extra: &'a Value,
    usage: Option<&'a Value>,
    prompt_tokens: Option<u64>,
}

fn merge(target: &mut Value, extra: &Value) {
    if let (Value::Object(t), Value::Object(e)) = (target, extra) {
        for (k, v) in e {
            t.insert(k.clone(), v.clone());
        }
    }
}

/// `POST /audio/transcriptions` as OpenAI's: a form with a `file` part
/// (named, not empty) and a `model` field, else a 400 recorded as a
/// violation; then the configured answer.
fn transcribe(
    out: &mut TcpStream,
    state: &Mutex<State>,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let fields = multipart::fields(content_type, body);
    let file_ok = fields.iter().any(|f| {
        f.name == "file"
            && f.file_name.as_deref().is_some_and(|n| !n.is_empty())
            && !f.data.is_empty()
    });
    let model_ok = fields
        .iter()
        .any(|f| f.name == "model" && !f.data.is_empty());
    let mut st = lock(state);
    if !(file_ok && model_ok) {
        let v = format!(
            "transcription request without a named, non-empty `file` part and a `model` field ({} parts)",
            fields.len()
        );
        st.violations.push(v.clone());
        drop(st);
        return respond_json(out, 400, &json!({"error": {"message": v}}));
    }
    st.transcriptions.push(fields);
    let reply = st.transcript.clone();
    drop(st);
    match reply {
        Some(Reply::Text(text)) => respond_json(out, 200, &json!({ "text": text })),
        Some(Reply::Status(code, message)) => respond_json(
            out,
            code,
            &json!({"error": {"message": message, "type": "invalid_request_error"}}),
        ),
        _ => respond_json(
            out,
            404,
            &json!({"error": {"message": "no transcription model"}}),
        ),
    }
}

/// The rules for a user message's content parts: text parts carry text,
/// image parts a base64 `data:` URL of an image (what OpenAI checks).
fn check_parts(i: usize, parts: &[Value]) -> Result<(), String> {
    use base64::Engine as _;
    if parts.is_empty() {
        return Err(format!("messages[{i}]: an empty content array"));
    }
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") if part.get("text").is_some_and(Value::is_string) => {}
            Some("image_url") => {
                let url = part
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let (head, data) = url
                    .strip_prefix("data:")
                    .and_then(|r| r.split_once(";base64,"))
                    .ok_or_else(|| format!("messages[{i}]: image_url is not a base64 data URL"))?;
                if !head.starts_with("image/") {
                    return Err(format!("messages[{i}]: an image data URL of type {head:?}"));
                }
                if base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .is_err()
                {
                    return Err(format!("messages[{i}]: the image data is not valid base64"));
                }
            }
            other => return Err(format!("messages[{i}]: a content part of type {other:?}")),
        }
    }
    Ok(())
}

/// Refuses a request of `n` tokens over `w`, as the provider `w` imitates.
fn refuse(out: &mut TcpStream, w: Window, n: u64, stream: bool) -> std::io::Result<()> {
    let limit = w.tokens;
    let body = match w.overflow {
        Overflow::OpenAi => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {n} tokens. Please reduce the length of the messages."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        Overflow::OpenRouter => json!({"error": {
            "message": format!("This endpoint's maximum context length is {limit} tokens. However, you requested about {n} tokens ({n} of text input, 0 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically."),
            "code": 400, "metadata": {"provider_name": "Fake"}}}),
        Overflow::Anthropic => json!({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": format!("prompt is too long: {n} tokens > {limit} maximum")}}),
        Overflow::LlamaCpp => json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
            "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": limit}}),
        Overflow::Vllm => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your request has {n} input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value={n})"),
            "type": "BadRequestError", "param": "input_tokens", "code": 400}}),
        Overflow::LlamaCppPython if stream => {
            // Its log says `ValueError: Requested tokens (n) exceed context
            // window of limit`; the client sees a stream that just closes.
            let mut events = EventStream::start(out)?;
            return events.end();
        }
        Overflow::LlamaCppPython => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, you requested {n} tokens ({n} in the messages, None in the completion). Please reduce the length of the messages or completion."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    };
    respond_json(out, 400, &body)
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
        if let Some(parts) = m.get("content").and_then(Value::as_array) {
            check_parts(i, parts)?;
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
                let args = c["function"]["arguments"].as_str().unwrap_or("");
                if !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
                    return Err(format!(
                        "messages[{i}]: tool call arguments {args:?} are not a JSON object"
                    ));
                }
            }
        }
        if role == "assistant"
            && m.get("tool_calls")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            && !has_text(m.get("content"))
        {
            return Err(format!(
                "messages[{i}]: an assistant message with neither content nor tool calls"
            ));
        }
        for forbidden in ["reasoning", "usage", "timestamp", "finish_reason"] {
            if m.get(forbidden).is_some() {
                return Err(format!("messages[{i}] carries ledger field {forbidden}"));
            }
        }
    }
    Ok(())
}

/// Whether a message's `content` has text: a non-empty string, or content
/// parts (`[{"type":"text","text":…}]`, as cache breakpoints send it) with
/// a non-empty text.
fn has_text(content: Option<&Value>) -> bool {
    match content {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(parts)) => parts
            .iter()
            .any(|p| p["type"] == "text" && p["text"].as_str().is_some_and(|t| !t.is_empty())),
        _ => false,
    }
}

fn respond_json(out: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
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
    decoration: &Decoration<'_>,
) -> std::io::Result<()> {
    let finish = if calls.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    // No count: this provider reports no usage (some local servers do not).
    let usage = decoration.usage.cloned().or_else(|| {
        decoration
            .prompt_tokens
            .map(|p| json!({"prompt_tokens": p, "completion_tokens": 7, "total_tokens": p + 7}))
    });
    if !stream {
        for _ in pieces {
            thread::sleep(delay);
        }
        let mut message = json!({"role": "assistant", "content": pieces.concat()});
        if let Some(c) = calls {
            message["content"] = Value::Null;
            message["tool_calls"] = tool_calls_json(c);
        }
        merge(&mut message, decoration.extra);
        let mut body = json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        });
        if let Some(u) = usage {
            body["usage"] = u;
        }
        return respond_json(out, 200, &body);
    }
    let mut events = EventStream::start(out)?;
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut send = |v: Value| events.send(&format!("data: {v}\n\n"));
    let mut first = json!({"role": "assistant", "content": ""});
    merge(&mut first, decoration.extra);
    send(chunk(first, Value::Null))?;
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
    if let Some(u) = usage {
        send(
            json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model", "choices": [], "usage": u}),
        )?;
    }
    events.send("data: [DONE]\n\n")?;
    events.end()
}

/// A `text/event-stream` response in chunked transfer encoding, so the
/// connection stays usable for the next request.
struct EventStream<'a> {
    out: &'a mut TcpStream,
}

impl<'a> EventStream<'a> {
    fn start(out: &'a mut TcpStream) -> std::io::Result<Self> {
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )?;
        out.flush()?;
        Ok(EventStream { out })
    }

    /// One piece of the stream, sent at once as its own chunk.
    fn send(&mut self, text: &str) -> std::io::Result<()> {
        let framed = format!("{:x}\r\n{text}\r\n", text.len());
        self.out.write_all(framed.as_bytes())?;
        self.out.flush()
    }

    /// The last chunk: the body ends, the connection stays open.
    fn end(&mut self) -> std::io::Result<()> {
        self.out.write_all(b"0\r\n\r\n")?;
        self.out.flush()
    }
}
