//! The key-value table on SQLite: small adapter and gateway state (the
//! Telegram update offset, the gateway's inbox and the ids of messages it
//! accepted).
//!
//! [`KeyValue::kv_commit`] applies several writes atomically, with
//! [`KvWrite::Claim`] as the test-and-set that makes intake exactly-once:
//! "remember this message id and queue the message" either both happen or,
//! when the id was already remembered, neither does.

use rusqlite::{Connection, OptionalExtension};

use super::lease::check_fence;
use super::{Sqlite, WriteTx, to_i64};
use crate::backend::KeyValue;
use crate::{Fence, KvWrite, StoreError, prefix_end};

/// Applies `writes` inside the open transaction; `false` when a claim failed
/// (the caller then drops the transaction, rolling everything back).
pub(super) fn apply(conn: &Connection, writes: &[KvWrite<'_>]) -> Result<bool, StoreError> {
    for write in writes {
        match *write {
            KvWrite::Claim { key, value } => {
                let inserted = conn
                    .prepare_cached(
                        "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                    )?
                    .execute([key, value])?;
                if inserted == 0 {
                    return Ok(false);
                }
            }
            KvWrite::Set { key, value } => {
                conn.prepare_cached(
                    "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                )?
                .execute([key, value])?;
            }
            KvWrite::Delete(key) => {
                conn.prepare_cached("DELETE FROM kv WHERE key = ?1")?
                    .execute([key])?;
            }
            KvWrite::Add { key, amount } => {
                conn.prepare_cached(
                    "INSERT INTO kv (key, value) VALUES (?1, CAST(?2 AS TEXT)) \
                     ON CONFLICT (key) DO UPDATE \
                     SET value = CAST(CAST(value AS INTEGER) + ?2 AS TEXT)",
                )?
                .execute(rusqlite::params![key, amount])?;
            }
            KvWrite::AddBelow { key, amount, below } => {
                // One writer at a time (the write transaction): no race.
                if below <= 0 {
                    return Ok(false);
                }
                let changed = conn
                    .prepare_cached(
                        "INSERT INTO kv (key, value) VALUES (?1, CAST(?2 AS TEXT)) \
                         ON CONFLICT (key) DO UPDATE \
                         SET value = CAST(CAST(value AS INTEGER) + ?2 AS TEXT) \
                         WHERE CAST(value AS INTEGER) < ?3",
                    )?
                    .execute(rusqlite::params![key, amount, below])?;
                if changed == 0 {
                    return Ok(false);
                }
            }
            KvWrite::Consume(key) => {
                let deleted = conn
                    .prepare_cached("DELETE FROM kv WHERE key = ?1")?
                    .execute([key])?;
                if deleted == 0 {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

impl KeyValue for Sqlite {
    fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM kv WHERE key = ?1")?
            .query_row([key], |row| row.get(0))
            .optional()?)
    }

    fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute([key, value])?;
        Ok(())
    }

    fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT key, value FROM kv WHERE substr(key, 1, ?2) = ?1 ORDER BY key",
        )?;
        let rows = stmt.query_map(
            rusqlite::params![
                prefix,
                i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX)
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        {
            let mut stmt = self.conn.prepare_cached("DELETE FROM kv WHERE key = ?1")?;
            for key in keys {
                stmt.execute([key])?;
            }
        }
        Ok(tx.commit()?)
    }

    fn kv_commit(&mut self, writes: &[KvWrite<'_>], fences: &[Fence]) -> Result<bool, StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        for fence in fences {
            check_fence(&tx, fence)?;
        }
        if !apply(&tx, writes)? {
            return Ok(false);
        }
        tx.commit()?;
        Ok(true)
    }

    fn kv_prune_below(&mut self, prefix: &str, below: u64) -> Result<usize, StoreError> {
        let below = to_i64("prune bound", below)?;
        let deleted = match prefix_end(prefix) {
            Some(end) => self
                .conn
                .prepare_cached(
                    "DELETE FROM kv WHERE key >= ?1 AND key < ?2 \
                     AND value <> '' AND value NOT GLOB '*[^0-9]*' \
                     AND CAST(value AS INTEGER) < ?3",
                )?
                .execute(rusqlite::params![prefix, end, below])?,
            None => self
                .conn
                .prepare_cached(
                    "DELETE FROM kv WHERE value <> '' AND value NOT GLOB '*[^0-9]*' \
                     AND CAST(value AS INTEGER) < ?1",
                )?
                .execute([below])?,
        };
        Ok(deleted)
    }
}
