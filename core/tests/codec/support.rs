//! Fixtures the codec tests share: the published OpenAI schemas, a
//! recorded-style stream and what it decodes to, line-ending variants, and
//! a sink that records what the decoder tells it, and an `embedded_io`
//! reader that serves small random reads, is interrupted, and may fail.

use std::string::String;
use std::vec::Vec;

use hermes_core::codec::{DecodeError, SseDecoder};
use hermes_core::{Completion, FinishReason, Flow, StreamSink, ToolCall, Usage};
use serde_json::Value;

pub(crate) const REQUEST_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");

pub(crate) const REQUEST_STREAMING_SCHEMA: &str = include_str!(
    "../../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);

pub(crate) const CHUNK_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion_chunk.schema.json");

pub(crate) const COMPLETION_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion.schema.json");

pub(crate) fn assert_valid(schema: &str, instance: &Value) {
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations: {errors:#?}\nin {instance:#}"
    );
}

/// A recorded-style stream (OpenAI shape, OpenRouter keep-alives): content
/// with an escape and multi-byte UTF-8, two parallel tool calls whose
/// fragments interleave, `finish_reason: tool_calls`, a usage-only chunk.
pub(crate) const STREAM: &str = r#": OPENROUTER PROCESSING

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":"héllo"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" 世界 🚀"},"logprobs":null,"finish_reason":null}],"usage":null}

: keep-alive

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":"\nLet me look: \"two\" files\u2026"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_Qx1","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Zy2","type":"function","function":{"name":"search_files","arguments":"{\"pattern\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"src/main.rs\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":" \"fn main\", \"dir\": \"é/🚀\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":1204,"completion_tokens":57,"total_tokens":1261,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"#;

pub(crate) const STREAM_TEXT: &str = "héllo 世界 🚀\nLet me look: \"two\" files…";

pub(crate) fn expected_stream_completion() -> Completion {
    Completion {
        content: Some(STREAM_TEXT.into()),
        tool_calls: vec![
            ToolCall::new("call_Qx1", "read_file", r#"{"path": "src/main.rs"}"#),
            ToolCall::new(
                "call_Zy2",
                "search_files",
                r#"{"pattern": "fn main", "dir": "é/🚀"}"#,
            ),
        ],
        reasoning: None,
        finish_reason: Some(FinishReason::ToolCalls),
        usage: Some(Usage {
            prompt_tokens: 1204,
            completion_tokens: 57,
            total_tokens: 1261,
            // `prompt_tokens_details.cached_tokens` (SPEC X3).
            cached_tokens: 1024,
            cache_write_tokens: 0,
        }),
        ..Completion::default()
    }
}

pub(crate) fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

pub(crate) fn cr_only(s: &str) -> String {
    s.replace('\n', "\r")
}

/// The JSON payloads of every `data:` line but `[DONE]`.
pub(crate) fn data_payloads(stream: &str) -> Vec<Value> {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Records everything the decoder tells its sink.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) text: String,
    pub(crate) reasoning: String,
    pub(crate) text_calls: usize,
    pub(crate) progress_calls: usize,
    /// Return `Stop` once this many text pieces were seen.
    pub(crate) stop_after_texts: Option<usize>,
}

impl StreamSink for Recorder {
    fn on_text(&mut self, text: &str) -> Flow {
        self.text.push_str(text);
        self.text_calls += 1;
        match self.stop_after_texts {
            Some(n) if self.text_calls >= n => Flow::Stop,
            _ => Flow::Continue,
        }
    }
    fn on_reasoning(&mut self, text: &str) -> Flow {
        self.reasoning.push_str(text);
        Flow::Continue
    }
    fn on_progress(&mut self) -> Flow {
        self.progress_calls += 1;
        Flow::Continue
    }
}

/// Feeds `bytes` cut at `cuts` (sorted or not, duplicates allowed) and finishes.
pub(crate) fn decode_split(
    bytes: &[u8],
    cuts: &[usize],
) -> (Result<Completion, DecodeError>, Recorder) {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    cuts.sort_unstable();
    let mut sink = Recorder::default();
    let mut decoder = SseDecoder::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        match decoder.feed(&bytes[start..cut], &mut sink) {
            Ok(_) => {}
            Err(e) => return (Err(e), sink),
        }
        start = cut;
    }
    (decoder.finish(), sink)
}

/// Serves a slice in reads of pseudo-random sizes in `1..=max`, optionally
/// failing once `fail_at` bytes were served, and once with `Interrupted`.
pub(crate) struct SliceReader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) max: usize,
    pub(crate) seed: u64,
    pub(crate) fail_at: Option<usize>,
    pub(crate) interrupted_once: bool,
}

impl<'a> SliceReader<'a> {
    pub(crate) fn new(data: &'a [u8], max: usize) -> Self {
        SliceReader {
            data,
            pos: 0,
            max: max.max(1),
            seed: 0x9E37_79B9_7F4A_7C15,
            fail_at: None,
            interrupted_once: false,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    Reset,
    Interrupted,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for ReadError {}

impl embedded_io::Error for ReadError {
    fn kind(&self) -> embedded_io::ErrorKind {
        match self {
            ReadError::Reset => embedded_io::ErrorKind::ConnectionReset,
            ReadError::Interrupted => embedded_io::ErrorKind::Interrupted,
        }
    }
}

impl embedded_io::ErrorType for SliceReader<'_> {
    type Error = ReadError;
}

impl embedded_io::Read for SliceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ReadError> {
        if !self.interrupted_once && self.pos > 0 {
            self.interrupted_once = true;
            return Err(ReadError::Interrupted);
        }
        if let Some(at) = self.fail_at
            && self.pos >= at
        {
            return Err(ReadError::Reset);
        }
        // xorshift: deterministic "random" read sizes.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let mut n = 1 + (self.seed % self.max as u64) as usize;
        n = n.min(buf.len()).min(self.data.len() - self.pos);
        if let Some(at) = self.fail_at {
            n = n.min(at - self.pos);
        }
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
