//! The turn driver (`hermes_runtime::turn`), the one every front end runs a
//! turn through: what a run produces is in the session's file as it goes,
//! and a run whose transcript cannot follow stops before its next tool
//! acts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hermes_core::*;
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{NewSession, Store};
use hermes_runtime::turn::{TurnView, Unwatched, drive};

/// Calls `count` three times, one call a model turn, then answers.
struct CountThrice;

impl Model for CountThrice {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let done = request
            .messages
            .iter()
            .filter(|e| matches!(e.message, Message::Tool { .. }))
            .count();
        Ok(if done < 3 {
            Completion {
                tool_calls: vec![ToolCall::new(format!("c{done}"), "count", "{}")],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        } else {
            Completion {
                content: Some("counted".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        })
    }
}

/// A tool with a side effect the test can see.
struct Count {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Tool for Count {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("{n}"))
    }
}

fn agent(calls: &Arc<AtomicUsize>) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(Box::new(Count {
        spec: ToolSpec::new(
            "count",
            "Counts.",
            serde_json::json!({"type": "object", "properties": {}}),
        ),
        calls: Arc::clone(calls),
    }));
    Agent::new(Arc::new(CountThrice), Arc::new(tools), "sys")
}

/// Counts the events it is shown, and every entry after it was stored.
#[derive(Default)]
struct Seen {
    events: usize,
    stored: usize,
}

impl TurnView for Seen {
    fn on_event(&mut self, _event: &AgentEvent<'_>) {
        self.events += 1;
    }

    fn store(&mut self, entry: &LedgerEntry, writer: &mut TurnWriter<'_>) -> bool {
        let ok = writer.append(entry);
        self.stored += usize::from(ok);
        ok
    }
}

#[test]
fn a_driven_turn_is_in_the_sessions_file_entry_by_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Mutex::new(Store::open(&path).unwrap());
    let session = store
        .lock()
        .unwrap()
        .create_session(&NewSession::default())
        .unwrap()
        .id;
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(&calls);
    let budget = IterationBudget::new(10);
    let mut seen = Seen::default();
    let driven = drive(
        &agent,
        Message::user("count three times"),
        Vec::new(),
        &budget,
        TurnWriter::new(&store, &session),
        &mut seen,
    );
    assert_eq!(driven.outcome.stop, StopReason::Completed);
    assert!(driven.answered());
    assert!(driven.store_failure().is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // user, three (call, result) pairs, the answer.
    assert_eq!(seen.stored, 8);
    assert!(
        seen.events > seen.stored,
        "the view sees the other events too"
    );
    drop(driven);
    // Another connection reads what the driver stored.
    let stored = Store::open(&path).unwrap().load_view(&session).unwrap();
    let roles: Vec<_> = stored
        .iter()
        .map(|e| match &e.message {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        })
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}

#[test]
fn a_turn_whose_transcript_cannot_follow_stops_before_the_next_tool_acts() {
    let store = Mutex::new(Store::open_in_memory().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(&calls);
    let budget = IterationBudget::new(10);
    // No such session: the first write fails.
    let driven = drive(
        &agent,
        Message::user("count three times"),
        Vec::new(),
        &budget,
        TurnWriter::new(&store, "20261205_000000_nosuch"),
        &mut Unwatched,
    );
    assert!(driven.store_failure().is_some());
    assert_eq!(driven.outcome.stop, StopReason::Interrupted);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the user's message was not stored, so no tool ran"
    );
}
