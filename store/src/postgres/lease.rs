//! Leases on PostgreSQL, timed by the server's clock (`hermes_now_ms()`),
//! and `LISTEN`/`NOTIFY` wake-ups.
//!
//! Lease rows, not advisory locks: an advisory lock stays held while a dead
//! client's query still runs on the server, and knows no epoch to fence
//! late writes with. An acquisition locks the row (`FOR UPDATE`), so two
//! gateways competing for a lease get exactly one grant; a fenced write
//! share-locks it (`super::check_fence`), so it either commits before the
//! next grant or sees the new epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres::{Config, NoTls, Row};

use super::{Postgres, SESSION_SETUP, from_db, to_db};
use crate::backend::Leases;
use crate::lease::{Listener, Notification, NotifySink};
use crate::{Fence, LeaseGrant, LeaseRecord, PreviousHolder, StoreError, prefix_end};

macro_rules! columns {
    () => {
        "name, owner, epoch, expires_at_ms, acquired_at_ms, renewed_at_ms, state, hermes_now_ms()"
    };
}

fn record(row: &Row) -> Result<LeaseRecord, StoreError> {
    let name: String = row.try_get(0)?;
    let ms = |i: usize, what: &str| -> Result<u64, StoreError> {
        crate::from_i64(&name, what, row.try_get(i)?)
    };
    Ok(LeaseRecord {
        owner: row.try_get(1)?,
        epoch: row.try_get(2)?,
        expires_at_ms: ms(3, "lease expiry")?,
        acquired_at_ms: ms(4, "lease acquisition")?,
        renewed_at_ms: ms(5, "lease renewal")?,
        state: row
            .try_get::<_, Option<String>>(6)?
            .map(|s| from_db(&s).into_owned()),
        now_ms: ms(7, "database clock")?,
        name,
    })
}

fn ttl(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms).unwrap_or(i64::MAX / 4)
}

/// Channel names travel into `LISTEN` unquoted by parameters (the command
/// takes none), so only plain identifiers are accepted.
fn valid_channel(channel: &str) -> bool {
    !channel.is_empty()
        && channel.len() <= 63
        && channel
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !channel.starts_with(|c: char| c.is_ascii_digit())
}

impl Leases for Postgres {
    fn lease_acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        state: Option<&str>,
        take_over: bool,
    ) -> Result<LeaseGrant, StoreError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        let state = state.map(|s| to_db(s).into_owned());
        let ttl = ttl(ttl_ms);
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            loop {
                let mut tx = client.transaction()?;
                let select = super::prepare(
                    statements,
                    &mut tx,
                    concat!("SELECT ", columns!(), " FROM leases WHERE name = $1 FOR UPDATE"),
                )?;
                let current = tx.query_opt(&select, &[&name])?.map(|r| record(&r)).transpose()?;
                let previous = match current {
                    Some(held) if held.is_live() && !take_over => {
                        return Ok(LeaseGrant::Held(held));
                    }
                    Some(old) => Some(PreviousHolder {
                        lapsed: old.owner.is_some(),
                        owner: old.owner,
                        epoch: old.epoch,
                        state: old.state,
                    }),
                    None => None,
                };
                let row = match &previous {
                    Some(old) => {
                        let update = super::prepare(
                            statements,
                            &mut tx,
                            "UPDATE leases SET owner = $2, epoch = $3, \
                             expires_at_ms = hermes_now_ms() + $4, acquired_at_ms = hermes_now_ms(), \
                             renewed_at_ms = hermes_now_ms(), state = $5 WHERE name = $1 \
                             RETURNING epoch, expires_at_ms, acquired_at_ms",
                        )?;
                        tx.query_one(&update, &[&name, &owner, &(old.epoch + 1), &ttl, &state])?
                    }
                    None => {
                        let insert = super::prepare(
                            statements,
                            &mut tx,
                            "INSERT INTO leases (name, owner, epoch, expires_at_ms, acquired_at_ms, \
                             renewed_at_ms, state) VALUES ($1, $2, 1, hermes_now_ms() + $3, \
                             hermes_now_ms(), hermes_now_ms(), $4) ON CONFLICT (name) DO NOTHING \
                             RETURNING epoch, expires_at_ms, acquired_at_ms",
                        )?;
                        match tx.query_opt(&insert, &[&name, &owner, &ttl, &state])? {
                            Some(row) => row,
                            // Another gateway created it meanwhile: read it
                            // again, locked this time.
                            None => continue,
                        }
                    }
                };
                let epoch: i64 = row.try_get(0)?;
                let expires: i64 = row.try_get(1)?;
                let now: i64 = row.try_get(2)?;
                tx.commit()?;
                return Ok(LeaseGrant::Granted {
                    fence: Fence {
                        name: name.clone(),
                        owner: owner.clone(),
                        epoch,
                    },
                    expires_at_ms: crate::from_i64(&name, "lease expiry", expires)?,
                    now_ms: crate::from_i64(&name, "database clock", now)?,
                    previous,
                });
            }
        })
    }

    fn lease_renew(&mut self, fence: &Fence, ttl_ms: u64) -> Result<Option<u64>, StoreError> {
        let fence = fence.clone();
        let ttl = ttl(ttl_ms);
        self.conn.call(move |session| {
            let stmt = session.statement(
                "UPDATE leases SET expires_at_ms = hermes_now_ms() + $4, \
                 renewed_at_ms = hermes_now_ms() \
                 WHERE name = $1 AND owner = $2 AND epoch = $3 RETURNING expires_at_ms",
            )?;
            session
                .client
                .query_opt(&stmt, &[&fence.name, &fence.owner, &fence.epoch, &ttl])?
                .map(|row| crate::from_i64(&fence.name, "lease expiry", row.try_get(0)?))
                .transpose()
        })
    }

    fn lease_set_state(&mut self, fence: &Fence, state: Option<&str>) -> Result<(), StoreError> {
        let fence = fence.clone();
        let state = state.map(|s| to_db(s).into_owned());
        self.conn.call(move |session| {
            let stmt = session.statement(
                "UPDATE leases SET state = $4 WHERE name = $1 AND owner = $2 AND epoch = $3",
            )?;
            if session
                .client
                .execute(&stmt, &[&fence.name, &fence.owner, &fence.epoch, &state])?
                == 0
            {
                return Err(StoreError::Fenced {
                    name: fence.name,
                    owner: fence.owner,
                    epoch: fence.epoch,
                });
            }
            Ok(())
        })
    }

    fn lease_release(&mut self, fence: &Fence, state: Option<&str>) -> Result<bool, StoreError> {
        let fence = fence.clone();
        let state = state.map(|s| to_db(s).into_owned());
        self.conn.call(move |session| {
            let stmt = session.statement(
                "UPDATE leases SET owner = NULL, expires_at_ms = 0, state = $4 \
                 WHERE name = $1 AND owner = $2 AND epoch = $3",
            )?;
            Ok(session
                .client
                .execute(&stmt, &[&fence.name, &fence.owner, &fence.epoch, &state])?
                > 0)
        })
    }

    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StoreError> {
        let name = name.to_owned();
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                columns!(),
                " FROM leases WHERE name = $1"
            ))?;
            session
                .client
                .query_opt(&stmt, &[&name])?
                .map(|row| record(&row))
                .transpose()
        })
    }

    fn leases(&self, prefix: &str) -> Result<Vec<LeaseRecord>, StoreError> {
        let from = prefix.to_owned();
        let to = prefix_end(prefix);
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                columns!(),
                " FROM leases WHERE name >= $1 AND ($2::TEXT IS NULL OR name < $2) ORDER BY name"
            ))?;
            session
                .client
                .query(&stmt, &[&from, &to])?
                .iter()
                .map(record)
                .collect()
        })
    }

    fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        let channel = channel.to_owned();
        let payload = to_db(payload).into_owned();
        self.conn.call(move |session| {
            let stmt = session.statement("SELECT pg_notify($1, $2)")?;
            session.client.execute(&stmt, &[&channel, &payload])?;
            Ok(())
        })
    }

    fn listen(&self, channels: &[&str], sink: NotifySink) -> Result<Option<Listener>, StoreError> {
        if let Some(bad) = channels.iter().find(|c| !valid_channel(c)) {
            return Err(StoreError::BadChannel((*bad).to_owned()));
        }
        let channels: Vec<String> = channels.iter().map(|c| (*c).to_owned()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let config = self.config.clone();
        let (thread_channels, thread_stop) = (channels.clone(), Arc::clone(&stop));
        // The first connection is made on the listener's own thread (the
        // sync client must not run on the caller's, which may be a tokio
        // worker), but reported here: a wrong URL or a refused login is the
        // caller's error, not a log line.
        let (connected, first) = std::sync::mpsc::channel();
        thread::Builder::new()
            .name("hermes-listen".into())
            .spawn(move || match connect_listening(&config, &thread_channels) {
                Ok(client) => {
                    let _ = connected.send(Ok(()));
                    listen_loop(client, &config, &thread_channels, &thread_stop, &sink);
                }
                Err(e) => {
                    let _ = connected.send(Err(e));
                }
            })
            .map_err(|e| {
                tracing::error!(error = %e, "cannot start the listener thread");
                StoreError::ConnectionGone
            })?;
        match first.recv() {
            Ok(Ok(())) => {}
            Ok(Err(source)) => {
                return Err(StoreError::Connect {
                    url: self.location.to_string(),
                    source,
                });
            }
            Err(_) => return Err(StoreError::ConnectionGone),
        }
        Ok(Some(Listener { stop, channels }))
    }
}

/// How long the listener waits for a notification before it looks whether
/// it was told to stop.
const LISTEN_WAIT: Duration = Duration::from_millis(200);

fn connect_listening(
    config: &Config,
    channels: &[String],
) -> Result<postgres::Client, postgres::Error> {
    let mut client = config.connect(NoTls)?;
    client.batch_execute(SESSION_SETUP)?;
    let listen: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
    client.batch_execute(&listen)?;
    Ok(client)
}

/// Delivers notifications until told to stop; reconnects (with backoff)
/// when the connection drops, then tells the sink so it polls once.
fn listen_loop(
    mut client: postgres::Client,
    config: &Config,
    channels: &[String],
    stop: &AtomicBool,
    sink: &NotifySink,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let lost = loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            // A fresh wait each round: a `TimeoutIter`'s delay is not reset
            // when it times out, so reusing one returns at once for ever —
            // the connection's runtime never parks, its reactor never sees
            // the socket readable, and nothing more is read.
            let next = client.notifications().timeout_iter(LISTEN_WAIT).next();
            match next {
                Ok(Some(n)) => sink(Notification {
                    channel: n.channel().to_owned(),
                    payload: from_db(n.payload()).into_owned(),
                }),
                // A connection closed without an error message ends the
                // iteration quietly, again and again: reconnect.
                Ok(None) if client.is_closed() => break "connection closed".to_owned(),
                Ok(None) => {}
                Err(e) => break e.to_string(),
            }
        };
        tracing::warn!(error = %lost, "the database listener lost its connection; reconnecting");
        client = loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            thread::sleep(backoff);
            match connect_listening(config, channels) {
                Ok(c) => break c,
                Err(e) => {
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    tracing::debug!(error = %e, "listener reconnect failed");
                }
            }
        };
        backoff = Duration::from_millis(200);
        // Whatever was sent while disconnected is lost: the sink polls.
        sink(Notification {
            channel: String::new(),
            payload: String::new(),
        });
    }
}
