//! Running the schema's forward migrations (see `schema.rs`).

use std::path::Path;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::schema;
use crate::StoreError;

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Runs the migration steps the database has not seen yet.
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
    for step in schema::MIGRATIONS {
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
        tx.execute_batch(step.sql).map_err(mig_err)?;
        tx.pragma_update(None, "user_version", step.version)
            .map_err(mig_err)?;
        tx.commit().map_err(mig_err)?;
    }
    Ok(())
}
