//! Which session a message belongs to and whether it runs at all: groups
//! per user or shared, duplicate message ids (per chat and platform), and
//! users outside the allow-list.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use hermes_gateway::event::ChatType;
use hermes_gateway::runner::refusal_text;
use hermes_gateway_testing::{ManualClock, Pace, TestAdapter, event};
use hermes_runtime::store::Store;

use super::support::{T0, WAIT, build, dm_key, harness, pairs, user_texts};

#[test]
fn two_users_in_one_group_get_separate_histories() {
    let h = harness(Pace::Instant, |_| {});
    h.adapter.say(ChatType::Group, "g1", "alice", "I am alice");
    h.wait_texts("g1", 1);
    h.adapter.say(ChatType::Group, "g1", "bob", "I am bob");
    h.wait_texts("g1", 2);
    h.adapter.say(ChatType::Group, "g1", "alice", "who am I?");
    h.wait_texts("g1", 3);

    let calls = h.model.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(user_texts(&calls[1]), vec!["I am bob"]);
    assert_eq!(user_texts(&calls[2]), vec!["I am alice", "who am I?"]);
    assert_eq!(
        h.transcript("agent:main:test:group:g1:alice"),
        pairs(&[
            ("user", "I am alice"),
            ("assistant", "reply to: I am alice"),
            ("user", "who am I?"),
            ("assistant", "reply to: who am I?"),
        ])
    );
    assert_eq!(h.transcript("agent:main:test:group:g1:bob").len(), 2);
}

#[test]
fn a_shared_group_has_one_history() {
    let h = harness(Pace::Instant, |c| c.group_sessions_per_user = false);
    h.adapter.say(ChatType::Group, "g1", "alice", "I am alice");
    h.wait_texts("g1", 1);
    h.adapter.say(ChatType::Group, "g1", "bob", "I am bob");
    h.wait_texts("g1", 2);
    assert_eq!(
        user_texts(&h.model.calls()[1]),
        vec!["I am alice", "I am bob"]
    );
    assert_eq!(h.transcript("agent:main:test:group:g1").len(), 4);
}

#[test]
fn a_duplicate_message_id_is_ignored() {
    let h = harness(Pace::Instant, |_| {});
    let ev = event(
        "test",
        ChatType::Dm,
        "dm-alice",
        "alice",
        "same-id",
        "hello",
    );
    h.adapter.inject(ev.clone());
    h.wait_texts("dm-alice", 1);
    h.adapter.inject(ev);
    h.dm("alice", "next");
    // The same session's work is ordered: had the duplicate been accepted it
    // would have run before "next".
    let texts = h.wait_text("dm-alice", |t| t == "reply to: next");
    assert_eq!(texts, vec!["reply to: hello", "reply to: next"]);
    assert_eq!(h.model.call_count(), 2);
}

#[test]
fn dedup_same_message_id_in_two_dms_both_answered() {
    // Telegram numbers messages per chat: alice's #42 and bob's #42 are
    // different messages and both must be answered.
    let h = harness(Pace::Instant, |_| {});
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-alice",
        "alice",
        "42",
        "from alice",
    ));
    h.wait_texts("dm-alice", 1);
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-bob",
        "bob",
        "42",
        "from bob",
    ));
    assert_eq!(h.wait_texts("dm-bob", 1), vec!["reply to: from bob"]);
    assert_eq!(h.adapter.texts_to("dm-alice"), vec!["reply to: from alice"]);
    // A real redelivery inside one chat is still dropped.
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-bob",
        "bob",
        "42",
        "from bob",
    ));
    h.dm("bob", "next");
    let texts = h.wait_text("dm-bob", |t| t == "reply to: next");
    assert_eq!(texts, vec!["reply to: from bob", "reply to: next"]);
}

#[test]
fn the_same_id_on_another_platform_is_not_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    let other = TestAdapter::new("other");
    let h = build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        Pace::Instant,
        |_| {},
        std::slice::from_ref(&other),
    );
    h.adapter
        .inject(event("test", ChatType::Dm, "c1", "alice", "7", "on test"));
    other.inject(event("other", ChatType::Dm, "c1", "alice", "7", "on other"));
    h.wait_texts("c1", 1);
    other.wait_until(WAIT, |s| !s.is_empty()).unwrap();
    assert_eq!(other.texts_to("c1"), vec!["reply to: on other"]);
    assert_eq!(h.adapter.texts_to("c1"), vec!["reply to: on test"]);
}

#[test]
fn an_unknown_user_is_refused_without_a_model_call() {
    let other = TestAdapter::new("other");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    let h = build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        Pace::Instant,
        |c| {
            c.allow
                .per_platform
                .insert("other".into(), HashSet::from(["dave".to_owned()]));
            // The refusal (pairing codes: tests/chat_ergonomics).
            c.pairing = false;
        },
        std::slice::from_ref(&other),
    );
    h.dm("mallory", "let me in");
    let texts = h.wait_texts("dm-mallory", 1);
    assert_eq!(texts, vec![refusal_text("mallory")]);
    h.dm("mallory", "please");
    // dave is allowed on "other" only.
    h.dm("dave", "hi from test");
    other.inject(event(
        "other",
        ChatType::Dm,
        "dm-dave",
        "dave",
        "x1",
        "hi from other",
    ));
    other.wait_until(WAIT, |s| !s.is_empty()).unwrap();
    h.dm("alice", "hi");
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-dave", 1);

    assert_eq!(other.texts_to("dm-dave"), vec!["reply to: hi from other"]);
    assert_eq!(h.adapter.texts_to("dm-dave"), vec![refusal_text("dave")]);
    // One refusal per user in the window, no model call, nothing stored.
    assert_eq!(h.adapter.texts_to("dm-mallory").len(), 1);
    let seen: Vec<String> = h.model.calls().iter().flat_map(|c| user_texts(c)).collect();
    assert_eq!(seen, vec!["hi from other", "hi"]);
    assert!(h.transcript(&dm_key("mallory")).is_empty());
}
