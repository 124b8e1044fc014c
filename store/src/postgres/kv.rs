//! The key-value table on PostgreSQL. A claim is `INSERT … ON CONFLICT DO
//! NOTHING`: of two gateways claiming one key at once, the second waits for
//! the first to commit and then finds the key (READ COMMITTED), so exactly
//! one batch wins.

use super::conn::{Statements, prepare};
use super::{Postgres, check_fence, from_db, to_db};
use crate::backend::KeyValue;
use crate::{Fence, KvWrite, StoreError, prefix_end, to_i64};

/// Owned key-value writes, for the connection's thread.
pub(super) enum OwnedWrite {
    Claim(String, String),
    Set(String, String),
    Delete(String),
    Consume(String),
    Add(String, i64),
    AddBelow(String, i64, i64),
}

impl OwnedWrite {
    pub fn all(writes: &[KvWrite<'_>]) -> Vec<OwnedWrite> {
        writes
            .iter()
            .map(|w| match *w {
                KvWrite::Claim { key, value } => {
                    OwnedWrite::Claim(key.to_owned(), to_db(value).into_owned())
                }
                KvWrite::Set { key, value } => {
                    OwnedWrite::Set(key.to_owned(), to_db(value).into_owned())
                }
                KvWrite::Delete(key) => OwnedWrite::Delete(key.to_owned()),
                KvWrite::Consume(key) => OwnedWrite::Consume(key.to_owned()),
                KvWrite::Add { key, amount } => OwnedWrite::Add(key.to_owned(), amount),
                KvWrite::AddBelow { key, amount, below } => {
                    OwnedWrite::AddBelow(key.to_owned(), amount, below)
                }
            })
            .collect()
    }
}

/// Applies `writes` inside the open transaction; `false` when a claim
/// failed (the caller drops the transaction, rolling everything back).
pub(super) fn apply(
    statements: &mut Statements,
    tx: &mut postgres::Transaction<'_>,
    writes: &[OwnedWrite],
) -> Result<bool, StoreError> {
    for write in writes {
        match write {
            OwnedWrite::Claim(key, value) => {
                let stmt = prepare(
                    statements,
                    tx,
                    "INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                )?;
                if tx.execute(&stmt, &[key, value])? == 0 {
                    return Ok(false);
                }
            }
            OwnedWrite::Set(key, value) => {
                let stmt = prepare(statements, tx, SET)?;
                tx.execute(&stmt, &[key, value])?;
            }
            OwnedWrite::Delete(key) => {
                let stmt = prepare(statements, tx, "DELETE FROM kv WHERE key = $1")?;
                tx.execute(&stmt, &[key])?;
            }
            OwnedWrite::Add(key, amount) => {
                // The conflict locks the row: concurrent adds serialise
                // and none is lost (READ COMMITTED re-reads the row).
                let stmt = prepare(
                    statements,
                    tx,
                    "INSERT INTO kv (key, value) VALUES ($1, ($2::BIGINT)::TEXT) \
                     ON CONFLICT (key) DO UPDATE \
                     SET value = (kv.value::BIGINT + $2::BIGINT)::TEXT",
                )?;
                tx.execute(&stmt, &[key, amount])?;
            }
            OwnedWrite::AddBelow(key, amount, below) => {
                // Absent counts as 0. On a conflict the row is locked and
                // the condition re-read after any concurrent writer
                // committed (READ COMMITTED), so the test cannot race.
                if *below <= 0 {
                    return Ok(false);
                }
                let stmt = prepare(
                    statements,
                    tx,
                    "INSERT INTO kv (key, value) VALUES ($1, ($2::BIGINT)::TEXT) \
                     ON CONFLICT (key) DO UPDATE \
                     SET value = (kv.value::BIGINT + $2::BIGINT)::TEXT \
                     WHERE kv.value::BIGINT < $3::BIGINT",
                )?;
                if tx.execute(&stmt, &[key, amount, below])? == 0 {
                    return Ok(false);
                }
            }
            OwnedWrite::Consume(key) => {
                let stmt = prepare(statements, tx, "DELETE FROM kv WHERE key = $1")?;
                if tx.execute(&stmt, &[key])? == 0 {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

const SET: &str = "INSERT INTO kv (key, value) VALUES ($1, $2) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";

impl KeyValue for Postgres {
    fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let key = key.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement("SELECT value FROM kv WHERE key = $1")?;
            Ok(session
                .client
                .query_opt(&stmt, &[&key])?
                .map(|row| row.try_get::<_, String>(0))
                .transpose()?
                .map(|v| from_db(&v).into_owned()))
        })
    }

    fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        let key = key.to_owned();
        let value = to_db(value).into_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(SET)?;
            session.client.execute(&stmt, &[&key, &value])?;
            Ok(())
        })
    }

    fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let from = prefix.to_owned();
        let to = prefix_end(prefix);
        self.conn.call(move |session| {
            let stmt = session.statement(
                "SELECT key, value FROM kv WHERE key >= $1 AND ($2::TEXT IS NULL OR key < $2) \
                 ORDER BY key",
            )?;
            session
                .client
                .query(&stmt, &[&from, &to])?
                .iter()
                .map(|row| {
                    let value: String = row.try_get(1)?;
                    Ok((row.try_get(0)?, from_db(&value).into_owned()))
                })
                .collect()
        })
    }

    fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        self.conn.call(move |session| {
            let stmt = session.statement("DELETE FROM kv WHERE key = ANY($1)")?;
            session.client.execute(&stmt, &[&keys])?;
            Ok(())
        })
    }

    fn kv_commit(&mut self, writes: &[KvWrite<'_>], fences: &[Fence]) -> Result<bool, StoreError> {
        let writes = OwnedWrite::all(writes);
        let fences = fences.to_vec();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            for fence in &fences {
                check_fence(statements, &mut tx, fence)?;
            }
            if !apply(statements, &mut tx, &writes)? {
                return Ok(false);
            }
            tx.commit()?;
            Ok(true)
        })
    }

    fn kv_prune_below(&mut self, prefix: &str, below: u64) -> Result<usize, StoreError> {
        let below = to_i64("prune bound", below)?;
        let from = prefix.to_owned();
        let to = prefix_end(prefix);
        self.conn.call(move |session| {
            // Whole numbers only (as SQLite's GLOB test), compared as
            // numerics so no value is too long to cast.
            let stmt = session.statement(
                "DELETE FROM kv WHERE key >= $1 AND ($2::TEXT IS NULL OR key < $2) \
                 AND value ~ '^[0-9]+$' AND value::NUMERIC < $3::BIGINT",
            )?;
            let deleted = session.client.execute(&stmt, &[&from, &to, &below])?;
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        })
    }
}
