//! Token totals of a session, per answering model (SPEC X3; prices need the
//! model, and with a fallback chain one session may have several).

use hermes_core::Usage;

use super::sessions::session_exists;
use super::{Store, StoreError};

/// The usage of one model within a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    /// The configured model name stored with the messages (`None` for
    /// messages written before models were recorded).
    pub model: Option<String>,
    /// Model calls that reported usage.
    pub calls: u64,
    /// Their summed counts.
    pub usage: Usage,
}

impl Store {
    /// The token totals of session `id`, one row per model, most used
    /// first. Only messages that carry counts (assistant messages) count.
    pub fn session_usage(&self, id: &str) -> Result<Vec<ModelUsage>, StoreError> {
        if !session_exists(&self.conn, id)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), \
             SUM(total_tokens), SUM(cached_tokens), SUM(cache_write_tokens) \
             FROM messages WHERE session_id = ?1 \
             AND (prompt_tokens IS NOT NULL OR completion_tokens IS NOT NULL) \
             GROUP BY model ORDER BY COUNT(*) DESC, model",
        )?;
        let rows = stmt.query_map([id], |row| {
            // SQLite sums integers into an i64 (saturating to a float only
            // past i64, which token counts do not reach); NULL is 0.
            let n = |i: usize| -> rusqlite::Result<u64> {
                Ok(row
                    .get::<_, Option<i64>>(i)?
                    .map_or(0, |v| u64::try_from(v).unwrap_or(0)))
            };
            Ok(ModelUsage {
                model: row.get(0)?,
                calls: n(1)?,
                usage: Usage {
                    prompt_tokens: n(2)?,
                    completion_tokens: n(3)?,
                    total_tokens: n(4)?,
                    cached_tokens: n(5)?,
                    cache_write_tokens: n(6)?,
                },
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}
