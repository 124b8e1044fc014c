//! Servers that close connections (SPEC X9, issue 28): a pooled keep-alive
//! connection the server closed must not fail the next request, and a
//! stream the server cut and closed must not poison the one after it. The
//! provider client runs with one attempt, so a failure reaches the test
//! instead of being hidden by the retry policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use hermes_core::{ChatRequest, LedgerEntry, Message, Model, NullSink, ToolChoice};
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

fn client(base_url: &str, stream: bool) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: base_url.to_owned(),
        model: "fake-model".into(),
        stream,
        max_attempts: 1,
        ..ClientOptions::default()
    })
    .unwrap()
}

/// Answers every request with the number of its last user message.
fn echo() -> hermes_tests::Responder {
    Arc::new(|request: &Value| {
        let last = request["messages"].as_array().unwrap().last().unwrap();
        Reply::text(format!("echo {}", last["content"].as_str().unwrap_or("")))
    })
}

#[test]
fn every_call_is_answered_when_the_server_closes_idle_connections_at_random() {
    for stream in [true, false] {
        let provider = FakeProvider::start_with(vec![], None, Some(echo())).unwrap();
        provider.close_idle_at_random(0x5eed_0028 + u64::from(stream));
        let client = client(&provider.base_url(), stream);
        for n in 0..40 {
            let messages = [LedgerEntry::new(Message::user(format!("call {n}")))];
            let request = ChatRequest {
                system_prompt: "You echo.",
                messages: &messages,
                tools: &[],
                tool_choice: ToolChoice::Auto,
            };
            let answer = client.complete(&request, &mut NullSink);
            match answer {
                Ok(c) => assert_eq!(
                    c.content.as_deref(),
                    Some(format!("echo call {n}").as_str()),
                    "stream {stream}"
                ),
                Err(e) => panic!("stream {stream}, call {n}: {e}"),
            }
            // Let some connections sit idle, as between turns.
            if n % 3 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(15));
            }
        }
        assert!(provider.violations().is_empty());
        assert_eq!(provider.requests().len(), 40, "stream {stream}");
        // The server did close connections under the client.
        assert!(
            provider.connections() >= 10,
            "stream {stream}: {} connections",
            provider.connections()
        );
    }
}
