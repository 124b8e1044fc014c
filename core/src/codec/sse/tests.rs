//! The decoder's unit tests: the fast path against serde, and split-independence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use alloc::string::ToString;
use alloc::vec::Vec;

use proptest::prelude::*;

use super::*;

/// The fast path must agree with the serde path whenever it accepts (the
/// same check the `sse_fast_path` fuzz target makes).
fn check_fast_path(data: &[u8]) -> bool {
    crate::fuzz_entry::sse_fast_path(data)
}

#[test]
fn fast_path_takes_typical_content_chunks() {
    let typical = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"h\u00e9llo \ud83d\ude80 \"x\"\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#;
    assert!(check_fast_path(typical));
    let mut out = String::new();
    fast::chunk(typical, &mut out, &mut Default::default()).unwrap();
    assert_eq!(out, "h\u{e9}llo \u{1F680} \"x\"\n");
    // DeepSeek's content chunks carry a null reasoning field.
    assert!(check_fast_path(
        br#"{"choices":[{"index":0,"delta":{"content":"a","reasoning_content":null}}]}"#
    ));
    // The finish chunk that ends each answer, and a last content chunk
    // that finishes too.
    for (finishing, reason) in [
        (
            &br#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#[..],
            "tool_calls",
        ),
        (
            br#"{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            "stop",
        ),
    ] {
        assert!(check_fast_path(finishing));
        let mut chunk = fast::FastChunk::default();
        fast::chunk(finishing, &mut String::new(), &mut chunk).unwrap();
        assert_eq!(chunk.finish_reason, Some(reason));
    }
    // An empty reason is none, as on the serde path.
    assert!(check_fast_path(
        br#"{"choices":[{"delta":{},"finish_reason":""}]}"#
    ));
    // A tool call's first fragment and its arguments a piece at a time.
    for (fragment, index, id, name, arguments) in [
        (
            &br#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"todo","arguments":""}}]},"finish_reason":null}]}"#[..],
            Some(0),
            Some("call_1"),
            Some("todo"),
            Some(""),
        ),
        (
            br#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\": \"\u00e9\"}"}}]}}]}"#,
            Some(1),
            None,
            None,
            Some("{\"a\": \"\u{e9}\"}"),
        ),
        (
            br#"{"choices":[{"delta":{"tool_calls":[{"id":null,"function":null}]}}]}"#,
            None,
            None,
            None,
            None,
        ),
    ] {
        assert!(check_fast_path(fragment), "{}", String::from_utf8_lossy(fragment));
        let mut chunk = fast::FastChunk::default();
        fast::chunk(fragment, &mut String::new(), &mut chunk).unwrap();
        let call = &chunk.tool_calls[0];
        assert_eq!(call.index, index);
        assert_eq!(call.id.as_deref(), id);
        assert_eq!(call.name.as_deref(), name);
        assert_eq!(call.arguments.as_deref(), arguments);
    }
    for declined in [
        &br#"{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}"#[..],
        br#"{"choices":[{"delta":{"tool_calls":[{"index":1.0}]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[{"index":4294967296}]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"index":1}]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[{"id":7}]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[null]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\ud800"}}]}}]}"#,
        br#"{"choices":[{"delta":{"tool_calls":[{},{},{},{},{}]}}]}"#,
        br#"{"choices":[{"delta":{"content":"a"},"finish_reason":"st\u006fp"}]}"#,
        br#"{"choices":[{"delta":{},"finish_reason":1}]}"#,
        br#"{"choices":[{"delta":{},"finish_reason":"stop","finish_reason":null}]}"#,
        br#"{"choices":[{"delta":{"content":"a"}}],"usage":{"total_tokens":1}}"#,
        br#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
        br#"{"choices":[{"delta":{"reasoning":"r"}}]}"#,
        br#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        br#"{"choices":[{"delta":{"\u0063ontent":"a"}}]}"#,
        br#"{"error":{"message":"x"}}"#,
        br#"{"choices":[{"delta":{"content":"a"}}]} x"#,
        br#"{"choices":[{"delta":{"content":"a"}}],}"#,
        br#"{"n":01,"choices":[]}"#,
        b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}",
    ] {
        assert!(
            !check_fast_path(declined),
            "{}",
            String::from_utf8_lossy(declined)
        );
    }
}

/// Feeds `bytes` whole and at every split point; the outcomes agree.
fn outcome(bytes: &[u8], cap: usize, splits: &[usize]) -> Result<Completion, DecodeError> {
    let mut decoder = SseDecoder::with_max_event_bytes(cap);
    let mut at = 0;
    for &split in splits.iter().chain(core::iter::once(&bytes.len())) {
        match decoder.feed(&bytes[at..split], &mut NullSink) {
            Ok(SseStatus::NeedMore) => {}
            Ok(_) => break,
            Err(e) => return Err(e),
        }
        at = split;
    }
    decoder.finish()
}

#[test]
fn size_cap_does_not_depend_on_how_bytes_are_split() {
    // Found by fuzzing: a line completed within one feed skipped the line
    // cap, a carried-over line was measured with its `data: ` prefix,
    // and the plain-body cap used `>=` where the others used `>`.
    let done = "data: [DONE]\n\n";
    let cases: [(String, usize); 4] = [
        // The line is 16 bytes, its value 10: over a 12-byte cap.
        (["data: {\"a\":123}\n\n", done].concat(), 12),
        // Exactly at the cap: accepted.
        (["data: {\"a\":123}\n\n", done].concat(), 16),
        // A plain JSON body of exactly the cap.
        (
            String::from("{\"choices\":[{\"message\":{\"content\":\"x\"}}]}\n"),
            41,
        ),
        (
            String::from("{\"choices\":[{\"message\":{\"content\":\"x\"}}]}\n"),
            40,
        ),
    ];
    for (text, cap) in &cases {
        let bytes = text.as_bytes();
        let whole = outcome(bytes, *cap, &[]);
        for split in 1..bytes.len() {
            assert_eq!(
                outcome(bytes, *cap, &[split]),
                whole,
                "cap {cap}, split at {split} of {text:?}"
            );
        }
    }
    assert!(outcome(cases[0].0.as_bytes(), 12, &[]).is_err());
    assert!(outcome(cases[1].0.as_bytes(), 16, &[]).is_ok());
    assert!(outcome(cases[2].0.as_bytes(), 41, &[]).is_ok());
    assert!(outcome(cases[3].0.as_bytes(), 40, &[]).is_err());
}

#[test]
fn fast_path_nesting_is_bounded() {
    let deep = "[".repeat(100_000);
    let doc = ["{\"x\":", &deep, "}"].concat();
    assert!(!check_fast_path(doc.as_bytes()));
}

fn fields(options: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::subsequence(options.to_vec(), 0..=options.len())
        .prop_shuffle()
        .prop_map(|parts| ["{", &parts.join(","), "}"].concat())
}

/// A string's contents: letters, escapes, surrogate pairs, and what
/// serde refuses (a lone surrogate, an unknown escape).
const TEXT: &str = "([a-z\u{e9}\u{4e16}\u{1F680} ]|\\\\[nt\"/\\\\bfr]|\\\\u00e9|\\\\ud83d\\\\ude80|\\\\ud800|\\\\x){0,8}";

/// `obj` (`{…}`) with `field` as its first member.
fn prepend(obj: &str, field: &str) -> String {
    let inner = obj.trim_start_matches('{').trim_end_matches('}');
    let sep = if inner.is_empty() { "" } else { "," };
    ["{", field, sep, inner, "}"].concat()
}

/// One of `options`, weighted; `""` for none.
fn pick(options: &'static [(u32, &'static str)]) -> impl Strategy<Value = &'static str> {
    proptest::strategy::Union::new_weighted(
        options
            .iter()
            .map(|&(weight, option)| (weight, Just(option).boxed()))
            .collect(),
    )
}

/// `{…}` of `parts` (the empty ones left out), in a shuffled order.
fn object_of(parts: Vec<String>) -> impl Strategy<Value = String> {
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    Just(parts)
        .prop_shuffle()
        .prop_map(|parts| ["{", &parts.join(","), "}"].concat())
}

/// `[…]` of tool-call fragments, their arguments from `text`: mostly what
/// a server sends, sometimes what serde refuses (a signed or fractional
/// index, an id that is a number, a repeated key) or reads its own way.
fn tool_calls(text: &'static str) -> impl Strategy<Value = String> {
    let function = (
        pick(&[
            (3, ""),
            (3, "\"name\":\"todo\""),
            (1, "\"name\":null"),
            (1, "\"name\":\"t\\u006fdo\""),
        ]),
        pick(&[(6, ""), (1, "\"x\":[1]"), (1, "\"arguments\":null")]),
        proptest::option::weighted(0.8, text),
    )
        .prop_flat_map(|(name, other, arguments)| {
            let arguments =
                arguments.map_or_else(String::new, |a| ["\"arguments\":\"", &a, "\""].concat());
            object_of(vec![name.to_string(), other.to_string(), arguments])
        });
    let call = (
        pick(&[
            (3, ""),
            (4, "\"index\":0"),
            (3, "\"index\":1"),
            (1, "\"index\":null"),
            (1, "\"index\":-1"),
            (1, "\"index\":2.5"),
            (1, "\"index\":0,\"index\":1"),
        ]),
        pick(&[
            (4, ""),
            (4, "\"id\":\"call_1\""),
            (1, "\"id\":\"\""),
            (1, "\"id\":null"),
            (1, "\"id\":3"),
        ]),
        pick(&[(1, ""), (1, "\"type\":\"function\"")]),
        proptest::option::weighted(
            0.8,
            prop_oneof![9 => function, 1 => Just("null".to_string())],
        ),
    )
        .prop_flat_map(|(index, id, kind, function)| {
            let function = function.map_or_else(String::new, |f| ["\"function\":", &f].concat());
            object_of(vec![
                index.to_string(),
                id.to_string(),
                kind.to_string(),
                function,
            ])
        });
    proptest::collection::vec(call, 0..6).prop_map(|calls| ["[", &calls.join(","), "]"].concat())
}

/// A chunk with a clean envelope whose delta carries tool-call fragments
/// (and sometimes content): the chunks of a streamed tool call.
fn tool_call_chunk() -> impl Strategy<Value = String> {
    let text = TEXT;
    (tool_calls(text), proptest::option::weighted(0.2, "[a-z ]{0,4}"))
        .prop_map(|(calls, content)| {
            let content = content.map_or_else(String::new, |c| ["\"content\":\"", &c, "\","].concat());
            [
                "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{",
                &content,
                "\"tool_calls\":",
                &calls,
                "},\"finish_reason\":null}]}",
            ]
            .concat()
        })
}

/// How many of 1,000 chunks from `strategy` (always the same ones) the
/// fast path takes, each checked against the serde path.
fn accepted_of(strategy: &impl Strategy<Value = String>) -> usize {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..1000)
        .filter(|_| {
            let doc = strategy.new_tree(&mut runner).unwrap().current();
            check_fast_path(doc.as_bytes())
        })
        .count()
}

#[test]
fn generated_tool_call_chunks_exercise_both_paths() {
    let accepted = accepted_of(&tool_call_chunk());
    assert!(
        (100..950).contains(&accepted),
        "fast path took {accepted} of 1000"
    );
}

fn chunk() -> impl Strategy<Value = String> {
    let text = TEXT;
    let delta = (
        fields(&[
            "\"role\":\"assistant\"",
            "\"content\":null",
            "\"refusal\":null",
            "\"refusal\":\"no\"",
            "\"reasoning_content\":null",
            "\"reasoning\":\"r\"",
            "\"tool_calls\":null",
            "\"tool_calls\":[]",
            "\"content\":7",
        ]),
        text,
        any::<bool>(),
        proptest::option::of(tool_calls(text)),
    )
        .prop_map(|(obj, text, with_content, calls)| {
            let obj = match calls {
                Some(calls) => prepend(&obj, &["\"tool_calls\":", &calls].concat()),
                None => obj,
            };
            if with_content {
                prepend(&obj, &["\"content\":\"", &text, "\""].concat())
            } else {
                obj
            }
        });
    let choice = (
        fields(&[
            "\"index\":0",
            "\"logprobs\":null",
            "\"finish_reason\":null",
            "\"finish_reason\":\"stop\"",
            "\"finish_reason\":\"tool_calls\"",
            "\"finish_reason\":\"\"",
            "\"finish_reason\":\"st\\u006fp\"",
            "\"delta\":null",
        ]),
        delta,
    )
        .prop_map(|(obj, delta)| {
            let inner = obj.trim_start_matches('{').trim_end_matches('}');
            let sep = if inner.is_empty() { "" } else { "," };
            ["{\"delta\":", &delta, sep, inner, "}"].concat()
        });
    (
        fields(&[
            "\"id\":\"chatcmpl-1\"",
            "\"created\":1732000000",
            "\"x\":[1,{\"a\":null},-0.5e3,true,false,\"\\u00e9\"]",
            "\"usage\":null",
            "\"usage\":{\"prompt_tokens\":1}",
            "\"error\":null",
            "\"choices\":[]",
        ]),
        choice,
        0..3u8,
    )
        .prop_map(|(obj, choice, how)| {
            let inner = obj.trim_start_matches('{').trim_end_matches('}');
            let sep = if inner.is_empty() { "" } else { "," };
            let choices = match how {
                0 => ["[", &choice, "]"].concat(),
                1 => [
                    "[",
                    &choice,
                    ",{\"index\":1,\"delta\":{\"content\":\"z\"}}]",
                ]
                .concat(),
                _ => "null".to_string(),
            };
            ["{\"choices\":", &choices, sep, inner, "}"].concat()
        })
}

#[test]
fn generated_chunks_exercise_both_paths() {
    let accepted = accepted_of(&chunk());
    assert!(
        (20..980).contains(&accepted),
        "fast path took {accepted} of 1000"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_agrees_with_serde(doc in chunk()) {
        check_fast_path(doc.as_bytes());
    }

    #[test]
    fn fast_path_agrees_with_serde_on_tool_calls(doc in tool_call_chunk()) {
        check_fast_path(doc.as_bytes());
    }

    #[test]
    fn fast_path_agrees_with_serde_on_damaged_input(
        doc in prop_oneof![chunk(), tool_call_chunk()],
        at in any::<proptest::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut bytes: Vec<u8> = doc.into_bytes();
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        check_fast_path(&bytes);
    }
}
