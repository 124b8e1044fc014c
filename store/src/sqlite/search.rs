//! Full-text search over message content on SQLite: FTS5, indexed by
//! catch-up (see `schema.rs`, V3).

use hermes_core::Role;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Sqlite, WriteTx, from_i64};
use crate::backend::Search;
use crate::records::SCOPE_CONDITION;
use crate::{SearchHit, SearchScope, StoreError};

impl Search for Sqlite {
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(fts_query) = fts_query(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        Search::catch_up_search_index(self)?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT m.session_id, m.seq, m.role, \
             snippet(messages_fts, 0, '[', ']', '…', 16) \
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
             WHERE messages_fts MATCH ?1 ORDER BY rank, m.id LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![fts_query, limit], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (session_id, seq, role, snippet) = row?;
            let Some(role) = Role::parse(&role) else {
                return Err(StoreError::Corrupt {
                    session_id,
                    what: format!("message {seq} has unknown role {role:?}"),
                });
            };
            let seq = from_i64(&session_id, "seq", seq)?;
            out.push(SearchHit {
                session_id,
                seq,
                role,
                snippet: snippet.unwrap_or_default(),
            });
        }
        Ok(out)
    }

    fn search_in(
        &self,
        query: &str,
        scope: SearchScope<'_>,
        exclude: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let Some(fts_query) = fts_query(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        Search::catch_up_search_index(self)?;
        let sql = format!(
            "SELECT m.session_id, m.seq, m.role, \
             snippet(messages_fts, 0, '[', ']', '…', 16) \
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
             JOIN sessions s ON s.id = m.session_id \
             WHERE messages_fts MATCH ?1 AND {} AND m.session_id <> ?5 \
             ORDER BY rank, m.id LIMIT ?2",
            SCOPE_CONDITION.replace("KIND", "?3").replace("VALUE", "?4")
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (kind, value) = scope.sql();
        let rows = stmt.query_map(
            params![fts_query, limit, kind, value, exclude.unwrap_or("")],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            },
        )?;
        let mut out = Vec::new();
        for row in rows {
            let (session_id, seq, role, snippet) = row?;
            out.push(hit(session_id, seq, &role, snippet)?);
        }
        Ok(out)
    }

    // One `INSERT … SELECT` of the messages above the indexed watermark and
    // the watermark bump, in one `IMMEDIATE` transaction (so two processes
    // never index a row twice). Checked first without a write lock, so the
    // common up-to-date case costs one indexed read.
    fn catch_up_search_index(&self) -> Result<u64, StoreError> {
        let (indexed, newest) = fts_watermark(&self.conn)?;
        if newest <= indexed {
            return Ok(0);
        }
        let tx = WriteTx::begin(&self.conn)?;
        // Re-read under the write lock: another connection may have indexed
        // (or deleted) in between.
        let (indexed, newest) = fts_watermark(&tx)?;
        if newest <= indexed {
            return Ok(0);
        }
        let added = tx
            .prepare_cached(
                "INSERT INTO messages_fts (rowid, content) \
                 SELECT id, content FROM messages WHERE id > ?1 AND id <= ?2 ORDER BY id",
            )?
            .execute(params![indexed, newest])?;
        tx.prepare_cached("UPDATE messages_fts_state SET indexed_upto = ?1 WHERE id = 0")?
            .execute([newest])?;
        tx.commit()?;
        Ok(u64::try_from(added).unwrap_or(u64::MAX))
    }
}

/// One result row as a hit.
fn hit(
    session_id: String,
    seq: i64,
    role: &str,
    snippet: Option<String>,
) -> Result<SearchHit, StoreError> {
    let Some(role) = Role::parse(role) else {
        return Err(StoreError::Corrupt {
            session_id,
            what: format!("message {seq} has unknown role {role:?}"),
        });
    };
    let seq = from_i64(&session_id, "seq", seq)?;
    Ok(SearchHit {
        session_id,
        seq,
        role,
        snippet: snippet.unwrap_or_default(),
    })
}

/// `(indexed_upto, MAX(messages.id))`: the full-text watermark and the
/// newest message id (0 for none). See `store/src/sqlite/schema.rs`, V3.
fn fts_watermark(conn: &Connection) -> Result<(i64, i64), StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT indexed_upto, (SELECT COALESCE(MAX(id), 0) FROM messages) \
             FROM messages_fts_state WHERE id = 0",
        )?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    row.ok_or_else(|| StoreError::Sqlite(rusqlite::Error::QueryReturnedNoRows))
}

/// Turns user text into an FTS5 query that cannot be a syntax error: every
/// word becomes a double-quoted string (inner quotes doubled), joined by
/// spaces (implicit AND). `None` when no word has a letter or digit.
pub(super) fn fts_query(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}
