//! The Anthropic Messages wire codec (`POST /v1/messages`), the second wire
//! format beside OpenAI's chat completions: same [`ChatRequest`] in, same
//! [`Completion`] out, so the loop does not know which one it talks to.
//!
//! - [`encode_messages_request`]: the borrowed ledger as a Messages request
//!   (system prompt on top, tool results as `tool_result` blocks, tool calls
//!   as `tool_use` blocks, cache breakpoints, extended thinking and the echo
//!   of signed thinking blocks within a tool loop).
//! - [`decode_messages_response`]: a non-streaming `message` body.
//! - [`MessagesStreamDecoder`]: the event stream, on the shared SSE framer.
//!
//! Reasoning blocks are stored in the same form as OpenRouter's
//! `reasoning_details` (`reasoning.text` with its `signature`,
//! `reasoning.encrypted` for redacted thinking), so the ledger has one shape
//! for them whichever API produced them.
//!
//! [`ChatRequest`]: crate::ChatRequest
//! [`Completion`]: crate::Completion

mod request;
mod response;
mod stream;

pub use request::{DEFAULT_MAX_TOKENS, MessagesOptions, encode_messages_request};
pub use response::decode_messages_response;
pub use stream::MessagesStreamDecoder;
