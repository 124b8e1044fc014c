//! Compaction planning and the pre-call estimate (SPEC X1) on a
//! 10 000-message ledger: where to cut (head, tail, an earlier summary) and
//! how big the next request is. Both borrow the ledger; planning reads only
//! the head, the tail and the scan for an earlier summary (target: under
//! 1 ms, no copy of the history — `core/tests/plan_alloc.rs` proves it
//! allocates nothing).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hermes_core::context::ContextPolicy;
use hermes_core::context::estimate::{fresh_from, request_tokens};
use hermes_core::context::plan::{Budgets, plan};
use hermes_core::{EntryMeta, LedgerEntry, Message, ToolCall, Usage};

/// Exchanges of a question, a tool call with its result and an answer, with
/// the usage a provider reports on each assistant message.
fn ledger(n: usize) -> Vec<LedgerEntry> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0usize;
    while out.len() < n {
        let usage = Some(Usage {
            prompt_tokens: 1_000 + i as u64 * 50,
            completion_tokens: 80,
            total_tokens: 1_080 + i as u64 * 50,
            ..Usage::default()
        });
        out.push(LedgerEntry::new(Message::user(format!(
            "question {i}: {}",
            "how does this part work? ".repeat(8)
        ))));
        out.push(LedgerEntry {
            message: Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall::new(
                    format!("call_{i}"),
                    "read_file",
                    r#"{"path":"src/lib.rs"}"#,
                )],
            },
            meta: EntryMeta {
                usage,
                ..EntryMeta::default()
            },
        });
        out.push(LedgerEntry::new(Message::tool(
            format!("call_{i}"),
            "   1|fn main() { println!(\"hello\"); }\n".repeat(30),
        )));
        out.push(LedgerEntry {
            message: Message::assistant(format!(
                "answer {i}: {}",
                "it reads the file. ".repeat(15)
            )),
            meta: EntryMeta {
                usage,
                ..EntryMeta::default()
            },
        });
        i += 1;
    }
    out.truncate(n);
    out
}

fn context(c: &mut Criterion) {
    let mut group = c.benchmark_group("context");
    for window in [8_192u64, 131_072] {
        let view = ledger(10_000);
        let b = ContextPolicy::default().budgets(window, 2_000);
        let budgets = Budgets {
            head: b.head,
            tail: b.tail,
            tail_max: b.tail,
        };
        group.bench_with_input(
            BenchmarkId::new("plan_10000_messages_window", window),
            &view,
            |bench, view| bench.iter(|| plan(black_box(view), black_box(budgets))),
        );
    }
    let view = ledger(10_000);
    let fresh = fresh_from(&view);
    group.bench_function("estimate_anchored_10000_messages", |b| {
        b.iter(|| request_tokens(black_box(2_000), black_box(&view), black_box(fresh)))
    });
    let unanchored: Vec<LedgerEntry> = view
        .iter()
        .map(|e| LedgerEntry::new(e.message.clone()))
        .collect();
    group.bench_function("estimate_unanchored_10000_messages", |b| {
        b.iter(|| request_tokens(black_box(2_000), black_box(&unanchored), black_box(0)))
    });
    group.finish();
}

criterion_group!(benches, context);
criterion_main!(benches);
