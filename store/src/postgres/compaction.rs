//! Compactions on PostgreSQL; the logic is shared (`store/src/compaction.rs`).

use hermes_core::LedgerEntry;
use hermes_core::context::Compaction;
use postgres::GenericClient;

use super::conn::{Statements, prepare};
use super::transcript::{decode, message_columns};
use super::{Postgres, from_db, to_db};
use crate::backend::{Compactions, Transcripts};
use crate::compaction::{
    RawRow, ViewCounts, assemble_view, into_stored, new_record, placement_str,
};
use crate::{StoreError, StoredCompaction, to_i64};

macro_rules! columns {
    () => {
        "head_end, tail_start, end_seq, placement, replaced, summary, tokens_before, \
         tokens_after, created_at_ms"
    };
}

const LATEST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM compactions WHERE session_id = $1 ORDER BY id DESC LIMIT 1"
);

fn raw(row: &postgres::Row) -> Result<RawRow, StoreError> {
    let summary: String = row.try_get(5)?;
    Ok((
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        from_db(&summary).into_owned(),
        row.try_get(6)?,
        row.try_get(7)?,
        row.try_get(8)?,
    ))
}

fn latest(
    statements: &mut Statements,
    client: &mut impl GenericClient,
    id: &str,
) -> Result<Option<StoredCompaction>, StoreError> {
    let stmt = prepare(statements, client, LATEST)?;
    client
        .query_opt(&stmt, &[&id])?
        .map(|row| into_stored(raw(&row)?, id))
        .transpose()
}

impl Compactions for Postgres {
    fn record_compaction(
        &mut self,
        id: &str,
        compaction: &Compaction,
    ) -> Result<StoredCompaction, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let id = id.to_owned();
        let compaction = compaction.clone();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let touch = prepare(
                statements,
                &mut tx,
                "UPDATE sessions SET updated_at_ms = GREATEST(updated_at_ms, $2), \
                 clean_shutdown = false WHERE id = $1",
            )?;
            if tx.execute(&touch, &[&id, &now])? == 0 {
                return Err(StoreError::SessionNotFound(id));
            }
            let current = latest(statements, &mut tx, &id)?;
            let (head_end, tail_start) = current
                .as_ref()
                .map_or((0, 0), |c| (c.head_end, c.tail_start));
            let count = prepare(
                statements,
                &mut tx,
                "SELECT COUNT(*) FILTER (WHERE seq < $2), COUNT(*) FILTER (WHERE seq >= $3), \
                 COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1",
            )?;
            let row = tx.query_one(
                &count,
                &[
                    &id,
                    &to_i64("head_end", head_end)?,
                    &to_i64("tail_start", tail_start)?,
                ],
            )?;
            let counts = ViewCounts {
                kept_front: row.try_get(0)?,
                kept_back: row.try_get(1)?,
                end_seq: row.try_get(2)?,
            };
            let record = new_record(&id, current.as_ref(), counts, &compaction)?;
            let insert = prepare(
                statements,
                &mut tx,
                concat!(
                    "INSERT INTO compactions (session_id, ",
                    columns!(),
                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                ),
            )?;
            tx.execute(
                &insert,
                &[
                    &id,
                    &to_i64("head_end", record.head_end)?,
                    &to_i64("tail_start", record.tail_start)?,
                    &to_i64("end_seq", record.end_seq)?,
                    &placement_str(record.placement),
                    &to_i64("replaced", record.replaced)?,
                    &to_db(&record.summary),
                    &to_i64("tokens_before", record.tokens_before)?,
                    &to_i64("tokens_after", record.tokens_after)?,
                    &to_i64("created_at_ms", record.created_at_ms)?,
                ],
            )?;
            tx.commit()?;
            Ok(record)
        })
    }

    fn latest_compaction(&self, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            latest(statements, client, &id)
        })
    }

    fn compactions(&self, id: &str) -> Result<Vec<StoredCompaction>, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                columns!(),
                " FROM compactions WHERE session_id = $1 ORDER BY id"
            ))?;
            session
                .client
                .query(&stmt, &[&id])?
                .iter()
                .map(|row| into_stored(raw(row)?, &id))
                .collect()
        })
    }

    fn load_view(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let owned = id.to_owned();
        let view = self.conn.call(move |session| {
            let (statements, client) = session.parts();
            // One snapshot for the latest compaction and the messages.
            let mut tx = client.build_transaction().read_only(true).start()?;
            let Some(c) = latest(statements, &mut tx, &owned)? else {
                return Ok(None);
            };
            let stmt = prepare(
                statements,
                &mut tx,
                concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM sessions s LEFT JOIN messages m ON m.session_id = s.id \
                     AND (m.seq < $2 OR m.seq >= $3) WHERE s.id = $1 ORDER BY m.seq"
                ),
            )?;
            let rows = tx.query(
                &stmt,
                &[
                    &owned,
                    &to_i64("head_end", c.head_end)?,
                    &to_i64("tail_start", c.tail_start)?,
                ],
            )?;
            tx.commit()?;
            if rows.is_empty() {
                return Err(StoreError::SessionNotFound(owned));
            }
            let mut out = Vec::with_capacity(rows.len() + 1);
            let mut summary_at = None;
            for row in &rows {
                let seq: Option<i64> = row.try_get(0)?;
                if let Some(entry) = decode(row, 0, &owned)? {
                    if summary_at.is_none()
                        && seq.is_some_and(|s| s >= 0 && s as u64 >= c.tail_start)
                    {
                        summary_at = Some(out.len());
                    }
                    out.push(entry);
                }
            }
            Ok(Some(assemble_view(out, summary_at, &c)))
        })?;
        match view {
            Some(view) => Ok(view),
            None => self.load_transcript(id),
        }
    }
}
