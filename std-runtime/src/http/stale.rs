//! Stale keep-alive connections: a pooled connection the server has closed
//! (an idle timeout, or a server that closes after a response it cut
//! short) fails the next request sent on it before any byte of an answer.
//!
//! The usual rule of HTTP clients applies: a request that fails on a
//! **reused** connection **before any response byte** arrived is sent once
//! more on a fresh connection — safe, because the server processed nothing
//! it answered — and that resend is not an attempt of the caller's retry
//! policy ([`send_fresh_if_stale`]). A caller that finds a response did not
//! complete cleanly (a stream that ended before its first event) keeps its
//! connection out of the pool ([`discard_last_connection`]).
//!
//! ureq 3 exposes neither which connection a request used nor a way to
//! drop one from the pool, but it asks every pooled connection
//! [`Transport::is_open`](ureq::unversioned::transport::Transport::is_open)
//! before lending it out, and drops those that say no. The
//! [`TickingTransport`](super::tick::TickingTransport) every connection is
//! wrapped in reports here what happened on it, and answers `is_open` from
//! what is decided here.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::lock;

/// Connections marked to be dropped rather than lent out again, at most
/// this many (a marked connection that expires idle is never asked again).
const MAX_DISCARDED: usize = 64;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static DISCARDED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// What this thread's current request did on the wire.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    /// The connection it went out on (0: nothing sent yet).
    connection: u64,
    /// That connection had carried an earlier exchange.
    reused: bool,
    /// Bytes of an answer arrived.
    answered: bool,
}

std::thread_local! {
    static SENT: Cell<Sent> = const { Cell::new(Sent { connection: 0, reused: false, answered: false }) };
    /// The last connection this thread sent on or read from.
    static LAST: Cell<u64> = const { Cell::new(0) };
    /// While set, no pooled connection is lent to this thread (the pool
    /// drops every idle one to that host it looks at: after one went stale,
    /// the others usually are too).
    static FRESH: Cell<bool> = const { Cell::new(false) };
}

/// A new connection's id.
pub(super) fn new_connection() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Connection `id` sends bytes; `used`: it carried an exchange before.
pub(super) fn note_send(id: u64, used: bool) {
    LAST.set(id);
    let sent = SENT.get();
    if sent.connection == 0 {
        SENT.set(Sent {
            connection: id,
            reused: used,
            answered: false,
        });
    }
}

/// Connection `id` received bytes.
pub(super) fn note_input(id: u64) {
    LAST.set(id);
    let mut sent = SENT.get();
    if sent.connection == id {
        sent.answered = true;
        SENT.set(sent);
    }
}

/// Whether the pool may lend out (or take back) connection `id`.
pub(super) fn may_reuse(id: u64) -> bool {
    if FRESH.get() {
        return false;
    }
    let mut discarded = lock(&DISCARDED);
    match discarded.iter().position(|d| *d == id) {
        Some(at) => {
            discarded.swap_remove(at);
            false
        }
        None => true,
    }
}

/// Keeps the last connection this thread used out of the pool: its
/// response did not end cleanly, and a server that cuts a response short
/// usually closes the connection just after.
pub fn discard_last_connection() {
    let id = LAST.get();
    if id == 0 {
        return;
    }
    let mut discarded = lock(&DISCARDED);
    if discarded.len() >= MAX_DISCARDED {
        discarded.remove(0);
    }
    discarded.push(id);
}

/// Runs the request `send` (one ureq call on the shared agent, on this
/// thread); if it fails on a reused connection before any byte of an
/// answer, runs it once more on a fresh connection. The second error, if
/// any, is the one returned.
pub fn send_fresh_if_stale<R>(
    mut send: impl FnMut() -> Result<R, ureq::Error>,
) -> Result<R, ureq::Error> {
    SENT.set(Sent::default());
    let first = send();
    let sent = SENT.get();
    SENT.set(Sent::default());
    match first {
        Err(e) if sent.reused && !sent.answered && is_closed_connection(&e) => {
            tracing::debug!(error = %e, "a reused connection was closed by the server; sending again on a new one");
            /// Clears the flag however the resend ends.
            struct Fresh;
            impl Drop for Fresh {
                fn drop(&mut self) {
                    FRESH.set(false);
                }
            }
            FRESH.set(true);
            let _fresh = Fresh;
            send()
        }
        other => other,
    }
}

/// Whether `e` is what a connection the server closed produces (not an
/// interrupt, a timeout, a refused connection or a TLS failure).
pub fn is_closed_connection(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::Io(io) => {
            !super::Stopped::is(e)
                && matches!(
                    io.kind(),
                    K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
                )
        }
        _ => false,
    }
}
