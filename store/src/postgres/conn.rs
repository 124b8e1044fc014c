//! One PostgreSQL connection on a thread of its own.
//!
//! The synchronous `postgres` client drives its connection with a private
//! tokio runtime and panics when called on a thread that is already inside
//! a runtime (a tokio worker, or a test's `#[tokio::test]` body). The store
//! promises a synchronous API callable from anywhere, so each connection
//! lives on its own plain thread and every call is a job sent there, its
//! result sent back. The caller blocks exactly as it would on SQLite; the
//! hand-off costs a few microseconds against a round trip to the server.
//!
//! The thread keeps prepared statements (re-parsing every statement would
//! double the round trips) and reconnects, before the next job, when the
//! server closed the connection (a restart, a failover), so a store
//! outlives a database restart without being reopened.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread;

use postgres::{Client, Config, GenericClient, NoTls, Statement};

use crate::StoreError;

/// The client of one connection and its prepared statements.
pub(super) struct Session {
    pub client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Session {
    /// `sql` prepared once per connection.
    pub fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        prepare(&mut self.statements, &mut self.client, sql)
    }

    /// Splits the session into its statement cache and its client, so a
    /// transaction (which borrows the client) can still prepare.
    pub fn parts(&mut self) -> (&mut Statements, &mut Client) {
        (&mut self.statements, &mut self.client)
    }
}

/// Prepared statements by their SQL.
pub(super) type Statements = HashMap<&'static str, Statement>;

/// `sql` prepared on `client` (a client or a transaction), cached.
pub(super) fn prepare(
    cache: &mut Statements,
    client: &mut impl GenericClient,
    sql: &'static str,
) -> Result<Statement, postgres::Error> {
    if let Some(stmt) = cache.get(sql) {
        return Ok(stmt.clone());
    }
    let stmt = client.prepare(sql)?;
    cache.insert(sql, stmt.clone());
    Ok(stmt)
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// What a job sends back: its `Result<R, StoreError>`, boxed.
type Reply = Box<dyn Any + Send>;

/// A handle to the connection's thread. Dropping it ends the thread (after
/// the job in progress, if any).
pub(super) struct Conn {
    jobs: mpsc::Sender<Job>,
}

impl Conn {
    /// Connects (on the new thread) and returns once the connection is up.
    /// `shown` is the URL with its password masked, for the error.
    pub fn open(config: Config, setup: &'static str, shown: &str) -> Result<Conn, StoreError> {
        let (jobs, incoming) = mpsc::channel::<Job>();
        let (ready, connected) = mpsc::channel();
        let spawned = thread::Builder::new()
            .name("hermes-postgres".into())
            .spawn(move || {
                let connect = |config: &Config| {
                    let mut client = config.connect(NoTls)?;
                    client.batch_execute(setup)?;
                    Ok::<_, postgres::Error>(client)
                };
                let mut session = match connect(&config) {
                    Ok(client) => {
                        let _ = ready.send(Ok(()));
                        Session {
                            client,
                            statements: HashMap::new(),
                        }
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = incoming.recv() {
                    if session.client.is_closed() {
                        match connect(&config) {
                            Ok(client) => {
                                tracing::info!("reconnected to the database");
                                session.client = client;
                                session.statements.clear();
                            }
                            // The job then fails on the closed client with
                            // the server's error, which the caller reports.
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot reconnect to the database")
                            }
                        }
                    }
                    // A panicking job must not take the connection (and every
                    // later call) with it; its caller sees `ConnectionGone`.
                    if catch_unwind(AssertUnwindSafe(|| job(&mut session))).is_err() {
                        tracing::error!("a database call panicked");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the database connection's thread");
            return Err(StoreError::ConnectionGone);
        }
        match connected.recv() {
            Ok(Ok(())) => Ok(Conn { jobs }),
            Ok(Err(source)) => Err(StoreError::Connect {
                url: shown.to_owned(),
                source,
            }),
            Err(_) => Err(StoreError::ConnectionGone),
        }
    }

    /// Runs `job` on the connection's thread and returns its result.
    ///
    /// The result comes back boxed as `dyn Any`: one reply channel type for
    /// every call, where a channel per result type made std's channel code
    /// once per call site (≈ 100 KB of the binary for some forty calls).
    pub fn call<R, F>(&self, job: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Session) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, result) = mpsc::sync_channel::<Reply>(1);
        self.jobs
            .send(Box::new(move |session| {
                let _ = reply.send(Box::new(job(session)));
            }))
            .map_err(|_| StoreError::ConnectionGone)?;
        // A job that panicked dropped its sender unsent.
        let answer = result.recv().map_err(|_| StoreError::ConnectionGone)?;
        match answer.downcast::<Result<R, StoreError>>() {
            Ok(answer) => *answer,
            Err(_) => Err(StoreError::ConnectionGone),
        }
    }
}
