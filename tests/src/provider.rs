//! The scripted, loopback, OpenAI-compatible provider ([`FakeProvider`])
//! the crates' tests talk to.
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
//! like llama-cpp-python, with an empty event stream when streamed (and the
//! connection closed after it, the moment the next request arrives). The
//! window can be advertised where that provider advertises it
//! ([`Advertise`]). A [`Responder`] answers when the script is empty, for
//! conversations whose number of calls is not known in advance.

mod checks;
mod serve;

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::multipart;

use serve::serve;

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
    /// When set, the state of the generator that picks which connections
    /// are closed after an answer (see [`FakeProvider::close_idle_at_random`]).
    idle_close: Option<u64>,
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
            idle_close: None,
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

    /// Closes connections after an answer at random, as servers close idle
    /// keep-alive connections: about every second one, after 0–30 ms idle
    /// or the moment the next request arrives on it (left unread), the
    /// draws reproducible from `seed`.
    pub fn close_idle_at_random(&self, seed: u64) {
        lock(&self.state).idle_close = Some(seed.max(1));
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
