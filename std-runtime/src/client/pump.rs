//! One HTTP exchange on the caller's thread, read as events.
//!
//! ureq is blocking, and a blocked `read()` cannot be cancelled from another
//! thread. The exchange goes through the shared agent ([`crate::http`]),
//! whose connections wait for bytes in ticks of [`TICK`]: each wait here runs
//! under a probe that asks the sink (`on_progress`) after every quiet tick
//! whether to stop, and watches the caller's deadline. No thread is spawned
//! per request, and the connection goes back to the shared pool when its
//! body has been read to the end, so the next call reuses it.
//!
//! **Interrupt latency:** the caller returns at most one [`TICK`] after the
//! sink starts answering `Flow::Stop` (plus the time the sink itself takes),
//! while waiting for the response head as well as between body chunks. The
//! connection of a stopped exchange is closed, never pooled half-read.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_core::{Flow, StreamSink};
use ureq::BodyReader;
use ureq::http::{HeaderName, HeaderValue};

use super::ClientOptions;
use super::failure::{AttemptResult, helper_gone, no_answer, transport_failure};
use crate::http::{self, Wake};

pub(crate) use crate::http::TICK;

/// Read granularity: one `read()` of the body at a time.
const READ_CHUNK: usize = 16 * 1024;

/// The read buffer of the last exchange that ended, zeroed once and then
/// handed from one exchange to the next: a fresh zeroed buffer per model
/// call cost ≈ 17 k instructions (callgrind), a tenth of an iteration. One
/// for the process, taken and given back without waiting (exchanges at
/// the same time make their own). Not thread-local: a thread-local value
/// that needs dropping makes std register its destructor in a list it
/// allocates from the C library's `malloc`, which then sets itself up —
/// a few page faults and system calls in every one-shot (issue 39).
static SPARE_BUF: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// What reading an exchange yields, in order: `Data`*, then `End` or
/// `Failed`.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// A piece of the body as it came off the socket (borrowed from the
    /// exchange's read buffer until the next read).
    Data(&'a [u8]),
    /// The body ended cleanly; the connection is back in the pool.
    End,
    /// Reading the body failed.
    Failed(ureq::Error),
}

/// Everything one exchange needs to be sent.
pub(crate) struct Request<'b> {
    pub(crate) url: Arc<str>,
    /// `None` for GET. Borrowed: a retry sends the same bytes again.
    pub(crate) body: Option<&'b [u8]>,
    pub(crate) headers: Arc<[(HeaderName, HeaderValue)]>,
}

/// One exchange: sent by [`wait_head`], then read by [`next_event_by`].
pub(crate) struct Exchange<'b> {
    request: Option<Request<'b>>,
    reader: Option<BodyReader<'static>>,
    buf: Vec<u8>,
}

impl<'b> Exchange<'b> {
    /// An exchange not yet sent (no IO).
    pub(crate) fn new(request: Request<'b>) -> Self {
        Exchange {
            request: Some(request),
            reader: None,
            buf: Vec::new(),
        }
    }
}

impl Drop for Exchange<'_> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.len() == READ_CHUNK
            && let Ok(mut spare) = SPARE_BUF.try_lock()
            && spare.is_empty()
        {
            *spare = buf;
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

pub(crate) enum Next<'a> {
    Event(Event<'a>),
    /// The sink asked to stop while we waited.
    Stopped,
    /// The deadline given to [`next_event_by`] passed first.
    TimedOut,
}

/// Why a wait ended early, as the probe saw it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    No,
    Stopped,
    TimedOut,
}

/// Runs `f` with a probe that asks `sink` after every quiet tick and gives
/// up at `until`; returns `f`'s result and whether (and why) the probe cut
/// the wait short.
fn watched<R>(
    sink: &mut dyn StreamSink,
    until: Option<Instant>,
    f: impl FnOnce() -> R,
) -> (R, Cut) {
    let mut cut = Cut::No;
    let mut probe = || {
        if until.is_some_and(|at| Instant::now() >= at) {
            cut = Cut::TimedOut;
            Wake::Stop
        } else if sink.on_progress() == Flow::Stop {
            cut = Cut::Stopped;
            Wake::Stop
        } else {
            Wake::Continue
        }
    };
    let result = http::interruptible(&mut probe, f);
    (result, cut)
}

/// Sends the request and waits for the response head until `until` (the
/// attempt's first-byte deadline, or the call's, whichever comes first).
/// `Ok(None)`: the sink stopped the call.
pub(crate) fn wait_head(
    exchange: &mut Exchange<'_>,
    sink: &mut dyn StreamSink,
    url: &str,
    opts: &ClientOptions,
    until: Until,
) -> AttemptResult<Option<Head>> {
    let Some(Request {
        url: target,
        body,
        headers,
    }) = exchange.request.take()
    else {
        return Err(helper_gone(url));
    };
    let (result, cut) = watched(sink, Some(until.at), || send(&target, body, &headers, opts));
    let response = match (result, cut) {
        (Ok(response), _) => response,
        (Err(_), Cut::Stopped) => return Ok(None),
        (Err(_), Cut::TimedOut) => return Err(no_answer(url, opts, until.call_deadline)),
        (Err(e), Cut::No) => return Err(transport_failure(&e, url, opts)),
    };
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let head = Head {
        status: response.status().as_u16(),
        content_type: header("content-type"),
        retry_after: header("retry-after"),
        retry_after_ms: header("retry-after-ms"),
    };
    exchange.reader = Some(response.into_body().into_reader());
    Ok(Some(head))
}

/// One request on the shared agent with this provider's timeouts.
fn send(
    url: &str,
    body: Option<&[u8]>,
    headers: &[(HeaderName, HeaderValue)],
    opts: &ClientOptions,
) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    let agent = http::agent();
    macro_rules! configured {
        ($builder:expr) => {{
            let mut req = $builder
                .config()
                .timeout_resolve(Some(opts.connect_timeout))
                .timeout_connect(Some(opts.connect_timeout))
                .timeout_per_read(Some(opts.idle_read_timeout))
                .timeout_per_write(Some(opts.idle_read_timeout))
                .build();
            for (name, value) in headers {
                req = req.header(name.clone(), value.clone());
            }
            req
        }};
    }
    // A pooled connection the server closed meanwhile is not a failed
    // attempt: the request goes out once more on a new connection.
    http::send_fresh_if_stale(|| match body {
        Some(body) => configured!(agent.post(url)).send(body),
        None => configured!(agent.get(url)).call(),
    })
}

/// Reads the next piece of the body, offering the sink a chance to stop
/// after every quiet tick, and giving up at `until` if one is given.
pub(crate) fn next_event_by<'a>(
    exchange: &'a mut Exchange<'_>,
    sink: &mut dyn StreamSink,
    until: Option<Instant>,
) -> Next<'a> {
    let Some(reader) = exchange.reader.as_mut() else {
        return Next::Event(Event::End);
    };
    if exchange.buf.len() < READ_CHUNK {
        exchange.buf = SPARE_BUF
            .try_lock()
            .map(|mut spare| std::mem::take(&mut *spare))
            .ok()
            .filter(|b| b.len() == READ_CHUNK)
            .unwrap_or_else(|| vec![0; READ_CHUNK]);
    }
    let buf = &mut exchange.buf;
    let (result, cut) = watched(sink, until, || {
        loop {
            match reader.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    });
    match (result, cut) {
        (Ok(0), _) => {
            // Dropping the finished reader is what returns the connection
            // to the pool (ureq does it once the body has been read whole).
            exchange.reader = None;
            Next::Event(Event::End)
        }
        (Ok(n), _) => Next::Event(Event::Data(&exchange.buf[..n])),
        (Err(_), Cut::Stopped) => {
            exchange.reader = None;
            Next::Stopped
        }
        (Err(_), Cut::TimedOut) => {
            exchange.reader = None;
            Next::TimedOut
        }
        (Err(e), Cut::No) => {
            exchange.reader = None;
            Next::Event(Event::Failed(ureq::Error::from(e)))
        }
    }
}

/// After `[DONE]`, gives the body a moment to end so the connection goes
/// back to the pool for the next request; a server that keeps the body open
/// after `[DONE]` only costs this grace, then the connection is dropped.
pub(crate) fn wait_for_end(exchange: &mut Exchange<'_>) {
    let until = Instant::now() + DONE_GRACE;
    let mut quiet = hermes_core::NullSink;
    loop {
        match next_event_by(exchange, &mut quiet, Some(until)) {
            Next::Event(Event::Data(_)) => {}
            Next::Event(Event::End | Event::Failed(_)) | Next::Stopped | Next::TimedOut => return,
        }
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
