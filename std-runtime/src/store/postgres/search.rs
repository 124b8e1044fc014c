//! Full-text search on PostgreSQL: the `tsvector` of each message, built
//! with SQLite's word rules (`fts.rs`), matched with a `tsquery` built the
//! same way, ranked by `ts_rank`.

use hermes_core::Role;

use super::{Postgres, from_db, fts};
use crate::store::backend::Search;
use crate::store::{SearchHit, StoreError, from_i64};

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
                .map(|row| {
                    Ok((
                        row.try_get::<_, String>(0)?,
                        row.try_get::<_, i64>(1)?,
                        row.try_get::<_, String>(2)?,
                        row.try_get::<_, Option<String>>(3)?,
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (session_id, seq, role, content) in rows {
            let Some(role) = Role::parse(&role) else {
                return Err(StoreError::Corrupt {
                    session_id,
                    what: format!("message {seq} has unknown role {role:?}"),
                });
            };
            let seq = from_i64(&session_id, "seq", seq)?;
            let snippet = content.map_or_else(String::new, |c| fts::snippet(&from_db(&c), &terms));
            out.push(SearchHit {
                session_id,
                seq,
                role,
                snippet,
            });
        }
        Ok(out)
    }

    fn catch_up_search_index(&self) -> Result<u64, StoreError> {
        // Every message is indexed in the transaction that stores it.
        Ok(0)
    }
}
