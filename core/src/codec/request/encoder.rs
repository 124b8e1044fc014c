//! [`RequestEncoder`]: the bodies of [`encode_request`], with the parts that
//! stay the same within a run (system message, `tools`) kept encoded.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;

use super::{
    EncodeError, Entries, ReasoningEcho, RequestOptions, SystemMessage, Tail, Tools, encode_request,
};
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
/// What is kept is compared by value on every call, never by address: a
/// changed prompt or toolset is encoded afresh.
#[derive(Debug, Default)]
pub struct RequestEncoder {
    /// The prompt and its encoded `{"role":"system","content":…}`.
    system: Option<(String, Vec<u8>)>,
    /// The definitions and their encoded `[…]`.
    tools: Option<(Vec<ToolSpec>, Vec<u8>)>,
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
        // The conversation: `[m1,m2,…]`, spliced without its brackets.
        let entries = json(&Entries(req.messages))?;
        let entries = entries
            .get(1..entries.len().saturating_sub(1))
            .unwrap_or_default();
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
            body.extend_from_slice(entries);
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

/// One part of a body, encoded on its own.
fn json<T: Serialize + ?Sized>(part: &T) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(part).map_err(EncodeError::Json)
}
