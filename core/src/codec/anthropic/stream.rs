//! Incremental decoding of Anthropic Messages event streams.
//!
//! The framing is the shared SSE framer's ([`super::super::frame`]); each
//! event's data is a JSON object whose `type` says what it is (the `event:`
//! name repeats it and is not needed):
//! - `message_start`: the input token counts (cache reads and writes
//!   included);
//! - `content_block_start` / `content_block_delta` / `content_block_stop`
//!   by `index`: `text` blocks grow by `text_delta` (to
//!   [`StreamSink::on_text`]), `thinking` blocks by `thinking_delta` (to
//!   [`StreamSink::on_reasoning`]) and `signature_delta`, `tool_use` blocks
//!   by `input_json_delta` pieces of their arguments; `redacted_thinking`
//!   arrives whole in its start event;
//! - `message_delta`: the `stop_reason` and the output token count;
//! - `message_stop`: the end; `ping`: a keep-alive; `error`: the provider's
//!   failure ([`DecodeError::Provider`]).
//!
//! A stream that ends before `message_stop` and without a `stop_reason` is
//! [`DecodeError::Truncated`]. When the sink says [`Flow::Stop`] the decoder
//! stops at once, like the OpenAI one. A body that is one JSON document (an
//! error, or a server that ignored `stream: true`) is decoded at the end as
//! a non-streaming body.

// Numbers here come from the outside: arithmetic must not wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use serde::Deserialize;

use super::super::DecodeError;
use super::super::frame::{
    DEFAULT_MAX_EVENT_BYTES, FrameHandler, MAX_TOOL_CALLS, SseFramer, SseStatus,
};
use super::super::reasoning::Details;
use super::super::response::decode_error_body;
use super::response::{
    Block, decode_messages_response, encrypted_detail, stop_reason, text_detail,
};
use crate::message::{FinishReason, ToolCall, Usage};
use crate::model::{Completion, Flow, NullSink, StreamSink};

/// How many content blocks one message may open (tool calls plus text and
/// thinking blocks).
const MAX_BLOCKS: usize = MAX_TOOL_CALLS + 16;

/// One content block being assembled.
#[derive(Clone, Debug)]
enum Slot {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: String,
        initial: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Streaming,
    Done,
    Stopped,
}

/// What the events so far add up to.
#[derive(Clone, Debug, Default)]
struct Message {
    content: String,
    reasoning: String,
    /// Blocks by their wire `index`.
    blocks: Vec<(u32, Slot)>,
    finish_reason: Option<FinishReason>,
    /// Counts from `message_start`, updated by `message_delta`.
    usage: Option<Usage>,
    events: u64,
    stopped_by_message_stop: bool,
}

/// The incremental decoder of one streamed Anthropic message.
#[derive(Clone, Debug)]
pub struct MessagesStreamDecoder {
    frame: SseFramer,
    message: Message,
    state: State,
    failed: Option<DecodeError>,
}

impl Default for MessagesStreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl MessagesStreamDecoder {
    /// A decoder with the default size cap.
    pub fn new() -> Self {
        MessagesStreamDecoder {
            frame: SseFramer::new(DEFAULT_MAX_EVENT_BYTES),
            message: Message::default(),
            state: State::Streaming,
            failed: None,
        }
    }

    /// Feeds any slice of bytes. After `Done`/`Stopped` further bytes are
    /// ignored; after an error the same error is returned again.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<SseStatus, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.state {
            State::Streaming => {}
            State::Done => return Ok(SseStatus::Done),
            State::Stopped => return Ok(SseStatus::Stopped),
        }
        let result = self.frame.feed(bytes, &mut self.message, sink);
        match &result {
            Ok(SseStatus::NeedMore) => {}
            Ok(SseStatus::Done) => self.state = State::Done,
            Ok(SseStatus::Stopped) => self.state = State::Stopped,
            Err(e) => self.failed = Some(e.clone()),
        }
        result
    }

    /// The completion so far (interrupts, broken streams).
    pub fn partial(&self) -> Completion {
        self.message.completion()
    }

    /// The stream ended: the completion, or [`DecodeError::Truncated`] when
    /// neither `message_stop` nor a `stop_reason` arrived.
    pub fn finish(mut self) -> Result<Completion, DecodeError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if self.state != State::Streaming {
            return Ok(self.message.completion());
        }
        let finished = self.frame.finish(&mut self.message, &mut NullSink)?;
        if let Some(body) = finished.raw_body {
            return decode_messages_response(&body);
        }
        if finished.status == Some(SseStatus::Done)
            || self.message.stopped_by_message_stop
            || self.message.finish_reason.is_some()
        {
            Ok(self.message.completion())
        } else {
            Err(DecodeError::Truncated {
                events: self.message.events,
                pending_bytes: finished.pending_bytes,
            })
        }
    }
}

impl Message {
    fn completion(&self) -> Completion {
        let mut details = Details::default();
        let mut tool_calls = Vec::new();
        for (index, slot) in &self.blocks {
            let index = usize::try_from(*index).unwrap_or(usize::MAX);
            match slot {
                Slot::Text => {}
                Slot::Thinking { text, signature } => {
                    details.push(text_detail(index, text, signature))
                }
                Slot::Redacted { data } => details.push(encrypted_detail(index, data)),
                Slot::ToolUse {
                    id,
                    name,
                    input,
                    initial,
                } => {
                    // A call without arguments streams no input pieces; its
                    // start event's `input` (`{}`) is the whole of it.
                    let arguments = if input.is_empty() { initial } else { input };
                    tool_calls.push(ToolCall::new(
                        id.as_str(),
                        name.as_str(),
                        arguments.as_str(),
                    ));
                }
            }
        }
        Completion {
            content: (!self.content.is_empty()).then(|| self.content.clone()),
            tool_calls,
            reasoning: (!self.reasoning.is_empty()).then(|| self.reasoning.clone()),
            reasoning_details: details.to_json(),
            model: None,
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
        }
    }

    fn slot(&mut self, index: u32) -> Option<&mut Slot> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, slot)| slot)
    }

    fn apply(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        let event: Event<'_> = serde_json::from_slice(data).map_err(|e| DecodeError::json(&e))?;
        self.events = self.events.saturating_add(1);
        let flow = match event.kind.as_ref() {
            "error" => {
                let message = decode_error_body(data)
                    .unwrap_or_else(|| String::from_utf8_lossy(data).into_owned());
                return Err(DecodeError::Provider { message });
            }
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    self.usage = Some(usage);
                }
                sink.on_progress()
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (event.index, event.content_block) else {
                    return Ok(None);
                };
                self.start_block(index, block, sink)?
            }
            "content_block_delta" => {
                let (Some(index), Some(delta)) = (event.index, event.delta) else {
                    return Ok(None);
                };
                self.apply_delta(index, delta, sink)
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.finish_reason = Some(stop_reason(&reason));
                }
                if let Some(more) = event.usage {
                    self.merge_usage(&more);
                }
                sink.on_progress()
            }
            "message_stop" => {
                self.stopped_by_message_stop = true;
                return Ok(Some(SseStatus::Done));
            }
            // `ping`, `content_block_stop` and whatever comes next.
            _ => sink.on_progress(),
        };
        Ok(match flow {
            Flow::Continue => None,
            Flow::Stop => Some(SseStatus::Stopped),
        })
    }

    /// `message_delta` usage: the output count is cumulative; input counts,
    /// when repeated, replace the start's.
    fn merge_usage(&mut self, more: &DeltaUsage) {
        let usage = self.usage.get_or_insert_with(Usage::default);
        if let Some(output) = more.output_tokens {
            usage.completion_tokens = output;
        }
        if more.input_tokens.is_some()
            || more.cache_read_input_tokens.is_some()
            || more.cache_creation_input_tokens.is_some()
        {
            let cached = more.cache_read_input_tokens.unwrap_or(usage.cached_tokens);
            let written = more
                .cache_creation_input_tokens
                .unwrap_or(usage.cache_write_tokens);
            let plain = more.input_tokens.unwrap_or_else(|| {
                usage
                    .prompt_tokens
                    .saturating_sub(usage.cached_tokens)
                    .saturating_sub(usage.cache_write_tokens)
            });
            usage.cached_tokens = cached;
            usage.cache_write_tokens = written;
            usage.prompt_tokens = plain.saturating_add(cached).saturating_add(written);
        }
        usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
    }

    fn start_block(
        &mut self,
        index: u32,
        block: Block<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Flow, DecodeError> {
        if self.slot(index).is_some() {
            // A repeated start changes nothing already received.
            return Ok(sink.on_progress());
        }
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(DecodeError::TooManyToolCalls {
                limit: MAX_TOOL_CALLS,
            });
        }
        let own = |s: Option<Cow<'_, str>>| s.map(Cow::into_owned).unwrap_or_default();
        let (slot, flow) = match block.kind.as_ref() {
            "text" => {
                let text = block.text.unwrap_or_default();
                self.content.push_str(&text);
                let flow = if text.is_empty() {
                    sink.on_progress()
                } else {
                    sink.on_text(&text)
                };
                (Slot::Text, flow)
            }
            "thinking" => {
                let text = own(block.thinking);
                self.reasoning.push_str(&text);
                let flow = if text.is_empty() {
                    sink.on_progress()
                } else {
                    sink.on_reasoning(&text)
                };
                (
                    Slot::Thinking {
                        text,
                        signature: own(block.signature),
                    },
                    flow,
                )
            }
            "redacted_thinking" => (
                Slot::Redacted {
                    data: own(block.data),
                },
                sink.on_progress(),
            ),
            "tool_use" => (
                Slot::ToolUse {
                    id: own(block.id),
                    name: own(block.name),
                    input: String::new(),
                    initial: block
                        .input
                        .map_or_else(|| String::from("{}"), |raw| String::from(raw.get())),
                },
                sink.on_progress(),
            ),
            // Server tools' blocks and future kinds carry nothing for us.
            _ => return Ok(sink.on_progress()),
        };
        self.blocks.push((index, slot));
        Ok(flow)
    }

    fn apply_delta(&mut self, index: u32, delta: Delta<'_>, sink: &mut dyn StreamSink) -> Flow {
        let kind = delta.kind.as_deref().unwrap_or("");
        match (kind, self.slot(index)) {
            ("text_delta", Some(Slot::Text)) => {
                let text = delta.text.unwrap_or_default();
                if text.is_empty() {
                    return sink.on_progress();
                }
                self.content.push_str(&text);
                sink.on_text(&text)
            }
            ("thinking_delta", Some(Slot::Thinking { text, .. })) => {
                let piece = delta.thinking.unwrap_or_default();
                if piece.is_empty() {
                    return sink.on_progress();
                }
                text.push_str(&piece);
                self.reasoning.push_str(&piece);
                sink.on_reasoning(&piece)
            }
            ("signature_delta", Some(Slot::Thinking { signature, .. })) => {
                signature.push_str(delta.signature.as_deref().unwrap_or(""));
                sink.on_progress()
            }
            ("input_json_delta", Some(Slot::ToolUse { input, .. })) => {
                input.push_str(delta.partial_json.as_deref().unwrap_or(""));
                sink.on_progress()
            }
            _ => sink.on_progress(),
        }
    }
}

impl FrameHandler for Message {
    fn event(
        &mut self,
        _name: &str,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        if data.trim_ascii().is_empty() {
            return Ok(None);
        }
        self.apply(data, sink)
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<DeltaUsage>,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}
