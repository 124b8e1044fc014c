//! The SQLite store's hot paths: appending one message after a model call
//! (target ≤ 30 µs) and loading a 1000-message transcript before a run
//! (target ≤ 1 ms, SPEC G5 loads it every time).
//!
//! Appends are measured on a real file in WAL mode with both
//! `synchronous = NORMAL` (the default: durable against process death, SPEC
//! E3; fsync at checkpoints only) and `FULL` (an fsync per commit, for
//! power-loss durability), plus an in-memory baseline that shows the cost of
//! SQLite itself without any file I/O. The database lives under Cargo's
//! target tmpdir so it is on the build disk, not a tmpfs.
//!
//! Full-text indexing moved from every append to the search that needs it
//! (catch-up, schema v3), so `store/search` shows what a search costs with
//! nothing to index and right after 100 unindexed appends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_core::{EntryMeta, FinishReason, LedgerEntry, Message, ToolCall, Usage};
use hermes_runtime::store::{NewSession, Store, Synchronous};

/// A typical assistant answer with metadata (≈300 bytes of text).
fn answer(i: u64) -> LedgerEntry {
    LedgerEntry {
        message: Message::assistant(format!(
            "Answer {i}: {}",
            "the quick brown fox jumps over the lazy dog; ".repeat(6)
        )),
        meta: EntryMeta {
            reasoning: Some("short reasoning".into()),
            usage: Some(Usage {
                prompt_tokens: 1200 + i,
                completion_tokens: 80,
                total_tokens: 1280 + i,
                ..Usage::default()
            }),
            timestamp_ms: 1_795_997_703_000 + i,
            finish_reason: Some(FinishReason::Stop),
            interrupted: false,
            compaction: None,
            ..EntryMeta::default()
        },
    }
}

/// A realistic mix: user, assistant with a tool call, tool result, answer.
fn transcript(len: u64) -> Vec<LedgerEntry> {
    (0..len)
        .map(|i| match i % 4 {
            0 => LedgerEntry::at(Message::user(format!("question {i}: how do I do X?")), i),
            1 => LedgerEntry::at(
                Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall::new(
                        format!("call_{i}"),
                        "read_file",
                        r#"{"path":"src/main.rs"}"#,
                    )],
                },
                i,
            ),
            2 => LedgerEntry::at(
                Message::tool(format!("call_{}", i - 1), "fn main() {}\n".repeat(20)),
                i,
            ),
            _ => answer(i),
        })
        .collect()
}

fn file_store(dir: &Path, name: &str, sync: Synchronous) -> (Store, String) {
    let mut store = Store::open(&dir.join(name)).unwrap();
    store.set_synchronous(sync).unwrap();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    (store, id)
}

fn append_one(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let entry = answer(1);
    let mut group = c.benchmark_group("store/append_one");
    for (name, sync) in [
        ("wal_normal", Synchronous::Normal),
        ("wal_full", Synchronous::Full),
    ] {
        let (mut store, id) = file_store(dir.path(), &format!("{name}.db"), sync);
        group.bench_function(name, |b| {
            b.iter(|| {
                store
                    .append_messages(&id, std::slice::from_ref(black_box(&entry)))
                    .unwrap();
            });
        });
    }
    let mut store = Store::open_in_memory().unwrap();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    group.bench_function("memory", |b| {
        b.iter(|| {
            store
                .append_messages(&id, std::slice::from_ref(black_box(&entry)))
                .unwrap();
        });
    });
    group.finish();
}

fn load_transcript(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (mut store, id) = file_store(dir.path(), "load.db", Synchronous::Normal);
    let entries = transcript(1000);
    store.append_messages(&id, &entries).unwrap();
    // Other sessions in the same file, so the lookup is not trivially the
    // whole table.
    for _ in 0..20 {
        let other = store.create_session(&NewSession::default()).unwrap().id;
        store.append_messages(&other, &entries[..100]).unwrap();
    }
    assert_eq!(store.load_transcript(&id).unwrap(), entries);
    c.bench_function("store/load_transcript_1000", |b| {
        b.iter(|| black_box(store.load_transcript(black_box(&id)).unwrap()));
    });
}

fn search(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (mut store, id) = file_store(dir.path(), "search.db", Synchronous::Normal);
    let entries = transcript(1000);
    store.append_messages(&id, &entries).unwrap();
    assert!(!store.search("fox", 10).unwrap().is_empty());
    let mut group = c.benchmark_group("store/search");
    group.bench_function("indexed", |b| {
        b.iter(|| black_box(store.search(black_box("lazy dog"), 10).unwrap()));
    });
    // Each iteration first appends 100 messages (not timed), so the search
    // has to index them before querying.
    group.bench_function("after_100_appends", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for entry in &entries[..100] {
                    store
                        .append_messages(&id, std::slice::from_ref(entry))
                        .unwrap();
                }
                let start = Instant::now();
                black_box(store.search(black_box("lazy dog"), 10).unwrap());
                spent += start.elapsed();
            }
            spent
        });
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = append_one, load_transcript, search
}
criterion_main!(benches);
