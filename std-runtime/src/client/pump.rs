//! One HTTP exchange on a helper thread, reported as messages.
//!
//! ureq is blocking: a thread inside `read()` cannot notice an interrupt
//! until the server sends a byte or the idle timeout fires — possibly two
//! minutes on a silent stream. So the exchange runs on a short-lived helper
//! thread that forwards the response head and each body chunk over a bounded
//! channel, and the caller waits with `recv_timeout(TICK)`, asking the sink
//! (`on_progress`) between chunks whether it should stop.
//!
//! **Interrupt latency:** the caller returns at most one [`TICK`] after the
//! sink starts answering `Flow::Stop` (plus the time the sink itself takes).
//! The socket is closed when the helper's pending `read()` returns (next byte
//! from the server, or the idle timeout), because a blocked read cannot be
//! cancelled from another thread; the helper then sees the dropped channel,
//! drops the body reader and exits.

use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use hermes_core::{Flow, StreamSink};
use ureq::http::{HeaderName, HeaderValue};

use super::ClientOptions;
use super::failure::{AttemptResult, helper_gone, no_answer, transport_failure};

/// How often a waiting caller offers the sink a chance to stop.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Read granularity: one `read()` of the body at a time.
const READ_CHUNK: usize = 16 * 1024;

/// Chunks that may queue up when the caller is slower than the network.
const CHANNEL_DEPTH: usize = 32;

/// What the helper thread reports, in order: `Head`, then `Data`*, then
/// `End` or `Failed` (or `Failed` alone when no response arrived).
#[derive(Debug)]
pub(crate) enum Event {
    /// The status line and the headers the client needs.
    Head {
        status: u16,
        content_type: Option<String>,
        retry_after: Option<String>,
        retry_after_ms: Option<String>,
    },
    /// A piece of the body as it came off the socket.
    Data(Vec<u8>),
    /// The body ended cleanly.
    End,
    /// The request could not be sent, or reading the body failed.
    Failed(ureq::Error),
}

/// Everything one exchange needs, owned, so it can move to the helper.
pub(crate) struct Exchange {
    pub(crate) agent: ureq::Agent,
    pub(crate) url: Arc<str>,
    /// `None` for GET.
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) headers: Arc<[(HeaderName, HeaderValue)]>,
}

/// Starts the exchange on a helper thread and returns the event stream.
pub(crate) fn start(exchange: Exchange) -> std::io::Result<Receiver<Event>> {
    let (tx, rx) = mpsc::sync_channel(CHANNEL_DEPTH);
    std::thread::Builder::new()
        .name("hermes-http".into())
        .spawn(move || run(exchange, &tx))?;
    Ok(rx)
}

fn run(exchange: Exchange, tx: &SyncSender<Event>) {
    let Exchange {
        agent,
        url,
        body,
        headers,
    } = exchange;
    let result = match body {
        Some(body) => {
            let mut req = agent.post(&*url);
            for (name, value) in headers.iter() {
                req = req.header(name.clone(), value.clone());
            }
            req.send(&body[..])
        }
        None => {
            let mut req = agent.get(&*url);
            for (name, value) in headers.iter() {
                req = req.header(name.clone(), value.clone());
            }
            req.call()
        }
    };
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Event::Failed(e));
            return;
        }
    };
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let head = Event::Head {
        status: response.status().as_u16(),
        content_type: header("content-type"),
        retry_after: header("retry-after"),
        retry_after_ms: header("retry-after-ms"),
    };
    if tx.send(head).is_err() {
        return;
    }
    let mut reader = response.into_body().into_reader();
    loop {
        let mut buf = vec![0u8; READ_CHUNK];
        match reader.read(&mut buf) {
            Ok(0) => {
                // Release the connection to the pool *before* reporting the
                // end, so the caller's next request can reuse it.
                drop(reader);
                let _ = tx.send(Event::End);
                return;
            }
            Ok(n) => {
                buf.truncate(n);
                // A closed channel means the caller stopped listening
                // (interrupt, or it has what it needs): drop the connection.
                if tx.send(Event::Data(buf)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = tx.send(Event::Failed(ureq::Error::from(e)));
                return;
            }
        }
    }
}

/// How long to wait for the body to end after `data: [DONE]`.
const DONE_GRACE: Duration = Duration::from_secs(1);

/// The parts of the response head the client uses.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) content_type: Option<String>,
    pub(crate) retry_after: Option<String>,
    pub(crate) retry_after_ms: Option<String>,
}

pub(crate) enum Next {
    Event(Event),
    /// The sink asked to stop while we waited.
    Stopped,
    /// The helper thread vanished without a final event (it panicked).
    Gone,
    /// The deadline given to [`next_event_by`] passed first.
    TimedOut,
}

/// Waits for the next event, offering the sink a chance to stop every tick,
/// and gives up at `until` if one is given. Giving up does not stop the
/// helper thread (a blocked read cannot be cancelled); dropping the receiver
/// makes it exit at its next event.
pub(crate) fn next_event_by(
    rx: &Receiver<Event>,
    sink: &mut dyn StreamSink,
    until: Option<Instant>,
) -> Next {
    loop {
        let wait = match until {
            None => TICK,
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(TICK),
                _ => return Next::TimedOut,
            },
        };
        match rx.recv_timeout(wait) {
            Ok(event) => return Next::Event(event),
            Err(RecvTimeoutError::Timeout) => {
                if sink.on_progress() == Flow::Stop {
                    return Next::Stopped;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Next::Gone,
        }
    }
}

/// After `[DONE]`, gives the body a moment to end so the helper returns the
/// connection to the pool before the next request; a server that keeps the
/// body open after `[DONE]` only costs this grace, then the connection is
/// dropped.
pub(crate) fn wait_for_end(rx: &Receiver<Event>) {
    let until = Instant::now() + DONE_GRACE;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(Event::Data(_) | Event::Head { .. }) => {}
            Ok(Event::End | Event::Failed(_)) | Err(_) => return,
        }
    }
}

/// Waits for the response head until `until` (the attempt's first-byte
/// deadline, or the call's, whichever comes first). `Ok(None)`: the sink
/// stopped the call.
pub(crate) fn wait_head(
    rx: &Receiver<Event>,
    sink: &mut dyn StreamSink,
    url: &str,
    opts: &ClientOptions,
    until: Until,
) -> AttemptResult<Option<Head>> {
    match next_event_by(rx, sink, Some(until.at)) {
        Next::Event(Event::Head {
            status,
            content_type,
            retry_after,
            retry_after_ms,
        }) => Ok(Some(Head {
            status,
            content_type,
            retry_after,
            retry_after_ms,
        })),
        Next::Event(Event::Failed(e)) => Err(transport_failure(&e, url, opts)),
        Next::Event(Event::Data(_) | Event::End) | Next::Gone => Err(helper_gone(url)),
        Next::Stopped => Ok(None),
        Next::TimedOut => Err(no_answer(url, opts, until.call_deadline)),
    }
}

/// When an attempt stops waiting, and whether that is the call's deadline
/// (no further attempt) or only this attempt's first-byte deadline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Until {
    pub(crate) at: Instant,
    pub(crate) call_deadline: bool,
}

impl Until {
    /// The earlier of `now + first_byte` and `call_deadline`.
    pub(crate) fn first_byte(opts: &ClientOptions, call_deadline: Instant) -> Until {
        let attempt = Instant::now() + opts.first_byte_timeout;
        if attempt < call_deadline {
            Until {
                at: attempt,
                call_deadline: false,
            }
        } else {
            Until {
                at: call_deadline,
                call_deadline: true,
            }
        }
    }
}

/// Sleeps `delay`, asking the sink every tick whether to stop.
pub(crate) fn sleep_unless_stopped(delay: Duration, sink: &mut dyn StreamSink) -> Flow {
    let until = Instant::now() + delay;
    loop {
        if sink.on_progress() == Flow::Stop {
            return Flow::Stop;
        }
        let now = Instant::now();
        if now >= until {
            return Flow::Continue;
        }
        std::thread::sleep((until - now).min(TICK));
    }
}
