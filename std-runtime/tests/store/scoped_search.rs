//! `Store::search_in` on both backends: the `session_search` tool's scope
//! (SPEC Y6). A session key's sessions, or the local user's, never another
//! chat's or user's; the asking session left out; messages a compaction
//! replaced still found.

use hermes_core::SummaryPlacement;
use hermes_core::context::Compaction;
use hermes_runtime::store::{NewSession, SearchScope};

use super::support::{assistant, gateway_session, user};
use crate::backends::{self, Db, both};

const ALICE: &str = "agent:main:telegram:dm:alice";
const BOB: &str = "agent:main:telegram:dm:bob";

fn a_scoped_search_stays_in_its_scope(db: Db) {
    let mut store = db.open();
    let alice_old = store.create_session(&gateway_session(ALICE)).unwrap().id;
    let alice_now = store.create_session(&gateway_session(ALICE)).unwrap().id;
    let bob = store.create_session(&gateway_session(BOB)).unwrap().id;
    let cli = store
        .create_session(&NewSession {
            platform: Some("cli"),
            ..NewSession::default()
        })
        .unwrap()
        .id;
    let cron = store
        .create_session(&NewSession {
            session_key: Some("cron:job1"),
            platform: Some("cron"),
            ..NewSession::default()
        })
        .unwrap()
        .id;
    for (id, who) in [
        (&alice_old, "alice"),
        (&alice_now, "alice"),
        (&bob, "bob"),
        (&cli, "local"),
        (&cron, "cron"),
    ] {
        store
            .append_messages(
                id,
                &[
                    user(&format!("the zebra42 plan of {who}"), 1),
                    assistant("noted", 2),
                ],
            )
            .unwrap();
    }
    let ids = |hits: Vec<hermes_runtime::store::SearchHit>| -> Vec<String> {
        hits.into_iter().map(|h| h.session_id).collect()
    };

    let hits = store
        .search_in("zebra42", SearchScope::SessionKey(ALICE), None, 10)
        .unwrap();
    let mut found = ids(hits);
    found.sort();
    let mut want = vec![alice_old.clone(), alice_now.clone()];
    want.sort();
    assert_eq!(found, want);

    // The asking session is left out.
    let hits = store
        .search_in(
            "zebra42",
            SearchScope::SessionKey(ALICE),
            Some(&alice_now),
            10,
        )
        .unwrap();
    assert_eq!(ids(hits.clone()), vec![alice_old.clone()]);
    assert!(hits[0].snippet.contains("[zebra42]"), "{hits:?}");

    // The local user's: CLI sessions only, not a chat's, not a cron run's.
    let hits = store
        .search_in("zebra42", SearchScope::Platform("cli"), None, 10)
        .unwrap();
    assert_eq!(ids(hits), vec![cli.clone()]);
    let hits = store
        .search_in("zebra42", SearchScope::Session(&bob), None, 10)
        .unwrap();
    assert_eq!(ids(hits), vec![bob.clone()]);

    // Query syntax in the words is words; nothing else leaks through it.
    for odd in ["zebra42 OR bob", "\"zebra42\" OR \"bob\"", "bob", "* OR *"] {
        let hits = store
            .search_in(odd, SearchScope::SessionKey(ALICE), None, 10)
            .unwrap();
        assert!(hits.iter().all(|h| h.session_id != bob), "{odd}: {hits:?}");
    }
    assert!(
        store
            .search_in("zebra42", SearchScope::SessionKey(ALICE), None, 0)
            .unwrap()
            .is_empty()
    );
}

fn messages_a_compaction_replaced_are_still_found(db: Db) {
    let mut store = db.open();
    let id = store.create_session(&gateway_session(ALICE)).unwrap().id;
    store
        .append_messages(
            &id,
            &[
                user("remember the quokka77 password hint", 1),
                assistant("kept", 2),
                user("something else", 3),
                assistant("fine", 4),
            ],
        )
        .unwrap();
    let compaction = Compaction {
        head: 0,
        replaced: 2,
        tail: 2,
        placement: SummaryPlacement::Standalone,
        summary: "[summary] the user talked about a hint".into(),
        tokens_before: 100,
        tokens_after: 50,
        usage: None,
        digest: true,
        summarizer_failure: None,
        at_ms: 5,
    };
    store.record_compaction(&id, &compaction).unwrap();
    let view = store.load_view(&id).unwrap();
    assert!(
        !format!("{view:?}").contains("quokka77"),
        "the view no longer holds it: {view:?}"
    );
    let hits = store
        .search_in("quokka77", SearchScope::SessionKey(ALICE), None, 10)
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!((hits[0].session_id.as_str(), hits[0].seq), (id.as_str(), 0));
}

both!(
    a_scoped_search_stays_in_its_scope,
    messages_a_compaction_replaced_are_still_found,
);
