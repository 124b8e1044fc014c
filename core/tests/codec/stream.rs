//! The SSE stream decoder: every line ending and byte split, reasoning
//! deltas, tool-call fragments (ids, indices, limits), truncation, garbage,
//! provider errors mid-stream, caps, a sink that stops, `[DONE]`, and
//! `decode_stream` over a reader of small random reads that may fail.

use std::string::String;
use std::vec::Vec;

use hermes_core::codec::{
    DecodeError, SseDecoder, SseStatus, StreamError, decode_response, decode_stream,
};
use hermes_core::{Completion, FinishReason, Flow, NullSink, StreamSink, ToolCall};

use super::response::RESPONSE;
use super::support::{
    CHUNK_SCHEMA, ReadError, Recorder, STREAM, STREAM_TEXT, SliceReader, assert_valid, cr_only,
    crlf, data_payloads, decode_split, expected_stream_completion,
};

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
