//! Read-only tool calls of one model turn run at the same time (SPEC Y6):
//! a turn of three `read_file`-like calls, each waiting 20 ms (a cold disk,
//! a network file system), answered one after the other (the core's
//! `SequentialBatch`) and concurrently (the runtime's `ParallelBatch`).
//! The concurrent turn should take about as long as one call.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, IterationBudget, Model, ModelError, NoObserver,
    Role, SequentialBatch, StreamSink, Tool, ToolBatchRunner, ToolCall, ToolContext, ToolError,
    ToolRegistry, ToolSpec,
};
use hermes_runtime::parallel::ParallelBatch;

/// How long one read takes.
const READ_TIME: Duration = Duration::from_millis(20);

/// Asks for three reads after the user's message, answers after them.
struct ThreeReads;

impl Model for ThreeReads {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let last = request.messages.last().map(|e| e.message.role());
        Ok(if last == Some(Role::User) {
            Completion {
                tool_calls: (0..3)
                    .map(|i| {
                        ToolCall::new(
                            format!("call_{i}"),
                            "read_file",
                            format!(r#"{{"path":"src/file{i}.rs"}}"#),
                        )
                    })
                    .collect(),
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

/// A read-only tool that takes [`READ_TIME`].
struct SlowRead(ToolSpec);

impl Tool for SlowRead {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        std::thread::sleep(READ_TIME);
        Ok(format!("contents of {arguments}"))
    }
    fn read_only(&self) -> bool {
        true
    }
}

fn agent(runner: Arc<dyn ToolBatchRunner>) -> Agent {
    let tools = ToolRegistry::new().with(SlowRead(ToolSpec::new(
        "read_file",
        "reads a file",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )));
    Agent::new(Arc::new(ThreeReads), Arc::new(tools), "You are Hermes.").with_batch_runner(runner)
}

fn parallel_tools(c: &mut Criterion) {
    let mut group = c.benchmark_group("parallel_tools");
    group.sample_size(20);
    for (name, runner) in [
        (
            "sequential",
            Arc::new(SequentialBatch) as Arc<dyn ToolBatchRunner>,
        ),
        ("parallel", Arc::new(ParallelBatch::default())),
    ] {
        let agent = agent(runner);
        group.bench_function(name, |b| {
            b.iter(|| {
                let budget = IterationBudget::new(90);
                agent.run("read three files", Vec::new(), &budget, &mut NoObserver)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, parallel_tools);
criterion_main!(benches);
