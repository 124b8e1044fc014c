//! Compacted views of transcripts (SPEC X1): originals kept, the view
//! recorded beside them.
//!
//! A compaction never deletes or edits a message. It adds a row to
//! `compactions` (schema V4) saying which messages the model is given from
//! then on — the head `seq < head_end`, the summary, then every message with
//! `seq >= tail_start` — so `sessions search` and exports still see every
//! original, and [`Store::load_view`] gives the compacted view that later
//! turns start from. The row is computed from the view the core compacted
//! (entry counts, [`Compaction`]) and the session's latest row, and is
//! refused when the two disagree (the caller's ledger was not the stored
//! view), so a stale ledger can never corrupt the mapping.

use hermes_core::context::{Compaction, summary};
use hermes_core::{CompactionMark, EntryMeta, LedgerEntry, Message, SummaryPlacement};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

use super::sessions::touch;
use super::transcript::{decode_message, message_columns};
use super::{Store, StoreError, WriteTx, from_i64, to_i64};

/// A compaction as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCompaction {
    /// Messages with `seq < head_end` are kept at the front.
    pub head_end: u64,
    /// Messages with `seq >= tail_start` are kept after the summary.
    pub tail_start: u64,
    /// One past the last message when the compaction was made.
    pub end_seq: u64,
    /// How the summary sits in the view.
    pub placement: SummaryPlacement,
    /// How many entries of the previous view it replaced.
    pub replaced: u64,
    /// The summary, framed as the view shows it.
    pub summary: String,
    /// Estimated request tokens before.
    pub tokens_before: u64,
    /// Estimated request tokens after.
    pub tokens_after: u64,
    /// When it was made, ms since the Unix epoch.
    pub created_at_ms: u64,
}

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

fn placement_str(p: SummaryPlacement) -> &'static str {
    match p {
        SummaryPlacement::Standalone => "standalone",
        SummaryPlacement::BeforeNext => "before_next",
    }
}

fn latest(conn: &Connection, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
    let sql =
        format!("SELECT {COLUMNS} FROM compactions WHERE session_id = ?1 ORDER BY id DESC LIMIT 1");
    let row = conn.prepare_cached(&sql)?.query_row([id], raw).optional()?;
    row.map(|r| r.into_stored(id)).transpose()
}

type RawRow = (i64, i64, i64, String, i64, String, i64, i64, i64);

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

trait IntoStored {
    fn into_stored(self, id: &str) -> Result<StoredCompaction, StoreError>;
}

impl IntoStored for RawRow {
    fn into_stored(self, id: &str) -> Result<StoredCompaction, StoreError> {
        let (head, tail, end, placement, replaced, summary, before, after, at) = self;
        let placement = match placement.as_str() {
            "standalone" => SummaryPlacement::Standalone,
            "before_next" => SummaryPlacement::BeforeNext,
            other => {
                return Err(StoreError::Corrupt {
                    session_id: id.to_owned(),
                    what: format!("compaction with unknown placement {other:?}"),
                });
            }
        };
        Ok(StoredCompaction {
            head_end: from_i64(id, "head_end", head)?,
            tail_start: from_i64(id, "tail_start", tail)?,
            end_seq: from_i64(id, "end_seq", end)?,
            placement,
            replaced: from_i64(id, "replaced", replaced)?,
            summary,
            tokens_before: from_i64(id, "tokens_before", before)?,
            tokens_after: from_i64(id, "tokens_after", after)?,
            created_at_ms: from_i64(id, "created_at_ms", at)?,
        })
    }
}

/// The sequence number of entry `index` of the current view, or `None` for
/// a standalone summary entry. Sequence numbers are contiguous from 0 (rows
/// are only ever appended at `MAX(seq) + 1` and deleted from the end).
fn seq_of(current: Option<&StoredCompaction>, index: u64) -> Option<u64> {
    let Some(c) = current else {
        return Some(index);
    };
    if index < c.head_end {
        return Some(index);
    }
    match c.placement {
        SummaryPlacement::Standalone if index == c.head_end => None,
        SummaryPlacement::Standalone => Some(c.tail_start + (index - c.head_end - 1)),
        SummaryPlacement::BeforeNext => Some(c.tail_start + (index - c.head_end)),
    }
}

impl Store {
    /// Records a compaction the core made of this session's current view
    /// (what [`Store::load_view`] returned, plus what was appended since),
    /// in one transaction. Refused with [`StoreError::StaleView`] when the
    /// compaction describes a view of another length; the originals are
    /// never touched either way.
    pub fn record_compaction(
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
        let (kept_front, kept_back, end_seq): (i64, i64, i64) = tx
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
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?;
        let stored_len = match &current {
            None => from_i64(id, "count", kept_back)?,
            Some(c) => {
                from_i64(id, "count", kept_front)?
                    + from_i64(id, "count", kept_back)?
                    + u64::from(c.placement == SummaryPlacement::Standalone)
            }
        };
        let described = (compaction.head + compaction.replaced + compaction.tail) as u64;
        if described != stored_len {
            return Err(StoreError::StaleView {
                session_id: id.to_owned(),
                stored: stored_len,
                described,
            });
        }
        let head = compaction.head as u64;
        let first_tail = head + compaction.replaced as u64;
        let (Some(new_tail_start), true) = (
            seq_of(current.as_ref(), first_tail),
            current.as_ref().is_none_or(|c| head <= c.head_end),
        ) else {
            return Err(StoreError::StaleView {
                session_id: id.to_owned(),
                stored: stored_len,
                described,
            });
        };
        let record = StoredCompaction {
            head_end: head,
            tail_start: new_tail_start,
            end_seq: from_i64(id, "end_seq", end_seq)?,
            placement: compaction.placement,
            replaced: compaction.replaced as u64,
            summary: compaction.summary.clone(),
            tokens_before: compaction.tokens_before,
            tokens_after: compaction.tokens_after,
            // The timestamp the in-memory summary entry carries, so a load
            // gives back exactly the view the core made.
            created_at_ms: compaction.at_ms,
        };
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

    /// The session's latest compaction, if any.
    pub fn latest_compaction(&self, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
        latest(&self.conn, id)
    }

    /// Every compaction of the session, oldest first (for exports).
    pub fn compactions(&self, id: &str) -> Result<Vec<StoredCompaction>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM compactions WHERE session_id = ?1 ORDER BY id");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([id], raw)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row?.into_stored(id)?);
        }
        Ok(out)
    }

    /// What the model is given of this session: the transcript itself, or,
    /// after a compaction, the kept head, the summary (marked
    /// [`EntryMeta::compaction`]) and every message from the kept tail on.
    /// This is what a turn starts from (SPEC G5, X1); the originals stay
    /// available through [`Store::load_transcript`] and search.
    pub fn load_view(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let Some(c) = latest(&self.conn, id)? else {
            return self.load_transcript(id);
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
        let at = summary_at.unwrap_or(out.len());
        let mark = CompactionMark {
            placement: c.placement,
            replaced: u32::try_from(c.replaced).unwrap_or(u32::MAX),
            kept_after: u32::try_from(c.end_seq - c.tail_start).unwrap_or(u32::MAX),
        };
        let merged = c.placement == SummaryPlacement::BeforeNext
            && matches!(out.get(at).map(|e| &e.message), Some(Message::User { .. }));
        if merged {
            let entry = &mut out[at];
            if let Message::User { content, .. } = &mut entry.message {
                *content = summary::merged(&c.summary, content);
            }
            entry.meta.compaction = Some(mark);
        } else {
            // A standalone summary (or, should the first kept message have
            // changed by hand, one of its own rather than a merge into the
            // wrong message).
            out.insert(
                at,
                LedgerEntry {
                    message: Message::user(c.summary.clone()),
                    meta: EntryMeta {
                        timestamp_ms: c.created_at_ms,
                        compaction: Some(CompactionMark {
                            placement: SummaryPlacement::Standalone,
                            ..mark
                        }),
                        ..EntryMeta::default()
                    },
                },
            );
        }
        Ok(out)
    }
}
