//! Compactions in the store (SPEC X1): the originals stay, the view the core
//! compacted is what loads, and anything that does not match is refused —
//! on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use backends::{Db, both};

use std::sync::Arc;

use hermes_core::context::{ContextConfig, ContextWindow, WindowSource};
use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, LedgerEntry, Message, Model, ModelError,
    StreamSink, SummaryPlacement, ToolCall, ToolRegistry,
};
use hermes_runtime::store::{NewSession, Store, StoreError};
use rand::{RngExt, SeedableRng};

/// Writes a fixed summary, numbered.
struct Summarizer(std::sync::atomic::AtomicUsize);

impl Model for Summarizer {
    fn complete(
        &self,
        _request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        Ok(Completion {
            content: Some(format!("summary number {n}")),
            finish_reason: Some(FinishReason::Stop),
            ..Completion::default()
        })
    }
}

fn agent(window: u32) -> Agent {
    Agent::new(
        Arc::new(Summarizer(Default::default())),
        Arc::new(ToolRegistry::new()),
        "system",
    )
    .with_context(ContextConfig::new(Arc::new(ContextWindow::new(
        window,
        WindowSource::Configured,
    ))))
}

/// One exchange: a user message, maybe tool rounds, an answer.
fn exchange(rng: &mut impl RngExt, n: usize) -> Vec<LedgerEntry> {
    let mut out = vec![LedgerEntry::at(
        Message::user(format!(
            "question{n} {}",
            "word ".repeat(rng.random_range(5..80))
        )),
        n as u64,
    )];
    for round in 0..rng.random_range(0..3) {
        let calls: Vec<ToolCall> = (0..rng.random_range(1..3))
            .map(|c| ToolCall::new(format!("call_{n}_{round}_{c}"), "t", "{}"))
            .collect();
        out.push(LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: calls.clone(),
        }));
        for c in calls {
            out.push(LedgerEntry::new(Message::tool(
                c.id,
                "result ".repeat(rng.random_range(1..60)),
            )));
        }
    }
    out.push(LedgerEntry::new(Message::assistant(format!(
        "answer{n} {}",
        "text ".repeat(rng.random_range(5..80))
    ))));
    out
}

fn the_stored_view_is_the_view_the_core_compacted(db: Db) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    for round in 0..8 {
        // A database per round: searches below count one round's messages.
        let db = if round == 0 { &db } else { &Db::new(db.kind) };
        let mut store = db.open();
        let id = store.create_session(&NewSession::default()).unwrap().id;
        let agent = agent(rng.random_range(1_000..4_000));
        let mut view: Vec<LedgerEntry> = Vec::new();
        let mut originals: Vec<LedgerEntry> = Vec::new();
        let mut compactions = 0;
        for n in 0..40 {
            let added = exchange(&mut rng, n);
            store.append_messages(&id, &added).unwrap();
            originals.extend(added.iter().cloned());
            view.extend(added);
            if rng.random_bool(0.3) {
                let focus = rng.random_bool(0.5).then_some("the questions");
                if let Ok(c) = agent.compact(&mut view, focus) {
                    store.record_compaction(&id, &c).unwrap();
                    compactions += 1;
                }
            }
            assert_eq!(
                store.load_view(&id).unwrap(),
                view,
                "round {round}, exchange {n}"
            );
            assert_eq!(
                store.load_transcript(&id).unwrap(),
                originals,
                "originals untouched"
            );
        }
        assert!(compactions >= 3, "round {round}: {compactions} compactions");
        assert_eq!(store.compactions(&id).unwrap().len(), compactions);
        // Everything replaced is still found.
        assert_eq!(store.search("question0", 5).unwrap().len(), 1);
        assert_eq!(store.search("answer1", 5).unwrap().len(), 1);
    }
}

fn simple_session(store: &mut Store, exchanges: usize) -> (String, Vec<LedgerEntry>) {
    let id = store.create_session(&NewSession::default()).unwrap().id;
    let mut view = Vec::new();
    for n in 0..exchanges {
        let pair = [
            LedgerEntry::at(
                Message::user(format!("question{n} {}", "w ".repeat(200))),
                1,
            ),
            LedgerEntry::at(
                Message::assistant(format!("answer{n} {}", "w ".repeat(200))),
                2,
            ),
        ];
        store.append_messages(&id, &pair).unwrap();
        view.extend(pair);
    }
    (id, view)
}

fn a_compaction_of_a_stale_view_is_refused_and_changes_nothing(db: Db) {
    let mut store = db.open();
    let (id, mut view) = simple_session(&mut store, 10);
    // The caller's ledger misses the last exchange the store holds.
    store
        .append_messages(&id, &[LedgerEntry::new(Message::user("late"))])
        .unwrap();
    let c = agent(2_000).compact(&mut view, None).unwrap();
    let err = store.record_compaction(&id, &c).unwrap_err();
    assert!(matches!(err, StoreError::StaleView { .. }), "{err}");
    assert!(store.compactions(&id).unwrap().is_empty());
    assert_eq!(store.load_view(&id).unwrap().len(), 21);
    assert!(matches!(
        store.record_compaction("no-such-session", &c),
        Err(StoreError::SessionNotFound(_))
    ));
}

fn undo_of_a_turn_that_was_compacted_falls_back_to_the_view_before(db: Db) {
    let mut store = db.open();
    let (id, mut view) = simple_session(&mut store, 10);
    let agent = agent(2_000);
    let first = agent.compact(&mut view, None).unwrap();
    store.record_compaction(&id, &first).unwrap();
    let after_first = view.clone();
    // Another turn, compacted during its run.
    let turn = [
        LedgerEntry::new(Message::user(format!("last question {}", "w ".repeat(300)))),
        LedgerEntry::new(Message::assistant("last answer")),
    ];
    store.append_messages(&id, &turn).unwrap();
    view.extend(turn);
    let second = agent.compact(&mut view, None).unwrap();
    store.record_compaction(&id, &second).unwrap();
    assert_eq!(store.load_view(&id).unwrap(), view);
    // /undo removes that turn, and the compaction that summarised it.
    assert_eq!(store.undo_last_turn(&id).unwrap(), 2);
    assert_eq!(store.compactions(&id).unwrap().len(), 1);
    assert_eq!(store.load_view(&id).unwrap(), after_first);
    // A rewrite drops every compaction.
    store
        .replace_transcript(&id, &[LedgerEntry::new(Message::user("fresh"))])
        .unwrap();
    assert!(store.compactions(&id).unwrap().is_empty());
    assert_eq!(store.load_view(&id).unwrap().len(), 1);
}

fn a_summary_before_a_user_message_is_merged_into_it_when_loaded(db: Db) {
    let mut store = db.open();
    let (id, mut view) = simple_session(&mut store, 12);
    let c = agent(2_000).compact(&mut view, None).unwrap();
    assert_eq!(c.placement, SummaryPlacement::BeforeNext);
    store.record_compaction(&id, &c).unwrap();
    let loaded = store.load_view(&id).unwrap();
    assert_eq!(loaded, view);
    let merged = &loaded[c.head];
    let mark = merged.meta.compaction.unwrap();
    assert_eq!(mark.replaced as usize, c.replaced);
    let text = merged.message.content().unwrap();
    assert!(text.starts_with("[Context summary]"), "{text}");
    assert!(
        text.ends_with(&"w ".repeat(200)),
        "the original follows the summary"
    );
    // What the user wrote is still recoverable (for /retry).
    let original = store.load_transcript(&id).unwrap()[c.head + c.replaced].clone();
    assert_eq!(
        hermes_core::context::summary::original_text(merged),
        original.message.content()
    );
    // Roles still alternate.
    for pair in loaded.windows(2) {
        assert_ne!(pair[0].message.role(), pair[1].message.role());
    }
}

both!(
    the_stored_view_is_the_view_the_core_compacted,
    a_compaction_of_a_stale_view_is_refused_and_changes_nothing,
    undo_of_a_turn_that_was_compacted_falls_back_to_the_view_before,
    a_summary_before_a_user_message_is_merged_into_it_when_loaded,
);
