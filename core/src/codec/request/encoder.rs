//! [`RequestEncoder`]: the bodies of [`encode_request`], with the parts that
//! stay the same within a run (system message, `tools`, the conversation so
//! far) kept encoded.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;

use super::{
    EncodeError, ReasoningEcho, RequestOptions, SystemMessage, Tail, WireMessage, encode_request,
    on_wire, write_tools,
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
        // Everything that can fail first, into what is kept; then the body
        // is written straight into `out`, one copy of each part.
        let model = json(opts.model)?;
        let tail = json(&Tail(opts))?;
        if !req.system_prompt.is_empty() {
            self.keep_system(req.system_prompt)?;
        }
        if !req.tools.is_empty() {
            self.keep_tools(req.tools)?;
        }
        self.keep_conversation(req)?;
        let system = self
            .system
            .as_ref()
            .filter(|_| !req.system_prompt.is_empty())
            .map(|(_, encoded)| encoded.as_slice());
        let tools = self
            .tools
            .as_ref()
            .filter(|_| !req.tools.is_empty())
            .map(|(_, encoded)| encoded.as_slice());
        let parts = system
            .into_iter()
            .chain(self.messages.iter().map(|(_, e)| e.as_slice()));

        out.reserve(
            model.len()
                + tail.len()
                + system.map_or(0, <[u8]>::len)
                + tools.map_or(0, <[u8]>::len)
                + self
                    .messages
                    .iter()
                    .map(|(_, e)| e.len() + 1)
                    .sum::<usize>()
                + 64,
        );
        out.extend_from_slice(b"{\"model\":");
        out.extend_from_slice(&model);
        out.extend_from_slice(b",\"messages\":[");
        for (i, part) in parts.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(part);
        }
        out.push(b']');
        if let Some(tools) = tools {
            out.extend_from_slice(b",\"tools\":");
            out.extend_from_slice(tools);
            if req.tool_choice == ToolChoice::None {
                out.extend_from_slice(b",\"tool_choice\":\"none\"");
            }
        }
        // `{"stream":…,…}`: always one field, so never `{}`.
        out.push(b',');
        out.extend_from_slice(tail.get(1..).unwrap_or_default());
        Ok(())
    }
}

impl RequestEncoder {
    /// Keeps `prompt`'s encoded system message (already kept when equal).
    fn keep_system(&mut self, prompt: &str) -> Result<(), EncodeError> {
        if self.system.as_ref().is_some_and(|(kept, _)| kept == prompt) {
            return Ok(());
        }
        self.system = None;
        let encoded = json(&SystemMessage {
            content: prompt,
            cache: None,
        })?;
        self.system = Some((prompt.into(), encoded));
        Ok(())
    }

    /// Keeps `specs`' encoded `tools` array (already kept when equal).
    fn keep_tools(&mut self, specs: &[ToolSpec]) -> Result<(), EncodeError> {
        if self
            .tools
            .as_ref()
            .is_some_and(|(kept, _)| kept.as_slice() == specs)
        {
            return Ok(());
        }
        self.tools = None;
        let mut encoded = Vec::new();
        write_tools(specs, &mut encoded)?;
        self.tools = Some((specs.to_vec(), encoded));
        Ok(())
    }

    /// Keeps the encoded messages of `req` that go on the wire (and only
    /// them), reusing each kept message equal to the one at its place. On error
    /// nothing kept is left half-updated: the messages from the failing one
    /// on are forgotten.
    fn keep_conversation(&mut self, req: &ChatRequest<'_>) -> Result<(), EncodeError> {
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
            at += 1;
        }
        self.messages.truncate(at);
        Ok(())
    }
}

/// One part of a body, encoded on its own.
fn json<T: Serialize + ?Sized>(part: &T) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(part).map_err(EncodeError::Json)
}
