//! A session's messages on SQLite: loading, appending, undoing and
//! replacing them.

use hermes_core::{EntryMeta, LedgerEntry, Message, Role, Usage};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, Row, params};

use super::kv::apply as apply_kv;
use super::lease::check_fence;
use super::sessions::{session_exists, touch};
use super::{Sqlite, WriteTx, to_i64};
use crate::backend::Transcripts;
use crate::codec::{decode_finish_reason, encode};
use crate::{Fence, KvWrite, ModelUsage, StoreError, tool_calls};

/// One message of a session, numbered after its last one; see
/// [`insert_entries`].
pub(super) const INSERT_SQL: &str = "INSERT INTO messages (session_id, seq, role, content, tool_calls, \
     tool_call_id, reasoning, prompt_tokens, completion_tokens, total_tokens, finish_reason, \
     interrupted, timestamp_ms, cached_tokens, cache_write_tokens, model, reasoning_details, attachments) \
     VALUES (?1, (SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?1), \
     ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";

/// The columns of a message, `m` being `messages`, in the order
/// [`decode_message`] reads them; every query that decodes messages selects
/// exactly these.
macro_rules! message_columns {
    () => {
        "m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, \
         m.reasoning, m.prompt_tokens, m.completion_tokens, m.total_tokens, m.finish_reason, \
         m.interrupted, m.timestamp_ms, m.cached_tokens, m.cache_write_tokens, m.model, \
         m.reasoning_details, m.attachments"
    };
}
pub(super) use message_columns;

/// A session's messages in order; see [`Transcripts::load_transcript`].
pub(super) const LOAD_SQL: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM sessions s LEFT JOIN messages m ON m.session_id = s.id \
     WHERE s.id = ?1 ORDER BY m.seq"
);

impl Transcripts for Sqlite {
    fn load_transcript(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        // One statement, so the existence check and the rows come from the
        // same snapshot even while another connection writes, without the
        // cost of an explicit BEGIN/COMMIT: the session row LEFT JOINed to
        // its messages gives no row for an unknown session and one row of
        // NULLs for an empty transcript. The (session_id, seq) index yields
        // the messages already in order (no sort).
        let mut stmt = self.conn.prepare_cached(LOAD_SQL)?;
        let mut rows = stmt.query([id])?;
        let mut out = Vec::new();
        let mut session_found = false;
        while let Some(row) = rows.next()? {
            session_found = true;
            // `role` is NOT NULL in the table, so NULL here is the LEFT
            // JOIN's one row for a session without messages.
            let role = row.get_ref(1)?;
            if role == ValueRef::Null {
                continue;
            }
            out.push(decode_message(row, role, id)?);
        }
        if !session_found {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(out)
    }

    fn append(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        writes: &[KvWrite<'_>],
        fences: &[Fence],
    ) -> Result<bool, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        if entries.is_empty() && writes.is_empty() && fences.is_empty() {
            return if session_exists(&self.conn, id)? {
                Ok(true)
            } else {
                Err(StoreError::SessionNotFound(id.to_owned()))
            };
        }
        let tx = WriteTx::begin(&self.conn)?;
        for fence in fences {
            check_fence(&tx, fence)?;
        }
        // The hot path of every run: the bump proves the session exists
        // (no separate existence check), and each INSERT computes its own
        // sequence number (no separate MAX(seq) query). Deliberately not
        // `UPDATE … RETURNING`: SQLite re-prepares such a statement on every
        // execution, which cost more than the rest of the append.
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        insert_entries(&tx, id, entries)?;
        if !apply_kv(&tx, writes)? {
            return Ok(false);
        }
        tx.commit()?;
        Ok(true)
    }

    fn undo_last_turn(&mut self, id: &str) -> Result<usize, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let tx = WriteTx::begin(&self.conn)?;
        // Bumped first to learn whether the session exists; dropping `tx`
        // when there is nothing to undo rolls the bump back.
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        let last_user: Option<i64> = tx
            .prepare_cached(
                "SELECT MAX(seq) FROM messages WHERE session_id = ?1 AND role = 'user'",
            )?
            .query_row([id], |row| row.get(0))?;
        let Some(from) = last_user else {
            return Ok(0);
        };
        let deleted = tx
            .prepare_cached("DELETE FROM messages WHERE session_id = ?1 AND seq >= ?2")?
            .execute(params![id, from])?;
        // A compaction made during or after the removed turn summarised
        // messages that are gone: the view falls back to the one before.
        tx.prepare_cached("DELETE FROM compactions WHERE session_id = ?1 AND end_seq > ?2")?
            .execute(params![id, from])?;
        tx.commit()?;
        Ok(deleted)
    }

    fn replace_transcript(&mut self, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let tx = WriteTx::begin(&self.conn)?;
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        tx.prepare_cached("DELETE FROM messages WHERE session_id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM compactions WHERE session_id = ?1")?
            .execute([id])?;
        insert_entries(&tx, id, entries)?;
        tx.commit()?;
        Ok(())
    }

    fn session_usage(&self, id: &str) -> Result<Vec<ModelUsage>, StoreError> {
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
            // SQLite sums integers into an i64 (an integer overflow is an
            // error; counts are stored saturated below i64::MAX, so only an
            // absurd session gets there); NULL is 0.
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

/// Appends `entries` to the messages of session `id`, numbering them after
/// its last message (from 0 for an empty transcript). Each row's `seq` is a
/// subquery on the `(session_id, seq)` index, which is cheaper than a
/// separate statement and sees the rows inserted before it.
pub(super) fn insert_entries(
    conn: &Connection,
    id: &str,
    entries: &[LedgerEntry],
) -> Result<(), StoreError> {
    let mut insert = conn.prepare_cached(INSERT_SQL)?;
    for entry in entries {
        let e = encode(id, entry)?;
        insert.execute(params![
            id,
            e.role,
            e.content,
            e.tool_calls,
            e.tool_call_id,
            e.reasoning,
            e.prompt_tokens,
            e.completion_tokens,
            e.total_tokens,
            e.finish_reason,
            e.interrupted,
            e.timestamp_ms,
            e.cached_tokens,
            e.cache_write_tokens,
            e.model,
            e.reasoning_details,
            e.attachments,
        ])?;
    }
    Ok(())
}

/// Decodes one row of [`LOAD_SQL`] into an entry.
///
/// Load is on the path of every run (SPEC G5), so this borrows each column
/// from SQLite (`get_ref`) and allocates once per string that ends up in the
/// entry: role and finish reason are matched in place, `seq` is read only
/// for an error message, and tool-call JSON is parsed straight from SQLite's
/// buffer (`store/src/tool_calls.rs`), only when present. Anything that
/// does not fit the schema — a wrong type, invalid UTF-8, a negative count —
/// is a typed [`StoreError::Corrupt`], never a panic.
pub(super) fn decode_message(
    row: &Row<'_>,
    role: ValueRef<'_>,
    session_id: &str,
) -> Result<LedgerEntry, StoreError> {
    // `seq` is only for error messages, so it is read only for them.
    let corrupt = |what: String| {
        let seq = row.get_ref(0).ok().and_then(|v| v.as_i64().ok());
        StoreError::Corrupt {
            session_id: session_id.to_owned(),
            what: match seq {
                Some(seq) => format!("message {seq}: {what}"),
                None => format!("message with unreadable seq: {what}"),
            },
        }
    };
    let text = |idx: usize, name: &str| -> Result<Option<&str>, StoreError> {
        row.get_ref(idx)?
            .as_str_or_null()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let int = |idx: usize, name: &str| -> Result<Option<i64>, StoreError> {
        row.get_ref(idx)?
            .as_i64_or_null()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let count = |idx: usize, name: &str| -> Result<Option<u64>, StoreError> {
        int(idx, name)?
            .map(|v| u64::try_from(v).map_err(|_| corrupt(format!("{name} is negative ({v})"))))
            .transpose()
    };

    let role = role.as_str().map_err(|e| corrupt(format!("role: {e}")))?;
    let content = text(2, "content")?;
    let message = match Role::parse(role) {
        Some(Role::User) => Message::User {
            content: content
                .ok_or_else(|| corrupt("user message without content".into()))?
                .to_owned(),
            attachments: match text(16, "attachments")? {
                None => Vec::new(),
                Some(json) => serde_json::from_str(json)
                    .map_err(|e| corrupt(format!("attachments are not valid JSON: {e}")))?,
            },
        },
        Some(Role::Assistant) => Message::Assistant {
            content: content.map(str::to_owned),
            tool_calls: match text(3, "tool_calls")? {
                None => Vec::new(),
                Some(json) => tool_calls::decode(json)
                    .map_err(|e| corrupt(format!("tool calls are not valid JSON: {e}")))?,
            },
        },
        Some(Role::Tool) => Message::Tool {
            tool_call_id: text(4, "tool_call_id")?
                .ok_or_else(|| corrupt("tool result without tool_call_id".into()))?
                .to_owned(),
            content: content
                .ok_or_else(|| corrupt("tool result without content".into()))?
                .to_owned(),
        },
        None => return Err(corrupt(format!("unknown role {role:?}"))),
    };
    let usage = match (
        count(6, "prompt_tokens")?,
        count(7, "completion_tokens")?,
        count(8, "total_tokens")?,
        count(12, "cached_tokens")?,
        count(13, "cache_write_tokens")?,
    ) {
        (None, None, None, None, None) => None,
        (p, c, t, r, w) => Some(Usage {
            prompt_tokens: p.unwrap_or(0),
            completion_tokens: c.unwrap_or(0),
            total_tokens: t.unwrap_or(0),
            cached_tokens: r.unwrap_or(0),
            cache_write_tokens: w.unwrap_or(0),
        }),
    };
    Ok(LedgerEntry {
        message,
        meta: EntryMeta {
            reasoning: text(5, "reasoning")?.map(str::to_owned),
            reasoning_details: text(15, "reasoning_details")?.map(str::to_owned),
            model: text(14, "model")?.map(str::to_owned),
            usage,
            timestamp_ms: count(11, "timestamp_ms")?
                .ok_or_else(|| corrupt("timestamp_ms is NULL".into()))?,
            finish_reason: text(9, "finish_reason")?.map(decode_finish_reason),
            interrupted: int(10, "interrupted")?.is_some_and(|v| v != 0),
            compaction: None,
        },
    })
}
