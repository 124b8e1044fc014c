//! The agent loop's own cost per iteration, with an instant model and a
//! no-op tool, at 10, 100 and 1000 history messages. The loop borrows the
//! ledger for each request instead of copying it, so the figure must stay
//! flat as the history grows.
//!
//! One measured run = 2 iterations: a model call that asks for the no-op
//! tool, the tool call, then a model call that answers.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
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
                tool_calls: vec![ToolCall::new("call_1", "noop", "{}")],
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
        Ok(String::new())
    }
}

fn history(n: usize) -> Vec<LedgerEntry> {
    (0..n)
        .map(|i| {
            let text = format!("message {i}: {}", "lorem ipsum ".repeat(20));
            LedgerEntry::new(if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            })
        })
        .collect()
}

fn loop_overhead(c: &mut Criterion) {
    let tools = ToolRegistry::new().with(Noop(ToolSpec::new(
        "noop",
        "does nothing",
        serde_json::json!({"type": "object", "properties": {}}),
    )));
    let agent = Agent::new(Arc::new(InstantModel), Arc::new(tools), "You are Hermes.");
    let mut group = c.benchmark_group("loop_overhead");
    // Two iterations per run: report per iteration.
    group.throughput(Throughput::Elements(2));
    for n in [10usize, 100, 1000] {
        group.bench_with_input(BenchmarkId::new("history", n), &n, |b, &n| {
            let mut hist = Some(history(n));
            b.iter(|| {
                let budget = IterationBudget::new(90);
                let h = hist.take().unwrap_or_default();
                let out = agent.run(black_box("go"), h, &budget, &mut NoObserver);
                let mut messages = out.messages;
                messages.truncate(n);
                hist = Some(messages);
            });
        });
    }
    // The same with the repeat guard on (SPEC Y6): each tool call's
    // arguments parsed and hashed with its result.
    let guarded = agent.with_repeat_guard(Some(RepeatGuard::DEFAULT));
    group.bench_function(BenchmarkId::new("history_guarded", 100), |b| {
        let mut hist = Some(history(100));
        b.iter(|| {
            let budget = IterationBudget::new(90);
            let h = hist.take().unwrap_or_default();
            let out = guarded.run(black_box("go"), h, &budget, &mut NoObserver);
            let mut messages = out.messages;
            messages.truncate(100);
            hist = Some(messages);
        });
    });
    group.finish();
}

criterion_group!(benches, loop_overhead);
criterion_main!(benches);
