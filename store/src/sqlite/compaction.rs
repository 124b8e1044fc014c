//! Compactions on SQLite (schema V4); the logic is shared
//! (`store/src/compaction.rs`).

use hermes_core::LedgerEntry;
use hermes_core::context::Compaction;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

use super::sessions::touch;
use super::transcript::{decode_message, message_columns};
use super::{Sqlite, WriteTx, to_i64};
use crate::backend::Compactions;
use crate::compaction::{
    RawRow, ViewCounts, assemble_view, into_stored, new_record, placement_str,
};
use crate::{StoreError, StoredCompaction};

const COLUMNS: &str = "head_end, tail_start, end_seq, placement, replaced, summary, \
     tokens_before, tokens_after, created_at_ms";

/// The view's messages: the session row LEFT JOINed to the kept messages
/// (same column order as the transcript load, so [`decode_message`] reads it).
const LOAD_VIEW_SQL: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM sessions s LEFT JOIN messages m ON m.session_id = s.id AND (m.seq < ?2 OR m.seq >= ?3) \
     WHERE s.id = ?1 ORDER BY m.seq"
);

fn latest(conn: &Connection, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
    let sql =
        format!("SELECT {COLUMNS} FROM compactions WHERE session_id = ?1 ORDER BY id DESC LIMIT 1");
    let row = conn.prepare_cached(&sql)?.query_row([id], raw).optional()?;
    row.map(|r| into_stored(r, id)).transpose()
}

fn raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
    ))
}

impl Compactions for Sqlite {
    fn record_compaction(
        &mut self,
        id: &str,
        compaction: &Compaction,
    ) -> Result<StoredCompaction, StoreError> {
        let now = self.clock.now_ms();
        let tx = WriteTx::begin(&self.conn)?;
        if !touch(&tx, id, to_i64("updated_at_ms", now)?)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        let current = latest(&tx, id)?;
        let (head_end, tail_start) = current
            .as_ref()
            .map_or((0, 0), |c| (c.head_end, c.tail_start));
        let counts = tx
            .prepare_cached(
                "SELECT COUNT(*) FILTER (WHERE seq < ?2), COUNT(*) FILTER (WHERE seq >= ?3), \
                 COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?1",
            )?
            .query_row(
                params![
                    id,
                    to_i64("head_end", head_end)?,
                    to_i64("tail_start", tail_start)?
                ],
                |row| {
                    Ok(ViewCounts {
                        kept_front: row.get(0)?,
                        kept_back: row.get(1)?,
                        end_seq: row.get(2)?,
                    })
                },
            )?;
        let record = new_record(id, current.as_ref(), counts, compaction)?;
        tx.prepare_cached(&format!(
            "INSERT INTO compactions (session_id, {COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        ))?
        .execute(params![
            id,
            to_i64("head_end", record.head_end)?,
            to_i64("tail_start", record.tail_start)?,
            to_i64("end_seq", record.end_seq)?,
            placement_str(record.placement),
            to_i64("replaced", record.replaced)?,
            record.summary,
            to_i64("tokens_before", record.tokens_before)?,
            to_i64("tokens_after", record.tokens_after)?,
            to_i64("created_at_ms", record.created_at_ms)?,
        ])?;
        tx.commit()?;
        Ok(record)
    }

    fn latest_compaction(&self, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
        latest(&self.conn, id)
    }

    fn compactions(&self, id: &str) -> Result<Vec<StoredCompaction>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM compactions WHERE session_id = ?1 ORDER BY id");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([id], raw)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(into_stored(row?, id)?);
        }
        Ok(out)
    }

    fn load_view(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let Some(c) = latest(&self.conn, id)? else {
            return crate::backend::Transcripts::load_transcript(self, id);
        };
        let mut stmt = self.conn.prepare_cached(LOAD_VIEW_SQL)?;
        let mut rows = stmt.query(params![
            id,
            to_i64("head_end", c.head_end)?,
            to_i64("tail_start", c.tail_start)?
        ])?;
        let mut out = Vec::new();
        let mut session_found = false;
        let mut summary_at = None;
        while let Some(row) = rows.next()? {
            session_found = true;
            let role = row.get_ref(1)?;
            if role == ValueRef::Null {
                continue;
            }
            let seq = row.get_ref(0)?.as_i64().unwrap_or(-1);
            if summary_at.is_none() && seq >= 0 && seq as u64 >= c.tail_start {
                summary_at = Some(out.len());
            }
            out.push(decode_message(row, role, id)?);
        }
        if !session_found {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(assemble_view(out, summary_at, &c))
    }
}
