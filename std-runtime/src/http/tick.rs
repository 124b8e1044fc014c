//! Waiting for bytes in ticks: the transport layer under every connection of
//! the shared agent, and the thread's probe it asks between ticks.
//!
//! ureq is blocking and a blocked `read()` cannot be cancelled from another
//! thread. Instead of a helper thread per exchange, every connection of the
//! shared agent is wrapped in [`TickingTransport`]: when the calling thread
//! has installed a probe ([`interruptible`]), a wait for input is cut into
//! slices of at most [`TICK`], and the probe is asked between slices whether
//! to go on. When it says stop, the wait fails with [`Stopped`] and the
//! exchange ends there (the connection is dropped, never pooled half-read).
//! Without a probe the transport waits exactly as ureq's own would.
//!
//! The probe is a scoped thread-local: ureq runs the transport on the thread
//! that called `send()` or `read()`, so the probe installed around that call
//! is the one asked, and concurrent exchanges on other threads (the gateway's
//! sessions, a Telegram poll on the blocking pool) each ask their own.

use std::fmt;
use std::time::{Duration, Instant};

use scoped_tls_hkt::scoped_thread_local;
use ureq::Error;
use ureq::unversioned::transport::time::Duration as UreqDuration;
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

use super::joined::Held;

/// The longest a waiting exchange goes without asking its probe.
pub const TICK: Duration = Duration::from_millis(50);

/// What a probe answers between ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Keep waiting.
    Continue,
    /// Give up: the exchange fails with [`Stopped`].
    Stop,
}

/// The error a wait ends with when its probe said [`Wake::Stop`]. It reaches
/// the caller as `ureq::Error::Io` (or an `io::Error`) wrapping this value;
/// callers usually know already, because their probe said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the exchange was stopped by its caller")]
pub struct Stopped;

impl Stopped {
    /// Whether `err` is a wait that ended because its probe said stop.
    pub fn is(err: &Error) -> bool {
        match err {
            Error::Io(e) => e.get_ref().is_some_and(|inner| inner.is::<Stopped>()),
            _ => false,
        }
    }

    fn error() -> Error {
        Error::Io(std::io::Error::other(Stopped))
    }
}

scoped_thread_local!(static mut PROBE: for<'a> &'a mut (dyn FnMut() -> Wake + 'a));

/// Runs `f` with `probe` installed for this thread: every wait for bytes of
/// an exchange on the shared agent inside `f` asks it at least every
/// [`TICK`], and fails with [`Stopped`] once it answers [`Wake::Stop`].
/// Nested calls replace the outer probe for their duration.
pub fn interruptible<R>(probe: &mut dyn FnMut() -> Wake, f: impl FnOnce() -> R) -> R {
    PROBE.set(probe, f)
}

/// Asks this thread's probe, if one is installed.
fn ask() -> Option<Wake> {
    if PROBE.is_set() {
        // `with` hides the probe while it runs, so a probe that itself does
        // HTTP cannot re-enter itself.
        Some(PROBE.with(|probe| probe()))
    } else {
        None
    }
}

/// Wraps each connection the inner connectors make in a
/// [`TickingTransport`]. The last link of the shared agent's chain.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TickingConnector;

impl<In: Transport> Connector<In> for TickingConnector {
    type Out = TickingTransport<In>;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        Ok(chained.map(|inner| TickingTransport {
            inner,
            id: super::stale::new_connection(),
            used: false,
            answered_since_probe: false,
            held: Held::default(),
        }))
    }
}

/// A connection whose waits for input ask the thread's probe every tick,
/// which tells [`super::stale`] what happened on it, and which sends a
/// request's head in the same write as its body ([`super::joined`]).
pub(crate) struct TickingTransport<T> {
    inner: T,
    /// Its id for [`super::stale`].
    id: u64,
    /// It has received bytes: any request sent on it now reuses it.
    used: bool,
    /// It has received bytes since `is_open` was last asked: the next ask
    /// is the one at the end of an answer ([`Transport::is_open`]).
    answered_since_probe: bool,
    /// A request's head kept back to go out with its body.
    held: Held,
}

impl<T: fmt::Debug> fmt::Debug for TickingTransport<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TickingTransport")
            .field(&self.inner)
            .finish()
    }
}

impl<T: Transport> Transport for TickingTransport<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        super::stale::note_send(self.id, self.used);
        self.held.transmit(&mut self.inner, amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        // ureq's own, with what is held sent first.
        self.held.flush(&mut self.inner, timeout)?;
        if self.buffers().can_use_input() {
            return Ok(true);
        }
        self.await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.held.flush(&mut self.inner, timeout)?;
        let got = self.await_ticking(timeout);
        if matches!(got, Ok(true)) {
            self.used = true;
            self.answered_since_probe = true;
            super::stale::note_input(self.id);
        }
        got
    }

    /// ureq asks twice between two exchanges: when an answer's end hands
    /// the connection back to the pool, and when the pool lends it out
    /// again. The inner probe of a TCP socket is three system calls
    /// (non-blocking on, a one-byte read, off), and what it can find at the
    /// first ask — bytes the server sent after the body, or the server's end
    /// closed — stays on the socket until the second. So only the lending
    /// probes the socket; the hand-back answers from what is known here.
    fn is_open(&mut self) -> bool {
        // Bytes still held belong to an exchange that never waited for
        // its answer: sent later, they would go in front of another's.
        if !self.held.is_empty() || !super::stale::may_reuse(self.id) {
            return false;
        }
        std::mem::take(&mut self.answered_since_probe) || self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

impl<T: Transport> TickingTransport<T> {
    /// ureq's wait for input, cut into ticks when a probe is installed.
    fn await_ticking(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        if !PROBE.is_set() {
            return self.inner.await_input(timeout);
        }
        // The wait ureq asked for (the tighter of the call's remaining
        // budget and the per-read limit), cut into ticks.
        let whole = timeout.for_read();
        let deadline = match whole.after {
            UreqDuration::Exact(d) => Instant::now().checked_add(d),
            UreqDuration::NotHappening => None,
        };
        loop {
            if ask() == Some(Wake::Stop) {
                return Err(Stopped::error());
            }
            let slice = match deadline {
                Some(at) => match at.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(TICK),
                    _ => return Err(Error::Timeout(whole.reason)),
                },
                None => TICK,
            };
            let step = NextTimeout {
                after: UreqDuration::Exact(slice),
                reason: whole.reason,
                per_read: None,
                per_write: timeout.per_write,
            };
            match self.inner.await_input(step) {
                // A quiet tick: ask the probe and wait on.
                Err(Error::Timeout(_)) => {}
                other => return other,
            }
        }
    }
}
