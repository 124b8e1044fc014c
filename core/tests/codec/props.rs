//! Properties of the stream decoder: any split of the fixture, arbitrary
//! bytes, arbitrary event lines and flipped bytes never panic and agree
//! with one-piece decoding.

use std::string::String;

use hermes_core::codec::{decode_error_body, decode_response};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::support::{STREAM, STREAM_TEXT, crlf, decode_split, expected_stream_completion};

proptest! {
    // The seeds stay beside this file (`props.proptest-regressions`): by
    // default proptest would look for them in `tests/proptest-regressions/`,
    // as this directory holds a `main.rs`.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

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
