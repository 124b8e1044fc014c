//! Runs a store test against each backend: a SQLite file in a temp dir,
//! and a fresh database on the test binary's private PostgreSQL server
//! (`hermes_tests::postgres`).
//!
//! A test is a function of a [`Db`]; [`both!`] makes one `#[test]` per
//! backend of it (`sqlite::name`, `postgres::name`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use hermes_core::Clock;
use hermes_runtime::store::{BackendKind, Store, StoreTarget};

/// One test's database.
pub struct Db {
    pub kind: BackendKind,
    /// Scratch space (and the SQLite file).
    pub dir: tempfile::TempDir,
    /// The PostgreSQL URL.
    pub url: Option<String>,
}

impl Db {
    pub fn new(kind: BackendKind) -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = (kind == BackendKind::Postgres).then(hermes_tests::postgres::fresh_database);
        Db { kind, dir, url }
    }

    /// The SQLite file (meaningful for the SQLite backend only).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    /// A new connection to this test's database.
    pub fn open(&self) -> Store {
        match &self.url {
            Some(url) => Store::open_url(url).unwrap(),
            None => Store::open(&self.path()).unwrap(),
        }
    }

    /// [`Db::open`] with a clock.
    pub fn open_with(&self, clock: &Arc<impl Clock + 'static>) -> Store {
        self.open().with_clock(clock.clone())
    }

    /// Waits until no other session is connected to this test's database
    /// (PostgreSQL only; 20 s at most). A killed client's server process
    /// may still be committing what the client sent before it died — a
    /// commit the kill did not stop is not a loss, but a check that reads
    /// twice must not see it land between its two reads.
    pub fn wait_for_other_sessions_to_end(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let others = self.psql(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            );
            if others.trim() == "0" {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "sessions still connected 20 s after the client died: {others}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Runs SQL directly against the database, bypassing the store (hand
    /// edits, checks); PostgreSQL only.
    pub fn psql(&self, sql: &str) -> String {
        let url = self.url.as_ref().expect("a PostgreSQL database");
        let db = url
            .strip_prefix("postgresql:///")
            .and_then(|rest| rest.split('?').next())
            .unwrap();
        hermes_tests::postgres::psql(hermes_tests::postgres::server(), db, sql)
    }
}

/// `both!(a, b, …)`: one test per backend for each function `fn a(db: Db)`.
#[allow(unused_macros)]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::backends::Db::new(
                        hermes_runtime::store::BackendKind::Sqlite,
                    ));
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if !hermes_tests::tier::require(&[hermes_tests::tier::Component::Postgres]) {
                        return;
                    }
                    super::$name(super::backends::Db::new(
                        hermes_runtime::store::BackendKind::Postgres,
                    ));
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both;

impl Db {
    /// What [`Store::open_target`] needs to open this database again (from
    /// another thread).
    pub fn target(&self) -> StoreTarget {
        match &self.url {
            Some(url) => StoreTarget::Postgres(url.clone()),
            None => StoreTarget::Sqlite(self.path()),
        }
    }

    /// Runs portable SQL directly (a hand edit behind the store's back).
    pub fn exec(&self, sql: &str) {
        match self.kind {
            BackendKind::Sqlite => {
                rusqlite::Connection::open(self.path())
                    .unwrap()
                    .execute_batch(sql)
                    .unwrap();
            }
            BackendKind::Postgres => {
                self.psql(sql);
            }
        }
    }

    /// The full-text index is internally sound (on SQLite it may lag behind
    /// the messages until the next search; PostgreSQL indexes as it stores,
    /// so this is [`Db::assert_index_consistent`]).
    pub fn assert_index_sound(&self) {
        match self.kind {
            BackendKind::Sqlite => {
                rusqlite::Connection::open(self.path())
                    .unwrap()
                    .execute(
                        "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')",
                        [],
                    )
                    .unwrap_or_else(|e| panic!("full-text index is damaged: {e}"));
            }
            BackendKind::Postgres => self.assert_index_consistent(),
        }
    }

    /// Every message is indexed with exactly its current text and nothing
    /// else is: FTS5's own check against the external content on SQLite;
    /// on PostgreSQL, each row's `tsvector` is the one its content gives.
    pub fn assert_index_consistent(&self) {
        match self.kind {
            BackendKind::Sqlite => {
                rusqlite::Connection::open(self.path())
                    .unwrap()
                    .execute(
                        "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)",
                        [],
                    )
                    .unwrap_or_else(|e| panic!("full-text index differs from the messages: {e}"));
            }
            BackendKind::Postgres => {
                let url = self.url.clone().unwrap();
                // The sync client on a plain thread of its own.
                std::thread::spawn(move || {
                    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                    let rows = client
                        .query("SELECT id, content, search::TEXT FROM messages", &[])
                        .unwrap();
                    for row in rows {
                        let id: i64 = row.get(0);
                        let content: Option<String> = row.get(1);
                        let stored: String = row.get(2);
                        let expected =
                            hermes_runtime::store::search_vector(content.as_deref().unwrap_or(""));
                        assert_eq!(
                            parse_vector(&stored),
                            parse_vector(&expected),
                            "message {id}: {content:?}"
                        );
                    }
                })
                .join()
                .unwrap();
            }
        }
    }
}

/// A `tsvector` in its text form as a set of (word, positions).
fn parse_vector(text: &str) -> std::collections::BTreeSet<(String, String)> {
    text.split_whitespace()
        .map(|entry| {
            let (word, positions) = entry.rsplit_once(':').unwrap_or((entry, ""));
            (word.trim_matches('\'').to_owned(), positions.to_owned())
        })
        .collect()
}
