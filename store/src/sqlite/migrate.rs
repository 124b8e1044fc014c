//! Running the schema's forward migrations (see `schema.rs`).

use std::path::Path;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::schema;
use crate::StoreError;

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the database to the latest schema: a new one in one step
/// ([`create_latest`]), an older one through the steps it has not seen yet.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    // The common case, an up-to-date database, takes no write lock, so
    // opening a store never waits for (or delays) another process's writes.
    let current = user_version(conn).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    if current == schema::LATEST_VERSION {
        return Ok(());
    }
    if current == 0 && create_latest(conn, path)? {
        return Ok(());
    }
    // A version only grows: steps at or below the one read are done
    // without taking the write lock to see so.
    for step in schema::MIGRATIONS.iter().filter(|s| s.version > current) {
        let mig_err = |source| StoreError::Migration {
            path: path.to_path_buf(),
            version: step.version,
            source,
        };
        // IMMEDIATE takes the write lock first, so two processes opening an
        // old database at once run each step exactly once.
        let tx = Transaction::new(conn, TransactionBehavior::Immediate).map_err(mig_err)?;
        let current = user_version(&tx).map_err(mig_err)?;
        if current > schema::LATEST_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.to_path_buf(),
                found: current,
                supported: schema::LATEST_VERSION,
            });
        }
        if current >= step.version {
            continue;
        }
        tracing::info!(path = %path.display(), version = step.version, what = step.what, "migrating database");
        step.apply(&tx).map_err(mig_err)?;
        tx.pragma_update(None, "user_version", step.version)
            .map_err(mig_err)?;
        tx.commit().map_err(mig_err)?;
    }
    Ok(())
}

/// Gives a new database (version 0: `Sqlite::open` has refused one with
/// another program's tables) the latest schema in one transaction, unless
/// another process gave it a schema first (false: the steps take it from
/// there).
fn create_latest(conn: &mut Connection, path: &Path) -> Result<bool, StoreError> {
    let err = |source| StoreError::Migration {
        path: path.to_path_buf(),
        version: schema::LATEST_VERSION,
        source,
    };
    let tx = Transaction::new(conn, TransactionBehavior::Immediate).map_err(err)?;
    if user_version(&tx).map_err(err)? != 0 {
        return Ok(false);
    }
    tx.execute_batch(schema::LATEST).map_err(err)?;
    tx.pragma_update(None, "user_version", schema::LATEST_VERSION)
        .map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Every object of the schema with its SQL (whitespace folded, none
    /// beside punctuation: `ALTER TABLE … ADD COLUMN` writes its column
    /// after a newline and a comma), the columns as SQLite reads them, and
    /// every row of the tables hermes writes.
    fn describe(conn: &Connection) -> Vec<String> {
        let fold = |sql: &str| {
            let spaced = sql.split_whitespace().collect::<Vec<_>>().join(" ");
            ["(", ")", ","].iter().fold(spaced, |s, p| {
                s.replace(&format!(" {p}"), p).replace(&format!("{p} "), p)
            })
        };
        let mut out = Vec::new();
        let mut objects = conn
            .prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name")
            .unwrap();
        let rows = objects
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap();
        for (kind, name, table, sql) in rows {
            out.push(format!(
                "{kind} {name} on {table}: {}",
                fold(&sql.unwrap_or_default())
            ));
            if kind != "table" {
                continue;
            }
            let columns = rows_of(conn, "SELECT * FROM pragma_table_xinfo(?1)", [&name]);
            out.extend(
                columns
                    .into_iter()
                    .map(|c| format!("  column of {name}: {c}")),
            );
            // The full-text index's segment data: version 2's `rebuild` of
            // no rows writes an empty averages record (`[0, 0]`) where a new
            // index has none yet. FTS5 reads both as "no rows".
            if name == "messages_fts_data" {
                continue;
            }
            let rows = rows_of(conn, &format!("SELECT * FROM \"{name}\""), []);
            out.extend(rows.into_iter().map(|r| format!("  row of {name}: {r}")));
        }
        out
    }

    /// Each row of `sql` as its values' debug forms.
    fn rows_of(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        let width = stmt.column_count();
        stmt.query_map(params, |r| {
            (0..width)
                .map(|i| r.get_ref(i).map(|v| format!("{v:?}")))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(|values| values.join("|"))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap()
    }

    #[test]
    fn a_new_database_gets_the_schema_the_migrations_build() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.db");
        let mut created = Connection::open(&new).unwrap();
        migrate(&mut created, &new).unwrap();
        assert_eq!(user_version(&created).unwrap(), schema::LATEST_VERSION);

        // The steps one by one, as a database from the first release meets
        // every later build.
        let mut stepped = Connection::open_in_memory().unwrap();
        for step in schema::MIGRATIONS {
            let tx = stepped.transaction().unwrap();
            step.apply(&tx).unwrap();
            tx.pragma_update(None, "user_version", step.version)
                .unwrap();
            tx.commit().unwrap();
        }
        let (created, stepped) = (describe(&created), describe(&stepped));
        assert!(created.len() > 40, "{created:#?}");
        assert!(
            created
                .iter()
                .any(|l| l.contains("row of messages_fts_state")),
            "{created:#?}"
        );
        for (a, b) in created.iter().zip(&stepped) {
            assert_eq!(a, b, "new database against the migrated one");
        }
        assert_eq!(created.len(), stepped.len(), "{created:#?}\n{stepped:#?}");
    }

    /// A new file at `path` migrated step by step to `version`, as a build
    /// of that version left it.
    fn at_version(path: &Path, version: u32) -> Connection {
        let mut conn = Connection::open(path).unwrap();
        for step in schema::MIGRATIONS.iter().filter(|s| s.version <= version) {
            let tx = conn.transaction().unwrap();
            step.apply(&tx).unwrap();
            tx.pragma_update(None, "user_version", step.version)
                .unwrap();
            tx.commit().unwrap();
        }
        conn
    }

    #[test]
    fn version_12_rewrites_the_status_check_and_keeps_it_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v11.db");
        let mut conn = at_version(&path, 11);
        conn.execute(
            "INSERT INTO sessions (id, created_at_ms, updated_at_ms, status) \
             VALUES ('s1', 1, 2, 'suspended')",
            [],
        )
        .unwrap();
        // A second connection has read the old schema before the step.
        let other = Connection::open(&path).unwrap();
        let count = |c: &Connection| -> i64 {
            c.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(count(&other), 1);
        let table_sql = |c: &Connection| -> String {
            c.query_row(
                "SELECT sql FROM sqlite_schema WHERE name = 'sessions'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(table_sql(&conn).contains("status IN ("));
        let cookie = |c: &Connection| -> i64 {
            c.pragma_query_value(None, "schema_version", |r| r.get(0))
                .unwrap()
        };
        let before = cookie(&conn);

        migrate(&mut conn, &path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), schema::LATEST_VERSION);
        let sql = table_sql(&other);
        assert!(!sql.contains(" IN ("), "{sql}");
        assert!(
            sql.contains("CHECK (status = 'active' OR status = 'ended' OR status = 'suspended')"),
            "{sql}"
        );
        assert!(cookie(&other) > before);
        let status: String = other
            .query_row("SELECT status FROM sessions WHERE id = 's1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(status, "suspended");
        // Both connections enforce the constraint as before.
        for c in [&conn, &other] {
            let err = c
                .execute("UPDATE sessions SET status = 'bogus' WHERE id = 's1'", [])
                .unwrap_err();
            assert!(err.to_string().contains("CHECK constraint failed"), "{err}");
            c.execute("UPDATE sessions SET status = 'ended' WHERE id = 's1'", [])
                .unwrap();
        }
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn version_13_refuses_to_change_a_message_and_deletes_still_leave_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v12.db");
        let mut conn = at_version(&path, 12);
        conn.execute_batch(
            "INSERT INTO sessions (id, created_at_ms, updated_at_ms) VALUES ('s1', 1, 1);
             INSERT INTO messages (session_id, seq, role, content, timestamp_ms)
                 VALUES ('s1', 0, 'user', 'hello world', 1), ('s1', 1, 'assistant', 'hi there', 2);
             INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages;
             UPDATE messages_fts_state SET indexed_upto = (SELECT MAX(id) FROM messages);",
        )
        .unwrap();
        migrate(&mut conn, &path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), schema::LATEST_VERSION);

        for update in [
            "UPDATE messages SET content = 'changed' WHERE seq = 0",
            "UPDATE messages SET id = id + 10 WHERE seq = 0",
        ] {
            let err = conn.execute(update, []).unwrap_err();
            assert!(err.to_string().contains("do not change"), "{err}");
        }
        // Other columns still change.
        conn.execute("UPDATE messages SET interrupted = 1 WHERE seq = 1", [])
            .unwrap();
        let found = |word: &str| -> i64 {
            conn.query_row(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?1",
                [word],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!((found("hello"), found("there")), (1, 1));
        conn.execute("DELETE FROM messages WHERE seq = 0", [])
            .unwrap();
        assert_eq!((found("hello"), found("there")), (0, 1));
        conn.execute(
            "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')",
            [],
        )
        .unwrap();
    }

    #[test]
    fn a_database_another_process_created_meanwhile_is_left_to_the_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut first = Connection::open(&path).unwrap();
        let mut second = Connection::open(&path).unwrap();
        // Both read version 0 before either creates anything.
        assert_eq!(user_version(&second).unwrap(), 0);
        migrate(&mut first, &path).unwrap();
        assert!(!create_latest(&mut second, &path).unwrap());
        migrate(&mut second, &path).unwrap();
        assert_eq!(user_version(&second).unwrap(), schema::LATEST_VERSION);
        let sessions: i64 = second
            .query_row(
                "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'sessions'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(sessions, 1);
    }
}
