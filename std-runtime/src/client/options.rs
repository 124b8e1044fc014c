//! [`ClientOptions`]: how to reach one provider, and the limits of a call.

use std::fmt;
use std::time::Duration;

pub use hermes_core::codec::{CacheControl, ReasoningEcho};

/// How a reasoning effort is spelled on the OpenAI wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningDialect {
    /// `"reasoning_effort": "high"` (OpenAI, DeepSeek, Kimi, most servers).
    #[default]
    OpenAi,
    /// `"reasoning": {"effort": "high"}` (OpenRouter).
    OpenRouter,
}

/// How to reach one OpenAI-compatible provider.
#[derive(Clone)]
pub struct ClientOptions {
    /// Base URL up to and including the API version, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`; a trailing
    /// `/` is fine. The client appends `/chat/completions` and `/models`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set and non-empty; local
    /// servers usually need none. Never logged.
    pub api_key: Option<String>,
    /// The provider's model name.
    pub model: String,
    /// Ask for a server-sent-event stream (with a final usage chunk).
    pub stream: bool,
    /// Output token cap, `max_tokens` on the wire.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; provider default when `None`.
    pub temperature: Option<f32>,
    /// Bound on establishing a connection (DNS, TCP, TLS).
    pub connect_timeout: Duration,
    /// Bound on each wait for bytes from the server once the response has
    /// begun (every body read). Not a deadline for the whole answer.
    pub idle_read_timeout: Duration,
    /// Bound on waiting for the response to begin (its status line), per
    /// attempt: a server that accepted the connection but never answers is
    /// given up on after this, and the call retried. For a non-streaming call
    /// the response begins only when the whole answer is ready; raise this
    /// (and `call_timeout`) for slow models without streaming.
    pub first_byte_timeout: Duration,
    /// Bound on one call, across all its attempts and the waits between them,
    /// until its answer starts (the first byte of a successful response's
    /// body). Once an answer is arriving only `idle_read_timeout` applies, so
    /// a long, healthy stream is never cut.
    pub call_timeout: Duration,
    /// Attempts per call, including the first (0 counts as 1).
    pub max_attempts: u32,
    /// First backoff step; doubled per attempt, jittered.
    pub backoff_base: Duration,
    /// Cap on any wait between attempts, including a server's `Retry-After`.
    pub max_retry_after: Duration,
    /// Extra headers sent on every request (OpenRouter's `HTTP-Referer`,
    /// `X-Title`, an organisation header, …). Values are not logged.
    pub extra_headers: Vec<(String, String)>,
    /// Where the files behind image attachments live, for a model that
    /// accepts images (SPEC X6): the current turn's images are sent from
    /// there as `image_url` parts ([`crate::media::inline`]). `None`: every
    /// attachment travels as its text reference.
    pub images: Option<crate::media::MediaDir>,
    /// Explicit prompt-cache breakpoints (SPEC X3; Anthropic models); `None`
    /// for providers that cache a stable prefix by themselves.
    pub cache: Option<CacheControl>,
    /// How much the model should reason (`minimal`, `low`, `medium`,
    /// `high`, …); provider default when `None`. On the Anthropic API it
    /// turns extended thinking on with a budget that grows with the effort.
    pub reasoning_effort: Option<String>,
    /// How the effort is spelled on the OpenAI wire.
    pub reasoning_dialect: ReasoningDialect,
    /// Stored reasoning sent back on the OpenAI wire, for providers that
    /// require it (the Anthropic API gets its signed thinking blocks back
    /// whenever thinking is on).
    pub reasoning_echo: ReasoningEcho,
    /// Fail at once, instead of waiting `max_retry_after`, when a rate
    /// limit's `Retry-After` is longer than that: set when a fallback can
    /// take the call (SPEC X2).
    pub fail_fast_on_long_retry_after: bool,
}

/// The default [`ClientOptions::first_byte_timeout`].
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);

/// The default [`ClientOptions::call_timeout`]: a provider that never answers
/// fails the call within this.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(90);

impl Default for ClientOptions {
    /// A local Ollama server, streaming, three attempts.
    fn default() -> Self {
        ClientOptions {
            base_url: "http://127.0.0.1:11434/v1".into(),
            api_key: None,
            model: String::new(),
            stream: true,
            max_tokens: None,
            temperature: None,
            connect_timeout: Duration::from_secs(10),
            idle_read_timeout: Duration::from_secs(120),
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_attempts: 3,
            backoff_base: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(60),
            extra_headers: Vec::new(),
            images: None,
            cache: None,
            reasoning_effort: None,
            reasoning_dialect: ReasoningDialect::OpenAi,
            reasoning_echo: ReasoningEcho::Off,
            fail_fast_on_long_retry_after: false,
        }
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("base_url", &crate::redact::redact_url(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_read_timeout", &self.idle_read_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("max_retry_after", &self.max_retry_after)
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("images", &self.images.as_ref().map(|d| d.root()))
            .field("cache", &self.cache)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("reasoning_dialect", &self.reasoning_dialect)
            .field("reasoning_echo", &self.reasoning_echo)
            .field(
                "fail_fast_on_long_retry_after",
                &self.fail_fast_on_long_retry_after,
            )
            .finish()
    }
}
