//! Session rows on PostgreSQL.

use postgres::Row;

use super::conn::prepare;
use super::{Postgres, from_db, opt_to_db, owned_from_db};
use crate::backend::Sessions;
use crate::records::SessionChange;
use crate::{
    ID_ATTEMPTS, NewSession, SessionRecord, SessionStatus, StoreError, from_i64, id, to_i64,
};

/// Columns of a session row, in the order [`record`] reads them.
macro_rules! session_columns {
    () => {
        "s.id, s.session_key, s.source_platform, s.source_chat_id, s.source_user_id, s.model, \
         s.system_prompt, s.created_at_ms, s.updated_at_ms, s.status, \
         (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), s.title, s.workdir"
    };
}

const INSERT: &str = "INSERT INTO sessions (id, session_key, source_platform, source_chat_id, \
     source_user_id, model, system_prompt, created_at_ms, updated_at_ms, status, clean_shutdown, \
     workdir, title) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, 'active', false, $9, $10) \
     ON CONFLICT (id) DO NOTHING";

const BY_ID: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions s WHERE s.id = $1"
);

/// Reads a row of [`session_columns`].
pub(super) fn record(row: &Row) -> Result<SessionRecord, StoreError> {
    let id: String = row.try_get(0)?;
    let id = from_db(&id).into_owned();
    let status: String = row.try_get(9)?;
    let Some(status) = SessionStatus::parse(&status) else {
        return Err(StoreError::Corrupt {
            session_id: id,
            what: format!("unknown status {status:?}"),
        });
    };
    let text = |i: usize| -> Result<Option<String>, StoreError> {
        Ok(owned_from_db(row.try_get::<_, Option<String>>(i)?))
    };
    Ok(SessionRecord {
        created_at_ms: from_i64(&id, "created_at_ms", row.try_get(7)?)?,
        updated_at_ms: from_i64(&id, "updated_at_ms", row.try_get(8)?)?,
        message_count: from_i64(&id, "message_count", row.try_get(10)?)?,
        session_key: text(1)?,
        platform: text(2)?,
        chat_id: text(3)?,
        user_id: text(4)?,
        model: text(5)?,
        system_prompt: text(6)?,
        status,
        title: text(11)?,
        workdir: text(12)?,
        id,
    })
}

/// Inserts a session under a fresh id from `next_id`, retrying when the id
/// is taken; returns the id.
fn insert(
    statements: &mut super::Statements,
    tx: &mut postgres::Transaction<'_>,
    new: &OwnedNew,
    now: i64,
    mut next_id: impl FnMut() -> String,
) -> Result<String, StoreError> {
    let stmt = prepare(statements, tx, INSERT)?;
    for _ in 0..ID_ATTEMPTS {
        let id = next_id();
        let inserted = tx.execute(
            &stmt,
            &[
                &id,
                &new.session_key,
                &new.platform,
                &new.chat_id,
                &new.user_id,
                &new.model,
                &new.system_prompt,
                &now,
                &new.workdir,
                &new.title,
            ],
        )?;
        if inserted > 0 {
            return Ok(id);
        }
        tracing::debug!(%id, "session id taken, retrying");
    }
    Err(StoreError::IdsExhausted)
}

/// A [`NewSession`] the connection's thread can own.
struct OwnedNew {
    session_key: Option<String>,
    platform: Option<String>,
    chat_id: Option<String>,
    user_id: Option<String>,
    model: Option<String>,
    system_prompt: Option<String>,
    workdir: Option<String>,
    title: Option<String>,
}

impl OwnedNew {
    fn from(new: &NewSession<'_>) -> Self {
        let own = |s: Option<&str>| opt_to_db(s).map(|c| c.into_owned());
        OwnedNew {
            session_key: own(new.session_key),
            platform: own(new.platform),
            chat_id: own(new.chat_id),
            user_id: own(new.user_id),
            model: own(new.model),
            system_prompt: own(new.system_prompt),
            workdir: own(new.workdir),
            title: own(new.title),
        }
    }
}

impl Sessions for Postgres {
    fn create_session(&mut self, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        let now_ms = self.clock.now_ms();
        let now = to_i64("created_at_ms", now_ms)?;
        let new = OwnedNew::from(new);
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let id = insert(statements, &mut tx, &new, now, || {
                id::session_id(now_ms, id::random_suffix())
            })?;
            let stmt = prepare(statements, &mut tx, BY_ID)?;
            let row = tx.query_one(&stmt, &[&id])?;
            let record = record(&row)?;
            tx.commit()?;
            Ok(record)
        })
    }

    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(BY_ID)?;
            session
                .client
                .query_opt(&stmt, &[&id])?
                .map(|row| record(&row))
                .transpose()
        })
    }

    fn latest_session(&self, platform: Option<&str>) -> Result<Option<SessionRecord>, StoreError> {
        let platform = opt_to_db(platform).map(|p| p.into_owned());
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                session_columns!(),
                " FROM sessions s WHERE ($1::TEXT IS NULL OR s.source_platform = $1) \
                 ORDER BY s.updated_at_ms DESC, s.ordinal DESC LIMIT 1"
            ))?;
            session
                .client
                .query_opt(&stmt, &[&platform])?
                .map(|row| record(&row))
                .transpose()
        })
    }

    fn latest_session_in(
        &self,
        platform: &str,
        workdir: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let platform = super::to_db(platform).into_owned();
        let workdir = super::to_db(workdir).into_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                session_columns!(),
                " FROM sessions s WHERE s.source_platform = $1 AND s.workdir = $2 \
                 ORDER BY s.updated_at_ms DESC, s.ordinal DESC LIMIT 1"
            ))?;
            session
                .client
                .query_opt(&stmt, &[&platform, &workdir])?
                .map(|row| record(&row))
                .transpose()
        })
    }

    fn find_session(&self, id_or_prefix: &str) -> Result<Option<SessionRecord>, StoreError> {
        let given = id_or_prefix.to_owned();
        let found = self.conn.call(move |session| {
            let exact = session.statement(BY_ID)?;
            if let Some(row) = session.client.query_opt(&exact, &[&given])? {
                return Ok(vec![record(&row)?]);
            }
            if given.is_empty() {
                return Ok(Vec::new());
            }
            // `starts_with`, not LIKE: an id prefix may hold `_`.
            let stmt = session.statement(concat!(
                "SELECT ",
                session_columns!(),
                " FROM sessions s WHERE starts_with(s.id, $1) \
                 ORDER BY s.created_at_ms DESC, s.ordinal DESC LIMIT 6"
            ))?;
            session
                .client
                .query(&stmt, &[&given])?
                .iter()
                .map(record)
                .collect()
        })?;
        crate::records::one_of(id_or_prefix, found)
    }

    fn delete_session(&mut self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            // Messages and compactions go by `ON DELETE CASCADE`, their
            // search vectors with them.
            let stmt = session.statement("DELETE FROM sessions WHERE id = $1")?;
            if session.client.execute(&stmt, &[&id])? == 0 {
                return Err(StoreError::SessionNotFound(id));
            }
            Ok(())
        })
    }

    fn active_session_for_key(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let key = super::to_db(key).into_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                session_columns!(),
                " FROM sessions s WHERE s.session_key = $1 AND s.status = 'active' \
                 ORDER BY s.updated_at_ms DESC, s.ordinal DESC LIMIT 1"
            ))?;
            session
                .client
                .query_opt(&stmt, &[&key])?
                .map(|row| record(&row))
                .transpose()
        })
    }

    fn update_session(&mut self, id: &str, change: SessionChange<'_>) -> Result<(), StoreError> {
        let (sql, value): (&'static str, Option<String>) = match change {
            SessionChange::SystemPrompt(p) => (
                "UPDATE sessions SET system_prompt = $2, clean_shutdown = false WHERE id = $1",
                Some(super::to_db(p).into_owned()),
            ),
            SessionChange::Model(m) => (
                "UPDATE sessions SET model = $2, clean_shutdown = false WHERE id = $1",
                Some(super::to_db(m).into_owned()),
            ),
            SessionChange::Title(t) => (
                "UPDATE sessions SET title = $2, clean_shutdown = false WHERE id = $1",
                opt_to_db(t).map(|t| t.into_owned()),
            ),
            SessionChange::Status(s) => (
                "UPDATE sessions SET status = $2, clean_shutdown = false WHERE id = $1",
                Some(s.as_str().to_owned()),
            ),
        };
        let id = id.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(sql)?;
            if session.client.execute(&stmt, &[&id, &value])? == 0 {
                return Err(StoreError::SessionNotFound(id));
            }
            Ok(())
        })
    }

    fn reset(&mut self, key: &str, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        let now_ms = self.clock.now_ms();
        let now = to_i64("created_at_ms", now_ms)?;
        let mut new = OwnedNew::from(new);
        let key = super::to_db(key).into_owned();
        new.session_key = Some(key.clone());
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let end = prepare(
                statements,
                &mut tx,
                "UPDATE sessions SET status = 'ended', clean_shutdown = false \
                 WHERE session_key = $1 AND status = 'active'",
            )?;
            tx.execute(&end, &[&key])?;
            let id = insert(statements, &mut tx, &new, now, || {
                id::session_id(now_ms, id::random_suffix())
            })?;
            let stmt = prepare(statements, &mut tx, BY_ID)?;
            let row = tx.query_one(&stmt, &[&id])?;
            let record = record(&row)?;
            tx.commit()?;
            Ok(record)
        })
    }

    fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                session_columns!(),
                " FROM sessions s ORDER BY s.created_at_ms DESC, s.ordinal DESC LIMIT $1"
            ))?;
            let rows = session.client.query(&stmt, &[&limit])?;
            rows.iter().map(record).collect()
        })
    }

    fn suspend_recent_unclean(&mut self, within_ms: u64) -> Result<Vec<String>, StoreError> {
        let since = self.clock.now_ms().saturating_sub(within_ms);
        let since = to_i64("suspend window start", since)?;
        self.conn.call(move |session| {
            let stmt = session.statement(
                "UPDATE sessions SET status = 'suspended' \
                 WHERE status = 'active' AND NOT clean_shutdown AND updated_at_ms >= $1 \
                 RETURNING id",
            )?;
            let mut ids: Vec<String> = session
                .client
                .query(&stmt, &[&since])?
                .iter()
                .map(|row| {
                    row.try_get::<_, String>(0)
                        .map(|s| from_db(&s).into_owned())
                })
                .collect::<Result<_, _>>()?;
            ids.sort();
            Ok(ids)
        })
    }

    fn mark_clean_shutdown(&mut self) -> Result<(), StoreError> {
        self.conn.call(|session| {
            let stmt = session
                .statement("UPDATE sessions SET clean_shutdown = true WHERE NOT clean_shutdown")?;
            session.client.execute(&stmt, &[])?;
            Ok(())
        })
    }
}
