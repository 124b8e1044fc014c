//! The encoder's decorations (prompt-cache breakpoints, reasoning settings,
//! the reasoning echo) and the usage shapes the decoders read (SPEC X3).
//! Every request built here validates against the OpenAI request schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_core::codec::{
    CacheControl, Reasoning, ReasoningEcho, RequestOptions, SseDecoder, SseStatus, decode_response,
    encode_request,
};
use hermes_core::{
    ChatRequest, EntryMeta, LedgerEntry, Message, NullSink, ToolCall, ToolSpec, Usage,
};
use serde_json::{Value, json};

const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");

fn assert_valid(instance: &Value) {
    let schema: Value = serde_json::from_str(REQUEST_SCHEMA).unwrap();
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

fn with_reasoning(message: Message, reasoning: &str) -> LedgerEntry {
    LedgerEntry {
        message,
        meta: EntryMeta {
            reasoning: Some(reasoning.into()),
            ..EntryMeta::default()
        },
    }
}

/// Two turns: the first answered in plain text, the second through a tool.
fn ledger() -> Vec<LedgerEntry> {
    vec![
        LedgerEntry::new(Message::user("What is 2+2?")),
        with_reasoning(Message::assistant("4."), "Trivial arithmetic."),
        LedgerEntry::new(Message::user("Read main.rs")),
        with_reasoning(
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall::new(
                    "call_1",
                    "read_file",
                    r#"{"path":"main.rs"}"#,
                )],
            },
            "I should read the file first.",
        ),
        LedgerEntry::new(Message::tool("call_1", "fn main() {}")),
        // Stored without reasoning (say, written by another model).
        LedgerEntry::new(Message::Assistant {
            content: Some("Let me also check the tests.".into()),
            tool_calls: vec![ToolCall::new("call_2", "read_file", r#"{"path":"t.rs"}"#)],
        }),
        LedgerEntry::new(Message::tool("call_2", "#[test] fn t() {}")),
    ]
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "read_file",
        "Reads a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )]
}

fn encode(opts: &RequestOptions<'_>, system: &str, entries: &[LedgerEntry]) -> Value {
    let tools = tools();
    let req = ChatRequest {
        system_prompt: system,
        messages: entries,
        tools: &tools,
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let mut out = Vec::new();
    encode_request(opts, &req, &mut out).unwrap();
    let body: Value = serde_json::from_slice(&out).unwrap();
    assert_valid(&body);
    body
}

/// Indices (in the wire `messages` array) of messages carrying a marker.
fn marked(body: &Value) -> Vec<usize> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.to_string().contains("cache_control"))
        .map(|(i, _)| i)
        .collect()
}

fn marker_count(body: &Value) -> usize {
    body.to_string().matches("cache_control").count()
}

#[test]
fn claude_breakpoints_go_on_the_system_prompt_and_the_last_three_messages_with_text() {
    let opts = RequestOptions {
        cache: Some(CacheControl::default()),
        ..RequestOptions::new("anthropic/claude-sonnet-4")
    };
    let body = encode(&opts, "You are Hermes.", &ledger());
    // Wire indices: 0 system, 1..=7 the ledger. The assistant message at 4
    // only calls tools (no text), so the last three that can carry a marker
    // are 7 (tool), 6 (assistant with text) and 5 (tool).
    assert_eq!(marked(&body), vec![0, 5, 6, 7]);
    assert_eq!(marker_count(&body), 4, "Anthropic allows at most four");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": [
            {"type": "text", "text": "You are Hermes.", "cache_control": {"type": "ephemeral"}}
        ]})
    );
    assert_eq!(
        messages[5],
        json!({"role": "tool", "tool_call_id": "call_1", "content": [
            {"type": "text", "text": "fn main() {}", "cache_control": {"type": "ephemeral"}}
        ]})
    );
    assert_eq!(
        messages[6]["content"],
        json!([{"type": "text", "text": "Let me also check the tests.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(messages[6]["tool_calls"][0]["id"], "call_2");
    // Messages without a marker keep their plain string content.
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "What is 2+2?"})
    );
    assert_eq!(messages[4]["content"], Value::Null);
}

#[test]
fn without_a_system_prompt_four_messages_carry_the_breakpoints() {
    let opts = RequestOptions {
        cache: Some(CacheControl { one_hour: true }),
        ..RequestOptions::new("claude-opus-4")
    };
    let body = encode(&opts, "", &ledger());
    // Wire indices 0..=6 are the ledger; 3 only calls tools.
    assert_eq!(marked(&body), vec![2, 4, 5, 6]);
    assert_eq!(marker_count(&body), 4);
    assert_eq!(
        body["messages"][6]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
}

#[test]
fn a_short_history_gets_fewer_breakpoints() {
    let opts = RequestOptions {
        cache: Some(CacheControl::default()),
        ..RequestOptions::new("claude-haiku-4-5")
    };
    let body = encode(&opts, "sys", &[LedgerEntry::new(Message::user("hi"))]);
    assert_eq!(marked(&body), vec![0, 1]);
    assert_eq!(marker_count(&body), 2);
}

#[test]
fn other_models_get_no_markers_and_plain_string_content() {
    let body = encode(
        &RequestOptions::new("gpt-4o-mini"),
        "You are Hermes.",
        &ledger(),
    );
    assert_eq!(marker_count(&body), 0);
    for m in body["messages"].as_array().unwrap() {
        assert!(
            m["content"].is_string() || m["content"].is_null(),
            "content is not a plain string: {m}"
        );
    }
}

#[test]
fn reasoning_effort_in_both_dialects() {
    let opts = RequestOptions {
        reasoning: Some(Reasoning::Effort("high")),
        ..RequestOptions::new("o4-mini")
    };
    let body = encode(&opts, "sys", &ledger());
    assert_eq!(body["reasoning_effort"], "high");
    assert!(body.get("reasoning").is_none());

    let opts = RequestOptions {
        reasoning: Some(Reasoning::OpenRouter("low")),
        ..RequestOptions::new("deepseek/deepseek-r1")
    };
    let body = encode(&opts, "sys", &ledger());
    assert_eq!(body["reasoning"], json!({"effort": "low"}));
    assert!(body.get("reasoning_effort").is_none());

    let body = encode(&RequestOptions::new("m"), "sys", &ledger());
    assert!(body.get("reasoning").is_none() && body.get("reasoning_effort").is_none());
}

#[test]
fn reasoning_content_is_echoed_only_in_turns_that_called_tools() {
    let opts = RequestOptions {
        reasoning_echo: ReasoningEcho::ReasoningContent,
        ..RequestOptions::new("deepseek-chat")
    };
    let body = encode(&opts, "sys", &ledger());
    let messages = body["messages"].as_array().unwrap();
    // The plain-text turn: DeepSeek ignores its reasoning, so none is sent.
    assert!(
        messages[2].get("reasoning_content").is_none(),
        "{}",
        messages[2]
    );
    // The tool turn: every assistant message carries it, an empty one where
    // none was stored.
    assert_eq!(
        messages[4]["reasoning_content"],
        "I should read the file first."
    );
    assert_eq!(messages[6]["reasoning_content"], "");
    for m in messages {
        if m["role"] != "assistant" {
            assert!(m.get("reasoning_content").is_none(), "{m}");
        }
    }
}

#[test]
fn reasoning_details_are_echoed_verbatim_in_tool_turns() {
    let details = r#"[{"type":"reasoning.text","text":"Read it first.","signature":"c2ln","format":"anthropic-claude-v1","index":0}]"#;
    let mut entries = ledger();
    entries[3].meta.reasoning_details = Some(details.into());
    entries[1].meta.reasoning_details = Some(details.into());
    let opts = RequestOptions {
        reasoning_echo: ReasoningEcho::ReasoningDetails,
        ..RequestOptions::new("anthropic/claude-sonnet-4")
    };
    let body = encode(&opts, "sys", &entries);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[4]["reasoning_details"],
        serde_json::from_str::<Value>(details).unwrap()
    );
    assert!(messages[2].get("reasoning_details").is_none());
    assert!(messages[6].get("reasoning_details").is_none());
    assert!(body.to_string().matches("reasoning_content").count() == 0);
}

#[test]
fn with_the_echo_off_no_reasoning_reaches_the_wire() {
    let mut entries = ledger();
    entries[3].meta.reasoning_details =
        Some(r#"[{"type":"reasoning.text","text":"SECRET"}]"#.into());
    let opts = RequestOptions {
        cache: Some(CacheControl::default()),
        ..RequestOptions::new("claude-sonnet-4")
    };
    let body = encode(&opts, "sys", &entries).to_string();
    for forbidden in ["reasoning", "SECRET", "I should read the file first."] {
        assert!(!body.contains(forbidden), "{forbidden} in {body}");
    }
}

#[test]
fn usage_is_read_from_every_shape_providers_send() {
    let read = |usage: Value| -> Usage {
        let body = json!({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": usage});
        decode_response(body.to_string().as_bytes())
            .unwrap()
            .usage
            .unwrap()
    };
    let usage = |prompt, completion, total, cached, written| Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        cached_tokens: cached,
        cache_write_tokens: written,
    };
    // OpenAI.
    assert_eq!(
        read(
            json!({"prompt_tokens": 2000, "completion_tokens": 10, "total_tokens": 2010,
                    "prompt_tokens_details": {"cached_tokens": 1536, "audio_tokens": 0}})
        ),
        usage(2000, 10, 2010, 1536, 0)
    );
    // OpenRouter (Anthropic behind it): cache writes in the details.
    assert_eq!(
        read(
            json!({"prompt_tokens": 3000, "completion_tokens": 20, "total_tokens": 3020,
                    "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2900}})
        ),
        usage(3000, 20, 3020, 0, 2900)
    );
    // Anthropic's names, as proxies pass them through: input_tokens leaves
    // out what the cache served or stored.
    assert_eq!(
        read(json!({"input_tokens": 50, "output_tokens": 7,
                    "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 200})),
        usage(2050, 7, 2057, 1800, 200)
    );
    // LiteLLM-style: OpenAI counts plus Anthropic's cache fields.
    assert_eq!(
        read(
            json!({"prompt_tokens": 2050, "completion_tokens": 7, "total_tokens": 2057,
                    "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 200})
        ),
        usage(2050, 7, 2057, 1800, 200)
    );
    // DeepSeek.
    assert_eq!(
        read(
            json!({"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
                    "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36})
        ),
        usage(100, 5, 105, 64, 0)
    );
    // Nulls are absent counts.
    assert_eq!(
        read(json!({"prompt_tokens": 9, "completion_tokens": null, "prompt_tokens_details": null})),
        usage(9, 0, 9, 0, 0)
    );
    // A count of the wrong type stays a decode error.
    let body = json!({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens_details": {"cached_tokens": "many"}}});
    assert!(decode_response(body.to_string().as_bytes()).is_err());
}

#[test]
fn cache_hit_share() {
    let u = Usage {
        prompt_tokens: 2000,
        cached_tokens: 1500,
        ..Usage::default()
    };
    assert_eq!(u.cache_hit_percent(), Some(75));
    assert_eq!(Usage::default().cache_hit_percent(), None);
    let mut total = u;
    total.add(&Usage {
        prompt_tokens: 2000,
        cached_tokens: 500,
        cache_write_tokens: 7,
        ..Usage::default()
    });
    assert_eq!(total.cached_tokens, 2000);
    assert_eq!(total.cache_write_tokens, 7);
    assert_eq!(total.cache_hit_percent(), Some(50));
}

#[test]
fn reasoning_details_are_kept_from_bodies_and_streams() {
    let body = json!({"choices": [{"message": {
        "content": "done", "reasoning": "Read it first.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Read it first.", "signature": "c2ln", "index": 0}]
    }, "finish_reason": "stop"}]});
    let c = decode_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(c.reasoning.as_deref(), Some("Read it first."));
    let details: Value = serde_json::from_str(c.reasoning_details.as_deref().unwrap()).unwrap();
    assert_eq!(details[0]["signature"], "c2ln");

    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    let stream = [
        chunk(json!({"reasoning": "Read ", "reasoning_details": [{"type": "reasoning.text", "text": "Read ", "index": 0}]})),
        chunk(json!({"reasoning": "it.", "reasoning_details": [{"type": "reasoning.text", "text": "it.", "index": 0}]})),
        chunk(json!({"reasoning_details": [{"type": "reasoning.text", "signature": "c2ln", "index": 0}]})),
        chunk(json!({"content": "done"})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let mut decoder = SseDecoder::new();
    assert_eq!(
        decoder.feed(stream.as_bytes(), &mut NullSink).unwrap(),
        SseStatus::Done
    );
    let c = decoder.finish().unwrap();
    assert_eq!(c.content.as_deref(), Some("done"));
    assert_eq!(c.reasoning.as_deref(), Some("Read it."));
    let details: Value = serde_json::from_str(c.reasoning_details.as_deref().unwrap()).unwrap();
    assert_eq!(
        details,
        json!([{"type": "reasoning.text", "text": "Read it.", "signature": "c2ln", "index": 0}])
    );
}

#[test]
fn a_content_chunk_carrying_reasoning_details_keeps_them() {
    // Regression guard for the content-only fast path: a chunk with text
    // and reasoning details must not be taken for a plain content chunk.
    let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\",\"reasoning_details\":[{\"type\":\"reasoning.encrypted\",\"data\":\"eA==\",\"index\":0}]}}]}\n\ndata: [DONE]\n\n";
    let mut decoder = SseDecoder::new();
    decoder.feed(stream.as_bytes(), &mut NullSink).unwrap();
    let c = decoder.finish().unwrap();
    assert_eq!(c.content.as_deref(), Some("hi"));
    let details: Value = serde_json::from_str(c.reasoning_details.as_deref().unwrap()).unwrap();
    assert_eq!(details[0]["data"], "eA==");
}
