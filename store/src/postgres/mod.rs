//! The PostgreSQL backend: several gateways (on several machines) sharing
//! one database (SPEC X8).
//!
//! Each store is one connection on its own thread (`conn.rs`); each call
//! is one transaction (or one statement) there. The schema and its
//! migrations are in `schema.rs`; full-text search in `fts.rs`; each area's
//! SQL in its own file, implementing that area's backend trait, exactly as
//! the SQLite backend does.
//!
//! Text: PostgreSQL's `text` cannot hold U+0000, which a message may (a
//! tool reading a binary file, platform junk). Strings are stored as they
//! are unless they contain U+0000 or U+FFFF; then U+FFFF escapes both
//! ([`to_db`], [`from_db`]), so every string round-trips exactly and
//! ordinary text is stored verbatim.

mod compaction;
mod conn;
mod fts;
mod jobs;
mod kv;
mod lease;
mod schema;
mod search;
mod sessions;
mod transcript;

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use hermes_core::Clock;
use postgres::{Config, GenericClient};

use super::backend::{Backend, Location};
use super::{BUSY_TIMEOUT, Fence, StoreError, Synchronous, SystemClock, mask_url};
use conn::{Conn, Statements, prepare};

/// Settings of every connection: a statement waiting for a lock gives up
/// after [`BUSY_TIMEOUT`] (as SQLite's writers do), and a transaction left
/// idle — its process stopped (SIGSTOP) or cut off half-way — is ended by
/// the server after 5 s, so it cannot hold a lease row locked while another
/// gateway takes over.
const SESSION_SETUP: &str = "SET lock_timeout = '10s'; \
     SET idle_in_transaction_session_timeout = '5s'; \
     SET application_name = 'hermes'";

const _: () = assert!(BUSY_TIMEOUT.as_secs() == 10, "SESSION_SETUP says 10s");

/// The `tsvector` literal a message's text is indexed as (for the tests'
/// consistency checks).
pub fn search_vector(text: &str) -> String {
    fts::vector(text)
}

/// The PostgreSQL backend of a [`super::Store`].
pub(super) struct Postgres {
    conn: Conn,
    config: Config,
    clock: Arc<dyn Clock>,
    location: Location,
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// Connects to `url` and brings the schema up to date.
    pub(super) fn connect(url: &str) -> Result<Postgres, StoreError> {
        let shown = mask_url(url);
        let mut config = Config::from_str(url.trim()).map_err(|e| {
            StoreError::BadUrl(format!("the database URL {shown} is malformed: {e}"))
        })?;
        if config.get_application_name().is_none() {
            config.application_name("hermes");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let conn = Conn::open(config.clone(), SESSION_SETUP, &shown)?;
        let store = Postgres {
            conn,
            config,
            clock: Arc::new(SystemClock),
            location: Location::Postgres {
                url: url.to_owned(),
                shown,
            },
        };
        store.migrate()?;
        Ok(store)
    }

    fn shown(&self) -> String {
        self.location.to_string()
    }

    /// Runs the schema steps the database has not seen yet; refuses a
    /// database from a newer hermes before changing anything.
    fn migrate(&self) -> Result<(), StoreError> {
        let shown = self.shown();
        self.conn.call(move |session| {
            let path = PathBuf::from(&shown);
            let mig_err = |version: u32| {
                let url = shown.clone();
                move |source| StoreError::PgMigration {
                    url,
                    version,
                    source,
                }
            };
            // The common case, an up-to-date database, takes no lock.
            let current = current_version(&mut session.client).map_err(mig_err(0))?;
            if current == Some(schema::LATEST_VERSION) {
                return Ok(());
            }
            if let Some(found) = current.filter(|v| *v > schema::LATEST_VERSION) {
                return Err(StoreError::NewerSchema {
                    path,
                    found,
                    supported: schema::LATEST_VERSION,
                });
            }
            for step in schema::MIGRATIONS {
                let mut tx = session
                    .client
                    .transaction()
                    .map_err(mig_err(step.version))?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::MIGRATION_LOCK])
                    .map_err(mig_err(step.version))?;
                tx.batch_execute(schema::BOOTSTRAP)
                    .map_err(mig_err(step.version))?;
                let current: i32 = tx
                    .query_one("SELECT version FROM hermes_schema WHERE id = 0", &[])
                    .map_err(mig_err(step.version))?
                    .get(0);
                let current = u32::try_from(current).unwrap_or(0);
                if current > schema::LATEST_VERSION {
                    return Err(StoreError::NewerSchema {
                        path,
                        found: current,
                        supported: schema::LATEST_VERSION,
                    });
                }
                if current >= step.version {
                    continue;
                }
                tracing::info!(database = %shown, version = step.version, what = step.what, "migrating database");
                tx.batch_execute(step.sql).map_err(mig_err(step.version))?;
                let version = i32::try_from(step.version).unwrap_or(i32::MAX);
                tx.execute("UPDATE hermes_schema SET version = $1 WHERE id = 0", &[&version])
                    .map_err(mig_err(step.version))?;
                tx.commit().map_err(mig_err(step.version))?;
            }
            Ok(())
        })
    }
}

/// The schema version, `None` for a database hermes never touched.
fn current_version(client: &mut impl GenericClient) -> Result<Option<u32>, postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass('hermes_schema') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let version: Option<i32> = client
        .query_opt("SELECT version FROM hermes_schema WHERE id = 0", &[])?
        .map(|row| row.get(0));
    Ok(version.map(|v| u32::try_from(v).unwrap_or(0)))
}

impl Backend for Postgres {
    fn location(&self) -> &Location {
        &self.location
    }

    fn reopen(&self) -> Result<Box<dyn Backend>, StoreError> {
        let conn = Conn::open(self.config.clone(), SESSION_SETUP, &self.shown())?;
        Ok(Box::new(Postgres {
            conn,
            config: self.config.clone(),
            clock: Arc::clone(&self.clock),
            location: self.location.clone(),
        }))
    }

    fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// The server's write-ahead log is its own business.
    fn set_wal_autocheckpoint(&mut self, _pages: u32) -> Result<(), StoreError> {
        Ok(())
    }

    /// The server caches pages for all its clients.
    fn set_cache_pages(&mut self, _pages: u32) -> Result<(), StoreError> {
        Ok(())
    }

    fn set_synchronous(&mut self, mode: Synchronous) -> Result<(), StoreError> {
        let sql = match mode {
            Synchronous::Full => "SET synchronous_commit = on",
            Synchronous::Normal => "SET synchronous_commit = off",
        };
        self.conn
            .call(move |session| Ok(session.client.batch_execute(sql)?))
    }
}

/// Fails with [`StoreError::Fenced`] unless `fence` holds, and keeps the
/// lease row share-locked until the transaction ends, so an acquisition
/// (which updates the row) waits for this write to commit, or this write
/// sees the new epoch: never both.
fn check_fence(
    statements: &mut Statements,
    tx: &mut postgres::Transaction<'_>,
    fence: &Fence,
) -> Result<(), StoreError> {
    let stmt = prepare(
        statements,
        tx,
        "SELECT 1 FROM leases WHERE name = $1 AND owner = $2 AND epoch = $3 FOR SHARE",
    )?;
    let holds = tx
        .query_opt(&stmt, &[&fence.name, &fence.owner, &fence.epoch])?
        .is_some();
    if holds {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            name: fence.name.clone(),
            owner: fence.owner.clone(),
            epoch: fence.epoch,
        })
    }
}

/// `s` as stored: verbatim unless it holds U+0000 or U+FFFF (see the module
/// docs).
fn to_db(s: &str) -> Cow<'_, str> {
    if !s.contains(['\u{0}', '\u{FFFF}']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\u{0}' => out.push_str("\u{FFFF}0"),
            '\u{FFFF}' => out.push_str("\u{FFFF}\u{FFFF}"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Inverse of [`to_db`].
fn from_db(s: &str) -> Cow<'_, str> {
    if !s.contains('\u{FFFF}') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\u{FFFF}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('\u{0}'),
            Some('\u{FFFF}') => out.push('\u{FFFF}'),
            // Not written by hermes (a hand edit): keep what is there.
            Some(other) => {
                out.push('\u{FFFF}');
                out.push(other);
            }
            None => out.push('\u{FFFF}'),
        }
    }
    Cow::Owned(out)
}

fn opt_to_db(s: Option<&str>) -> Option<Cow<'_, str>> {
    s.map(to_db)
}

fn owned_from_db(s: Option<String>) -> Option<String> {
    s.map(|s| match from_db(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(o) => o,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn text_escaping_round_trips_and_leaves_plain_text_alone() {
        for s in [
            "",
            "plain",
            "nul \u{0} inside",
            "\u{0}",
            "\u{FFFF}",
            "\u{FFFF}0",
            "\u{0}\u{FFFF}\u{0}0\u{FFFF}\u{FFFF}",
            "xin chào 👋",
        ] {
            let stored = to_db(s);
            assert!(!stored.contains('\u{0}'), "{s:?}");
            assert_eq!(from_db(&stored), s, "{s:?}");
        }
        assert!(matches!(to_db("plain"), Cow::Borrowed(_)));
        assert!(matches!(from_db("plain"), Cow::Borrowed(_)));
    }
}
