//! A SQLite file looked at from outside a [`super::Sqlite`] store: what it
//! is (ours, hermes-agent's, someone else's) and a consistent copy of it —
//! without migrating or otherwise changing it.
//!
//! `hermes backup` copies the store through SQLite's online backup API while
//! a gateway may be writing: the copy is one read transaction's snapshot, so
//! it is consistent whatever commits meanwhile. The start-up guard and
//! `hermes restore` ask [`inspect`] what a file is before anything opens it
//! for writing.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::{migrate, schema};
use crate::StoreError;

/// The newest SQLite schema (`PRAGMA user_version`) this build reads.
pub const SQLITE_SCHEMA: u32 = schema::LATEST_VERSION;

/// What a SQLite file holds, as far as hermes cares.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqliteFile {
    /// A database with no tables (a new, empty file).
    Empty,
    /// A hermes store at this schema version (may be newer than
    /// [`SQLITE_SCHEMA`]: a downgrade, which the store refuses).
    Hermes {
        /// Its `PRAGMA user_version`.
        schema: u32,
    },
    /// hermes-agent's (the Python program's) `state.db`: it keeps its
    /// version in a `schema_version` table, not in `user_version`.
    HermesAgent {
        /// Its `schema_version.version`, when readable (22 for 0.19).
        schema: Option<i64>,
    },
    /// Some other program's database.
    Foreign {
        /// Its tables' names (the first few).
        tables: Vec<String>,
    },
}

impl SqliteFile {
    /// How an error message names it.
    pub fn describe(&self) -> String {
        match self {
            SqliteFile::Empty => "an empty database".into(),
            SqliteFile::Hermes { schema } => format!("a hermes store, schema {schema}"),
            SqliteFile::HermesAgent { schema: Some(v) } => {
                format!("hermes-agent's session database, schema {v}")
            }
            SqliteFile::HermesAgent { schema: None } => "hermes-agent's session database".into(),
            SqliteFile::Foreign { tables } => {
                format!("another program's database (tables {})", tables.join(", "))
            }
        }
    }
}

/// What the SQLite file at `path` is, read-only (the file, its WAL and its
/// contents are left as they are).
pub fn inspect(path: &Path) -> Result<SqliteFile, StoreError> {
    let open_err = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let conn = open_read_only(path).map_err(open_err)?;
    classify(&conn).map_err(open_err)
}

/// Opens `path` read-only, creating nothing beside it.
pub(super) fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    super::configure_library();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // Reading a WAL-mode file read-only still creates its `-wal` and `-shm`
    // beside it; with no `-wal` there, nothing is in it to read, so open the
    // file as immutable and create nothing (another program's home stays
    // exactly as it was).
    if wal_path(path).exists() {
        Connection::open_with_flags(path, flags)
    } else {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
    }
}

fn wal_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// `path` for a `file:` URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// Classifies an open connection's main database.
pub(super) fn classify(conn: &Connection) -> rusqlite::Result<SqliteFile> {
    let version = migrate::user_version(conn)?;
    if version > 0 {
        return Ok(SqliteFile::Hermes { schema: version });
    }
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    let tables = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    if tables.is_empty() {
        return Ok(SqliteFile::Empty);
    }
    // Another process may have created hermes's schema between the two
    // reads above (its first migration's tables and `user_version` commit
    // together, so tables seen now mean the version is visible now): read
    // the version again before calling the file someone else's. Without
    // this, two processes opening a new database at once — a gateway and a
    // command, or the store tests' racing connections — could refuse it as
    // "another program's database".
    let version = migrate::user_version(conn)?;
    if version > 0 {
        return Ok(SqliteFile::Hermes { schema: version });
    }
    let has = |name: &str| tables.iter().any(|t| t == name);
    if has("schema_version") && has("sessions") && has("messages") {
        let schema = conn
            .query_row("SELECT version FROM schema_version LIMIT 1", [], |row| {
                row.get::<_, i64>(0)
            })
            .ok();
        return Ok(SqliteFile::HermesAgent { schema });
    }
    Ok(SqliteFile::Foreign {
        tables: tables.into_iter().take(6).collect(),
    })
}

/// Copies the hermes store at `source` to a new file `dest` with SQLite's
/// online backup API (one step: a single read transaction, so the copy is
/// consistent while other connections write), and returns the copy's
/// schema version. `source` is only read; `dest` must not exist.
pub fn snapshot(source: &Path, dest: &Path) -> Result<u32, StoreError> {
    let open_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Open { path, source }
    };
    super::configure_library();
    let from = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err(source))?;
    from.busy_timeout(crate::BUSY_TIMEOUT)
        .map_err(open_err(source))?;
    match classify(&from).map_err(open_err(source))? {
        SqliteFile::Hermes { .. } | SqliteFile::Empty => {}
        other => {
            return Err(StoreError::Foreign {
                path: source.to_path_buf(),
                what: other.describe(),
            });
        }
    }
    if dest.exists() {
        return Err(StoreError::Create {
            path: dest.to_path_buf(),
            source: std::io::ErrorKind::AlreadyExists.into(),
        });
    }
    super::create_private_file(dest)?;
    let mut to = Connection::open(dest).map_err(open_err(dest))?;
    {
        let backup = rusqlite::backup::Backup::new(&from, &mut to).map_err(open_err(dest))?;
        // -1: every page in one step, under one read lock of the source.
        backup.step(-1).map_err(open_err(dest))?;
    }
    // The copy is a plain rollback-journal file: one file, nothing beside it.
    to.pragma_update(None, "journal_mode", "DELETE")
        .map_err(open_err(dest))?;
    migrate::user_version(&to).map_err(open_err(dest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::sqlite::Sqlite;

    #[test]
    fn another_programs_database_is_refused_before_anything_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version VALUES (22);
                 CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL);
                 CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT);",
            )
            .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        assert_eq!(
            inspect(&path).unwrap(),
            SqliteFile::HermesAgent { schema: Some(22) }
        );
        assert!(
            !dir.path().join("state.db-wal").exists(),
            "inspect creates nothing"
        );
        assert!(
            !dir.path().join("state.db-shm").exists(),
            "inspect creates nothing"
        );
        let err = Sqlite::open(&path).unwrap_err();
        assert!(
            matches!(&err, StoreError::Foreign { what, .. } if what.contains("hermes-agent")),
            "{err:?}"
        );
        assert!(err.to_string().contains("left untouched"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert_eq!(
            migrate::user_version(&Connection::open(&path).unwrap()).unwrap(),
            0
        );

        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE sessions (x)")
            .unwrap();
        assert!(matches!(
            Sqlite::open(&other),
            Err(StoreError::Foreign { .. })
        ));
    }

    #[test]
    fn a_snapshot_holds_what_was_committed_also_in_the_wal_while_another_writer_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Sqlite::open(&path).unwrap();
        store
            .conn
            .execute_batch("CREATE TABLE probe (x); INSERT INTO probe VALUES ('committed');")
            .unwrap();
        // A writer in the middle of a transaction: not in the copy.
        store
            .conn
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO probe VALUES ('open');")
            .unwrap();
        let copy = dir.path().join("copy.db");
        assert_eq!(snapshot(&path, &copy).unwrap(), SQLITE_SCHEMA);
        store.conn.execute_batch("COMMIT").unwrap();
        assert!(
            dir.path().join("state.db-wal").exists(),
            "the source's data was in its WAL"
        );
        let conn = Connection::open(&copy).unwrap();
        let rows: Vec<String> = conn
            .prepare("SELECT x FROM probe")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, ["committed"]);
        assert!(
            !dir.path().join("copy.db-wal").exists(),
            "the copy is one file"
        );
        assert!(
            snapshot(&path, &copy).is_err(),
            "an existing copy is not overwritten"
        );
    }
}
