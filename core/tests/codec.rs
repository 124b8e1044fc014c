//! The OpenAI wire codec: request encoding against the published schemas,
//! non-streaming bodies, and the SSE stream decoder under every byte split.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::string::String;
use std::vec::Vec;

use hermes_core::codec::{
    DecodeError, EncodeError, RequestEncoder, RequestOptions, SseDecoder, SseStatus, StreamError,
    decode_error_body, decode_response, decode_stream, encode_request,
};
use hermes_core::{
    ChatRequest, CompactionMark, Completion, EntryMeta, FinishReason, Flow, LedgerEntry, Message,
    NullSink, StreamSink, SummaryPlacement, ToolCall, ToolSpec, Usage,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");
const REQUEST_STREAMING_SCHEMA: &str = include_str!(
    "../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);
const CHUNK_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion_chunk.schema.json");
const COMPLETION_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion.schema.json");

fn assert_valid(schema: &str, instance: &Value) {
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

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// A recorded-style stream (OpenAI shape, OpenRouter keep-alives): content
/// with an escape and multi-byte UTF-8, two parallel tool calls whose
/// fragments interleave, `finish_reason: tool_calls`, a usage-only chunk.
const STREAM: &str = r#": OPENROUTER PROCESSING

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

const STREAM_TEXT: &str = "héllo 世界 🚀\nLet me look: \"two\" files…";

fn expected_stream_completion() -> Completion {
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

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

fn cr_only(s: &str) -> String {
    s.replace('\n', "\r")
}

/// The JSON payloads of every `data:` line but `[DONE]`.
fn data_payloads(stream: &str) -> Vec<Value> {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Records everything the decoder tells its sink.
#[derive(Default)]
struct Recorder {
    text: String,
    reasoning: String,
    text_calls: usize,
    progress_calls: usize,
    /// Return `Stop` once this many text pieces were seen.
    stop_after_texts: Option<usize>,
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
fn decode_split(bytes: &[u8], cuts: &[usize]) -> (Result<Completion, DecodeError>, Recorder) {
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

// ---------------------------------------------------------------------------
// Request encoding
// ---------------------------------------------------------------------------

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "read_file",
            "Read a UTF-8 file inside the working directory.",
            json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        ),
        ToolSpec::new(
            "search_files",
            "Search files for a regex.",
            json!({"type":"object","properties":{"pattern":{"type":"string"},"dir":{"type":"string"}},"required":["pattern"]}),
        ),
    ]
}

/// A ledger whose metadata holds values that must never reach the wire.
fn ledger() -> Vec<LedgerEntry> {
    let secret_meta = EntryMeta {
        reasoning: Some("SECRET-REASONING-TEXT".into()),
        usage: Some(Usage {
            prompt_tokens: 987_651,
            completion_tokens: 987_652,
            total_tokens: 987_653,
            ..Usage::default()
        }),
        timestamp_ms: 1_732_000_000_123,
        finish_reason: Some(FinishReason::Length),
        interrupted: true,
        compaction: Some(CompactionMark {
            placement: SummaryPlacement::Standalone,
            replaced: 987_654,
            kept_after: 987_655,
        }),
        ..EntryMeta::default()
    };
    let assistant_calls = Message::Assistant {
        content: None,
        tool_calls: vec![
            ToolCall::new("call_Qx1", "read_file", r#"{"path":"src/main.rs"}"#),
            ToolCall::new("call_Zy2", "search_files", r#"{"pattern":"fn main"}"#),
        ],
    };
    vec![
        LedgerEntry::at(
            Message::user("Find main, \"quoted\" \u{1F680}\n"),
            1_732_000_000_001,
        ),
        LedgerEntry {
            message: assistant_calls,
            meta: secret_meta.clone(),
        },
        LedgerEntry::new(Message::tool("call_Qx1", "fn main() {}\n")),
        LedgerEntry::new(Message::tool("call_Zy2", "src/main.rs:1: fn main() {}")),
        LedgerEntry {
            message: Message::assistant("It is in src/main.rs."),
            meta: secret_meta,
        },
        LedgerEntry::new(Message::user("thanks")),
    ]
}

fn encode(
    opts: &RequestOptions<'_>,
    system: &str,
    entries: &[LedgerEntry],
    tools: &[ToolSpec],
) -> Vec<u8> {
    let req = ChatRequest {
        system_prompt: system,
        messages: entries,
        tools,
    };
    let mut out = Vec::new();
    encode_request(opts, &req, &mut out).unwrap();
    // Every request of these tests also goes through one long-lived caching
    // encoder (the client's path), which must write the same bytes whatever
    // it encoded before.
    CACHING.with(|encoder| {
        let mut cached = Vec::new();
        encoder
            .borrow_mut()
            .encode(opts, &req, &mut cached)
            .unwrap();
        assert_eq!(
            String::from_utf8(cached).unwrap(),
            String::from_utf8(out.clone()).unwrap()
        );
    });
    out
}

std::thread_local! {
    static CACHING: std::cell::RefCell<RequestEncoder> = std::cell::RefCell::new(RequestEncoder::new());
}

#[test]
fn the_caching_encoder_writes_what_encode_request_writes_when_prompt_or_tools_change() {
    let entries = ledger();
    let mut more_tools = tools();
    more_tools.push(ToolSpec::new("todo", "A list.", json!({"type":"object"})));
    let mut changed_schema = tools();
    changed_schema[0].parameters["properties"]["path"]["type"] = json!("integer");
    let streaming = RequestOptions {
        stream: true,
        include_usage: true,
        max_tokens: Some(64),
        temperature: Some(0.5),
        ..RequestOptions::new("m")
    };
    let mut encoder = RequestEncoder::new();
    let cases: [(&str, &[LedgerEntry], &[ToolSpec]); 9] = [
        ("You are terse.", &entries, &tools()),
        ("You are terse.", &entries[..1], &tools()),
        ("You are verbose.", &entries, &tools()),
        ("You are verbose.", &entries, &more_tools),
        ("You are verbose.", &entries, &changed_schema),
        ("", &entries, &changed_schema),
        ("", &[], &[]),
        ("You are terse.", &[], &tools()),
        ("You are terse.", &entries, &tools()),
    ];
    for opts in [RequestOptions::new("m"), streaming] {
        for (system, messages, tools) in cases {
            let req = ChatRequest {
                system_prompt: system,
                messages,
                tools,
            };
            let mut plain = Vec::new();
            encode_request(&opts, &req, &mut plain).unwrap();
            let mut cached = b"prefix".to_vec();
            encoder.encode(&opts, &req, &mut cached).unwrap();
            assert_eq!(
                std::str::from_utf8(&cached[6..]).unwrap(),
                std::str::from_utf8(&plain).unwrap(),
                "system {system:?}, {} messages, {} tools",
                messages.len(),
                tools.len()
            );
        }
    }
    // A refused temperature leaves the output alone.
    let mut out = b"kept".to_vec();
    let req = ChatRequest {
        system_prompt: "s",
        messages: &entries,
        tools: &[],
    };
    let hot = RequestOptions {
        temperature: Some(f32::NAN),
        ..RequestOptions::new("m")
    };
    assert!(matches!(
        encoder.encode(&hot, &req, &mut out),
        Err(EncodeError::InvalidTemperature(_))
    ));
    assert_eq!(out, b"kept");
}

#[test]
fn request_non_streaming_matches_schema_and_shape() {
    let entries = ledger();
    let tools = tools();
    let opts = RequestOptions {
        model: "gpt-4o-mini",
        stream: false,
        max_tokens: Some(1024),
        temperature: Some(0.7),
        include_usage: true, // ignored without `stream`,
        ..RequestOptions::new("")
    };
    let bytes = encode(&opts, "You are Hermes.", &entries, &tools);
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_valid(REQUEST_SCHEMA, &body);

    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert_eq!(body["max_tokens"], 1024);
    assert!((body["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), entries.len() + 1);
    assert_eq!(
        messages[0],
        json!({"role":"system","content":"You are Hermes."})
    );
    assert_eq!(
        messages[1],
        json!({"role":"user","content":"Find main, \"quoted\" \u{1F680}\n"})
    );
    assert_eq!(
        messages[2],
        json!({"role":"assistant","content":null,"tool_calls":[
            {"id":"call_Qx1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/main.rs\"}"}},
            {"id":"call_Zy2","type":"function","function":{"name":"search_files","arguments":"{\"pattern\":\"fn main\"}"}}
        ]})
    );
    assert_eq!(
        messages[3],
        json!({"role":"tool","tool_call_id":"call_Qx1","content":"fn main() {}\n"})
    );
    assert_eq!(
        messages[5],
        json!({"role":"assistant","content":"It is in src/main.rs."})
    );
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][1]["function"]["name"], "search_files");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["required"],
        json!(["path"])
    );

    // Field order as documented: model first, messages second.
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.starts_with(r#"{"model":"gpt-4o-mini","messages":[{"role":"system","#));
}

#[test]
fn request_streaming_matches_streaming_schema() {
    let entries = ledger();
    let tools = tools();
    let opts = RequestOptions {
        model: "openai/gpt-4o-mini",
        stream: true,
        max_tokens: None,
        temperature: None,
        include_usage: true,
        ..RequestOptions::new("")
    };
    let body: Value = serde_json::from_slice(&encode(&opts, "sys", &entries, &tools)).unwrap();
    assert_valid(REQUEST_STREAMING_SCHEMA, &body);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert!(body.get("max_tokens").is_none());
    assert!(body.get("temperature").is_none());

    // Without include_usage no stream_options at all (some servers reject it).
    let opts = RequestOptions {
        include_usage: false,
        ..opts
    };
    let body: Value = serde_json::from_slice(&encode(&opts, "sys", &entries, &tools)).unwrap();
    assert_valid(REQUEST_STREAMING_SCHEMA, &body);
    assert!(body.get("stream_options").is_none());
}

#[test]
fn ledger_fields_never_reach_the_wire() {
    let entries = ledger();
    let opts = RequestOptions::new("m");
    let bytes = encode(&opts, "system prompt", &entries, &tools());
    let text = String::from_utf8(bytes).unwrap();
    for forbidden in [
        "SECRET-REASONING-TEXT",
        "98765",
        "1732000000",
        "\"usage\"",
        "reasoning",
        "timestamp",
        "interrupted",
        "finish_reason",
        "length",
        "compaction",
        "kept_after",
    ] {
        assert!(!text.contains(forbidden), "{forbidden} leaked into {text}");
    }
    // Every message holds only wire keys.
    let body: Value = serde_json::from_str(&text).unwrap();
    for m in body["messages"].as_array().unwrap() {
        for key in m.as_object().unwrap().keys() {
            assert!(
                ["role", "content", "tool_calls", "tool_call_id"].contains(&key.as_str()),
                "unexpected key {key}"
            );
        }
    }
}

#[test]
fn wire_never_carries_tool_arguments_that_are_not_a_json_object() {
    let bad = [
        r#"{"path": "src/ma"#, // cut mid-string (a truncated stream)
        "{not json",
        "",
        "   ",
        "[1, 2]",
        "\"just a string\"",
        "null",
        r#"{"a":1} trailing"#,
    ];
    let good = [
        r#"{"path":"src/main.rs"}"#,
        "  {}  ",
        r#"{"nested":{"x":[1]}}"#,
    ];
    let calls: Vec<ToolCall> = bad
        .iter()
        .chain(good.iter())
        .enumerate()
        .map(|(i, args)| ToolCall::new(format!("call_{i}"), "read_file", *args))
        .collect();
    let mut entries = vec![
        LedgerEntry::new(Message::user("go")),
        LedgerEntry::new(Message::Assistant {
            content: Some("Reading.".into()),
            tool_calls: calls.clone(),
        }),
    ];
    for c in &calls {
        entries.push(LedgerEntry::new(Message::tool(c.id.clone(), "result")));
    }
    let bytes = encode(&RequestOptions::new("m"), "sys", &entries, &tools());
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_valid(REQUEST_SCHEMA, &body);
    let sent = body["messages"][2]["tool_calls"].as_array().unwrap();
    assert_eq!(sent.len(), calls.len());
    for (i, call) in sent.iter().enumerate() {
        let args = call["function"]["arguments"].as_str().unwrap();
        if i < bad.len() {
            assert_eq!(args, "{}", "{:?} must go out as {{}}", bad[i]);
        } else {
            assert_eq!(
                args,
                good[i - bad.len()],
                "a valid object goes out verbatim"
            );
        }
        // Every argument string on the wire parses as a JSON object.
        assert!(serde_json::from_str::<Value>(args).unwrap().is_object());
        assert_eq!(call["id"], format!("call_{i}"));
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "read_file");
    }
    // The ledger itself keeps what the model produced.
    assert_eq!(
        entries[1].message.tool_calls()[0].function.arguments,
        bad[0]
    );
}

#[test]
fn wire_never_carries_an_empty_assistant_message() {
    let interrupted = LedgerEntry {
        message: Message::Assistant {
            content: Some(String::new()),
            tool_calls: Vec::new(),
        },
        meta: EntryMeta {
            interrupted: true,
            ..EntryMeta::default()
        },
    };
    let cut = LedgerEntry {
        message: Message::Assistant {
            content: None,
            tool_calls: Vec::new(),
        },
        meta: EntryMeta {
            finish_reason: Some(FinishReason::Length),
            ..EntryMeta::default()
        },
    };
    let entries = vec![
        LedgerEntry::new(Message::user("first")),
        interrupted,
        LedgerEntry::new(Message::user("second")),
        cut,
        LedgerEntry::new(Message::user("third")),
        LedgerEntry::new(Message::assistant("an answer")),
        LedgerEntry::new(Message::user("fourth")),
    ];
    for stream in [false, true] {
        let opts = RequestOptions {
            stream,
            ..RequestOptions::new("m")
        };
        let body: Value =
            serde_json::from_slice(&encode(&opts, "sys", &entries, &tools())).unwrap();
        assert_valid(
            if stream {
                REQUEST_STREAMING_SCHEMA
            } else {
                REQUEST_SCHEMA
            },
            &body,
        );
        let roles: Vec<(&str, &str)> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        assert_eq!(
            roles,
            [
                ("system", "sys"),
                ("user", "first"),
                ("user", "second"),
                ("user", "third"),
                ("assistant", "an answer"),
                ("user", "fourth"),
            ]
        );
    }
    // Nothing but the empty ones is dropped: with no system prompt and only
    // an empty assistant message after the user, the array is just the user.
    let only = vec![
        LedgerEntry::new(Message::user("hi")),
        LedgerEntry::new(Message::assistant("")),
        LedgerEntry::new(Message::user("again")),
    ];
    let bytes = encode(&RequestOptions::new("m"), "", &only, &[]);
    assert_eq!(
        std::str::from_utf8(&bytes).unwrap(),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"user","content":"again"}],"stream":false}"#
    );
}

#[test]
fn empty_system_prompt_and_no_tools_are_omitted() {
    let entries = vec![LedgerEntry::new(Message::user("hi"))];
    let bytes = encode(&RequestOptions::new("llama3"), "", &entries, &[]);
    assert_eq!(
        std::str::from_utf8(&bytes).unwrap(),
        r#"{"model":"llama3","messages":[{"role":"user","content":"hi"}],"stream":false}"#
    );
    assert_valid(REQUEST_SCHEMA, &serde_json::from_slice(&bytes).unwrap());
}

#[test]
fn request_is_appended_and_bad_temperature_is_refused() {
    let entries = vec![LedgerEntry::new(Message::user("hi"))];
    let req = ChatRequest {
        system_prompt: "s",
        messages: &entries,
        tools: &[],
    };
    let mut out = b"prefix".to_vec();
    encode_request(&RequestOptions::new("m"), &req, &mut out).unwrap();
    assert!(out.starts_with(b"prefix{\"model\":\"m\""));

    for t in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let opts = RequestOptions {
            temperature: Some(t),
            ..RequestOptions::new("m")
        };
        let mut out = b"kept".to_vec();
        let err = encode_request(&opts, &req, &mut out).unwrap_err();
        assert!(matches!(err, EncodeError::InvalidTemperature(_)), "{err}");
        assert_eq!(out, b"kept");
    }
}

// ---------------------------------------------------------------------------
// Non-streaming bodies
// ---------------------------------------------------------------------------

const RESPONSE: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Checking h\u00e9llo 世界 🚀",
        "refusal": null,
        "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
          {"id": "call_2", "type": "function", "function": {"name": "search_files", "arguments": "{\"pattern\":\"x\"}"}}
        ],
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

#[test]
fn response_fixture_is_realistic_and_decodes() {
    assert_valid(COMPLETION_SCHEMA, &serde_json::from_str(RESPONSE).unwrap());
    let c = decode_response(RESPONSE.as_bytes()).unwrap();
    assert_eq!(
        c,
        Completion {
            content: Some("Checking héllo 世界 🚀".into()),
            tool_calls: vec![
                ToolCall::new("call_1", "read_file", r#"{"path":"a.txt"}"#),
                ToolCall::new("call_2", "search_files", r#"{"pattern":"x"}"#),
            ],
            reasoning: None,
            finish_reason: Some(FinishReason::ToolCalls),
            usage: Some(Usage {
                prompt_tokens: 1117,
                completion_tokens: 46,
                total_tokens: 1163,
                ..Usage::default()
            }),
            ..Completion::default()
        }
    );
}

#[test]
fn response_variants_from_compatible_servers() {
    // DeepSeek-style reasoning, no usage, no tool calls.
    let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"think think"},"finish_reason":"stop"}]}"#;
    assert_valid(COMPLETION_SCHEMA, &serde_json::from_str(body).unwrap());
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content.as_deref(), Some("42"));
    assert_eq!(c.reasoning.as_deref(), Some("think think"));
    assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    assert_eq!(c.usage, None);

    // Arguments as an object and no id (seen from local servers).
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}"#;
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content, None);
    assert_eq!(c.tool_calls, vec![ToolCall::new("", "f", r#"{"a":1}"#)]);

    // A refusal is shown as the content.
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#;
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content.as_deref(), Some("I can't help with that."));
}

#[test]
fn response_errors_are_typed() {
    let err = decode_response(br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#)
        .unwrap_err();
    assert_eq!(
        err,
        DecodeError::Provider {
            message: "Rate limit reached".into()
        }
    );
    assert_eq!(
        decode_response(br#"{"id":"x","choices":[]}"#).unwrap_err(),
        DecodeError::NoChoices
    );
    assert_eq!(
        decode_response(br#"{"id":"x"}"#).unwrap_err(),
        DecodeError::NoChoices
    );
    for garbage in [
        &b"<html>502 Bad Gateway</html>"[..],
        b"",
        b"{\"choices\":[{\"message\":{\"content\":5}}]}",
        b"{\"choices\":{}}",
        b"{\"choices\":[{\"message\":{\"content\":\"a\"}}]",
        b"\xff\xfe",
    ] {
        let err = decode_response(garbage).unwrap_err();
        assert!(
            matches!(err, DecodeError::Json { .. }),
            "{garbage:?}: {err:?}"
        );
    }
}

#[test]
fn error_bodies_of_every_shape() {
    let cases: &[(&str, Option<&str>)] = &[
        (
            r#"{"error":{"message":"Invalid API key","type":"auth"}}"#,
            Some("Invalid API key"),
        ),
        (r#"{"error":"model not found"}"#, Some("model not found")),
        (
            r#"{"message":"Too many requests"}"#,
            Some("Too many requests"),
        ),
        (r#"{"detail":"Not Found"}"#, Some("Not Found")),
        (
            r#"[{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}]"#,
            Some("Resource exhausted"),
        ),
        (r#"{"error":{"code":500}}"#, None),
        (r#"{"error":""}"#, None),
        ("upstream connect error", None),
        ("", None),
        ("[]", None),
    ];
    for (body, want) in cases {
        assert_eq!(
            decode_error_body(body.as_bytes()).as_deref(),
            *want,
            "{body}"
        );
    }
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

#[test]
fn stream_fixture_chunks_are_realistic() {
    let payloads = data_payloads(STREAM);
    assert_eq!(payloads.len(), 11);
    for p in &payloads {
        assert_valid(CHUNK_SCHEMA, p);
    }
    for p in data_payloads(REASONING_STREAM) {
        assert_valid(CHUNK_SCHEMA, &p);
    }
}

#[test]
fn stream_decodes_in_one_piece_lf_crlf_and_cr() {
    for variant in [STREAM.to_string(), crlf(STREAM), cr_only(STREAM)] {
        let (result, sink) = decode_split(variant.as_bytes(), &[]);
        assert_eq!(result.unwrap(), expected_stream_completion());
        assert_eq!(sink.text, STREAM_TEXT);
        assert_eq!(sink.text_calls, 3);
        // 2 comments + role chunk + 5 tool fragments + finish + usage.
        assert_eq!(sink.progress_calls, 10);
    }
}

#[test]
fn stream_decodes_fed_one_byte_at_a_time() {
    for variant in [STREAM.to_string(), crlf(STREAM), cr_only(STREAM)] {
        let bytes = variant.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        let (result, sink) = decode_split(bytes, &cuts);
        assert_eq!(result.unwrap(), expected_stream_completion());
        assert_eq!(sink.text, STREAM_TEXT);
    }
}

#[test]
fn stream_without_blank_lines_or_final_newline() {
    // Servers that put `data:` lines back to back and end without a newline.
    let packed: String = STREAM
        .lines()
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let (result, _) = decode_split(packed.as_bytes(), &[]);
    assert_eq!(result.unwrap(), expected_stream_completion());
    let cuts: Vec<usize> = (1..packed.len()).step_by(7).collect();
    let (result, _) = decode_split(packed.as_bytes(), &cuts);
    assert_eq!(result.unwrap(), expected_stream_completion());
}

#[test]
fn bom_and_multiline_data_events() {
    let stream = "\u{FEFF}event: message\nid: 7\nretry: 1000\ndata: {\"choices\":[{\"index\":0,\ndata: \"delta\":{\"content\":\"a\\nb\"}}]}\n\ndata:{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    let (result, sink) = decode_split(stream.as_bytes(), &[1, 2]);
    let c = result.unwrap();
    assert_eq!(c.content.as_deref(), Some("a\nb"));
    assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    assert_eq!(sink.text, "a\nb");
}

const REASONING_STREAM: &str = r#"data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Let me think"},"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" hard."},"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"openrouter/x","choices":[{"index":0,"delta":{"content":"","reasoning":" More."},"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"42"},"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}

"#;

#[test]
fn reasoning_deltas_and_finish_without_done() {
    let (result, sink) = decode_split(REASONING_STREAM.as_bytes(), &[100, 300]);
    let c = result.unwrap();
    assert_eq!(c.reasoning.as_deref(), Some("Let me think hard. More."));
    assert_eq!(sink.reasoning, "Let me think hard. More.");
    assert_eq!(c.content.as_deref(), Some("42"));
    assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    assert_eq!(c.usage.map(|u| u.total_tokens), Some(30));
}

#[test]
fn tool_calls_without_index_or_id() {
    // Gemini-style: complete calls, no `index`; and a call with no id.
    let stream = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"g1","type":"function","function":{"name":"a","arguments":"{}"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"g2","type":"function","function":{"name":"b","arguments":"{\"x\""}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"c","arguments":"[]"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]
"#;
    let (result, _) = decode_split(stream.as_bytes(), &[]);
    let c = result.unwrap();
    assert_eq!(
        c.tool_calls,
        vec![
            ToolCall::new("g1", "a", "{}"),
            ToolCall::new("g2", "b", r#"{"x":1}"#),
            ToolCall::new("", "c", "[]"),
        ]
    );
}

/// Regression: the codec used to invent `call_{n}` for a call the provider
/// sent without id. Those names repeat in every turn (`call_0` again and
/// again), and providers that need ids unique across the conversation reject
/// such a history. The codec sees one response only, so it leaves the id
/// empty for the agent loop to name.
#[test]
fn missing_tool_call_id_is_left_empty_not_invented_per_response() {
    // Non-streaming: two calls, neither with an id (one with an empty id).
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"a","arguments":"{}"}},{"id":"","type":"function","function":{"name":"b","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(
        c.tool_calls,
        vec![ToolCall::new("", "a", "{}"), ToolCall::new("", "b", "{}")]
    );

    // Streaming, with indexes but no ids: the final completion and the
    // partial one (what an interrupted or broken stream keeps) agree.
    let stream = r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}},{"index":1,"function":{"name":"b","arguments":"[]"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]
"#;
    let expected = vec![ToolCall::new("", "a", "{}"), ToolCall::new("", "b", "[]")];
    for cut in 0..stream.len() {
        let (result, _) = decode_split(stream.as_bytes(), &[cut]);
        assert_eq!(result.unwrap().tool_calls, expected, "cut at {cut}");
    }
    let mut decoder = SseDecoder::new();
    decoder
        .feed(stream.as_bytes(), &mut Recorder::default())
        .unwrap();
    assert_eq!(decoder.partial().tool_calls, expected);
}

#[test]
fn tool_calls_are_ordered_by_index_not_arrival() {
    let stream = r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"c2","function":{"name":"two","arguments":"2"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c0","function":{"name":"zero","arguments":"0"}},{"index":2,"function":{"arguments":"2"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

"#;
    let c = decode_split(stream.as_bytes(), &[]).0.unwrap();
    assert_eq!(
        c.tool_calls,
        vec![
            ToolCall::new("c0", "zero", "0"),
            ToolCall::new("c2", "two", "22")
        ]
    );
}

#[test]
fn too_many_parallel_tool_calls_is_an_error() {
    let mut stream = String::new();
    for i in 0..=hermes_core::codec::MAX_TOOL_CALLS {
        stream.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"c{i}\",\"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n"
        ));
    }
    let (result, _) = decode_split(stream.as_bytes(), &[]);
    assert_eq!(
        result.unwrap_err(),
        DecodeError::TooManyToolCalls {
            limit: hermes_core::codec::MAX_TOOL_CALLS
        }
    );
}

#[test]
fn truncated_streams_keep_the_partial_text() {
    // Cut before the finish_reason chunk: anywhere from inside the third
    // content chunk to just before the finish chunk.
    let finish_at = STREAM.find(r#""finish_reason":"tool_calls""#).unwrap();
    let finish_line = STREAM[..finish_at].rfind("data: ").unwrap();
    let third_text = STREAM.find("Let me look").unwrap();
    for cut in (third_text..finish_line).step_by(13) {
        let bytes = &STREAM.as_bytes()[..cut];
        let mut decoder = SseDecoder::new();
        let mut sink = Recorder::default();
        assert_eq!(decoder.feed(bytes, &mut sink).unwrap(), SseStatus::NeedMore);
        let partial = decoder.partial();
        let err = decoder.finish().unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { .. }),
            "cut {cut}: {err:?}"
        );
        assert!(
            partial
                .content
                .as_deref()
                .unwrap()
                .starts_with("héllo 世界 🚀")
        );
        assert_eq!(partial.content.as_deref(), Some(sink.text.as_str()));
        assert_eq!(partial.finish_reason, None);
    }

    // EOF in the middle of an event, through decode_stream.
    let cut = third_text + 5;
    let mut reader = SliceReader::new(&STREAM.as_bytes()[..cut], 17);
    match decode_stream(&mut reader, &mut NullSink) {
        Err(StreamError::Decode {
            error:
                DecodeError::Truncated {
                    events,
                    pending_bytes,
                },
            partial,
        }) => {
            assert_eq!(events, 3);
            assert!(pending_bytes > 0);
            assert_eq!(partial.content.as_deref(), Some("héllo 世界 🚀"));
        }
        other => panic!("{other:?}"),
    }

    // Nothing at all.
    assert_eq!(
        SseDecoder::new().finish().unwrap_err(),
        DecodeError::Truncated {
            events: 0,
            pending_bytes: 0
        }
    );
}

#[test]
fn garbage_gives_typed_errors() {
    let cases: &[&str] = &[
        "data: not json\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n",
        "data: {\"choices\":{\"index\":0}}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]\n\n",
        "data: {\"usage\":{\"prompt_tokens\":\"many\"}}\n\n",
        "data: [\"a\", 1]\n\n",
        "data: \"\\ud800\"\n\n",
    ];
    for case in cases {
        let (result, _) = decode_split(case.as_bytes(), &[]);
        assert!(
            matches!(result, Err(DecodeError::Json { .. })),
            "{case}: {result:?}"
        );
    }
    let (result, _) = decode_split(b"data: \xff\xfe\n\n", &[]);
    assert!(
        matches!(result, Err(DecodeError::Json { .. })),
        "{result:?}"
    );
}

#[test]
fn provider_errors_mid_stream() {
    let head = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n";
    let cases = [
        (
            "data: {\"error\":{\"message\":\"Upstream overloaded\",\"code\":502}}\n\n",
            "Upstream overloaded",
        ),
        ("event: error\ndata: {\"message\":\"quota\"}\n\n", "quota"),
        ("event: error\ndata: plain words\n\n", "plain words"),
        ("data: {\"error\":\"boom\",\"choices\":[]}\n\n", "boom"),
    ];
    for (tail, message) in cases {
        let stream = format!("{head}{tail}");
        let mut reader = SliceReader::new(stream.as_bytes(), 5);
        match decode_stream(&mut reader, &mut NullSink) {
            Err(StreamError::Decode { error, partial }) => {
                assert_eq!(
                    error,
                    DecodeError::Provider {
                        message: message.into()
                    }
                );
                assert_eq!(partial.content.as_deref(), Some("par"));
            }
            other => panic!("{tail}: {other:?}"),
        }
    }
}

#[test]
fn huge_lines_and_events_are_capped() {
    // A line that never ends.
    let mut decoder = SseDecoder::with_max_event_bytes(1024);
    let mut sink = NullSink;
    assert_eq!(
        decoder.feed(&[b'x'; 1000], &mut sink),
        Ok(SseStatus::NeedMore)
    );
    assert_eq!(
        decoder.feed(&[b'x'; 100], &mut sink),
        Err(DecodeError::TooLarge { limit: 1024 })
    );
    // The error sticks.
    assert_eq!(
        decoder.feed(b"\n\n", &mut sink),
        Err(DecodeError::TooLarge { limit: 1024 })
    );

    // An event made of many short data lines.
    let mut decoder = SseDecoder::with_max_event_bytes(1024);
    let many = "data: [1,\n".repeat(400);
    assert_eq!(
        decoder.feed(many.as_bytes(), &mut sink),
        Err(DecodeError::TooLarge { limit: 1024 })
    );

    // The default cap, fed in 1 MiB reads without a line end.
    let mut decoder = SseDecoder::new();
    let block = vec![b'a'; 1 << 20];
    let mut result = Ok(SseStatus::NeedMore);
    for _ in 0..17 {
        result = decoder.feed(&block, &mut sink);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(
        result,
        Err(DecodeError::TooLarge {
            limit: hermes_core::codec::DEFAULT_MAX_EVENT_BYTES
        })
    );
}

#[test]
fn sink_stop_returns_the_text_seen_so_far() {
    let mut sink = Recorder {
        stop_after_texts: Some(2),
        ..Recorder::default()
    };
    let mut decoder = SseDecoder::new();
    assert_eq!(
        decoder.feed(STREAM.as_bytes(), &mut sink).unwrap(),
        SseStatus::Stopped
    );
    // Later bytes are ignored.
    assert_eq!(
        decoder.feed(b"data: x\n\n", &mut sink).unwrap(),
        SseStatus::Stopped
    );
    let partial = decoder.partial();
    assert_eq!(partial.content.as_deref(), Some("héllo 世界 🚀"));
    assert_eq!(sink.text, "héllo 世界 🚀");
    assert!(partial.tool_calls.is_empty());
    assert_eq!(decoder.finish().unwrap(), partial);

    // Through decode_stream: Ok with the partial completion.
    let mut sink = Recorder {
        stop_after_texts: Some(1),
        ..Recorder::default()
    };
    let mut reader = SliceReader::new(STREAM.as_bytes(), 64);
    let c = decode_stream(&mut reader, &mut sink).unwrap();
    assert_eq!(c.content.as_deref(), Some("héllo"));
    assert_eq!(c.finish_reason, None);
    assert!(reader.pos < STREAM.len(), "stopped reading early");

    // A stop at a keep-alive, before any text.
    struct StopAtProgress;
    impl StreamSink for StopAtProgress {
        fn on_text(&mut self, _: &str) -> Flow {
            Flow::Continue
        }
        fn on_progress(&mut self) -> Flow {
            Flow::Stop
        }
    }
    let mut decoder = SseDecoder::new();
    assert_eq!(
        decoder
            .feed(STREAM.as_bytes(), &mut StopAtProgress)
            .unwrap(),
        SseStatus::Stopped
    );
    assert_eq!(decoder.partial(), Completion::default());
}

#[test]
fn plain_json_body_where_a_stream_was_expected() {
    // A server that ignored `stream: true`: the whole completion, pretty-printed.
    let expected = decode_response(RESPONSE.as_bytes()).unwrap();
    for max in [1, 5, 4096] {
        let mut reader = SliceReader::new(RESPONSE.as_bytes(), max);
        let c = decode_stream(&mut reader, &mut NullSink).unwrap();
        assert_eq!(c, expected);
    }
    // An error object with a 200 status.
    let body = br#"{"error":{"message":"context length exceeded","code":400}}"#;
    let mut reader = SliceReader::new(body, 7);
    match decode_stream(&mut reader, &mut NullSink) {
        Err(StreamError::Decode { error, .. }) => assert_eq!(
            error,
            DecodeError::Provider {
                message: "context length exceeded".into()
            }
        ),
        other => panic!("{other:?}"),
    }
    // Cut short: a typed JSON error, not a success.
    let (result, _) = decode_split(&RESPONSE.as_bytes()[..200], &[]);
    assert!(
        matches!(result, Err(DecodeError::Json { .. })),
        "{result:?}"
    );
}

#[test]
fn done_ends_the_stream_and_later_bytes_are_ignored() {
    let mut decoder = SseDecoder::new();
    let mut sink = Recorder::default();
    let status = decoder
        .feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\n", &mut sink)
        .unwrap();
    assert_eq!(status, SseStatus::Done);
    assert_eq!(
        decoder.feed(b"garbage\n\n", &mut sink).unwrap(),
        SseStatus::Done
    );
    let c = decoder.finish().unwrap();
    assert_eq!(c.content.as_deref(), Some("x"));
    assert_eq!(c.finish_reason, None);
}

// ---------------------------------------------------------------------------
// decode_stream over embedded-io readers
// ---------------------------------------------------------------------------

/// Serves a slice in reads of pseudo-random sizes in `1..=max`, optionally
/// failing once `fail_at` bytes were served, and once with `Interrupted`.
struct SliceReader<'a> {
    data: &'a [u8],
    pos: usize,
    max: usize,
    seed: u64,
    fail_at: Option<usize>,
    interrupted_once: bool,
}

impl<'a> SliceReader<'a> {
    fn new(data: &'a [u8], max: usize) -> Self {
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
enum ReadError {
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

#[test]
fn decode_stream_with_small_random_reads() {
    for max in [1, 2, 3, 7, 64, 10_000] {
        for variant in [STREAM.to_string(), crlf(STREAM)] {
            let mut reader = SliceReader::new(variant.as_bytes(), max);
            let mut sink = Recorder::default();
            let c = decode_stream(&mut reader, &mut sink).unwrap();
            assert_eq!(c, expected_stream_completion(), "max read {max}");
            assert_eq!(sink.text, STREAM_TEXT);
            assert!(reader.interrupted_once, "the Interrupted error was retried");
        }
    }
}

#[test]
fn decode_stream_reader_error_keeps_partial() {
    let fail_at = STREAM.find("call_Zy2").unwrap();
    let mut reader = SliceReader::new(STREAM.as_bytes(), 50);
    reader.fail_at = Some(fail_at);
    match decode_stream(&mut reader, &mut NullSink) {
        Err(StreamError::Io { error, partial }) => {
            assert_eq!(error, ReadError::Reset);
            assert_eq!(partial.content.as_deref(), Some(STREAM_TEXT));
            // The first call's fragments so far are kept; the loop decides.
            assert_eq!(partial.tool_calls.len(), 1);
            assert_eq!(partial.tool_calls[0].function.name, "read_file");
            assert_eq!(partial.tool_calls[0].function.arguments, "{\"pa");
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_split_gives_the_same_completion(
        cuts in proptest::collection::vec(0..STREAM.len() * 2, 0..40),
        crlf_variant in any::<bool>(),
    ) {
        let stream = if crlf_variant { crlf(STREAM) } else { STREAM.to_string() };
        let (result, sink) = decode_split(stream.as_bytes(), &cuts);
        prop_assert_eq!(result.unwrap(), expected_stream_completion());
        prop_assert_eq!(sink.text, STREAM_TEXT);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(0usize..2048, 0..8),
    ) {
        let _ = decode_split(&bytes, &cuts);
        let _ = decode_response(&bytes);
        let _ = decode_error_body(&bytes);
    }

    #[test]
    fn sse_shaped_noise_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just(String::new()),
                Just(": ping".to_string()),
                Just("data: [DONE]".to_string()),
                Just("event: error".to_string()),
                "data: \\{\"choices\":\\[\\{\"delta\":\\{\"(content|reasoning|tool_calls)\":[a-z0-9\"\\[\\]\\{\\}:,]{0,20}".prop_map(|s| s),
                "data: [ -~]{0,40}".prop_map(|s| s),
                "[a-z]{0,6}:? ?[ -~]{0,20}".prop_map(|s| s),
            ],
            0..30,
        ),
        sep in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(0usize..600, 0..6),
    ) {
        let stream = lines.join(sep);
        let _ = decode_split(stream.as_bytes(), &cuts);
    }

    #[test]
    fn mutated_fixture_never_panics(
        flips in proptest::collection::vec((0..STREAM.len(), any::<u8>()), 1..8),
        cuts in proptest::collection::vec(0..STREAM.len(), 0..6),
    ) {
        let mut bytes = STREAM.as_bytes().to_vec();
        for (at, b) in flips {
            bytes[at] = b;
        }
        let (result, sink) = decode_split(&bytes, &cuts);
        // The sink never sees text the completion does not hold.
        if let Ok(c) = result {
            prop_assert!(c.content.unwrap_or_default().starts_with(&sink.text));
        }
    }
}
