//! Leases with fencing epochs (SPEC X8), on both backends: one grant at a
//! time, lapsing when not renewed, and a write under a lost lease refused
//! in its own transaction. PostgreSQL also wakes listeners.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use backends::{Db, both};
use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{
    BackendKind, Fence, KvWrite, LeaseGrant, NewSession, Notification, Store, StoreError,
};

const LONG: Duration = Duration::from_secs(600);

fn granted(grant: LeaseGrant) -> Fence {
    match grant {
        LeaseGrant::Granted { fence, .. } => fence,
        LeaseGrant::Held(held) => panic!("held by {held:?}"),
    }
}

/// Acquires `name` for `owner`, retrying until it lapses (within `within`).
fn acquire_when_lapsed(store: &mut Store, name: &str, owner: &str, within: Duration) -> LeaseGrant {
    let deadline = Instant::now() + within;
    loop {
        match store
            .lease_acquire(name, owner, LONG, Some("next"), false)
            .unwrap()
        {
            LeaseGrant::Held(held) => {
                assert!(Instant::now() < deadline, "never lapsed: {held:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
            grant => return grant,
        }
    }
}

fn a_lease_is_granted_once_lapses_and_fences_its_old_holder(db: Db) {
    let mut a = db.open();
    let mut b = db.open();
    let session = a.create_session(&NewSession::default()).unwrap().id;
    let first = granted(
        a.lease_acquire(
            "bot:test:1",
            "a",
            Duration::from_millis(300),
            Some("running"),
            false,
        )
        .unwrap(),
    );
    assert_eq!(first.epoch, 1);
    let LeaseGrant::Held(held) = b
        .lease_acquire("bot:test:1", "b", LONG, None, false)
        .unwrap()
    else {
        panic!("granted twice");
    };
    assert_eq!(held.owner.as_deref(), Some("a"));
    assert_eq!(held.state.as_deref(), Some("running"));
    assert!(held.is_live());

    // The holder writes under its fence.
    let entry = [LedgerEntry::at(Message::user("from a"), 1)];
    a.append_messages_fenced(&session, &entry, &first).unwrap();

    // It stops renewing: the lease lapses and b takes it, under a new epoch,
    // learning what a left behind.
    let LeaseGrant::Granted {
        fence: second,
        previous,
        ..
    } = acquire_when_lapsed(&mut b, "bot:test:1", "b", Duration::from_secs(10))
    else {
        unreachable!()
    };
    assert_eq!(second.epoch, 2);
    let previous = previous.unwrap();
    assert_eq!(previous.owner.as_deref(), Some("a"));
    assert_eq!(previous.state.as_deref(), Some("running"));
    assert!(previous.lapsed);

    // a wakes up: everything it tries under its old fence is refused, and
    // nothing of it is written.
    assert_eq!(a.lease_renew(&first, LONG).unwrap(), None);
    let late = [LedgerEntry::at(Message::user("late from a"), 2)];
    let err = a
        .append_messages_fenced(&session, &late, &first)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Fenced { epoch: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("another instance took over"),
        "{err}"
    );
    let err = a
        .kv_commit_fenced(
            &[KvWrite::Set {
                key: "offset",
                value: "9",
            }],
            std::slice::from_ref(&first),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    assert!(matches!(
        a.lease_set_state(&first, None),
        Err(StoreError::Fenced { .. })
    ));
    assert!(!a.lease_release(&first, None).unwrap());
    assert_eq!(b.load_transcript(&session).unwrap(), entry);
    assert_eq!(b.kv_get("offset").unwrap(), None);

    // The new holder's writes go through; a release keeps the epoch, and the
    // next grant is newer still, with nothing lapsed.
    b.append_messages_fenced(&session, &late, &second).unwrap();
    assert!(b.lease_renew(&second, LONG).unwrap().is_some());
    b.lease_set_state(&second, Some("turn 7")).unwrap();
    assert!(b.lease_release(&second, None).unwrap());
    let released = b.lease("bot:test:1").unwrap().unwrap();
    assert_eq!((released.owner, released.epoch), (None, 2));
    let LeaseGrant::Granted {
        fence: third,
        previous,
        ..
    } = a
        .lease_acquire("bot:test:1", "a", LONG, None, false)
        .unwrap()
    else {
        panic!("a released lease is free");
    };
    assert_eq!(third.epoch, 3);
    let previous = previous.unwrap();
    assert!(!previous.lapsed);
    assert_eq!(previous.state, None);
    // Every acquisition is a new epoch, even by the holder itself.
    let again = granted(
        a.lease_acquire("bot:test:1", "a", LONG, None, true)
            .unwrap(),
    );
    assert_eq!(again.epoch, 4);
    assert!(matches!(
        a.append_messages_fenced(&session, &late, &third),
        Err(StoreError::Fenced { .. })
    ));

    // Listing, by prefix.
    a.lease_acquire("session:k1", "a", LONG, None, false)
        .unwrap();
    a.lease_acquire("session:k2", "a", LONG, None, false)
        .unwrap();
    let names: Vec<String> = a
        .leases("session:")
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["session:k1", "session:k2"]);
    assert_eq!(a.leases("").unwrap().len(), 3);
}

fn concurrent_acquisitions_grant_exactly_one(db: Db) {
    // The database exists first: what races here is the acquisitions, not
    // six first opens of a new SQLite file (whose WAL switch is not retried).
    drop(db.open());
    for round in 0..5 {
        let name = format!("bot:race:{round}");
        let barrier = Arc::new(Barrier::new(6));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let target = db.target();
                let barrier = Arc::clone(&barrier);
                let name = name.clone();
                std::thread::spawn(move || {
                    let mut store = Store::open_target(&target).unwrap();
                    barrier.wait();
                    matches!(
                        store
                            .lease_acquire(&name, &format!("owner{i}"), LONG, None, false)
                            .unwrap(),
                        LeaseGrant::Granted { .. }
                    )
                })
            })
            .collect();
        let grants = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|g| *g)
            .count();
        assert_eq!(grants, 1, "round {round}");
    }
}

/// A holder that keeps writing while another takes over: every write the
/// holder was told succeeded is stored, none that failed is, and once the
/// takeover returned, the next write is refused.
fn a_takeover_and_a_writing_holder_never_both_win(db: Db) {
    let mut owner = db.open();
    let session = owner.create_session(&NewSession::default()).unwrap().id;
    let fence = granted(
        owner
            .lease_acquire("session:s", "old", LONG, None, false)
            .unwrap(),
    );
    let taken = Arc::new(AtomicBool::new(false));
    let after_takeover = Arc::new(AtomicUsize::new(0));
    let (started, writing) = mpsc::channel();
    let writer = {
        let (session, fence) = (session.clone(), fence.clone());
        let (taken, after_takeover) = (Arc::clone(&taken), Arc::clone(&after_takeover));
        std::thread::spawn(move || {
            let mut ok = 0usize;
            let mut signalled = false;
            for i in 0.. {
                let was_taken = taken.load(Ordering::SeqCst);
                let entry = [LedgerEntry::at(Message::user(format!("w{i}")), i)];
                match owner.append_messages_fenced(&session, &entry, &fence) {
                    Ok(()) => {
                        ok += 1;
                        if was_taken {
                            after_takeover.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(StoreError::Fenced { .. }) => return ok,
                    Err(e) => panic!("{e}"),
                }
                if !signalled && ok >= 20 {
                    signalled = true;
                    started.send(()).unwrap();
                }
            }
            unreachable!()
        })
    };
    writing.recv().unwrap();
    let mut other = db.open();
    let grant = granted(
        other
            .lease_acquire("session:s", "new", LONG, None, true)
            .unwrap(),
    );
    taken.store(true, Ordering::SeqCst);
    let ok = writer.join().unwrap();
    assert_eq!(grant.epoch, 2);
    assert_eq!(other.load_transcript(&session).unwrap().len(), ok);
    assert_eq!(
        after_takeover.load(Ordering::SeqCst),
        0,
        "a write began after the takeover and landed"
    );
}

/// Taking a queued item: of two transactions consuming one key, exactly one
/// goes through — with its transcript append — and the other writes nothing.
fn a_consumed_key_is_taken_exactly_once(db: Db) {
    let mut a = db.open();
    let mut b = db.open();
    let session = a.create_session(&NewSession::default()).unwrap().id;
    a.kv_set("gateway.inbox.x", "message").unwrap();
    let entry = [LedgerEntry::at(Message::user("the message"), 1)];
    let take = [KvWrite::Consume("gateway.inbox.x")];
    assert!(a.append_messages_with_kv(&session, &entry, &take).unwrap());
    assert!(!b.append_messages_with_kv(&session, &entry, &take).unwrap());
    assert!(!b.kv_commit(&take).unwrap());
    assert_eq!(b.load_transcript(&session).unwrap(), entry);
    assert_eq!(b.kv_get("gateway.inbox.x").unwrap(), None);
}

both!(
    a_consumed_key_is_taken_exactly_once,
    a_lease_is_granted_once_lapses_and_fences_its_old_holder,
    concurrent_acquisitions_grant_exactly_one,
    a_takeover_and_a_writing_holder_never_both_win,
);

/// The listener's wait for notifications timed out once and then never
/// waited again: its connection's runtime never turned its reactor, so a
/// notification sent after the listener's first idle interval was never
/// read (and its thread spun on a core). A gateway heard no interrupt and
/// no release sent later than its first fifth of a second.
#[test]
fn a_notification_sent_long_after_listening_began_is_still_heard() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let store = db.open();
    let (tx, rx) = mpsc::channel::<Notification>();
    let tx = std::sync::Mutex::new(tx);
    let _listener = store
        .listen(
            &["hermes_late"],
            Arc::new(move |n| {
                let _ = tx.lock().unwrap().send(n);
            }),
        )
        .unwrap()
        .expect("PostgreSQL listens");
    let sender = db.open();
    for round in 0..3 {
        // Idle for several of the listener's wait intervals: the scenario,
        // not a synchronisation.
        std::thread::sleep(Duration::from_secs(1));
        sender
            .notify("hermes_late", &format!("round {round}"))
            .unwrap();
        let heard = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(heard.payload, format!("round {round}"));
    }
}

/// A listener whose connection the server ended reconnects, tells its sink
/// (an empty notification: whatever was sent meanwhile is lost, look
/// again) and hears what is sent afterwards.
#[test]
fn a_listener_whose_connection_was_ended_reconnects_and_says_so() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let store = db.open();
    let (tx, rx) = mpsc::channel::<Notification>();
    let tx = std::sync::Mutex::new(tx);
    let _listener = store
        .listen(
            &["hermes_after"],
            Arc::new(move |n| {
                let _ = tx.lock().unwrap().send(n);
            }),
        )
        .unwrap()
        .expect("PostgreSQL listens");
    let ended = db.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN %'",
    );
    assert_eq!(ended, "1");
    let reconnected = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (reconnected.channel.as_str(), reconnected.payload.as_str()),
        ("", "")
    );
    db.open().notify("hermes_after", "heard").unwrap();
    let heard = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(heard.payload, "heard");
}

/// On PostgreSQL leases lapse by the database server's clock, never by a
/// gateway's: a gateway whose clock says 1970 neither grants itself leases
/// that seem lapsed to the others nor sees theirs as lapsed.
#[test]
fn postgres_leases_lapse_by_the_servers_clock_not_the_gateways() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let stale_clock = Arc::new(hermes_core::NoClock);
    let mut behind = db.open_with(&stale_clock);
    let mut on_time = db.open();
    let fence = granted(
        behind
            .lease_acquire("bot:test:clock", "behind", LONG, None, false)
            .unwrap(),
    );
    let LeaseGrant::Held(held) = on_time
        .lease_acquire("bot:test:clock", "on-time", LONG, None, false)
        .unwrap()
    else {
        panic!("a lease taken with a clock at 1970 looked lapsed");
    };
    assert_eq!(held.owner.as_deref(), Some("behind"));
    assert!(held.is_live());
    assert!(behind.lease_renew(&fence, LONG).unwrap().is_some());
    let theirs = granted(
        on_time
            .lease_acquire("bot:test:theirs", "on-time", LONG, None, false)
            .unwrap(),
    );
    assert!(matches!(
        behind
            .lease_acquire("bot:test:theirs", "behind", LONG, None, false)
            .unwrap(),
        LeaseGrant::Held(_)
    ));
    assert!(on_time.lease_release(&theirs, None).unwrap());
}

#[test]
fn postgres_notifications_reach_listeners_and_sqlite_has_none() {
    hermes_tests::require!(Postgres);
    let db = Db::new(BackendKind::Postgres);
    let store = db.open();
    let (tx, rx) = mpsc::channel::<Notification>();
    let tx = std::sync::Mutex::new(tx);
    let listener = store
        .listen(
            &["hermes_wake", "hermes_other"],
            Arc::new(move |n| {
                let _ = tx.lock().unwrap().send(n);
            }),
        )
        .unwrap()
        .expect("PostgreSQL listens");
    assert_eq!(listener.channels(), ["hermes_wake", "hermes_other"]);
    let sender = db.open();
    sender
        .notify("hermes_wake", "session:agent:main:telegram:dm:42")
        .unwrap();
    sender.notify("hermes_unheard", "x").unwrap();
    sender.notify("hermes_other", "with\u{0}nul").unwrap();
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (first.channel.as_str(), first.payload.as_str()),
        ("hermes_wake", "session:agent:main:telegram:dm:42")
    );
    let second = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (second.channel.as_str(), second.payload.as_str()),
        ("hermes_other", "with\u{0}nul")
    );
    assert!(matches!(
        store.listen(&["bad; DROP TABLE kv"], Arc::new(|_| {})),
        Err(StoreError::BadChannel(_))
    ));
    drop(listener);

    let sqlite = Db::new(BackendKind::Sqlite).open();
    assert!(
        sqlite
            .listen(&["hermes_wake"], Arc::new(|_| {}))
            .unwrap()
            .is_none()
    );
    sqlite.notify("hermes_wake", "nobody").unwrap();
}
