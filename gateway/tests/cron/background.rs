//! `/background PROMPT` (issue 46): a one-off job of the scheduler.

use super::*;

/// `/background PROMPT` (issue 46): a separate session whose answer comes
/// to the chat once, while the chat goes on.
#[test]
fn background_work_is_delivered_once_while_the_chat_goes_on() {
    let g = gateway(settings(CatchUp::Once), true);
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "/background compare the prices",
    );
    g.wait_for("dm-alice", "Working on it in the background");
    g.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "meanwhile, hello");
    g.wait_for("dm-alice", "answer: meanwhile, hello");
    g.wait_for("dm-alice", "answer: compare the prices");
    g.settle();
    let texts = g.texts("dm-alice");
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("answer: compare the prices"))
            .count(),
        1,
        "{texts:#?}"
    );
    // A separate session: the chat's own conversation never saw the prompt.
    let seen = g.model.seen.lock().unwrap().clone();
    let chat_turn = seen.iter().find(|s| s.user.contains("meanwhile")).unwrap();
    assert!(!chat_turn.user.contains("compare the prices"));
    let jobs = g.store.lock().unwrap().jobs(true).unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].id.starts_with("bg_"), "{:?}", jobs[0].id);
    assert_eq!(g.runs(&jobs[0].id).len(), 1);
    // Nothing to do: the usage, and no job.
    g.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "/background");
    g.wait_for("dm-alice", "Usage: /background PROMPT");
}

#[test]
fn background_work_queued_before_a_stop_is_delivered_once_after_the_restart() {
    let mut g = gateway(settings(CatchUp::Once), false);
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "/background summarise the logs",
    );
    g.wait_for("dm-alice", "Working on it in the background");
    assert_eq!(g.store.lock().unwrap().jobs(false).unwrap().len(), 1);
    // Stopped before the scheduler ran it; the home (and its database)
    // stays for the next start.
    let dir = std::mem::replace(&mut g._dir, tempfile::tempdir().unwrap());
    let now = hermes_core::Clock::now_ms(&*g.clock);
    drop(g);
    let g = gateway_in(dir, now, settings(CatchUp::Once), true);
    g.wait_for("dm-alice", "answer: summarise the logs");
    g.settle();
    let texts = g.texts("dm-alice");
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("answer: summarise the logs"))
            .count(),
        1,
        "{texts:#?}"
    );
}
