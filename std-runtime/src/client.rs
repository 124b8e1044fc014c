//! The OpenAI-compatible provider client: the std implementation of the
//! core's [`Model`] (SPEC L10, L12).
//!
//! Any server speaking `POST {base_url}/chat/completions` works — OpenAI,
//! OpenRouter, llama.cpp, Ollama, vLLM: switching provider is changing
//! [`ClientOptions::base_url`], [`ClientOptions::api_key`] and
//! [`ClientOptions::model`]. Bodies are built and parsed by the core's codec
//! ([`hermes_core::codec`]); this module only moves bytes and decides about
//! retries.
//!
//! # Guarantees
//! - **Streaming and non-streaming both reach the sink.** Streamed text goes
//!   to the sink piece by piece; a non-streaming answer (or a server that
//!   ignored `stream: true` and sent one JSON body) goes to it once, whole. So
//!   a front-end that prints what the sink receives shows every answer once.
//! - **Bounded retries** with exponential backoff and jitter, honouring
//!   `Retry-After` (capped), on 429, 5xx, connection failures, timeouts and
//!   streams that broke before any text was shown (see the `retry`
//!   submodule). Other 4xx and malformed answers fail at once.
//! - **Text the user saw is never replayed.** A stream that breaks *after*
//!   answer text reached the sink is not retried (a retry would show a second,
//!   different answer after the first half of this one); the call fails with
//!   [`ModelError::partial_text`] holding what was shown, and the loop keeps it.
//! - **Interrupts return promptly.** When the sink answers [`Flow::Stop`]
//!   (checked at every chunk, and every 50 ms while the server is silent,
//!   see the `pump` submodule) the call returns `Ok` with the partial
//!   completion and the connection is dropped. This also holds while waiting for the response
//!   headers and during a retry backoff.
//! - **Timeouts: a provider that never answers fails within `call_timeout`**
//!   (90 s by default), not after every attempt's read timeout.
//!   `connect_timeout` bounds connecting (DNS + TCP + TLS);
//!   `first_byte_timeout` (30 s) bounds each attempt's wait for the response
//!   to begin (its status line), after which the call is retried;
//!   `call_timeout` bounds the whole call — every attempt and every wait
//!   between attempts — until the first byte of the answer. From then on only
//!   `idle_read_timeout` (120 s) applies, to *each* wait for more bytes: a
//!   long stream that keeps producing is never cut. (A non-streaming call to
//!   a slow local model sends nothing until it is done: raise
//!   `first_byte_timeout` and `call_timeout` for those.)
//! - **An HTML page is not an answer**: a 2xx response whose body is HTML
//!   (a web site, a proxy's login page) fails at once with "the provider
//!   answered with HTML, not JSON — wrong base URL?" instead of a parse
//!   error; an HTML error page is named the same way.
//! - **Credentials in the base URL** (`https://user:pass@host/v1`, sent as
//!   HTTP Basic auth) appear as `***` in every error message and log line.
//! - **The API key is never logged**: `Debug` of the options and of the
//!   client redacts it, and the `Authorization` header is marked sensitive.
//! - **Errors name what failed**: the HTTP status and the provider's own
//!   message, or the URL that could not be reached and what to check.
//! - **A context-length error is recognised** (SPEC X1), whatever the
//!   provider's wording ([`hermes_core::context::overflow`]), as
//!   [`ModelErrorKind::ContextOverflow`] with the limit it states, and not
//!   retried: the same request would fail the same way, and the agent loop
//!   compacts instead.
//! - **A stream that ends before its first event is asked again without
//!   streaming**, once, inside the same attempt: llama-cpp-python answers a
//!   streamed request that does not fit with `200` and an event stream that
//!   closes empty, and only the non-streamed request gets the real error.

mod anthropic;
mod failure;
mod metadata;
mod options;
mod pump;
pub(crate) mod retry;
mod wire;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hermes_core::codec::DecodeError;
use hermes_core::codec::SseStatus;
use hermes_core::codec::request::RequestEncoder;
use hermes_core::{AttachmentResolver, TextReferences};
use hermes_core::{
    ChatRequest, Completion, Fallback, Flow, Model, ModelError, ModelErrorKind, StreamSink,
};
use ureq::http::{HeaderName, HeaderValue};

pub use anthropic::{ANTHROPIC_BASE_URL, AnthropicClient};
use failure::{
    AttemptResult, Failure, body_too_large, decode_failure, html_answer, looks_like_html,
    status_failure, transport_failure,
};
pub use options::{
    CacheControl, ClientOptions, DEFAULT_CALL_TIMEOUT, DEFAULT_FIRST_BYTE_TIMEOUT,
    ReasoningDialect, ReasoningEcho,
};
use pump::{
    Event, Exchange, Head, Next, Request, Until, next_event_by, sleep_unless_stopped, wait_for_end,
    wait_head,
};
pub(crate) use wire::Wire;

/// Cap on a response body, streamed or not. ureq's own default (10 MB) is
/// too low for a long answer with big tool arguments; 64 MiB still stops a
/// runaway server (a stream's lines and events have their own, smaller cap
/// in the decoder; this one bounds the whole answer).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Cap on an error body kept for the message (only its text matters).
const MAX_ERROR_BODY_BYTES: usize = 1024 * 1024;

/// The largest request buffer kept for the next call. A tool turn's request
/// grows by what the turn added; writing it into the last one's buffer
/// spares a fresh block of that size each turn (in a one-shot's start-up
/// arena, ≈ 8 pages the kernel zeroes, and cold cache lines). A request
/// with inlined images can be megabytes: that buffer goes.
const KEPT_BODY_LIMIT: usize = 1024 * 1024;

/// What calls of one client (and its clones) keep for the next.
#[derive(Default)]
struct Kept {
    encoder: RequestEncoder,
    /// An empty buffer with the capacity of the largest request sent.
    body: Vec<u8>,
}

/// Why a client could not be built or a non-chat call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The options cannot work (bad base URL, a header name or value HTTP
    /// does not allow). Fix the configuration; never retryable.
    #[error("invalid provider configuration: {0}")]
    Config(String),
    /// The provider failed the call (after the retries worth making).
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// The OpenAI-compatible client. `Send + Sync`; every client shares the
/// process's connection pool ([`crate::http::agent`]), and clones are cheap
/// (a few reference counts).
#[derive(Clone)]
pub struct OpenAiClient {
    opts: Arc<ClientOptions>,
    chat: Endpoint,
    models: Endpoint,
    /// The `user:password` written into the base URL, if any: scrubbed from
    /// every message (ureq's own error texts may quote the URL).
    userinfo: Option<Arc<str>>,
    /// Content type, auth and extra headers, validated once.
    headers: Arc<[(HeaderName, HeaderValue)]>,
    /// Keeps the encoded system prompt and tool schemas between calls (most
    /// of every request body; see `RequestEncoder`), and the last request's
    /// buffer. Shared by clones; a call that finds it busy encodes without
    /// it.
    kept: Arc<Mutex<Kept>>,
    /// The API it speaks (this type: OpenAI's; [`AnthropicClient`] wraps
    /// one speaking Anthropic's).
    wire: Wire,
}

/// A URL to call, and the same URL as messages show it (credentials masked).
#[derive(Clone, Debug)]
struct Endpoint {
    url: Arc<str>,
    shown: Arc<str>,
}

impl Endpoint {
    fn new(url: String) -> Self {
        let shown = crate::redact::redact_url(&url).into_owned();
        Endpoint {
            url: url.into(),
            shown: shown.into(),
        }
    }
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("chat_url", &self.chat.shown)
            .field("model", &self.opts.model)
            .field("stream", &self.opts.stream)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// Validates the options. Does no IO.
    pub fn new(opts: ClientOptions) -> Result<Self, ClientError> {
        Self::with_wire(opts, Wire::OpenAiChat)
    }

    /// [`Self::new`] for either wire format.
    pub(crate) fn with_wire(opts: ClientOptions, wire: Wire) -> Result<Self, ClientError> {
        let base = opts.base_url.trim().trim_end_matches('/');
        let lower = base.to_ascii_lowercase();
        let shown_base = crate::redact::redact_url(base);
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(ClientError::Config(format!(
                "base URL {shown_base:?} must start with http:// or https:// (e.g. http://127.0.0.1:11434/v1)"
            )));
        }
        let chat_url = format!("{base}{}", wire.chat_path());
        let models_url = format!("{base}/models");
        if let Err(e) = ureq::http::Uri::try_from(chat_url.as_str()) {
            return Err(ClientError::Config(format!(
                "base URL {shown_base:?} is not a valid URL: {e}"
            )));
        }
        let userinfo = crate::redact::userinfo_span(base)
            .map(|(start, end)| Arc::<str>::from(&base[start..end]))
            .filter(|u| !u.is_empty());

        let mut headers = vec![(
            ureq::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )];
        let key = opts
            .api_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty());
        headers.extend(wire.auth_headers(key).map_err(ClientError::Config)?);
        for (name, value) in &opts.extra_headers {
            let header_name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| ClientError::Config(format!("invalid HTTP header name {name:?}")))?;
            let mut header_value = HeaderValue::from_str(value.trim()).map_err(|_| {
                ClientError::Config(format!(
                    "the value of header {name:?} is not a valid HTTP header value"
                ))
            })?;
            header_value.set_sensitive(true);
            headers.push((header_name, header_value));
        }

        Ok(OpenAiClient {
            chat: Endpoint::new(chat_url),
            models: Endpoint::new(models_url),
            userinfo,
            headers: headers.into(),
            opts: Arc::new(opts),
            kept: Arc::default(),
            wire,
        })
    }

    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// The same provider with another model (`/model <name>`): shares the
    /// connection pool and the validated headers.
    pub fn with_model(&self, model: &str) -> Self {
        let mut opts = (*self.opts).clone();
        opts.model = model.to_owned();
        OpenAiClient {
            opts: Arc::new(opts),
            ..self.clone()
        }
    }

    /// `POST {base_url}/chat/completions`, the full URL as messages show it
    /// (credentials in the base URL masked).
    pub fn chat_url(&self) -> &str {
        &self.chat.shown
    }

    /// `GET {base_url}/models`, the body as sent (OpenRouter's carries
    /// prices). Retried like a chat call.
    pub fn models_body(&self) -> Result<Vec<u8>, ClientError> {
        let deadline = Instant::now() + self.opts.call_timeout;
        Ok(self
            .with_retries(&mut hermes_core::NullSink, deadline, |client, sink| {
                client.fetch(&client.models, None, sink, deadline)
            })?
            .flatten()
            .ok_or_else(|| {
                ModelError::new(ModelErrorKind::Transport, "listing models was interrupted")
            })?)
    }

    /// `GET {base_url}/models`: the model ids the provider offers, in its
    /// order. For `hermes doctor`: it proves the URL and the key work.
    /// Retried like a chat call.
    pub fn list_models(&self) -> Result<Vec<String>, ClientError> {
        // A NullSink never stops the call, so `None` cannot happen; it is
        // reported rather than unwrapped all the same.
        let deadline = Instant::now() + self.opts.call_timeout;
        let body = self
            .with_retries(&mut hermes_core::NullSink, deadline, |client, sink| {
                client.fetch(&client.models, None, sink, deadline)
            })?
            .flatten()
            .ok_or_else(|| {
                ModelError::new(ModelErrorKind::Transport, "listing models was interrupted")
            })?;
        #[derive(serde::Deserialize)]
        struct Listing {
            data: Vec<Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            id: String,
        }
        let listing: Listing = serde_json::from_slice(&body).map_err(|e| {
            if looks_like_html(&body) {
                return html_answer(&self.models.shown, 200, &body).error;
            }
            ModelError::new(
                ModelErrorKind::Protocol,
                self.scrubbed(format!(
                    "malformed model list from {}: {e} (expected {{\"data\":[{{\"id\":…}}]}})",
                    self.models.shown
                )),
            )
        })?;
        Ok(listing.data.into_iter().map(|e| e.id).collect())
    }

    /// Runs `attempt` until it succeeds, fails for good, the attempts are
    /// spent or the call's `deadline` would pass before the next one could
    /// start, sleeping (interruptibly) in between. `Ok(None)`: the sink
    /// stopped the call during a backoff. Every error message leaves here
    /// scrubbed of the base URL's credentials.
    fn with_retries<T>(
        &self,
        sink: &mut dyn StreamSink,
        deadline: Instant,
        mut attempt: impl FnMut(&Self, &mut dyn StreamSink) -> AttemptResult<T>,
    ) -> Result<Option<T>, ModelError> {
        let max = self.opts.max_attempts.max(1);
        let mut n = 1;
        loop {
            let failure = match attempt(self, sink) {
                Ok(value) => return Ok(Some(value)),
                Err(failure) => failure,
            };
            let Failure {
                mut error,
                retryable,
                retry_after,
            } = failure;
            error.message = self.scrubbed(std::mem::take(&mut error.message));
            // A fallback can take the call: do not sit out a long rate limit.
            if retryable
                && self.opts.fail_fast_on_long_retry_after
                && let Some(wait) = retry_after.filter(|w| *w > self.opts.max_retry_after)
            {
                error.message.push_str(&format!(
                    " (the provider asks to wait {} s, longer than the {} s this client waits)",
                    wait.as_secs(),
                    self.opts.max_retry_after.as_secs()
                ));
                return Err(error);
            }
            if !retryable || n >= max {
                if retryable && n > 1 {
                    error
                        .message
                        .push_str(&format!(" (gave up after {n} attempts)"));
                }
                return Err(error);
            }
            let delay = retry::delay_before_next(
                n,
                retry_after,
                self.opts.backoff_base,
                self.opts.max_retry_after,
            );
            if Instant::now() + delay >= deadline {
                // No time for another attempt: stop now rather than sleep
                // into the deadline (a long Retry-After, or the deadline hit).
                error.message.push_str(&format!(
                    " (gave up after {n} attempt{}: the call timeout of {:?} leaves no time for another)",
                    if n == 1 { "" } else { "s" },
                    self.opts.call_timeout
                ));
                return Err(error);
            }
            tracing::warn!(
                attempt = n,
                max_attempts = max,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error.message,
                "provider call failed, retrying"
            );
            if sleep_unless_stopped(delay, sink) == Flow::Stop {
                return Ok(None);
            }
            n += 1;
        }
    }

    /// The message with the base URL's credentials (if any) masked.
    fn scrubbed(&self, message: String) -> String {
        match &self.userinfo {
            Some(secret) if message.contains(&**secret) => message.replace(&**secret, "***"),
            _ => message,
        }
    }

    /// One exchange whose body is read whole (non-streaming chat, models).
    /// `Ok(None)` when the sink stopped it.
    fn fetch(
        &self,
        endpoint: &Endpoint,
        body: Option<&[u8]>,
        sink: &mut dyn StreamSink,
        deadline: Instant,
    ) -> AttemptResult<Option<Vec<u8>>> {
        let url = &*endpoint.shown;
        let mut ex = self.start(endpoint, body);
        let until = Until::first_byte(&self.opts, deadline);
        let Some(head) = wait_head(&mut ex, sink, url, &self.opts, until)? else {
            return Ok(None);
        };
        if !(200..300).contains(&head.status) {
            return Err(self.status_failure(&mut ex, sink, url, &head, deadline));
        }
        self.read_body(&mut ex, sink, url, deadline)
    }

    /// Reads a response body whole, up to [`MAX_BODY_BYTES`]; its first byte
    /// must arrive by the call's `deadline`. `Ok(None)` when the sink stopped
    /// it.
    fn read_body(
        &self,
        ex: &mut Exchange<'_>,
        sink: &mut dyn StreamSink,
        url: &str,
        deadline: Instant,
    ) -> AttemptResult<Option<Vec<u8>>> {
        let mut bytes = Vec::new();
        let mut until = Some(deadline);
        loop {
            let next = next_event_by(ex, sink, until);
            until = None;
            match next {
                Next::Event(Event::Data(chunk)) => {
                    if chunk.len() > MAX_BODY_BYTES.saturating_sub(bytes.len()) {
                        return Err(body_too_large(url, MAX_BODY_BYTES));
                    }
                    bytes.extend_from_slice(chunk);
                }
                Next::Event(Event::End) => return Ok(Some(bytes)),
                Next::Event(Event::Failed(e)) => {
                    return Err(transport_failure(&e, url, &self.opts));
                }
                Next::Stopped => return Ok(None),
                Next::TimedOut => {
                    return Err(failure::no_answer(url, &self.opts, true));
                }
            }
        }
    }

    /// The exchange to send (no IO yet).
    fn start<'b>(&self, endpoint: &Endpoint, body: Option<&'b [u8]>) -> Exchange<'b> {
        Exchange::new(Request {
            url: endpoint.url.clone(),
            body,
            headers: self.headers.clone(),
        })
    }

    /// Reads the error body of a non-2xx answer and names the failure.
    fn status_failure(
        &self,
        ex: &mut Exchange<'_>,
        sink: &mut dyn StreamSink,
        url: &str,
        head: &Head,
        deadline: Instant,
    ) -> Failure {
        let mut body = Vec::new();
        // A broken error body still leaves the status to report; an
        // interrupt here is reported by the retry loop's next check.
        while let Next::Event(Event::Data(chunk)) = next_event_by(ex, sink, Some(deadline)) {
            let room = MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if room <= chunk.len() {
                break;
            }
        }
        let key_sent = self
            .opts
            .api_key
            .as_deref()
            .is_some_and(|k| !k.trim().is_empty());
        status_failure(
            head.status,
            head.retry_after_ms.as_deref(),
            head.retry_after.as_deref(),
            url,
            &body,
            key_sent,
        )
    }

    /// The request body for `request` (streamed or not) on this client's
    /// wire, with this turn's images inlined when the client has a media
    /// directory (SPEC X6) and the encoder's kept state reused when free.
    fn encode(&self, request: &ChatRequest<'_>, stream: bool) -> Result<Vec<u8>, ModelError> {
        // A call that finds the shared encoder busy (a clone calling at the
        // same time) encodes without what it keeps.
        let mut kept = self.kept.try_lock().ok();
        let mut body = match kept.as_deref_mut() {
            Some(kept) if kept.body.capacity() > 0 => std::mem::take(&mut kept.body),
            _ => Vec::with_capacity(4096),
        };
        // The images of this turn, read for this request only (SPEC X6).
        let inline = self
            .opts
            .images
            .as_ref()
            .map(|dir| crate::media::inline::InlineImages::for_request(dir, request.messages));
        let attachments: &dyn AttachmentResolver = match &inline {
            Some(images) => images,
            None => &TextReferences,
        };
        self.wire
            .encode(
                &self.opts,
                stream,
                request,
                attachments,
                kept.as_deref_mut().map(|kept| &mut kept.encoder),
                &mut body,
            )
            .map_err(|e| {
                ModelError::new(
                    ModelErrorKind::Request,
                    format!("could not build the request: {e}"),
                )
            })?;
        Ok(body)
    }

    /// Keeps a sent request's buffer for the next call to encode into,
    /// unless a very large request (inlined images) grew it.
    fn keep_buffer(&self, mut body: Vec<u8>) {
        if body.capacity() > KEPT_BODY_LIMIT {
            return;
        }
        if let Ok(mut kept) = self.kept.try_lock()
            && kept.body.capacity() < body.capacity()
        {
            body.clear();
            kept.body = body;
        }
    }

    /// One streamed chat attempt. `request` is encoded again, without
    /// streaming, if the stream ends before its first event.
    fn stream_attempt(
        &self,
        body: &[u8],
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
        deadline: Instant,
    ) -> AttemptResult<Completion> {
        let url = &*self.chat.shown;
        let mut ex = self.start(&self.chat, Some(body));
        let until = Until::first_byte(&self.opts, deadline);
        let Some(head) = wait_head(&mut ex, sink, url, &self.opts, until)? else {
            return Ok(Completion::default());
        };
        if !(200..300).contains(&head.status) {
            return Err(self.status_failure(&mut ex, sink, url, &head, deadline));
        }
        let content_type = head
            .content_type
            .as_deref()
            .map(|ct| ct.trim_start().to_ascii_lowercase())
            .unwrap_or_default();
        if content_type.starts_with("application/json") || content_type.starts_with("text/html") {
            // The server ignored `stream: true` and sent one body (or a web
            // page, which `whole_body` names).
            return self.whole_body(&mut ex, sink, url, head.status, deadline);
        }

        let mut tracker = ShownTracker {
            inner: sink,
            shown: false,
        };
        let mut decoder = self.wire.stream_decoder();
        // The first byte of the answer is due by the call's deadline; after
        // that only the idle read timeout applies.
        let mut until = Some(deadline);
        let mut first = true;
        let mut received = 0usize;
        loop {
            let next = next_event_by(&mut ex, &mut tracker, until);
            until = None;
            if let Next::Event(Event::Data(chunk)) = &next
                && std::mem::take(&mut first)
                && looks_like_html(chunk)
            {
                return Err(html_answer(url, head.status, chunk));
            }
            match next {
                Next::Event(Event::Data(chunk))
                    if chunk.len() > MAX_BODY_BYTES.saturating_sub(received) =>
                {
                    let mut failure = body_too_large(url, MAX_BODY_BYTES);
                    if tracker.shown {
                        failure.error.partial_text = decoder.partial().content;
                    }
                    return Err(failure);
                }
                Next::Event(Event::Data(chunk)) => match decoder.feed(chunk, &mut tracker) {
                    Ok(SseStatus::NeedMore) => received += chunk.len(),
                    Ok(SseStatus::Done) => {
                        wait_for_end(&mut ex);
                        return decoder
                            .finish()
                            .map_err(|e| decode_failure(e, None, false, url));
                    }
                    Ok(SseStatus::Stopped) => return Ok(decoder.partial()),
                    Err(e) => {
                        let partial = decoder.partial();
                        return Err(decode_failure(e, partial.content, tracker.shown, url));
                    }
                },
                Next::Event(Event::End) => {
                    let partial = decoder.partial();
                    return match decoder.finish() {
                        // Not one event: the server gave no reason. Asking
                        // without streaming makes llama-cpp-python say why
                        // (a context-length error), and gets the answer from
                        // a server that only had a streaming hiccup.
                        Err(DecodeError::Truncated { events: 0, .. }) if !tracker.shown => {
                            self.ask_without_streaming(request, &mut *tracker.inner, deadline)
                        }
                        other => other
                            .map_err(|e| decode_failure(e, partial.content, tracker.shown, url)),
                    };
                }
                // Cut before a single byte of the stream: the same as an
                // empty stream (llama-cpp-python closes without the last
                // chunk when it refuses a request it already said 200 to).
                Next::Event(Event::Failed(e))
                    if received == 0 && !tracker.shown && crate::http::is_closed_connection(&e) =>
                {
                    return self.ask_without_streaming(request, &mut *tracker.inner, deadline);
                }
                Next::Event(Event::Failed(e)) => {
                    let mut failure = transport_failure(&e, url, &self.opts);
                    if tracker.shown {
                        failure.retryable = false;
                        failure.error.message = format!(
                            "the stream from {url} broke after part of the answer was shown: {}",
                            failure.error.message
                        );
                        failure.error.partial_text = decoder.partial().content;
                    }
                    return Err(failure);
                }
                Next::Stopped => return Ok(decoder.partial()),
                Next::TimedOut => return Err(failure::no_answer(url, &self.opts, true)),
            }
        }
    }

    /// After a stream that ended before its first event, for no reason
    /// given: asking without streaming makes llama-cpp-python say why (a
    /// context-length error), and gets the answer from a server that only
    /// had a streaming hiccup. The cut connection stays out of the pool:
    /// such a server closes it right after.
    fn ask_without_streaming(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
        deadline: Instant,
    ) -> AttemptResult<Completion> {
        tracing::warn!(url = %self.chat.shown, "the stream ended before its first event; asking again without streaming");
        crate::http::discard_last_connection();
        let plain = self.encode(request, false).map_err(Failure::fatal)?;
        self.plain_attempt(&plain, sink, deadline)
    }

    /// One non-streaming chat attempt.
    fn plain_attempt(
        &self,
        body: &[u8],
        sink: &mut dyn StreamSink,
        deadline: Instant,
    ) -> AttemptResult<Completion> {
        let url = &*self.chat.shown;
        let mut ex = self.start(&self.chat, Some(body));
        let until = Until::first_byte(&self.opts, deadline);
        let Some(head) = wait_head(&mut ex, sink, url, &self.opts, until)? else {
            return Ok(Completion::default());
        };
        if !(200..300).contains(&head.status) {
            return Err(self.status_failure(&mut ex, sink, url, &head, deadline));
        }
        self.whole_body(&mut ex, sink, url, head.status, deadline)
    }

    /// Reads a whole JSON completion body and shows its text to the sink.
    fn whole_body(
        &self,
        ex: &mut Exchange<'_>,
        sink: &mut dyn StreamSink,
        url: &str,
        status: u16,
        deadline: Instant,
    ) -> AttemptResult<Completion> {
        let Some(bytes) = self.read_body(ex, sink, url, deadline)? else {
            return Ok(Completion::default());
        };
        if looks_like_html(&bytes) {
            return Err(html_answer(url, status, &bytes));
        }
        let completion = self
            .wire
            .decode_body(&bytes)
            .map_err(|e| decode_failure(e, None, false, url))?;
        // Show the answer once, like a stream would have, so front-ends that
        // print the sink's text work in both modes. Stopping here changes
        // nothing: the answer is already complete.
        if let Some(reasoning) = completion.reasoning.as_deref() {
            let _ = sink.on_reasoning(reasoning);
        }
        if let Some(text) = completion.content.as_deref() {
            let _ = sink.on_text(text);
        }
        Ok(completion)
    }
}

impl Model for OpenAiClient {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let body = self.encode(request, self.opts.stream)?;
        let deadline = Instant::now() + self.opts.call_timeout;
        let completion = self.with_retries(sink, deadline, |client, sink| {
            if client.opts.stream {
                client.stream_attempt(&body, request, sink, deadline)
            } else {
                client.plain_attempt(&body, sink, deadline)
            }
        });
        self.keep_buffer(body);
        let completion = completion?;
        // Stopped during a backoff: nothing was received, nothing is lost.
        let mut completion = completion.unwrap_or_default();
        // The configured name, for prices and for the user (a provider's
        // own `model` field names a snapshot, not what was configured).
        completion.model = Some(self.opts.model.clone());
        Ok(completion)
    }
}

/// Forwards to the caller's sink and remembers whether any answer text or
/// reasoning text was shown (either forbids a retry, and a fallback: the
/// user saw it). Shared by the client's retries and the fallback chain.
pub(crate) struct ShownTracker<'a> {
    pub(crate) inner: &'a mut dyn StreamSink,
    pub(crate) shown: bool,
}

impl StreamSink for ShownTracker<'_> {
    fn on_text(&mut self, text: &str) -> Flow {
        self.shown |= !text.is_empty();
        self.inner.on_text(text)
    }

    fn on_reasoning(&mut self, text: &str) -> Flow {
        self.shown |= !text.is_empty();
        self.inner.on_reasoning(text)
    }

    fn on_progress(&mut self) -> Flow {
        self.inner.on_progress()
    }

    fn on_fallback(&mut self, fallback: &Fallback<'_>) -> Flow {
        self.inner.on_fallback(fallback)
    }
}
