//! Request encoding: a borrowed [`ChatRequest`] to chat-completions JSON.
//!
//! The body is serialized straight from the borrowed ledger through small
//! `Serialize` views; no intermediate `api_messages` vector, no clone of the
//! history (SPEC L5). Only `entry.message` is visited, so ledger metadata
//! cannot reach the wire.

use alloc::vec::Vec;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::EncodeError;
use crate::message::LedgerEntry;
use crate::model::ChatRequest;
use crate::tool::ToolSpec;

/// Per-call settings that are not part of the conversation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestOptions<'a> {
    /// The provider's model name (`gpt-4o-mini`, `anthropic/claude-…`, …).
    pub model: &'a str,
    /// Ask for a server-sent-event stream instead of one JSON body.
    pub stream: bool,
    /// Output token cap (`max_tokens`); omitted when `None`.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; omitted when `None`. Must be finite.
    pub temperature: Option<f32>,
    /// Ask for a final usage chunk (`stream_options.include_usage`). Only
    /// sent when `stream` is set: providers reject `stream_options` otherwise,
    /// and some local servers reject it outright, hence opt-in.
    pub include_usage: bool,
}

impl<'a> RequestOptions<'a> {
    /// Options for `model`: non-streaming, no limits, provider defaults.
    pub fn new(model: &'a str) -> Self {
        RequestOptions {
            model,
            stream: false,
            max_tokens: None,
            temperature: None,
            include_usage: false,
        }
    }
}

/// Appends the JSON body of one chat-completions call to `out`.
///
/// Field order: `model`, `messages` (system prompt first unless empty, then
/// each ledger entry's message), `tools` (omitted when empty), `stream`,
/// `stream_options` (streaming with usage only), `max_tokens`, `temperature`.
/// The body is appended to `out`; on error `out` is left as it was.
pub fn encode_request(
    opts: &RequestOptions<'_>,
    req: &ChatRequest<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    if let Some(t) = opts.temperature
        && !t.is_finite()
    {
        return Err(EncodeError::InvalidTemperature(t));
    }
    // serde_json's `Serializer` over a caller's writer is std-only, so the
    // body is built in one vector and moved (or appended) into `out`.
    let body = serde_json::to_vec(&Body { opts, req }).map_err(EncodeError::Json)?;
    if out.is_empty() {
        *out = body;
    } else {
        out.extend_from_slice(&body);
    }
    Ok(())
}

/// The whole request body.
struct Body<'o, 'r> {
    opts: &'o RequestOptions<'o>,
    req: &'o ChatRequest<'r>,
}

impl Serialize for Body<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", self.opts.model)?;
        map.serialize_entry(
            "messages",
            &Messages {
                system_prompt: self.req.system_prompt,
                entries: self.req.messages,
            },
        )?;
        if !self.req.tools.is_empty() {
            map.serialize_entry("tools", &Tools(self.req.tools))?;
        }
        map.serialize_entry("stream", &self.opts.stream)?;
        if self.opts.stream && self.opts.include_usage {
            map.serialize_entry("stream_options", &StreamOptions)?;
        }
        if let Some(max) = self.opts.max_tokens {
            map.serialize_entry("max_tokens", &max)?;
        }
        if let Some(t) = self.opts.temperature {
            map.serialize_entry("temperature", &t)?;
        }
        map.end()
    }
}

/// `{"include_usage":true}`.
struct StreamOptions;

impl Serialize for StreamOptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

/// The `messages` array: the system prompt, then each entry's wire message.
struct Messages<'r> {
    system_prompt: &'r str,
    entries: &'r [LedgerEntry],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let system = !self.system_prompt.is_empty();
        let len = self.entries.len() + usize::from(system);
        let mut seq = serializer.serialize_seq(Some(len))?;
        if system {
            seq.serialize_element(&SystemMessage(self.system_prompt))?;
        }
        for entry in self.entries {
            // Only the wire half of the entry: `meta` is never visited.
            seq.serialize_element(&entry.message)?;
        }
        seq.end()
    }
}

/// `{"role":"system","content":…}`; not a `Message` because the ledger has no
/// system role (SPEC L6).
struct SystemMessage<'r>(&'r str);

impl Serialize for SystemMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "system")?;
        map.serialize_entry("content", self.0)?;
        map.end()
    }
}

/// The `tools` array, borrowed.
struct Tools<'r>(&'r [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}
