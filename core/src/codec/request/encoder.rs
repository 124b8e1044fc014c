//! [`RequestEncoder`]: the bodies of [`encode_request`], with the parts that
//! stay the same within a run (system message, `tools`, the conversation so
//! far) kept encoded.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;

use super::{
    EncodeError, ReasoningEcho, RequestOptions, SystemMessage, Tail, Tools, WireMessage,
    encode_request, on_wire,
};
use crate::attachment::TextReferences;
use crate::message::Message;
use crate::model::{ChatRequest, ToolChoice};
use crate::tool::ToolSpec;

/// Encodes requests exactly as [`encode_request`] does, byte for byte, but
/// keeps the encoded system message and `tools` array of the last request
/// it saw. Within a run both are the same on every call and are most of the
/// body (a default CLI request: 3.1 KB of system prompt and 6.7 KB of tool
/// schemas before the conversation's first kilobyte), so a later call
/// encodes only the conversation and compares the rest: a string comparison
/// and a walk of the schemas, with no escaping or number formatting.
///
/// The conversation is kept too, message by message: a run's requests
/// repeat the whole history and add a message or two, so re-encoding all of
/// it made the encoding grow with every tool turn (≈ 90 k instructions a
/// turn over a 20-turn run, the largest part of the loop's own cost:
/// BENCHMARKS.md "Per iteration"). A message equal to the one kept at its
/// place is copied as bytes; from the first that differs (a compacted or
/// rewound history, another session on a shared client) on, messages are
/// encoded afresh and kept instead.
///
/// What is kept is compared by value on every call, never by address: a
/// changed prompt, toolset or message is encoded afresh.
#[derive(Debug, Default)]
pub struct RequestEncoder {
    /// The prompt and its encoded `{"role":"system","content":…}`.
    system: Option<(String, Vec<u8>)>,
    /// The definitions and their encoded `[…]`.
    tools: Option<(Vec<ToolSpec>, Vec<u8>)>,
    /// The messages on the wire of the last request, in order, each with
    /// its encoded object.
    messages: Vec<(Message, Vec<u8>)>,
}

impl RequestEncoder {
    /// An encoder that remembers nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the JSON body of `req` to `out`, as [`encode_request`] would;
    /// on error `out` is left as it was.
    pub fn encode(
        &mut self,
        opts: &RequestOptions<'_>,
        req: &ChatRequest<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        // Decorations (cache breakpoints, reasoning echo) change the system
        // message and the messages around them: nothing kept applies.
        // So do attachments (what they become is the resolver's choice).
        if opts.cache.is_some()
            || opts.reasoning_echo != ReasoningEcho::Off
            || req
                .messages
                .iter()
                .any(|e| !e.message.attachments().is_empty())
        {
            return encode_request(opts, req, out);
        }
        if let Some(t) = opts.temperature
            && !t.is_finite()
        {
            return Err(EncodeError::InvalidTemperature(t));
        }
        // The conversation: `m1,m2,…`, spliced into the array.
        let entries = self.conversation(req)?;
        let model = json(opts.model)?;
        let tail = json(&Tail(opts))?;

        let mut body = Vec::with_capacity(entries.len() + 12 * 1024);
        body.extend_from_slice(b"{\"model\":");
        body.extend_from_slice(&model);
        body.extend_from_slice(b",\"messages\":[");
        let mut first = true;
        if !req.system_prompt.is_empty() {
            let system = match &self.system {
                Some((prompt, encoded)) if prompt == req.system_prompt => encoded,
                _ => {
                    self.system = None;
                    let encoded = json(&SystemMessage {
                        content: req.system_prompt,
                        cache: None,
                    })?;
                    &self.system.insert((req.system_prompt.into(), encoded)).1
                }
            };
            body.extend_from_slice(system);
            first = false;
        }
        if !entries.is_empty() {
            if !first {
                body.push(b',');
            }
            body.extend_from_slice(&entries);
        }
        body.push(b']');
        if !req.tools.is_empty() {
            let tools = match &self.tools {
                Some((specs, encoded)) if specs.as_slice() == req.tools => encoded,
                _ => {
                    self.tools = None;
                    let encoded = json(&Tools(req.tools))?;
                    &self.tools.insert((req.tools.to_vec(), encoded)).1
                }
            };
            body.extend_from_slice(b",\"tools\":");
            body.extend_from_slice(tools);
            if req.tool_choice == ToolChoice::None {
                body.extend_from_slice(b",\"tool_choice\":\"none\"");
            }
        }
        // `{"stream":…,…}`: always one field, so never `{}`.
        body.push(b',');
        body.extend_from_slice(tail.get(1..).unwrap_or_default());
        out.extend_from_slice(&body);
        Ok(())
    }
}

impl RequestEncoder {
    /// The messages of `req` that go on the wire, encoded and joined by
    /// commas, reusing what is kept for each message equal to the one kept
    /// at its place. On error nothing kept is left half-updated: the
    /// messages from the failing one on are forgotten.
    fn conversation(&mut self, req: &ChatRequest<'_>) -> Result<Vec<u8>, EncodeError> {
        let mut joined = Vec::new();
        let mut at = 0;
        for entry in req.messages.iter().filter(|e| on_wire(&e.message)) {
            let kept = self
                .messages
                .get(at)
                .is_some_and(|(message, _)| *message == entry.message);
            if !kept {
                self.messages.truncate(at);
                let encoded = json(&WireMessage {
                    message: &entry.message,
                    attachments: &TextReferences,
                })?;
                self.messages.push((entry.message.clone(), encoded));
            }
            if at > 0 {
                joined.push(b',');
            }
            if let Some((_, encoded)) = self.messages.get(at) {
                joined.extend_from_slice(encoded);
            }
            at += 1;
        }
        self.messages.truncate(at);
        Ok(joined)
    }
}

/// One part of a body, encoded on its own.
fn json<T: Serialize + ?Sized>(part: &T) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(part).map_err(EncodeError::Json)
}
