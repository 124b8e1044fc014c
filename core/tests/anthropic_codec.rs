//! The Anthropic Messages codec: requests against the schema generated from
//! Anthropic's SDK (`tests/fixtures/anthropic-schemas`), cache breakpoints,
//! thinking and its echo, response bodies and event streams under every
//! byte split.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_core::codec::CacheControl;
use hermes_core::codec::anthropic::{
    MessagesOptions, MessagesStreamDecoder, decode_messages_response, encode_messages_request,
};
use hermes_core::codec::{DecodeError, SseStatus};
use hermes_core::{
    ChatRequest, Completion, EntryMeta, FinishReason, Flow, LedgerEntry, Message, NullSink,
    StreamSink, ToolCall, ToolSpec, Usage,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/messages_request.schema.json");
const STREAMING_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/messages_request_streaming.schema.json");
const MESSAGE_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/message.schema.json");
const EVENT_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/message_stream_event.schema.json");

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

const DETAILS: &str = r#"[{"type":"reasoning.text","text":"Read the file first.","signature":"c2lnLTE=","format":"anthropic-claude-v1","index":0},{"type":"reasoning.encrypted","data":"ZW5j","format":"anthropic-claude-v1","index":1},{"type":"reasoning.text","text":"unsigned","index":2}]"#;

fn ledger() -> Vec<LedgerEntry> {
    let mut with_details = LedgerEntry::new(Message::Assistant {
        content: Some("Reading both.".into()),
        tool_calls: vec![
            ToolCall::new("toolu_01", "read_file", r#"{"path":"a.rs"}"#),
            ToolCall::new("call:2.x", "read_file", "{\"path\": \"b.rs\""),
        ],
    });
    with_details.meta = EntryMeta {
        reasoning: Some("Read the file first.".into()),
        reasoning_details: Some(DETAILS.into()),
        ..EntryMeta::default()
    };
    vec![
        LedgerEntry::new(Message::user("hi")),
        LedgerEntry::new(Message::assistant("Hello!")),
        LedgerEntry::new(Message::user("read a.rs and b.rs")),
        with_details,
        LedgerEntry::new(Message::tool("toolu_01", "fn a() {}")),
        LedgerEntry::new(Message::tool(
            "call:2.x",
            "Error: arguments were not valid JSON",
        )),
        // An interrupted turn that produced nothing: not sent.
        LedgerEntry::new(Message::Assistant {
            content: Some(String::new()),
            tool_calls: Vec::new(),
        }),
        LedgerEntry::new(Message::user("thanks")),
    ]
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "read_file",
        "Reads a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    )]
}

fn encode(opts: &MessagesOptions<'_>, system: &str, entries: &[LedgerEntry]) -> Value {
    encode_choosing(opts, system, entries, hermes_core::ToolChoice::Auto)
}

fn encode_choosing(
    opts: &MessagesOptions<'_>,
    system: &str,
    entries: &[LedgerEntry],
    tool_choice: hermes_core::ToolChoice,
) -> Value {
    let tools = tools();
    let req = ChatRequest {
        system_prompt: system,
        messages: entries,
        tools: &tools,
        tool_choice,
    };
    let mut out = Vec::new();
    encode_messages_request(opts, &req, &mut out).unwrap();
    let body: Value = serde_json::from_slice(&out).unwrap();
    let schema = if opts.stream {
        STREAMING_SCHEMA
    } else {
        REQUEST_SCHEMA
    };
    assert_valid(schema, &body);
    body
}

#[test]
fn the_ledger_as_a_messages_request() {
    let opts = MessagesOptions {
        max_tokens: Some(1000),
        temperature: Some(0.5),
        ..MessagesOptions::new("claude-sonnet-4-5")
    };
    let body = encode(&opts, "You are Hermes.", &ledger());
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 1000);
    assert_eq!(body["system"], "You are Hermes.");
    assert_eq!(body["stream"], false);
    assert!((body["temperature"].as_f64().unwrap() - 0.5).abs() < 1e-6);
    assert_eq!(
        body["tools"],
        json!([{"name": "read_file", "description": "Reads a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
            {"role": "user", "content": "read a.rs and b.rs"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "a.rs"}},
                // Broken arguments go out as {}; the id is made legal.
                {"type": "tool_use", "id": "call_2_x", "name": "read_file", "input": {}}
            ]},
            // Both results in one user message, right after the calls.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "fn a() {}"},
                {"type": "tool_result", "tool_use_id": "call_2_x", "content": "Error: arguments were not valid JSON"}
            ]},
            {"role": "user", "content": "thanks"}
        ])
    );
    // Without thinking, no reasoning goes back.
    assert!(!body.to_string().contains("thinking"));
    assert!(!body.to_string().contains("c2lnLTE"));
}

#[test]
fn a_final_call_keeps_the_tools_and_forbids_calling_them() {
    // The ledger holds tool_use blocks, so `tools` must stay; the schema
    // checks the `tool_choice` shape.
    let opts = MessagesOptions::new("claude-sonnet-4-5");
    let body = encode_choosing(&opts, "sys", &ledger(), hermes_core::ToolChoice::None);
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    assert_eq!(body["tools"][0]["name"], "read_file");
    let body = encode(&opts, "sys", &ledger());
    assert!(body.get("tool_choice").is_none());
}

#[test]
fn breakpoints_sit_on_the_system_prompt_and_the_last_block_of_the_last_three_messages() {
    let opts = MessagesOptions {
        cache: Some(CacheControl::default()),
        stream: true,
        ..MessagesOptions::new("claude-sonnet-4-5")
    };
    let body = encode(&opts, "You are Hermes.", &ledger());
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are Hermes.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body.to_string().matches("cache_control").count(), 4);
    let m = body["messages"].as_array().unwrap();
    // The last three wire messages: the calls, the results, "thanks".
    assert_eq!(
        m[5]["content"],
        json!([{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        m[4]["content"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(m[4]["content"][0].get("cache_control").is_none());
    assert_eq!(
        m[3]["content"][2]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(m[3]["content"][0].get("cache_control").is_none());
    assert!(m[2].to_string().matches("cache_control").count() == 0);

    // No system prompt: four messages, one hour.
    let opts = MessagesOptions {
        cache: Some(CacheControl { one_hour: true }),
        ..opts
    };
    let body = encode(&opts, "", &ledger());
    assert!(body.get("system").is_none());
    assert_eq!(body.to_string().matches("cache_control").count(), 4);
    assert_eq!(
        body["messages"][2]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
}

#[test]
fn thinking_sends_the_budget_and_echoes_signed_blocks_in_the_tool_turn() {
    let opts = MessagesOptions {
        max_tokens: Some(2000),
        temperature: Some(0.2),
        thinking_budget: Some(8000),
        ..MessagesOptions::new("claude-sonnet-4-5")
    };
    let body = encode(&opts, "sys", &ledger());
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 8000})
    );
    assert!(
        body["max_tokens"].as_u64().unwrap() > 8000,
        "room above the budget"
    );
    assert!(
        body.get("temperature").is_none(),
        "the API refuses it with thinking"
    );
    let blocks = body["messages"][3]["content"].as_array().unwrap();
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": "Read the file first.", "signature": "c2lnLTE="})
    );
    assert_eq!(
        blocks[1],
        json!({"type": "redacted_thinking", "data": "ZW5j"})
    );
    // The unsigned block cannot be verified: left out.
    assert_eq!(blocks[2]["type"], "text");
    assert_eq!(blocks.len(), 5);
}

const BODY: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",
"content":[{"type":"thinking","thinking":"Look at the file.","signature":"c2ln"},
{"type":"text","text":"Reading it."},
{"type":"tool_use","id":"toolu_01","name":"read_file","input":{"path":"a.rs"}}],
"stop_reason":"tool_use","stop_sequence":null,
"usage":{"input_tokens":12,"output_tokens":30,"cache_read_input_tokens":2000,"cache_creation_input_tokens":100}}"#;

/// The `tools` array is written by hand: escapes in a name and
/// description, the schema text byte for byte.
#[test]
fn tool_definitions_are_escaped_and_their_schema_text_goes_out_as_it_is() {
    const SCHEMA: &str = hermes_core::schema_text!(
        r#"{ "type": "object", "properties": { "q": {"type": "string", "description": "a \"quoted\" \\ word"} } }"#
    );
    let description = "Says \"hi\"\\ then\na tab\t, a bell \u{7} and é.";
    let tools = [ToolSpec {
        name: "look_up".into(),
        description: description.into(),
        parameters: hermes_core::SchemaText::from_static(SCHEMA),
    }];
    let entries = [LedgerEntry::new(Message::user("hi"))];
    let req = ChatRequest {
        system_prompt: "",
        messages: &entries,
        tools: &tools,
        tool_choice: hermes_core::ToolChoice::None,
    };
    let mut out = Vec::new();
    encode_messages_request(&MessagesOptions::new("claude-sonnet-4-5"), &req, &mut out).unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(
        text.contains(&format!(",\"input_schema\":{SCHEMA}}}]")),
        "{text}"
    );
    let body: Value = serde_json::from_slice(&out).unwrap();
    assert_valid(REQUEST_SCHEMA, &body);
    assert_eq!(body["tools"][0]["description"], description);
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    assert_eq!(
        body["tools"][0]["input_schema"]["properties"]["q"]["description"],
        "a \"quoted\" \\ word"
    );
}

fn expected() -> Completion {
    Completion {
        content: Some("Reading it.".into()),
        tool_calls: vec![ToolCall::new("toolu_01", "read_file", r#"{"path":"a.rs"}"#)],
        reasoning: Some("Look at the file.".into()),
        finish_reason: Some(FinishReason::ToolCalls),
        usage: Some(Usage {
            prompt_tokens: 2112,
            completion_tokens: 30,
            total_tokens: 2142,
            cached_tokens: 2000,
            cache_write_tokens: 100,
        }),
        ..Completion::default()
    }
}

fn without_details(mut c: Completion) -> (Completion, Value) {
    let details = serde_json::from_str(c.reasoning_details.take().as_deref().unwrap()).unwrap();
    (c, details)
}

#[test]
fn a_message_body() {
    let body: Value = serde_json::from_str(BODY).unwrap();
    assert_valid(MESSAGE_SCHEMA, &body);
    let (c, details) = without_details(decode_messages_response(BODY.as_bytes()).unwrap());
    assert_eq!(c, expected());
    assert_eq!(
        details,
        json!([{"type": "reasoning.text", "text": "Look at the file.", "signature": "c2ln",
                "format": "anthropic-claude-v1", "index": 0}])
    );
    let err = decode_messages_response(
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err,
        DecodeError::Provider {
            message: "Overloaded".into()
        }
    );
}

fn event(v: Value) -> String {
    // `ping` and `error` are not in the SDK's event union (it handles them
    // before decoding); every other event must match it.
    if !matches!(v["type"].as_str(), Some("ping" | "error")) {
        assert_valid(EVENT_SCHEMA, &v);
    }
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

/// The stream of `BODY`, as the API sends it (built and checked once).
fn stream() -> String {
    static STREAM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STREAM.get_or_init(build_stream).clone()
}

fn build_stream() -> String {
    [
        event(json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 100}}})),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
        event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Look at "}})),
        event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "the file."}})),
        event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "ping"})),
        event(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Reading "}})),
        event(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "it."}})),
        event(json!({"type": "content_block_stop", "index": 1})),
        event(json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {}}})),
        event(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}})),
        event(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "th\":\"a.rs\"}"}})),
        event(json!({"type": "content_block_stop", "index": 2})),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}})),
        event(json!({"type": "message_stop"})),
    ]
    .concat()
}

#[derive(Default)]
struct Recorder {
    text: String,
    reasoning: String,
}

impl StreamSink for Recorder {
    fn on_text(&mut self, text: &str) -> Flow {
        self.text.push_str(text);
        Flow::Continue
    }
    fn on_reasoning(&mut self, text: &str) -> Flow {
        self.reasoning.push_str(text);
        Flow::Continue
    }
}

fn decode_in_pieces(
    bytes: &[u8],
    cuts: &[usize],
    sink: &mut dyn StreamSink,
) -> Result<Completion, DecodeError> {
    let mut decoder = MessagesStreamDecoder::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(at, bytes.len());
        match decoder.feed(&bytes[at..cut], sink)? {
            SseStatus::NeedMore => {}
            SseStatus::Done | SseStatus::Stopped => break,
        }
        at = cut;
    }
    decoder.finish()
}

#[test]
fn an_event_stream() {
    let mut sink = Recorder::default();
    let (c, details) =
        without_details(decode_in_pieces(stream().as_bytes(), &[], &mut sink).unwrap());
    assert_eq!(c, expected());
    assert_eq!(details[0]["signature"], "c2ln");
    assert_eq!(sink.text, "Reading it.");
    assert_eq!(sink.reasoning, "Look at the file.");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_split_gives_the_same_completion(mut cuts in proptest::collection::vec(0usize..4000, 0..12)) {
        cuts.sort_unstable();
        let bytes = stream();
        let one = decode_in_pieces(bytes.as_bytes(), &[], &mut NullSink).unwrap();
        let split = decode_in_pieces(bytes.as_bytes(), &cuts, &mut NullSink).unwrap();
        prop_assert_eq!(one, split);
    }
}

#[test]
fn a_cut_stream_is_truncated_and_keeps_what_came() {
    let bytes = stream();
    let cut = bytes
        .find(r#"{"index":1,"type":"content_block_stop"}"#)
        .unwrap();
    let mut decoder = MessagesStreamDecoder::new();
    decoder
        .feed(&bytes.as_bytes()[..cut], &mut NullSink)
        .unwrap();
    assert_eq!(decoder.partial().content.as_deref(), Some("Reading it."));
    assert!(matches!(
        decoder.finish(),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn an_error_event_is_the_providers_message() {
    let bytes = [
        event(json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
            "model": "claude", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 0}}})),
        event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ]
    .concat();
    let mut decoder = MessagesStreamDecoder::new();
    let err = decoder.feed(bytes.as_bytes(), &mut NullSink).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Provider {
            message: "Overloaded".into()
        }
    );
}

#[test]
fn a_stopping_sink_stops_at_once() {
    struct StopAtText;
    impl StreamSink for StopAtText {
        fn on_text(&mut self, _: &str) -> Flow {
            Flow::Stop
        }
    }
    let mut decoder = MessagesStreamDecoder::new();
    assert_eq!(
        decoder.feed(stream().as_bytes(), &mut StopAtText).unwrap(),
        SseStatus::Stopped
    );
    let c = decoder.finish().unwrap();
    assert_eq!(c.content.as_deref(), Some("Reading "));
    assert!(c.tool_calls.is_empty());
}

#[test]
fn a_plain_body_where_a_stream_was_expected() {
    let (c, _) = without_details(decode_in_pieces(BODY.as_bytes(), &[7], &mut NullSink).unwrap());
    assert_eq!(c, expected());
}
