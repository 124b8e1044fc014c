//! The wire codecs, shared by every transport: OpenAI chat completions
//! (this module's `request`, `response`, `sse`) and Anthropic Messages
//! ([`anthropic`]), whose streams share one SSE framer.
//!
//! The codec turns the loop's borrowed view of a call ([`ChatRequest`]) into
//! request bytes, and the provider's answer — a plain JSON body or a stream of
//! server-sent events — back into a [`Completion`]. It does no IO: transports
//! hand it bytes (or an `embedded-io` reader) and send what it produces, so the
//! same code serves the std HTTP client, tests and a `no_std` target.
//!
//! # Guarantees
//! - **Only [`Message`]s reach the wire** (SPEC L5): the encoder walks
//!   `&entry.message` of each ledger entry and reads nothing of
//!   [`EntryMeta`] but the stored reasoning, and that only when
//!   [`RequestOptions::reasoning_echo`] asks for it; it serializes straight
//!   from the borrows — the history is never cloned.
//! - **The system prompt goes first** on every request (SPEC L6), and is left
//!   out when it is empty.
//! - **The stream decoder is split-agnostic**: any byte split (mid-line,
//!   mid-UTF-8 character, between `\r` and `\n`) gives the same [`Completion`].
//! - **Bad input is a typed error, never a panic**, and never loses what was
//!   already decoded: every stream error carries the partial completion.
//! - **Bounded memory**: one line or event is capped ([`DEFAULT_MAX_EVENT_BYTES`]),
//!   and so is the number of parallel tool calls ([`MAX_TOOL_CALLS`]).
//!
//! [`ChatRequest`]: crate::ChatRequest
//! [`Completion`]: crate::Completion
//! [`Message`]: crate::Message
//! [`EntryMeta`]: crate::EntryMeta

use alloc::string::String;
use alloc::vec::Vec;

use crate::model::{ChatRequest, Completion, ToolChoice};
use crate::tool::ToolSpec;

pub mod anthropic;
pub(crate) mod fast;
mod frame;
mod reasoning;
pub mod request;
pub mod response;
pub mod sse;
pub mod text_calls;

pub use frame::{DEFAULT_MAX_EVENT_BYTES, MAX_TOOL_CALLS, SseStatus};
pub use request::{
    CacheControl, Reasoning, ReasoningEcho, RequestEncoder, RequestOptions, encode_request,
    encode_request_with,
};
pub use response::{decode_error_body, decode_response};
pub use sse::{SseDecoder, decode_stream};

/// Building a request body failed. Nothing was sent; retrying the same
/// request fails the same way, so the transport reports it as a request error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// `temperature` was NaN or infinite; JSON cannot carry it and serde_json
    /// would silently write `null`, so the caller's setting would be lost.
    #[error("temperature {0} is not a finite number")]
    InvalidTemperature(f32),
    /// The serializer failed (serde_json's error; the parts of a body
    /// always serialize, so this is a bug).
    #[error("could not serialize the request: {0}")]
    Json(#[source] serde_json::Error),
}

/// Appends `text` as a JSON string (quoted, escaped) to `out`, for the
/// parts of a body written by hand.
pub(crate) fn push_json_string(text: &str, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(&serde_json::to_vec(text).map_err(EncodeError::Json)?);
    Ok(())
}

/// How one provider's body writes its tools: the `tools` array, and the
/// `tool_choice` value that forbids calling them.
pub(crate) struct ToolsDialect {
    pub(crate) write: fn(&[ToolSpec], &mut Vec<u8>) -> Result<(), EncodeError>,
    pub(crate) none_choice: &'static [u8],
}

/// Appends a request body to `out` (left as it was on error): `head`,
/// serde's encoding of the fields before `tools` (an object), then
/// `tools` and `tool_choice` as `dialect` writes them (none when `req` has
/// no tools), then the fields of `tail`, serde's encoding of the fields
/// after them (an object of one field at least).
pub(crate) fn join_body(
    mut head: Vec<u8>,
    req: &ChatRequest<'_>,
    dialect: &ToolsDialect,
    tail: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    debug_assert_eq!(head.last(), Some(&b'}'));
    head.pop();
    if !req.tools.is_empty() {
        head.extend_from_slice(b",\"tools\":");
        (dialect.write)(req.tools, &mut head)?;
        if req.tool_choice == ToolChoice::None {
            head.extend_from_slice(b",\"tool_choice\":");
            head.extend_from_slice(dialect.none_choice);
        }
    }
    debug_assert_eq!(tail.first(), Some(&b'{'));
    head.push(b',');
    head.extend_from_slice(tail.get(1..).unwrap_or_default());
    if out.is_empty() {
        *out = head;
    } else {
        out.extend_from_slice(&head);
    }
    Ok(())
}

/// The provider's answer could not be understood, or was an error.
///
/// Not retryable as such, except [`DecodeError::Truncated`] (a broken
/// connection) and possibly [`DecodeError::Provider`] (the provider's own
/// failure, e.g. overload); the transport decides.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A body or a stream event was not the JSON we expect (syntax error or
    /// wrong types). The provider broke the protocol; report it to the user.
    #[error("malformed provider response: {message}")]
    Json {
        /// serde_json's description, with line and column.
        message: String,
    },
    /// The provider answered with an error object, either as the body or in
    /// the middle of a stream (`{"error":{"message":…}}` or `event: error`).
    #[error("provider error: {message}")]
    Provider {
        /// The provider's own message.
        message: String,
    },
    /// A non-streaming body had no `choices`: there is no answer to return.
    #[error("provider response has no choices")]
    NoChoices,
    /// The stream ended (EOF) before `data: [DONE]` and before any
    /// `finish_reason`: the connection broke. Retryable; the partial text is
    /// kept by the caller.
    #[error(
        "stream ended early after {events} events ({pending_bytes} bytes of an unfinished event)"
    )]
    Truncated {
        /// How many chunk events were decoded before the end.
        events: u64,
        /// Bytes of the line or event that was cut off.
        pending_bytes: usize,
    },
    /// One line or event exceeded the size cap; decoding stops instead of
    /// buffering without bound (a broken or hostile server).
    #[error("stream line or event exceeds {limit} bytes")]
    TooLarge {
        /// The cap that was hit.
        limit: usize,
    },
    /// The model opened more parallel tool calls than the decoder has slots
    /// for; no sane model does this, so it is treated as a broken stream.
    #[error("more than {limit} parallel tool calls in one completion")]
    TooManyToolCalls {
        /// The number of slots.
        limit: usize,
    },
}

impl DecodeError {
    pub(crate) fn json(err: &serde_json::Error) -> Self {
        use core::fmt::Write as _;
        let mut message = String::new();
        // Writing into a String cannot fail.
        let _ = write!(message, "{err}");
        DecodeError::Json { message }
    }
}

/// Decoding a stream from a reader failed. Both variants carry what was
/// decoded before the failure, so text already shown to the user is not lost
/// (SPEC L11, L12).
#[derive(Debug, thiserror::Error)]
pub enum StreamError<E> {
    /// The reader failed (connection reset, timeout). Retryable.
    #[error("reading the stream failed: {error}")]
    Io {
        /// The reader's error.
        error: E,
        /// What was decoded before the failure.
        partial: Completion,
    },
    /// The bytes could not be decoded, the provider sent an error event, or
    /// the stream was truncated.
    #[error("{error}")]
    Decode {
        /// What went wrong.
        #[source]
        error: DecodeError,
        /// What was decoded before the failure.
        partial: Completion,
    },
}

impl<E> StreamError<E> {
    /// What was decoded before the failure.
    pub fn partial(&self) -> &Completion {
        match self {
            StreamError::Io { partial, .. } | StreamError::Decode { partial, .. } => partial,
        }
    }

    /// Takes the partial completion out of the error.
    pub fn into_partial(self) -> Completion {
        match self {
            StreamError::Io { partial, .. } | StreamError::Decode { partial, .. } => partial,
        }
    }
}
