//! Hostile bytes into the core's parsers, on stable: proptests for the
//! invariants the fuzz targets check (`fuzz/`, nightly), and a replay of the
//! committed seeds and crash inputs (`fuzz/seeds/`, `fuzz/regressions/`).
//! Both call the same `hermes_core::fuzz_entry` functions as the targets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use hermes_core::fuzz_entry;
use proptest::prelude::*;

/// Runs `entry` on every committed input of `target`; names the file that
/// fails.
fn replay(target: &str, entry: impl Fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for file in dir {
            let path = file.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
                panic!("{} fails (see the panic above)", path.display());
            }
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no committed inputs for {target}");
}

#[test]
fn committed_fuzz_inputs_still_pass() {
    replay("sse_stream", fuzz_entry::sse_stream);
    replay("sse_fast_path", |d| {
        fuzz_entry::sse_fast_path(d);
    });
    replay("response_body", fuzz_entry::response_body);
    replay("anthropic_stream", fuzz_entry::anthropic_stream);
    replay("text_calls", fuzz_entry::text_calls);
}

#[test]
fn empty_content_decodes_alike_as_json_and_as_a_stream() {
    // Found by the `response_body` proptest: `"content": ""` was `Some("")`
    // from a JSON body but `None` when the same body came where a stream
    // was expected.
    let body = br#"{"choices":[{"message":{"content":"","tool_calls":[{"function":{"name":"n","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let direct = hermes_core::codec::decode_response(body).unwrap();
    assert_eq!(direct.content, None);
    fuzz_entry::response_body(body);
    let refused = br#"{"choices":[{"message":{"content":"","refusal":"no"}}]}"#;
    let direct = hermes_core::codec::decode_response(refused).unwrap();
    assert_eq!(direct.content.as_deref(), Some("no"));
    fuzz_entry::response_body(refused);
}

/// Answers built from the pieces of text tool calls (issue 38).
fn text_call_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<tool_call>"),
        Just("</tool_call>"),
        Just("<think>"),
        Just("</think>"),
        Just(r#"{"name": "read_file", "arguments": {"path": "a"}}"#),
        Just(r#"{"name": "rm", "parameters": {}}"#),
        Just("[TOOL_CALLS]"),
        Just("[ARGS]"),
        Just("<|python_tag|>"),
        Just("<|eom_id|>"),
        Just("terminal"),
        Just(" "),
        Just("\n"),
        Just("{"),
        Just("}"),
        Just("["),
        Just("]"),
        Just("Sure, "),
        Just("```"),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

/// A text value as a provider might send it, JSON-escaped or not.
fn text() -> impl Strategy<Value = String> {
    "([a-z é中🚀]|\\\\n|\\\\\"|\\\\u00e9|\\\\ud83d\\\\ude80|\\\\ud800|\\n){0,12}"
}

/// One SSE line (without its line end).
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        text().prop_map(|t| format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}"
        )),
        text().prop_map(|t| format!(
            "data:{{\"choices\":[{{\"delta\":{{\"reasoning_content\":\"{t}\"}},\"finish_reason\":null}}]}}"
        )),
        (0..3u32, text()).prop_map(|(i, t)| format!(
            "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"c{i}\",\"function\":{{\"name\":\"f\",\"arguments\":\"{t}\"}}}}]}}}}]}}"
        )),
        Just("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}".to_string()),
        Just("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":-1}}".to_string()),
        Just("data: [DONE]".to_string()),
        Just(": keep-alive".to_string()),
        Just("event: error".to_string()),
        Just("data: {\"error\":{\"message\":\"boom\"}}".to_string()),
        Just(String::new()),
        Just("data: {\"choices\":[{\"delta\":{\"content\":\"cut".to_string()),
        Just("id: 7".to_string()),
        "[ -~]{0,20}",
    ]
}

/// A stream: ten parameter bytes, then lines with mixed line ends.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), 10),
        proptest::collection::vec((line(), 0..4u8), 0..12),
        any::<bool>(),
    )
        .prop_map(|(params, lines, bom)| {
            let mut out = params;
            if bom {
                out.extend_from_slice(b"\xEF\xBB\xBF");
            }
            for (line, end) in lines {
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(match end {
                    0 => b"\n".as_slice(),
                    1 => b"\r\n",
                    2 => b"\r",
                    _ => b"\n\n",
                });
            }
            out
        })
}

/// One Anthropic Messages event (`event:` + `data:` lines), valid or not.
fn anthropic_event() -> impl Strategy<Value = String> {
    let ev = |name: &str, data: String| format!("event: {name}\ndata: {data}\n\n");
    prop_oneof![
        Just(ev("message_start", r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":18446744073709551615}}}"#.into())),
        (0..3u32, prop_oneof![Just("text"), Just("thinking"), Just("tool_use"), Just("redacted_thinking"), Just("server_tool_use")])
            .prop_map(move |(i, kind)| ev("content_block_start", format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"{kind}","text":"","thinking":"","id":"t{i}","name":"f","input":{{}},"data":"ZW5j"}}}}"#))),
        (0..3u32, text()).prop_map(move |(i, t)| ev("content_block_delta", format!(
            r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"text_delta","text":"{t}"}}}}"#))),
        (0..3u32, text()).prop_map(move |(i, t)| ev("content_block_delta", format!(
            r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"thinking_delta","thinking":"{t}"}}}}"#))),
        (0..3u32, text()).prop_map(move |(i, t)| ev("content_block_delta", format!(
            r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"input_json_delta","partial_json":"{t}"}}}}"#))),
        (0..3u32).prop_map(move |i| ev("content_block_delta", format!(
            r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"signature_delta","signature":"c2ln"}}}}"#))),
        (0..4u32).prop_map(move |i| ev("content_block_stop", format!(r#"{{"type":"content_block_stop","index":{i}}}"#))),
        prop_oneof![Just("end_turn"), Just("tool_use"), Just("max_tokens"), Just("refusal"), Just("pause_turn")]
            .prop_map(move |r| ev("message_delta", format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{r}"}},"usage":{{"output_tokens":-1}}}}"#))),
        Just(ev("message_stop", r#"{"type":"message_stop"}"#.into())),
        Just(ev("ping", r#"{"type":"ping"}"#.into())),
        Just(ev("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into())),
        Just("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"cut".to_string()),
        Just(": keep-alive\n".to_string()),
        "[ -~]{0,20}\n",
    ]
}

/// An Anthropic stream: eight parameter bytes, then events.
fn anthropic_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), 8),
        proptest::collection::vec(anthropic_event(), 0..12),
    )
        .prop_map(|(params, events)| {
            let mut out = params;
            for e in events {
                out.extend_from_slice(e.as_bytes());
            }
            out
        })
}

/// A non-streaming body of the shapes providers send.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (text(), text()).prop_map(|(c, r)| format!(
            "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"{c}\",\"reasoning\":\"{r}\",\"tool_calls\":[{{\"function\":{{\"name\":\"n\",\"arguments\":{{\"a\":\"{c}\"}}}}}}]}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"total_tokens\":1.5}}}}"
        )
        .into_bytes()),
        text().prop_map(|m| format!("{{\"error\":{{\"message\":\"{m}\"}}}}").into_bytes()),
        text().prop_map(|m| format!("[{{\"error\":\"{m}\"}}]").into_bytes()),
        Just(b"{\"choices\":[]}".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn sse_result_does_not_depend_on_the_split(bytes in stream()) {
        fuzz_entry::sse_stream(&bytes);
    }

    #[test]
    fn sse_decoder_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_entry::sse_stream(&bytes);
    }

    #[test]
    fn fast_path_agrees_with_serde_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        fuzz_entry::sse_fast_path(&bytes);
    }

    #[test]
    fn response_bodies_decode_alike_whole_and_as_a_stream(bytes in body()) {
        fuzz_entry::response_body(&bytes);
    }

    #[test]
    fn anthropic_result_does_not_depend_on_the_split(bytes in anthropic_stream()) {
        fuzz_entry::anthropic_stream(&bytes);
    }

    #[test]
    fn text_calls_are_held_back_and_name_only_offered_tools(text in text_call_text()) {
        fuzz_entry::text_calls(text.as_bytes());
    }

    #[test]
    fn anthropic_decoder_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_entry::anthropic_stream(&bytes);
    }
}
