//! SPEC Y6, huge tool outputs: a result over the loop's cap is handed to
//! the registry's `OutputKeeper` whole before it is cut, and the model gets
//! the head, the tail and where the rest is. Without a keeper (or when
//! keeping fails) the result is cut as before, with its marker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_core::context::{ContextConfig, ContextWindow, WindowSource};
use hermes_core::*;
use serde_json::json;

/// Calls `dump` once, then answers.
struct DumpThenAnswer;

impl Model for DumpThenAnswer {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let called = request
            .messages
            .iter()
            .any(|e| matches!(e.message, Message::Tool { .. }));
        Ok(if called {
            Completion {
                content: Some("done".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        } else {
            Completion {
                tool_calls: vec![ToolCall::new("c1", "dump", "{}")],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        })
    }
}

/// Numbered lines, `lines` of them: the head and the tail are recognisable.
struct Dump {
    spec: ToolSpec,
    lines: usize,
}

impl Tool for Dump {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        Ok((1..=self.lines).map(|n| format!("line {n:06}\n")).collect())
    }
}

/// Remembers what it was given; `None` answers as a keeper that could not
/// write.
struct Recording {
    kept: Mutex<Vec<(String, String)>>,
    place: Option<String>,
}

impl OutputKeeper for Recording {
    fn keep(&self, tool: &str, output: &str) -> Option<KeptOutput> {
        self.kept
            .lock()
            .unwrap()
            .push((tool.to_owned(), output.to_owned()));
        self.place.clone().map(|place| KeptOutput {
            place,
            bytes: output.len() as u64,
            lines: output.bytes().filter(|b| *b == b'\n').count() as u64,
        })
    }
}

fn run(lines: usize, keeper: Option<Arc<Recording>>) -> String {
    let mut tools = ToolRegistry::new().with(Dump {
        spec: ToolSpec::new("dump", "prints a lot", json!({"type": "object"})),
        lines,
    });
    if let Some(k) = keeper {
        tools.set_output_keeper(k);
    }
    let agent = Agent::new(Arc::new(DumpThenAnswer), Arc::new(tools), "sys").with_context(
        ContextConfig::new(Arc::new(ContextWindow::new(
            8_000,
            WindowSource::Configured,
        ))),
    );
    let out = agent.run_conversation("go", Vec::new());
    assert_eq!(out.stop, StopReason::Completed);
    out.messages
        .iter()
        .find_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn an_output_over_the_cap_is_kept_whole_and_the_model_gets_head_tail_and_place() {
    let keeper = Arc::new(Recording {
        kept: Mutex::default(),
        place: Some("/home/h/tool-output/s1/dump-1.txt".into()),
    });
    // 200k lines, 2.4 MB, into an 8k window.
    let result = run(200_000, Some(keeper.clone()));
    let kept = keeper.kept.lock().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].0, "dump");
    assert_eq!(kept[0].1.len(), 200_000 * 12, "the keeper got all of it");
    assert!(result.len() < 16_000, "{} bytes", result.len());
    assert!(
        result.starts_with("line 000001\n"),
        "the head: {result:.40}"
    );
    assert!(result.ends_with("line 200000\n"), "the tail");
    assert!(
        result.contains(
            "The whole output (2400000 bytes, 200000 lines) is saved in \
             /home/h/tool-output/s1/dump-1.txt: read any part of it with read_file"
        ),
        "{result}"
    );
}

#[test]
fn an_output_within_the_cap_is_neither_kept_nor_changed() {
    let keeper = Arc::new(Recording {
        kept: Mutex::default(),
        place: Some("/nowhere".into()),
    });
    let result = run(10, Some(keeper.clone()));
    assert!(keeper.kept.lock().unwrap().is_empty());
    assert_eq!(result.lines().count(), 10);
}

#[test]
fn a_keeper_that_cannot_write_leaves_the_visible_cut() {
    let keeper = Arc::new(Recording {
        kept: Mutex::default(),
        place: None,
    });
    let result = run(200_000, Some(keeper));
    assert!(result.contains("more bytes cut to fit the model's context window"));
    assert!(!result.contains("is saved in"));
    let without = run(200_000, None);
    assert_eq!(result, without);
}
