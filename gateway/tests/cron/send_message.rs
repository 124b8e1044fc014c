//! `send_message` from a session (issue 43 §2): to the home channel once, a
//! made-up target refused, a delivery that failed for good reported.

use super::*;

#[test]
fn send_message_reaches_the_home_channel_once_and_a_made_up_target_is_refused() {
    let g = gateway(settings(CatchUp::Once), true);
    let home = hermes_gateway::cron::home::home_key("test");
    g.store.lock().unwrap().kv_set(&home, "dm-home").unwrap();
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "send: test the backup is done",
    );
    g.wait_for("dm-alice", "tool said: Delivered to test.");
    assert_eq!(g.texts("dm-home"), ["the backup is done"]);
    // An id the model made up: refused with what is allowed, nothing sent.
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "send: test:dm-mallory hi",
    );
    g.wait_for("dm-alice", "not an allowed target");
    let refusal = g.texts("dm-alice").last().unwrap().clone();
    assert!(
        refusal.contains("test (home channel), test:friend"),
        "{refusal}"
    );
    g.settle();
    assert!(g.texts("dm-mallory").is_empty());
    assert_eq!(g.texts("dm-home"), ["the backup is done"], "sent once");
    // Both calls and their results are in alice's transcript.
    let store = g.store.lock().unwrap();
    let session = store
        .list_sessions(10)
        .unwrap()
        .into_iter()
        .find(|s| s.chat_id.as_deref() == Some("dm-alice"))
        .unwrap();
    let results: Vec<String> = store
        .load_transcript(&session.id)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.message {
            Message::Tool { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:#?}");
    assert_eq!(results[0], "Delivered to test.");
    assert!(results[1].contains("not an allowed target"), "{results:?}");
}

#[test]
fn send_message_reports_a_delivery_that_failed_for_good() {
    let g = gateway(settings(CatchUp::Once), true);
    let home = hermes_gateway::cron::home::home_key("test");
    g.store.lock().unwrap().kv_set(&home, "dm-home").unwrap();
    // The platform is down: every attempt fails (the reply to alice too).
    g.adapter.fail_next_sends(1000);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let (clock, stop) = (g.clock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                clock.advance(Duration::from_secs(30));
            }
        })
    };
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "send: test are you there",
    );
    let deadline = Instant::now() + WAIT;
    let result = loop {
        let store = g.store.lock().unwrap();
        let found = store
            .list_sessions(10)
            .unwrap()
            .into_iter()
            .find(|s| s.chat_id.as_deref() == Some("dm-alice"))
            .and_then(|s| {
                store
                    .load_transcript(&s.id)
                    .unwrap()
                    .into_iter()
                    .find_map(|e| match e.message {
                        Message::Tool { content, .. } => Some(content),
                        _ => None,
                    })
            });
        drop(store);
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "no tool result");
        std::thread::sleep(Duration::from_millis(50));
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    ticker.join().unwrap();
    assert!(
        result.starts_with("not delivered to test:") && result.contains("platform is down"),
        "{result}"
    );
    assert!(g.texts("dm-home").is_empty());
}

/// The row of a delivered `send_message` is pruned once it is a day old,
/// not before.
#[test]
fn delivered_event_rows_are_pruned_after_their_retention() {
    let g = gateway(settings(CatchUp::Once), true);
    let home = hermes_gateway::cron::home::home_key("test");
    g.store.lock().unwrap().kv_set(&home, "dm-home").unwrap();
    g.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "send: test pruned later");
    g.wait_for("dm-alice", "tool said: Delivered to test.");
    let sent = |store: &hermes_runtime::store::Store| {
        store
            .jobs(true)
            .unwrap()
            .into_iter()
            .filter(|j| {
                j.id.starts_with(hermes_gateway::cron::send::MESSAGE_JOB_PREFIX)
            })
            .count()
    };
    let now = hermes_core::Clock::now_ms(&*g.clock);
    let mut store = g.store.lock().unwrap();
    assert_eq!(sent(&store), 1);
    let early = hermes_gateway::cron::prune_events(&mut store, now + 3_600_000).unwrap();
    assert_eq!(early, 0, "kept for a day");
    assert_eq!(sent(&store), 1);
    let late = hermes_gateway::cron::prune_events(&mut store, now + 2 * 86_400_000).unwrap();
    assert_eq!(late, 1);
    assert_eq!(sent(&store), 0, "the row is gone");
}

/// A finished webhook event row (`w…`) is kept for seven days after its
/// run, then pruned; a webhook row still waiting and a recurring job's
/// row are never pruned, however old.
#[test]
fn finished_webhook_rows_are_pruned_after_seven_days_and_nothing_else() {
    use hermes_runtime::store::JobRecord;
    const DAY: u64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let prefix = hermes_gateway::cron::WEBHOOK_JOB_PREFIX;
    let row =
        |id: &str| JobRecord::one_off(id.into(), "event".into(), "p".into(), "origin".into(), T0);
    let mut finished = row(&format!("{prefix}00finished"));
    finished.state = JobState::Done;
    finished.runs_done = 1;
    finished.next_run_ms = None;
    finished.last_run_ms = Some(T0);
    finished.last_outcome = Some("delivered".into());
    store.job_insert(&finished).unwrap();
    let waiting = row(&format!("{prefix}00waiting"));
    store.job_insert(&waiting).unwrap();
    let mut recurring = row("j0000000001");
    recurring.state = JobState::Done;
    recurring.last_run_ms = Some(T0);
    store.job_insert(&recurring).unwrap();
    let ids = |store: &Store| {
        let mut ids: Vec<String> = store
            .jobs(true)
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        ids.sort();
        ids
    };
    let six_days = hermes_gateway::cron::prune_events(&mut store, T0 + 7 * DAY - 1).unwrap();
    assert_eq!(six_days, 0, "kept for seven days");
    assert_eq!(ids(&store).len(), 3);
    let week = hermes_gateway::cron::prune_events(&mut store, T0 + 7 * DAY).unwrap();
    assert_eq!(week, 1);
    assert_eq!(
        ids(&store),
        ["j0000000001".to_owned(), format!("{prefix}00waiting")],
        "only the finished webhook row went"
    );
    let later = hermes_gateway::cron::prune_events(&mut store, T0 + 365 * DAY).unwrap();
    assert_eq!(later, 0, "a waiting event row and a recurring job stay");
}
