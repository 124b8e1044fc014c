//! Instruction counts of the agent loop, with the repeat guard off and on
//! (SPEC Y6), for callgrind: run once with 0 runs (the set-up) and once
//! with N, and divide the difference by 2·N iterations.
//!
//! ```sh
//! cargo build --release -p hermes-benches --example loop_instructions
//! for mode in off on; do for n in 0 2000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/loop_instructions $mode $n
//! done; done
//! ```
//!
//! One run is the `loop_overhead` bench's: a model call that asks for a
//! no-op tool, the tool call, a model call that answers, over a
//! 100-message history. With the guard on, each tool call's arguments are
//! parsed and hashed with its result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, IterationBudget, LedgerEntry, Message, Model,
    ModelError, NoObserver, RepeatGuard, Role, StreamSink, Tool, ToolCall, ToolContext, ToolError,
    ToolRegistry, ToolSpec,
};

/// Answers instantly: a tool call after a user message, text after a tool result.
struct InstantModel;

impl Model for InstantModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let last = request.messages.last().map(|e| e.message.role());
        Ok(if last == Some(Role::User) {
            Completion {
                tool_calls: vec![ToolCall::new(
                    "call_1",
                    "noop",
                    r#"{"path":"src/main.rs","offset":1,"limit":200}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        } else {
            Completion {
                content: Some("done".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        })
    }
}

struct Noop(ToolSpec);

impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        // A typical small result: 1 KB.
        Ok("fn main() {}\n".repeat(80))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let guard = match args.next().as_deref() {
        Some("on") => Some(RepeatGuard::DEFAULT),
        _ => None,
    };
    let runs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let tools = ToolRegistry::new().with(Noop(ToolSpec::new(
        "noop",
        "does nothing",
        serde_json::json!({"type": "object", "properties": {}}),
    )));
    let agent = Agent::new(Arc::new(InstantModel), Arc::new(tools), "You are Hermes.")
        .with_repeat_guard(guard);
    let mut hist: Vec<LedgerEntry> = (0..100)
        .map(|i| {
            let text = format!("message {i}: {}", "lorem ipsum ".repeat(20));
            LedgerEntry::new(if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            })
        })
        .collect();
    for _ in 0..runs {
        let budget = IterationBudget::new(90);
        let out = agent.run(black_box("go"), hist, &budget, &mut NoObserver);
        let mut messages = out.messages;
        messages.truncate(100);
        hist = messages;
    }
    black_box(hist);
}
