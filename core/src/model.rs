//! The `Model` trait: one chat completion, optionally streamed (SPEC L2, L10).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::message::{FinishReason, LedgerEntry, ToolCall, Usage};
use crate::tool::ToolSpec;

/// What the loop asks of the model for one iteration.
///
/// This is a *view*: it borrows the ledger instead of copying it, so the
/// loop's own cost per iteration does not grow with the history (SPEC L5's
/// `api_messages` is produced by the encoder straight from these borrows).
#[derive(Clone, Copy, Debug)]
pub struct ChatRequest<'a> {
    /// Sent first, as the `system` message, on every call (SPEC L6).
    pub system_prompt: &'a str,
    /// The ledger; only each entry's `message` goes on the wire.
    pub messages: &'a [LedgerEntry],
    /// Tool definitions offered to the model.
    pub tools: &'a [ToolSpec],
    /// Whether the model may call them on this call.
    pub tool_choice: ToolChoice,
}

/// Whether the model may call the offered tools on one call.
///
/// The definitions are sent either way: a ledger that holds tool calls and
/// results needs them (Anthropic refuses `tool_use` blocks in a request
/// without `tools`), and keeping them keeps the request's cacheable prefix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (nothing is sent: every provider's default).
    #[default]
    Auto,
    /// The model must answer in text: OpenAI's `"tool_choice":"none"`,
    /// Anthropic's `{"type":"none"}`. The loop asks for this for the last
    /// call of a spent wallet and after the repeat guard stopped a loop.
    None,
}

/// Whether a streaming sink wants more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading the stream.
    Continue,
    /// Stop reading now (the run was interrupted); return what was received.
    Stop,
}

/// Receives streamed pieces of a completion as they arrive.
pub trait StreamSink {
    /// A piece of answer text.
    fn on_text(&mut self, text: &str) -> Flow;

    /// A piece of reasoning text. Ignored unless overridden.
    fn on_reasoning(&mut self, _text: &str) -> Flow {
        Flow::Continue
    }

    /// Any other event (a tool-call fragment, a keep-alive): a chance to stop.
    fn on_progress(&mut self) -> Flow {
        Flow::Continue
    }

    /// The model that was asked failed and another one takes over the same
    /// call (SPEC X2). Ignored unless overridden.
    fn on_fallback(&mut self, _fallback: &Fallback<'_>) -> Flow {
        Flow::Continue
    }
}

/// A model in a fallback chain failed and the next one runs the same call
/// (SPEC X2). Front-ends tell the user which model answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback<'a> {
    /// The configured name of the model that failed.
    pub failed: &'a str,
    /// Why it failed, in a few words (`rate limited (HTTP 429)`, …).
    pub reason: &'a str,
    /// The configured name of the model that answers instead.
    pub answering: &'a str,
}

/// A sink that takes everything and never stops: for non-streaming callers.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl StreamSink for NullSink {
    fn on_text(&mut self, _text: &str) -> Flow {
        Flow::Continue
    }
}

/// One finished (or, when the sink said [`Flow::Stop`], partial) completion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The answer text, if any.
    pub content: Option<String>,
    /// Complete tool calls, in the order the model gave them.
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning text, if the provider returned any.
    pub reasoning: Option<String>,
    /// Reasoning blocks to keep for providers that want them back, as a JSON
    /// array in OpenRouter's `reasoning_details` form (see
    /// [`EntryMeta::reasoning_details`](crate::EntryMeta::reasoning_details)).
    pub reasoning_details: Option<String>,
    /// The configured name of the model that answered (set by the client;
    /// with a fallback chain, the link that answered).
    pub model: Option<String>,
    /// Why the model stopped; `None` if the stream ended without saying
    /// (for instance because the sink stopped it).
    pub finish_reason: Option<FinishReason>,
    /// Token usage, if reported.
    pub usage: Option<Usage>,
}

/// A chat-completion backend: an HTTP client, a scripted test model, …
pub trait Model: Send + Sync {
    /// Runs one chat completion. Streaming implementations pass pieces to
    /// `sink` as they arrive and stop reading when it returns
    /// [`Flow::Stop`], returning what they have so far as `Ok`.
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError>;
}

impl<M: Model + ?Sized> Model for alloc::sync::Arc<M> {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        (**self).complete(request, sink)
    }
}

impl<M: Model + ?Sized> Model for alloc::boxed::Box<M> {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        (**self).complete(request, sink)
    }
}

/// What kind of failure a [`ModelError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The provider answered with an HTTP error status.
    Status(u16),
    /// The connection failed or broke.
    Transport,
    /// No answer in time.
    Timeout,
    /// The provider's answer could not be understood (bad JSON, broken stream).
    Protocol,
    /// The request could not be built.
    Request,
    /// The request does not fit in the model's context window (SPEC X1):
    /// the provider said so, in any of the wordings
    /// [`crate::context::overflow`] recognises. Retrying the same request
    /// is pointless; compacting the ledger may help. `window` is the limit
    /// the provider stated, when it stated one.
    ContextOverflow {
        /// The context window the provider named, in tokens.
        window: Option<u32>,
    },
}

impl ModelErrorKind {
    /// Whether the provider refused the request as too long for the window.
    pub fn is_context_overflow(self) -> bool {
        matches!(self, ModelErrorKind::ContextOverflow { .. })
    }
}

/// A model call that failed for good (the transport already retried what was
/// worth retrying, SPEC L12). The loop stops and returns the messages gathered
/// so far with this error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelError {
    /// What failed.
    pub kind: ModelErrorKind,
    /// A sentence for the user, naming the status and the provider's own
    /// message where there is one.
    pub message: String,
    /// Answer text that streamed in before the failure (already shown to the
    /// user); the loop keeps it in the ledger, marked incomplete.
    pub partial_text: Option<String>,
}

impl ModelError {
    /// A new error without partial text.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        ModelError {
            kind,
            message: message.into(),
            partial_text: None,
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl core::error::Error for ModelError {}
