//! The OpenAI wire codec: request encoding against the published schemas,
//! non-streaming bodies, and the SSE stream decoder under every byte split.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod props;
mod request;
mod response;
mod stream;
mod support;
