//! Request encoding: against the published schemas (streaming or not),
//! the caching encoder, and what never reaches the wire (ledger metadata,
//! tool arguments that are not an object, empty assistant messages).

use std::string::String;
use std::vec::Vec;

use hermes_core::codec::{EncodeError, RequestEncoder, RequestOptions, encode_request};
use hermes_core::{
    ChatRequest, CompactionMark, EntryMeta, FinishReason, LedgerEntry, Message, SummaryPlacement,
    ToolCall, ToolSpec, Usage,
};
use serde_json::{Value, json};

use super::support::{REQUEST_SCHEMA, REQUEST_STREAMING_SCHEMA, assert_valid};

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
        tool_choice: hermes_core::ToolChoice::Auto,
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
    let mut schema = changed_schema[0].schema();
    schema["properties"]["path"]["type"] = json!("integer");
    changed_schema[0].parameters = hermes_core::SchemaText::from_value(&schema);
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
        // `tool_choice = none` (the loop's final calls, SPEC Y6) too.
        let choices = [hermes_core::ToolChoice::Auto, hermes_core::ToolChoice::None];
        for ((system, messages, tools), tool_choice) in cases
            .into_iter()
            .flat_map(|case| choices.map(|c| (case, c)))
        {
            let req = ChatRequest {
                system_prompt: system,
                messages,
                tools,
                tool_choice,
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
        tool_choice: hermes_core::ToolChoice::Auto,
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
fn the_caching_encoder_keeps_the_conversation_and_follows_every_change_in_it() {
    // A run's requests: the history grows a message or two at a time; then
    // a compaction rewrites the start, a rewind cuts the end, another
    // session's history arrives on the same client, an edit lands in the
    // middle. Every body is the one encode_request writes.
    let base = ledger();
    let mut grown = base.clone();
    grown.push(LedgerEntry::new(Message::assistant("Anything else?")));
    grown.push(LedgerEntry::new(Message::user("no \\ \u{0} done")));
    let mut compacted = grown.clone();
    compacted[0] = LedgerEntry::new(Message::user("[summary of earlier turns]"));
    let mut edited = grown.clone();
    edited[3] = LedgerEntry::new(Message::tool("call_Zy2", "changed"));
    let other = vec![LedgerEntry::new(Message::user("another chat"))];
    // An empty assistant message is not on the wire: it must not shift
    // what is kept against the wire's positions.
    let mut with_empty = grown.clone();
    with_empty.insert(2, LedgerEntry::new(Message::assistant("")));
    let histories: [&[LedgerEntry]; 10] = [
        &base[..1],
        &base[..2],
        &base[..4],
        &base,
        &grown,
        &compacted,
        &grown[..3],
        &other,
        &edited,
        &with_empty,
    ];
    let mut encoder = RequestEncoder::new();
    let opts = RequestOptions::new("m");
    for messages in histories {
        let req = ChatRequest {
            system_prompt: "You are terse.",
            messages,
            tools: &tools(),
            tool_choice: hermes_core::ToolChoice::Auto,
        };
        let mut plain = Vec::new();
        encode_request(&opts, &req, &mut plain).unwrap();
        let mut cached = Vec::new();
        encoder.encode(&opts, &req, &mut cached).unwrap();
        assert_eq!(
            std::str::from_utf8(&cached).unwrap(),
            std::str::from_utf8(&plain).unwrap(),
            "{} messages",
            messages.len()
        );
    }
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
        tool_choice: hermes_core::ToolChoice::Auto,
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

/// The `tools` array is written by hand (the schema's text as it is): a
/// name and description with quotes, backslashes, newlines and control
/// characters are escaped, a literal schema goes out byte for byte, and
/// both encoders write the same body.
#[test]
fn tool_definitions_are_escaped_and_their_schema_text_goes_out_as_it_is() {
    const SCHEMA: &str = hermes_core::schema_text!(
        r#"{ "type": "object", "properties": { "q": {"type": "string", "description": "a \"quoted\" \\ word"} } }"#
    );
    let spec = ToolSpec {
        name: "look_up".into(),
        description: "Says \"hi\"\\ then\na tab\t, a bell \u{7} and é.".into(),
        parameters: hermes_core::SchemaText::from_static(SCHEMA),
    };
    let entries = [LedgerEntry::new(Message::user("hi"))];
    let specs = [spec.clone(), spec];
    let req = ChatRequest {
        system_prompt: "",
        messages: &entries,
        tools: &specs,
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let opts = RequestOptions::new("m");
    let mut plain = Vec::new();
    encode_request(&opts, &req, &mut plain).unwrap();
    let mut kept = Vec::new();
    RequestEncoder::new()
        .encode(&opts, &req, &mut kept)
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain),
        String::from_utf8_lossy(&kept)
    );
    let text = std::str::from_utf8(&plain).unwrap();
    assert!(
        text.contains(&format!(",\"parameters\":{SCHEMA}}}}}")),
        "{text}"
    );
    let body: Value = serde_json::from_slice(&plain).unwrap();
    assert_valid(REQUEST_SCHEMA, &body);
    for tool in body["tools"].as_array().unwrap() {
        assert_eq!(
            tool["function"]["description"],
            "Says \"hi\"\\ then\na tab\t, a bell \u{7} and é."
        );
        assert_eq!(
            tool["function"]["parameters"]["properties"]["q"]["description"],
            "a \"quoted\" \\ word"
        );
    }
}
