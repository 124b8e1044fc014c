//! A message that arrives while its session is busy: interrupt mode (only
//! the latest waiting message runs, an early interrupt is not lost), queue
//! mode, and turns of different sessions in parallel up to the worker bound.

use std::time::Duration;

use hermes_core::Message;
use hermes_gateway::config::BusyMode;
use hermes_gateway::runner::{INTERRUPT_NOTICE, QUEUE_NOTICE};
use hermes_gateway_testing::Pace;

use super::support::{WAIT, dm_key, harness, pairs, user_texts};

#[test]
fn a_new_message_interrupts_the_slow_turn_and_only_the_latest_waiting_one_runs() {
    let h = harness(Pace::Gated, |_| {});
    h.dm("alice", "one");
    h.wait_model_waiting(1);
    {
        // Holding the store keeps turn "one" from finishing (it must persist
        // before the worker moves on), so "two" and "three" are both waiting
        // before anything else can run.
        let _guard = h.store.lock().unwrap();
        h.dm("alice", "two");
        h.dm("alice", "three");
        h.adapter
            .wait_until(WAIT, |s| s.iter().any(|m| m.text == INTERRUPT_NOTICE))
            .unwrap();
    }
    h.wait_model_waiting(2);
    h.model.release(1);
    let texts = h.wait_text("dm-alice", |t| t == "reply to: three");

    // The partial reply came first, the notice once.
    let partial = texts
        .iter()
        .position(|t| t == "partial reply to: one")
        .unwrap();
    let last = texts.iter().position(|t| t == "reply to: three").unwrap();
    assert!(partial < last, "{texts:?}");
    assert_eq!(
        texts.iter().filter(|t| *t == INTERRUPT_NOTICE).count(),
        1,
        "{texts:?}"
    );

    // "two" was replaced: not answered on its own, but accepted, so it is
    // kept (E3) just before "three", which ran on the full, reloaded history.
    let calls = h.model.calls();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(user_texts(&calls[1]), vec!["one", "two", "three"]);
    assert_eq!(
        calls[1][1],
        Message::assistant("partial reply to: one"),
        "the interrupted turn's partial answer is in the history"
    );
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "one"),
            ("assistant", "partial reply to: one"),
            ("user", "two"),
            ("user", "three"),
            ("assistant", "reply to: three"),
        ])
    );
    let report = h.shutdown();
    assert!(report.all_turns_finished && report.marked_clean);
}

#[test]
fn an_interrupt_before_the_turn_starts_is_not_lost() {
    // One worker: bob's turn holds it, so alice's first turn is dispatched
    // but waits. Her second message interrupts that turn before its run
    // begins (and clears the agent's flag); the turn must still stop.
    let h = harness(Pace::Gated, |c| c.max_workers = 1);
    h.dm("bob", "b");
    h.wait_model_waiting(1);
    h.dm("alice", "a1");
    // Until the worker takes a1 it is merely buffered, and a2 would replace
    // it; wait until /status says a turn is registered for alice.
    let mut status_seen = 0;
    loop {
        h.dm("alice", "/status");
        status_seen += 1;
        let texts = h.wait_texts("dm-alice", status_seen);
        if texts.last().unwrap().contains("Running: yes") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    h.dm("alice", "a2");
    h.wait_text("dm-alice", |t| t == INTERRUPT_NOTICE);
    h.model.release(1);
    h.wait_model_waiting(2);
    h.model.release(1);
    h.wait_text("dm-alice", |t| t == "reply to: a2");
    let calls = h.model.calls();
    assert_eq!(calls.len(), 2, "a1 never reached the model");
    // a1 was accepted, so it is stored (E3) and part of a2's history.
    assert_eq!(user_texts(&calls[1]), vec!["a1", "a2"]);
}

#[test]
fn queue_mode_runs_every_message_in_order() {
    let h = harness(Pace::Gated, |c| c.busy_mode = BusyMode::Queue);
    h.dm("alice", "q1");
    h.wait_model_waiting(1);
    h.dm("alice", "q2");
    h.dm("alice", "q3");
    h.wait_text("dm-alice", |t| t == QUEUE_NOTICE);
    h.model.release(3);
    let texts = h.wait_text("dm-alice", |t| t == "reply to: q3");
    let replies: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("reply to:"))
        .collect();
    assert_eq!(replies, ["reply to: q1", "reply to: q2", "reply to: q3"]);
    assert_eq!(texts.iter().filter(|t| *t == QUEUE_NOTICE).count(), 1);
    let calls = h.model.calls();
    assert_eq!(user_texts(&calls[2]), vec!["q1", "q2", "q3"]);
    assert_eq!(h.transcript(&dm_key("alice")).len(), 6);
}

#[test]
fn different_sessions_run_in_parallel() {
    let h = harness(Pace::Gated, |c| c.max_workers = 2);
    h.dm("alice", "a");
    h.dm("bob", "b");
    // Both turns are inside the model at the same time.
    assert!(h.model.wait_until(WAIT, |_, waiting| waiting == 2));
    h.model.release(2);
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-bob", 1);
    assert_eq!(h.adapter.texts_to("dm-bob"), vec!["reply to: b"]);
}

#[test]
fn the_worker_bound_limits_concurrent_turns() {
    let h = harness(Pace::Gated, |c| c.max_workers = 1);
    h.dm("alice", "a");
    h.dm("bob", "b");
    h.wait_model_waiting(1);
    // Give a (wrongly) unbounded runner every chance to start the second turn.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(h.model.call_count(), 1);
    h.model.release(1);
    h.wait_model_waiting(2);
    h.model.release(1);
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-bob", 1);
}
