//! A session's messages on PostgreSQL: loading, appending (fenced or not,
//! with key-value writes or not), undoing and replacing them.

use std::borrow::Cow;

use hermes_core::{LedgerEntry, Usage};
use postgres::Row;

use super::conn::{Statements, prepare};
use super::kv::{OwnedWrite, apply as apply_kv};
use super::{Postgres, check_fence, from_db, fts, to_db};
use crate::backend::Transcripts;
use crate::codec::{Columns, encode};
use crate::{Fence, KvWrite, ModelUsage, StoreError, to_i64};

/// The columns [`decode`] reads, after the session row's id (so a session
/// without messages gives one row of NULLs, as on SQLite).
macro_rules! message_columns {
    () => {
        "m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.reasoning, \
         m.prompt_tokens, m.completion_tokens, m.total_tokens, m.finish_reason, \
         m.interrupted, m.timestamp_ms, m.cached_tokens, m.cache_write_tokens, m.model, \
         m.reasoning_details, m.attachments"
    };
}
pub(super) use message_columns;

const LOAD: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM sessions s LEFT JOIN messages m ON m.session_id = s.id WHERE s.id = $1 ORDER BY m.seq"
);

/// Locks the session row, bumps `updated_at_ms` (never backwards) and hands
/// out `$3` sequence numbers: returns the first. No row: no such session.
const TOUCH: &str = "UPDATE sessions SET updated_at_ms = GREATEST(updated_at_ms, $2), \
     clean_shutdown = false, next_seq = next_seq + $3 WHERE id = $1 RETURNING next_seq - $3";

/// Every entry of one append in one statement: parallel arrays, numbered
/// from `$2`.
const INSERT: &str = "INSERT INTO messages (session_id, seq, role, content, tool_calls, \
     tool_call_id, reasoning, prompt_tokens, completion_tokens, total_tokens, finish_reason, \
     interrupted, timestamp_ms, search, cached_tokens, cache_write_tokens, model, \
     reasoning_details, attachments) \
     SELECT $1, $2 + r.ord - 1, r.role, r.content, r.tool_calls, r.tool_call_id, r.reasoning, \
     r.prompt_tokens, r.completion_tokens, r.total_tokens, r.finish_reason, r.interrupted, \
     r.timestamp_ms, r.search::TSVECTOR, r.cached_tokens, r.cache_write_tokens, r.model, \
     r.reasoning_details, r.attachments \
     FROM UNNEST($3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::BIGINT[], \
     $9::BIGINT[], $10::BIGINT[], $11::TEXT[], $12::BOOL[], $13::BIGINT[], $14::TEXT[], \
     $15::BIGINT[], $16::BIGINT[], $17::TEXT[], $18::TEXT[], $19::TEXT[]) \
     WITH ORDINALITY AS r(role, content, tool_calls, tool_call_id, reasoning, prompt_tokens, \
     completion_tokens, total_tokens, finish_reason, interrupted, timestamp_ms, search, \
     cached_tokens, cache_write_tokens, model, reasoning_details, attachments, ord)";

/// Decodes one row of [`message_columns`] starting at column `at`, or
/// `None` for the LEFT JOIN's row of NULLs.
pub(super) fn decode(
    row: &Row,
    at: usize,
    session_id: &str,
) -> Result<Option<LedgerEntry>, StoreError> {
    let Some(role) = row.try_get::<_, Option<&str>>(at + 1)? else {
        return Ok(None);
    };
    let text = |i: usize| -> Result<Option<Cow<'_, str>>, StoreError> {
        Ok(row.try_get::<_, Option<&str>>(at + i)?.map(from_db))
    };
    let content = text(2)?;
    let tool_call_id = text(4)?;
    let reasoning = text(5)?;
    let model = text(14)?;
    let reasoning_details = text(15)?;
    let attachments = text(16)?;
    let columns = Columns {
        seq: row.try_get(at)?,
        role,
        content: content.as_deref(),
        tool_calls: row.try_get(at + 3)?,
        tool_call_id: tool_call_id.as_deref(),
        reasoning: reasoning.as_deref(),
        prompt_tokens: row.try_get(at + 6)?,
        completion_tokens: row.try_get(at + 7)?,
        total_tokens: row.try_get(at + 8)?,
        finish_reason: row.try_get(at + 9)?,
        interrupted: row.try_get(at + 10)?,
        timestamp_ms: row.try_get(at + 11)?,
        cached_tokens: row.try_get(at + 12)?,
        cache_write_tokens: row.try_get(at + 13)?,
        model: model.as_deref(),
        reasoning_details: reasoning_details.as_deref(),
        attachments: attachments.as_deref(),
    };
    columns.into_entry(session_id).map(Some)
}

/// One append's entries as the parallel arrays [`INSERT`] takes.
#[derive(Default)]
pub(super) struct Batch {
    role: Vec<&'static str>,
    content: Vec<Option<String>>,
    tool_calls: Vec<Option<String>>,
    tool_call_id: Vec<Option<String>>,
    reasoning: Vec<Option<String>>,
    prompt_tokens: Vec<Option<i64>>,
    completion_tokens: Vec<Option<i64>>,
    total_tokens: Vec<Option<i64>>,
    finish_reason: Vec<Option<String>>,
    interrupted: Vec<bool>,
    timestamp_ms: Vec<i64>,
    search: Vec<String>,
    cached_tokens: Vec<Option<i64>>,
    cache_write_tokens: Vec<Option<i64>>,
    model: Vec<Option<String>>,
    reasoning_details: Vec<Option<String>>,
    attachments: Vec<Option<String>>,
}

impl Batch {
    /// Encodes `entries` of session `id` (on the caller's thread, so the
    /// connection's thread only talks to the server).
    pub fn new(id: &str, entries: &[LedgerEntry]) -> Result<Batch, StoreError> {
        let mut b = Batch::default();
        for entry in entries {
            let e = encode(id, entry)?;
            let owned = |s: Option<&str>| s.map(|s| to_db(s).into_owned());
            b.role.push(e.role);
            b.search
                .push(e.content.map(fts::vector).unwrap_or_default());
            b.content.push(owned(e.content));
            b.tool_calls.push(e.tool_calls);
            b.tool_call_id.push(owned(e.tool_call_id));
            b.reasoning.push(owned(e.reasoning));
            b.prompt_tokens.push(e.prompt_tokens);
            b.completion_tokens.push(e.completion_tokens);
            b.total_tokens.push(e.total_tokens);
            b.finish_reason.push(e.finish_reason.map(str::to_owned));
            b.interrupted.push(e.interrupted);
            b.timestamp_ms.push(e.timestamp_ms);
            b.cached_tokens.push(e.cached_tokens);
            b.cache_write_tokens.push(e.cache_write_tokens);
            b.model.push(owned(e.model));
            b.reasoning_details.push(owned(e.reasoning_details));
            b.attachments
                .push(e.attachments.map(|a| to_db(&a).into_owned()));
        }
        Ok(b)
    }

    fn len(&self) -> i64 {
        i64::try_from(self.role.len()).unwrap_or(i64::MAX)
    }

    /// Inserts the batch numbered from `first`.
    fn insert(
        &self,
        statements: &mut Statements,
        tx: &mut postgres::Transaction<'_>,
        id: &str,
        first: i64,
    ) -> Result<(), StoreError> {
        if self.role.is_empty() {
            return Ok(());
        }
        let stmt = prepare(statements, tx, INSERT)?;
        tx.execute(
            &stmt,
            &[
                &id,
                &first,
                &self.role,
                &self.content,
                &self.tool_calls,
                &self.tool_call_id,
                &self.reasoning,
                &self.prompt_tokens,
                &self.completion_tokens,
                &self.total_tokens,
                &self.finish_reason,
                &self.interrupted,
                &self.timestamp_ms,
                &self.search,
                &self.cached_tokens,
                &self.cache_write_tokens,
                &self.model,
                &self.reasoning_details,
                &self.attachments,
            ],
        )?;
        Ok(())
    }
}

/// Token totals per model: the session row LEFT JOINed to its messages that
/// carry counts, so an unknown session gives no row and a session without
/// counts one row counting nothing. Sums are NUMERIC here; they are capped
/// at what a BIGINT holds (the counts are stored saturated too).
const USAGE: &str = "SELECT m.model, COUNT(m.seq), \
     LEAST(COALESCE(SUM(m.prompt_tokens), 0), 9223372036854775807)::BIGINT, \
     LEAST(COALESCE(SUM(m.completion_tokens), 0), 9223372036854775807)::BIGINT, \
     LEAST(COALESCE(SUM(m.total_tokens), 0), 9223372036854775807)::BIGINT, \
     LEAST(COALESCE(SUM(m.cached_tokens), 0), 9223372036854775807)::BIGINT, \
     LEAST(COALESCE(SUM(m.cache_write_tokens), 0), 9223372036854775807)::BIGINT \
     FROM sessions s LEFT JOIN messages m ON m.session_id = s.id \
     AND (m.prompt_tokens IS NOT NULL OR m.completion_tokens IS NOT NULL) \
     WHERE s.id = $1 GROUP BY m.model \
     ORDER BY COUNT(m.seq) DESC, m.model COLLATE \"C\" NULLS FIRST";

/// Locks and touches the session, reserving `count` sequence numbers;
/// `None` when there is no such session.
fn touch(
    statements: &mut Statements,
    tx: &mut postgres::Transaction<'_>,
    id: &str,
    now: i64,
    count: i64,
) -> Result<Option<i64>, StoreError> {
    let stmt = prepare(statements, tx, TOUCH)?;
    Ok(tx
        .query_opt(&stmt, &[&id, &now, &count])?
        .map(|row| row.try_get(0))
        .transpose()?)
}

impl Transcripts for Postgres {
    fn load_transcript(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            // One statement: the existence check and the rows come from one
            // snapshot, even while others append.
            let stmt = session.statement(LOAD)?;
            let rows = session.client.query(&stmt, &[&id])?;
            if rows.is_empty() {
                return Err(StoreError::SessionNotFound(id));
            }
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                if let Some(entry) = decode(row, 0, &id)? {
                    out.push(entry);
                }
            }
            Ok(out)
        })
    }

    fn session_usage(&self, id: &str) -> Result<Vec<ModelUsage>, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(USAGE)?;
            let rows = session.client.query(&stmt, &[&id])?;
            if rows.is_empty() {
                return Err(StoreError::SessionNotFound(id));
            }
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let n = |i: usize| -> Result<u64, StoreError> {
                    Ok(u64::try_from(row.try_get::<_, i64>(i)?).unwrap_or(0))
                };
                let calls = n(1)?;
                if calls == 0 {
                    continue;
                }
                out.push(ModelUsage {
                    model: row
                        .try_get::<_, Option<&str>>(0)?
                        .map(|m| from_db(m).into_owned()),
                    calls,
                    usage: Usage {
                        prompt_tokens: n(2)?,
                        completion_tokens: n(3)?,
                        total_tokens: n(4)?,
                        cached_tokens: n(5)?,
                        cache_write_tokens: n(6)?,
                    },
                });
            }
            Ok(out)
        })
    }

    fn append(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        writes: &[KvWrite<'_>],
        fences: &[Fence],
    ) -> Result<bool, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let batch = Batch::new(id, entries)?;
        let writes = OwnedWrite::all(writes);
        let fences = fences.to_vec();
        let id = id.to_owned();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            for fence in &fences {
                check_fence(statements, &mut tx, fence)?;
            }
            let Some(first) = touch(statements, &mut tx, &id, now, batch.len())? else {
                return Err(StoreError::SessionNotFound(id));
            };
            batch.insert(statements, &mut tx, &id, first)?;
            if !apply_kv(statements, &mut tx, &writes)? {
                return Ok(false);
            }
            tx.commit()?;
            Ok(true)
        })
    }

    fn undo_last_turn(&mut self, id: &str) -> Result<usize, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let id = id.to_owned();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            // Locks the session first; dropping `tx` when there is nothing
            // to undo rolls the bump back.
            if touch(statements, &mut tx, &id, now, 0)?.is_none() {
                return Err(StoreError::SessionNotFound(id));
            }
            let stmt = prepare(
                statements,
                &mut tx,
                "SELECT MAX(seq) FROM messages WHERE session_id = $1 AND role = 'user'",
            )?;
            let Some(from) = tx.query_one(&stmt, &[&id])?.try_get::<_, Option<i64>>(0)? else {
                return Ok(0);
            };
            let stmt = prepare(
                statements,
                &mut tx,
                "DELETE FROM messages WHERE session_id = $1 AND seq >= $2",
            )?;
            let deleted = tx.execute(&stmt, &[&id, &from])?;
            // A compaction made during or after the removed turn summarised
            // messages that are gone: the view falls back to the one before.
            let stmt = prepare(
                statements,
                &mut tx,
                "DELETE FROM compactions WHERE session_id = $1 AND end_seq > $2",
            )?;
            tx.execute(&stmt, &[&id, &from])?;
            // Numbering goes on from the first removed message, as SQLite's
            // `MAX(seq) + 1` does.
            let stmt = prepare(
                statements,
                &mut tx,
                "UPDATE sessions SET next_seq = $2 WHERE id = $1",
            )?;
            tx.execute(&stmt, &[&id, &from])?;
            tx.commit()?;
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        })
    }

    fn replace_transcript(&mut self, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let batch = Batch::new(id, entries)?;
        let id = id.to_owned();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            if touch(statements, &mut tx, &id, now, 0)?.is_none() {
                return Err(StoreError::SessionNotFound(id));
            }
            for sql in [
                "DELETE FROM messages WHERE session_id = $1",
                "DELETE FROM compactions WHERE session_id = $1",
            ] {
                let stmt = prepare(statements, &mut tx, sql)?;
                tx.execute(&stmt, &[&id])?;
            }
            let stmt = prepare(
                statements,
                &mut tx,
                "UPDATE sessions SET next_seq = $2 WHERE id = $1",
            )?;
            tx.execute(&stmt, &[&id, &batch.len()])?;
            batch.insert(statements, &mut tx, &id, 0)?;
            tx.commit()?;
            Ok(())
        })
    }
}
