//! Full-text search on PostgreSQL: the `tsvector` of each message, built
//! with SQLite's word rules (`fts.rs`), matched with a `tsquery` built the
//! same way, ranked by `ts_rank`.

use std::collections::HashSet;

use hermes_core::Role;

use super::{Postgres, from_db, fts};
use crate::backend::Search;
use crate::{SearchHit, SearchScope, StoreError, from_i64};

/// A scoped search: `records::SCOPE_CONDITION` with `$3` (the scope's
/// kind) and `$4` (its value); `$5` is the session left out.
const SEARCH_IN: &str = "SELECT m.session_id, m.seq, m.role, m.content \
     FROM messages m JOIN sessions s ON s.id = m.session_id, \
     (SELECT $1::TEXT::TSQUERY AS q) AS q \
     WHERE m.search @@ q.q \
     AND (($3::INT4 = 1 AND s.session_key = $4::TEXT) \
     OR ($3::INT4 = 2 AND s.source_platform = $4::TEXT AND s.session_key IS NULL) \
     OR ($3::INT4 = 3 AND m.session_id = $4::TEXT)) \
     AND m.session_id <> $5 \
     ORDER BY ts_rank(m.search, q.q) DESC, m.id LIMIT $2";

/// One matching message as read: session id, seq, role, content.
type MatchRow = (String, i64, String, Option<String>);

fn decode(row: &postgres::Row) -> Result<MatchRow, StoreError> {
    Ok((
        row.try_get::<_, String>(0)?,
        row.try_get::<_, i64>(1)?,
        row.try_get::<_, String>(2)?,
        row.try_get::<_, Option<String>>(3)?,
    ))
}

/// The hits of `rows`, each with a snippet around `terms`.
fn hits(rows: Vec<MatchRow>, terms: &HashSet<String>) -> Result<Vec<SearchHit>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for (session_id, seq, role, content) in rows {
        let Some(role) = Role::parse(&role) else {
            return Err(StoreError::Corrupt {
                session_id,
                what: format!("message {seq} has unknown role {role:?}"),
            });
        };
        let seq = from_i64(&session_id, "seq", seq)?;
        let snippet = content.map_or_else(String::new, |c| fts::snippet(&from_db(&c), terms));
        out.push(SearchHit {
            session_id,
            seq,
            role,
            snippet,
        });
    }
    Ok(out)
}

impl Search for Postgres {
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some((tsquery, terms)) = fts::query(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.conn.call(move |session| {
            let stmt = session.statement(
                "SELECT m.session_id, m.seq, m.role, m.content \
                 FROM messages m, (SELECT $1::TEXT::TSQUERY AS q) AS q \
                 WHERE m.search @@ q.q ORDER BY ts_rank(m.search, q.q) DESC, m.id LIMIT $2",
            )?;
            let rows = session.client.query(&stmt, &[&tsquery, &limit])?;
            rows.iter()
                .map(decode)
                .collect::<Result<Vec<_>, StoreError>>()
        })?;
        hits(rows, &terms)
    }

    fn search_in(
        &self,
        query: &str,
        scope: SearchScope<'_>,
        exclude: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let Some((tsquery, terms)) = fts::query(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (kind, value) = scope.sql();
        let value = value.to_owned();
        let exclude = exclude.unwrap_or("").to_owned();
        let rows = self.conn.call(move |session| {
            let stmt = session.statement(SEARCH_IN)?;
            let rows = session
                .client
                .query(&stmt, &[&tsquery, &limit, &kind, &value, &exclude])?;
            rows.iter()
                .map(decode)
                .collect::<Result<Vec<_>, StoreError>>()
        })?;
        hits(rows, &terms)
    }

    fn catch_up_search_index(&self) -> Result<u64, StoreError> {
        // Every message is indexed in the transaction that stores it.
        Ok(0)
    }
}
