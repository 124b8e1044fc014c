//! Small adapter state (offsets, the gateway inbox) as key-value rows.

use rusqlite::OptionalExtension;

use super::{Store, StoreError, WriteTx};

impl Store {
    /// Reads a small adapter-state value (e.g. the Telegram update offset).
    pub fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM kv WHERE key = ?1")?
            .query_row([key], |row| row.get(0))
            .optional()?)
    }

    /// Writes (inserts or replaces) a small adapter-state value, durably.
    pub fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute([key, value])?;
        Ok(())
    }

    /// The values whose keys start with `prefix`, in key order.
    pub fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
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

    /// Deletes these keys (absent ones are ignored), in one transaction.
    pub fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        {
            let mut stmt = self.conn.prepare_cached("DELETE FROM kv WHERE key = ?1")?;
            for key in keys {
                stmt.execute([key])?;
            }
        }
        Ok(tx.commit()?)
    }
}
