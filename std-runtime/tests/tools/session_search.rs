//! The `session_search` tool over a real SQLite store (SPEC Y6): a CLI
//! session searches the local user's sessions and never a chat's; a tool
//! without a session searches nothing; bad queries get a clear error. The
//! scopes themselves run on both backends in `tests/store/scoped_search.rs`.

use std::sync::{Arc, Mutex};

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{NewSession, Store};
use hermes_runtime::tools::SearchSource;
use serde_json::json;

use super::support::Fx;

fn seeded(home: &std::path::Path) -> (Arc<Mutex<Store>>, String, String, String) {
    let mut store = Store::open(&home.join("state.db")).unwrap();
    let mut session = |new: NewSession<'_>, text: &str| {
        let id = store.create_session(&new).unwrap().id;
        store
            .append_messages(&id, &[LedgerEntry::new(Message::user(text))])
            .unwrap();
        id
    };
    let cli = NewSession {
        platform: Some("cli"),
        ..NewSession::default()
    };
    let old = session(cli, "the okapi99 recipe needs saffron");
    let now = session(cli, "what was the okapi99 recipe?");
    let chat = session(
        NewSession {
            session_key: Some("agent:main:telegram:dm:7"),
            platform: Some("telegram"),
            chat_id: Some("7"),
            user_id: Some("7"),
            ..NewSession::default()
        },
        "okapi99 is someone else's word",
    );
    (Arc::new(Mutex::new(store)), old, now, chat)
}

#[test]
fn a_cli_session_finds_the_local_users_sessions_only() {
    let home = tempfile::tempdir().unwrap();
    let (store, old, now, chat) = seeded(home.path());
    let source = SearchSource {
        store: store.clone(),
        session_id: Some(now.clone()),
    };
    let fx = Fx::with(
        move |e| e.session_search = Some(source),
        Some(&["session_search"]),
    );
    let out = fx.ok("session_search", json!({"query": "okapi99"}));
    assert!(
        out.starts_with("1 earlier session mentions \"okapi99\""),
        "{out}"
    );
    assert!(out.contains(&format!("Session {old} — started ")), "{out}");
    assert!(out.contains("UTC"), "{out}");
    assert!(
        out.contains("- user (message 0): the [okapi99] recipe"),
        "{out}"
    );
    assert!(!out.contains(&now) && !out.contains(&chat), "{out}");
    assert!(!out.contains("someone else"), "{out}");

    let out = fx.ok("session_search", json!({"query": "saffron missing-word"}));
    assert_eq!(out, "No earlier session mentions \"saffron missing-word\".");
    let err = fx.err("session_search", json!({"query": " * \" "}));
    assert!(err.contains("'query' has no words"), "{err}");
    let err = fx.err("session_search", json!({"limit": 2}));
    assert!(err.contains("query"), "{err}");
}

#[test]
fn without_a_session_nothing_is_searched() {
    let home = tempfile::tempdir().unwrap();
    let (store, ..) = seeded(home.path());
    let source = SearchSource {
        store,
        session_id: None,
    };
    let fx = Fx::with(
        move |e| e.session_search = Some(source),
        Some(&["session_search"]),
    );
    let out = fx.ok("session_search", json!({"query": "okapi99"}));
    assert_eq!(out, "No earlier sessions to search yet.");
    assert!(fx.reg.is_read_only("session_search"));
}
