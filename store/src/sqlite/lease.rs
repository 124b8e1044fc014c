//! Leases on SQLite (schema V5), timed by the store's clock. Every write
//! transaction is `IMMEDIATE`, so a check and the write it guards are never
//! interleaved with another connection's.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Sqlite, WriteTx, from_i64, to_i64};
use crate::backend::Leases;
use crate::lease::{Listener, NotifySink};
use crate::{Fence, LeaseGrant, LeaseRecord, PreviousHolder, StoreError, prefix_end};

const COLUMNS: &str = "name, owner, epoch, expires_at_ms, acquired_at_ms, renewed_at_ms, state";

/// Fails with [`StoreError::Fenced`] unless `fence` holds; call inside the
/// write transaction it guards.
pub(super) fn check_fence(conn: &Connection, fence: &Fence) -> Result<(), StoreError> {
    let holds = conn
        .prepare_cached("SELECT 1 FROM leases WHERE name = ?1 AND owner = ?2 AND epoch = ?3")?
        .query_row(params![fence.name, fence.owner, fence.epoch], |_| Ok(()))
        .optional()?
        .is_some();
    if holds {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            name: fence.name.clone(),
            owner: fence.owner.clone(),
            epoch: fence.epoch,
        })
    }
}

type RawLease = (String, Option<String>, i64, i64, i64, i64, Option<String>);

fn raw(row: &Row<'_>) -> rusqlite::Result<RawLease> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    ))
}

fn record(raw: RawLease, now: u64) -> Result<LeaseRecord, StoreError> {
    let (name, owner, epoch, expires, acquired, renewed, state) = raw;
    Ok(LeaseRecord {
        expires_at_ms: from_i64(&name, "lease expiry", expires)?,
        acquired_at_ms: from_i64(&name, "lease acquisition", acquired)?,
        renewed_at_ms: from_i64(&name, "lease renewal", renewed)?,
        name,
        owner,
        epoch,
        state,
        now_ms: now,
    })
}

fn fetch(conn: &Connection, name: &str, now: u64) -> Result<Option<LeaseRecord>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM leases WHERE name = ?1");
    let row = conn
        .prepare_cached(&sql)?
        .query_row([name], raw)
        .optional()?;
    row.map(|r| record(r, now)).transpose()
}

impl Leases for Sqlite {
    fn lease_acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        state: Option<&str>,
        take_over: bool,
    ) -> Result<LeaseGrant, StoreError> {
        let now = self.clock.now_ms();
        let expires = now.saturating_add(ttl_ms);
        let tx = WriteTx::begin(&self.conn)?;
        let current = fetch(&tx, name, now)?;
        let (epoch, previous) = match current {
            Some(held) if held.is_live() && !take_over => return Ok(LeaseGrant::Held(held)),
            Some(old) => {
                let lapsed = old.owner.is_some();
                (
                    old.epoch + 1,
                    Some(PreviousHolder {
                        owner: old.owner,
                        epoch: old.epoch,
                        state: old.state,
                        lapsed,
                    }),
                )
            }
            None => (1, None),
        };
        tx.prepare_cached(
            "INSERT INTO leases (name, owner, epoch, expires_at_ms, acquired_at_ms, renewed_at_ms, state) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6) \
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, \
             expires_at_ms = excluded.expires_at_ms, acquired_at_ms = excluded.acquired_at_ms, \
             renewed_at_ms = excluded.renewed_at_ms, state = excluded.state",
        )?
        .execute(params![
            name,
            owner,
            epoch,
            to_i64("lease expiry", expires)?,
            to_i64("lease acquisition", now)?,
            state
        ])?;
        tx.commit()?;
        Ok(LeaseGrant::Granted {
            fence: Fence {
                name: name.to_owned(),
                owner: owner.to_owned(),
                epoch,
            },
            expires_at_ms: expires,
            now_ms: now,
            previous,
        })
    }

    fn lease_renew(&mut self, fence: &Fence, ttl_ms: u64) -> Result<Option<u64>, StoreError> {
        let now = self.clock.now_ms();
        let expires = now.saturating_add(ttl_ms);
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE leases SET expires_at_ms = ?4, renewed_at_ms = ?5 \
                 WHERE name = ?1 AND owner = ?2 AND epoch = ?3",
            )?
            .execute(params![
                fence.name,
                fence.owner,
                fence.epoch,
                to_i64("lease expiry", expires)?,
                to_i64("lease renewal", now)?
            ])?;
        Ok((changed > 0).then_some(expires))
    }

    fn lease_set_state(&mut self, fence: &Fence, state: Option<&str>) -> Result<(), StoreError> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE leases SET state = ?4 WHERE name = ?1 AND owner = ?2 AND epoch = ?3",
            )?
            .execute(params![fence.name, fence.owner, fence.epoch, state])?;
        if changed == 0 {
            return Err(StoreError::Fenced {
                name: fence.name.clone(),
                owner: fence.owner.clone(),
                epoch: fence.epoch,
            });
        }
        Ok(())
    }

    fn lease_release(&mut self, fence: &Fence, state: Option<&str>) -> Result<bool, StoreError> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE leases SET owner = NULL, expires_at_ms = 0, state = ?4 \
                 WHERE name = ?1 AND owner = ?2 AND epoch = ?3",
            )?
            .execute(params![fence.name, fence.owner, fence.epoch, state])?;
        Ok(changed > 0)
    }

    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StoreError> {
        fetch(&self.conn, name, self.clock.now_ms())
    }

    fn leases(&self, prefix: &str) -> Result<Vec<LeaseRecord>, StoreError> {
        let now = self.clock.now_ms();
        let rows: Vec<RawLease> = match prefix_end(prefix) {
            Some(end) => {
                let sql = format!(
                    "SELECT {COLUMNS} FROM leases WHERE name >= ?1 AND name < ?2 ORDER BY name"
                );
                let mut stmt = self.conn.prepare_cached(&sql)?;
                stmt.query_map(params![prefix, end], raw)?
                    .collect::<Result<_, _>>()?
            }
            None => {
                let sql = format!("SELECT {COLUMNS} FROM leases ORDER BY name");
                let mut stmt = self.conn.prepare_cached(&sql)?;
                stmt.query_map([], raw)?.collect::<Result<_, _>>()?
            }
        };
        rows.into_iter().map(|r| record(r, now)).collect()
    }

    fn notify(&self, _channel: &str, _payload: &str) -> Result<(), StoreError> {
        // One process per SQLite database (the gateway's file lock): there
        // is nobody else to wake.
        Ok(())
    }

    fn listen(
        &self,
        _channels: &[&str],
        _sink: NotifySink,
    ) -> Result<Option<Listener>, StoreError> {
        Ok(None)
    }
}
