//! Sessions on both backends: their fields, reset, lookup by platform,
//! listing order, unique ids, crash recovery; and the key-value store.

use hermes_runtime::store::{NewSession, SessionStatus};

use super::support::{T0, TestClock, assistant, gateway_session, user};
use crate::backends::{self, Db, both};

fn session_fields_are_stored_and_updated(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let s = store
        .create_session(&gateway_session("agent:main:telegram:dm:42"))
        .unwrap();
    assert_eq!(s.session_key.as_deref(), Some("agent:main:telegram:dm:42"));
    assert_eq!(s.platform.as_deref(), Some("telegram"));
    assert_eq!(s.chat_id.as_deref(), Some("42"));
    assert_eq!(s.user_id.as_deref(), Some("7"));
    assert_eq!(s.model.as_deref(), Some("gpt-x"));
    assert_eq!(s.system_prompt, None);
    assert_eq!(s.title, None);
    assert_eq!((s.created_at_ms, s.updated_at_ms), (T0, T0));
    assert_eq!(s.status, SessionStatus::Active);
    assert_eq!(s.message_count, 0);
    assert!(s.id.starts_with("20261130_001503_"), "{}", s.id);

    store.set_system_prompt(&s.id, "You are Hermes.").unwrap();
    store.set_model(&s.id, "other-model").unwrap();
    store.set_title(&s.id, Some("Trip planning")).unwrap();
    clock.advance(5_000);
    store.append_messages(&s.id, &[user("hi", T0)]).unwrap();
    store.set_status(&s.id, SessionStatus::Ended).unwrap();
    let got = store.session(&s.id).unwrap().unwrap();
    assert_eq!(got.system_prompt.as_deref(), Some("You are Hermes."));
    assert_eq!(got.model.as_deref(), Some("other-model"));
    assert_eq!(got.title.as_deref(), Some("Trip planning"));
    assert_eq!(got.status, SessionStatus::Ended);
    assert_eq!(got.created_at_ms, T0);
    assert_eq!(got.updated_at_ms, T0 + 5_000);
    assert_eq!(got.message_count, 1);
    store.set_title(&s.id, None).unwrap();
    assert_eq!(store.session(&s.id).unwrap().unwrap().title, None);
}

/// `create_session` answers with the new row without reading it back: the
/// answer is exactly what a later read finds, every field set.
fn a_created_session_is_the_row_as_stored(db: Db) {
    let mut store = db.open().with_clock(TestClock::at(T0));
    let full = NewSession {
        session_key: Some("agent:main:telegram:dm:42"),
        platform: Some("telegram"),
        chat_id: Some("42"),
        user_id: Some("7"),
        model: Some("gpt-x"),
        system_prompt: Some("You are Hermes.\n\"quoted\" ✓"),
        workdir: Some("/home/me/project"),
        title: Some("Trip planning — ✈"),
    };
    for new in [full, NewSession::default()] {
        let created = store.create_session(&new).unwrap();
        assert_eq!(created.title.as_deref(), new.title);
        assert_eq!(store.session(&created.id).unwrap(), Some(created));
    }
}

fn reset_ends_the_active_session_and_starts_a_new_one(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let key = "agent:main:telegram:dm:42";
    let other_key = "agent:main:telegram:dm:43";
    assert!(store.active_session_for_key(key).unwrap().is_none());

    let old = store.create_session(&gateway_session(key)).unwrap();
    let other = store.create_session(&gateway_session(other_key)).unwrap();
    store
        .append_messages(&old.id, &[user("before reset", 1)])
        .unwrap();
    assert_eq!(
        store.active_session_for_key(key).unwrap().unwrap().id,
        old.id
    );

    clock.advance(10);
    // The key argument wins over the one in `new`.
    let new = store
        .reset(
            key,
            &NewSession {
                session_key: Some("ignored"),
                model: Some("m2"),
                ..NewSession::default()
            },
        )
        .unwrap();
    assert_ne!(new.id, old.id);
    assert_eq!(new.session_key.as_deref(), Some(key));
    assert_eq!(new.model.as_deref(), Some("m2"));
    assert_eq!(new.status, SessionStatus::Active);
    assert_eq!(new.message_count, 0);
    assert_eq!(new.created_at_ms, T0 + 10);

    let old_now = store.session(&old.id).unwrap().unwrap();
    assert_eq!(old_now.status, SessionStatus::Ended);
    assert_eq!(
        store.load_transcript(&old.id).unwrap(),
        vec![user("before reset", 1)]
    );
    assert_eq!(
        store.active_session_for_key(key).unwrap().unwrap().id,
        new.id
    );
    // Other keys are untouched.
    assert_eq!(
        store.active_session_for_key(other_key).unwrap().unwrap().id,
        other.id
    );

    // Reset of a key with no active session just creates one.
    let fresh = store
        .reset("agent:main:wecom:dm:1", &NewSession::default())
        .unwrap();
    assert_eq!(
        store
            .active_session_for_key("agent:main:wecom:dm:1")
            .unwrap()
            .unwrap()
            .id,
        fresh.id
    );
}

fn latest_session_on_a_platform_ignores_other_platforms(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let cli = |p| NewSession {
        platform: Some(p),
        ..NewSession::default()
    };
    let older_cli = store.create_session(&cli("cli")).unwrap();
    clock.advance(10);
    let newer_cli = store.create_session(&cli("cli")).unwrap();
    clock.advance(10);
    let chat = store.create_session(&cli("telegram")).unwrap();
    clock.advance(10);
    store
        .append_messages(&older_cli.id, &[user("back", T0 + 30)])
        .unwrap();
    clock.advance(10);
    store
        .append_messages(&chat.id, &[user("hi", T0 + 40)])
        .unwrap();
    assert_eq!(store.latest_session().unwrap().unwrap().id, chat.id);
    assert_eq!(
        store.latest_session_on("cli").unwrap().unwrap().id,
        older_cli.id
    );
    assert_ne!(older_cli.id, newer_cli.id);
    assert_eq!(
        store.latest_session_on("telegram").unwrap().unwrap().id,
        chat.id
    );
}

fn listing_is_newest_first_and_latest_is_most_recently_updated(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    assert!(store.latest_session().unwrap().is_none());
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(store.create_session(&NewSession::default()).unwrap().id);
        clock.advance(1_000);
    }
    // Two created in the same millisecond: creation order still decides.
    ids.push(store.create_session(&NewSession::default()).unwrap().id);
    ids.push(store.create_session(&NewSession::default()).unwrap().id);

    let listed: Vec<String> = store
        .list_sessions(100)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(listed, expected);
    let first3: Vec<String> = store
        .list_sessions(3)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(first3, expected[..3]);
    assert!(store.list_sessions(0).unwrap().is_empty());

    assert_eq!(store.latest_session().unwrap().unwrap().id, ids[6]);
    clock.advance(1_000);
    store.append_messages(&ids[1], &[user("bump", 1)]).unwrap();
    assert_eq!(store.latest_session().unwrap().unwrap().id, ids[1]);
    assert!(
        store
            .latest_session_on("no-such-platform")
            .unwrap()
            .is_none()
    );
    // Updating does not change the creation order of the listing.
    assert_eq!(store.list_sessions(1).unwrap()[0].id, ids[6]);
}

fn session_ids_are_unique_within_one_millisecond(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2_000 {
        let id = store.create_session(&NewSession::default()).unwrap().id;
        let (prefix, suffix) = id.split_at(16);
        assert_eq!(prefix, "20261130_001503_");
        assert_eq!(suffix.len(), 6);
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{id}"
        );
        assert!(seen.insert(id));
    }
}

fn crash_recovery_suspends_only_recent_sessions_of_an_unclean_process(db: Db) {
    let clock = TestClock::at(T0);

    // Process 1: three sessions, then it dies without a clean shutdown.
    let (recent, old, ended) = {
        let mut store = db.open_with(&clock);
        let old = store.create_session(&gateway_session("old")).unwrap().id;
        clock.advance(600_000);
        let recent = store.create_session(&gateway_session("recent")).unwrap().id;
        let ended = store.create_session(&gateway_session("ended")).unwrap().id;
        store.set_status(&ended, SessionStatus::Ended).unwrap();
        clock.advance(30_000);
        store
            .append_messages(&recent, &[user("mid-run", 1)])
            .unwrap();
        (recent, old, ended)
        // dropped: no mark_clean_shutdown
    };

    // Process 2 starts 60 s later.
    clock.advance(60_000);
    let mut store = db.open_with(&clock);
    let suspended = store.suspend_recent_unclean(120_000).unwrap();
    assert_eq!(suspended, vec![recent.clone()]);
    assert_eq!(
        store.session(&recent).unwrap().unwrap().status,
        SessionStatus::Suspended
    );
    assert_eq!(
        store.session(&old).unwrap().unwrap().status,
        SessionStatus::Active
    );
    assert_eq!(
        store.session(&ended).unwrap().unwrap().status,
        SessionStatus::Ended
    );
    assert!(
        store.active_session_for_key("recent").unwrap().is_none(),
        "starts fresh"
    );
    // Suspending keeps the transcript and does not pretend it was updated.
    assert_eq!(store.load_transcript(&recent).unwrap().len(), 1);
    assert_eq!(
        store.session(&recent).unwrap().unwrap().updated_at_ms,
        T0 + 630_000
    );
    // Running it again finds nothing more.
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());

    // Process 2 works on a new session and shuts down cleanly.
    let fresh = store.create_session(&gateway_session("recent")).unwrap().id;
    store
        .append_messages(&fresh, &[user("hello again", 2)])
        .unwrap();
    store.mark_clean_shutdown().unwrap();
    drop(store);

    // A CLI opening the database in between changes nothing.
    clock.advance(1_000);
    let cli = db.open_with(&clock);
    assert_eq!(cli.list_sessions(10).unwrap().len(), 4);
    drop(cli);

    // Process 3: clean predecessor, nothing suspended.
    clock.advance(1_000);
    let mut store = db.open_with(&clock);
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());
    assert_eq!(
        store.session(&fresh).unwrap().unwrap().status,
        SessionStatus::Active
    );

    // Process 3 touches the session, then crashes: process 4 suspends it.
    store
        .append_messages(&fresh, &[assistant("answer", 3)])
        .unwrap();
    drop(store);
    clock.advance(5_000);
    let mut store = db.open_with(&clock);
    assert_eq!(store.suspend_recent_unclean(120_000).unwrap(), vec![fresh]);
}

fn kv_values_are_set_replaced_and_persist(db: Db) {
    {
        let mut store = db.open();
        assert_eq!(store.kv_get("telegram.offset").unwrap(), None);
        store.kv_set("telegram.offset", "100").unwrap();
        store.kv_set("telegram.offset", "101").unwrap();
        store
            .kv_set("it's; DROP TABLE kv; --", "\"quoted\" 'value' ✓")
            .unwrap();
        store.kv_set("empty", "").unwrap();
    }
    let store = db.open();
    assert_eq!(
        store.kv_get("telegram.offset").unwrap().as_deref(),
        Some("101")
    );
    assert_eq!(
        store.kv_get("it's; DROP TABLE kv; --").unwrap().as_deref(),
        Some("\"quoted\" 'value' ✓")
    );
    assert_eq!(store.kv_get("empty").unwrap().as_deref(), Some(""));
}

both!(
    session_fields_are_stored_and_updated,
    a_created_session_is_the_row_as_stored,
    reset_ends_the_active_session_and_starts_a_new_one,
    latest_session_on_a_platform_ignores_other_platforms,
    listing_is_newest_first_and_latest_is_most_recently_updated,
    session_ids_are_unique_within_one_millisecond,
    crash_recovery_suspends_only_recent_sessions_of_an_unclean_process,
    kv_values_are_set_replaced_and_persist,
);
