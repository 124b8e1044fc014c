//! The process's one HTTP client stack: ureq 3 over rustls (ring) with
//! webpki-roots, one agent and so one connection pool for everything that
//! speaks HTTP — the provider client, `web_fetch`, `web_search`, Telegram,
//! WeCom's qyapi (SPEC X9).
//!
//! - [`agent`]: the shared agent. Statuses are answers, not errors
//!   (`http_status_as_error(false)`); timeouts are set per request
//!   (`request.config()…build()`), since every caller bounds its own waits.
//! - [`interruptible`]: while it runs, every wait for bytes on this thread
//!   asks a probe at least every [`TICK`] and gives up when it says
//!   [`Wake::Stop`] — how the model client notices an interrupt while a
//!   server is silent, without a helper thread per request.
//! - [`run_blocking`]: for async callers (the gateway's adapters): the
//!   exchange runs on tokio's blocking pool and gives up within a tick once
//!   the awaiting future is dropped (a shutdown, a `select!` that moved on).
//! - [`send_fresh_if_stale`]: a request that fails on a reused pooled
//!   connection before any answer byte is sent once more on a fresh one;
//!   [`discard_last_connection`] keeps the connection of a response that
//!   did not end cleanly out of the pool (see `stale`).
//! - [`describe`]: an error in words that never carry the URL (URLs may hold
//!   a bot token or an access token).
//! - [`multipart`]: a `multipart/form-data` body (Telegram's
//!   `sendDocument`, voice transcription).

mod joined;
pub mod multipart;
mod stale;
mod tick;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Connector as _, NextTimeout};

pub use stale::{discard_last_connection, is_closed_connection, send_fresh_if_stale};
pub use tick::{Stopped, TICK, Wake, interruptible};

/// How long an idle pooled connection is kept: below the keep-alive limit
/// of common servers and proxies (60–75 s), above the gap between a
/// conversation's model calls and a Telegram poll's renewals.
const MAX_IDLE_AGE: Duration = Duration::from_secs(50);

/// A connection's input buffer, and the largest response head accepted.
const INPUT_BUFFER: usize = 32 * 1024;

/// A connection's output buffer.
const OUTPUT_BUFFER: usize = 16 * 1024;

/// Connecting (DNS, TCP, TLS) unless a request says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `User-Agent` every request carries.
pub const USER_AGENT: &str = concat!("hermes-rs/", env!("CARGO_PKG_VERSION"));

/// The shared agent. Cheap to clone (reference counts); the first call
/// builds it.
pub fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(USER_AGENT)
            .timeout_resolve(Some(DEFAULT_CONNECT_TIMEOUT))
            .timeout_connect(Some(DEFAULT_CONNECT_TIMEOUT))
            .max_idle_age(MAX_IDLE_AGE)
            // ureq's defaults (128 KiB each way, per connection and per TLS
            // layer) are zeroed on every new connection and stay resident:
            // 32 KiB in holds two TLS records, 16 KiB out a request head
            // with room to spare (bodies stream through it).
            .input_buffer_size(INPUT_BUFFER)
            .output_buffer_size(OUTPUT_BUFFER)
            .max_response_header_size(INPUT_BUFFER)
            .build();
        agent_with(config)
    })
}

/// An agent with a pool and settings of its own (the MCP client's), on the
/// same connections as [`agent`]'s: ticking waits, IP literals resolved
/// without a thread, and stale pooled connections recognised
/// ([`send_fresh_if_stale`]).
pub fn agent_with(config: ureq::config::Config) -> ureq::Agent {
    let connector =
        ureq::unversioned::transport::DefaultConnector::new().chain(tick::TickingConnector);
    ureq::Agent::with_parts(config, connector, LiteralFirst::default())
}

/// Resolves IP-literal hosts (`127.0.0.1`, `[::1]`) itself and the rest
/// through ureq's resolver, which runs each lookup that has a timeout on a
/// thread of its own: a local provider costs no thread per connection.
#[derive(Debug, Default)]
struct LiteralFirst(DefaultResolver);

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().unwrap_or_default();
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse::<IpAddr>();
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        });
        match (literal, port) {
            (Ok(ip), Some(port)) => {
                let mut addrs = self.empty();
                addrs.push(SocketAddr::new(ip, port));
                Ok(addrs)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

/// Why [`run_blocking`] produced no value.
#[derive(Debug, thiserror::Error)]
#[error("the HTTP exchange {0}")]
pub struct BlockingError(&'static str);

/// Runs the blocking exchange `f` on tokio's blocking pool and awaits it.
/// Dropping the returned future (a shutdown, a `select!` that chose another
/// branch) makes every wait inside `f` give up within a [`TICK`], so no
/// blocking thread is left in a long poll after its caller went away.
pub async fn run_blocking<T, F>(f: F) -> Result<T, BlockingError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    /// Sets the flag when the awaiting future goes away, finished or not.
    struct Abandon(Arc<AtomicBool>);
    impl Drop for Abandon {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon = Abandon(Arc::clone(&abandoned));
    let task = crate::task::spawn_blocking(move || {
        let mut probe = || {
            if abandoned.load(Ordering::Acquire) {
                Wake::Stop
            } else {
                Wake::Continue
            }
        };
        interruptible(&mut probe, f)
    });
    task.await.map_err(|e| {
        BlockingError(if e.is_panic() {
            "panicked"
        } else {
            "was cancelled (the runtime is shutting down)"
        })
    })
}

/// `err` in a few words, without any URL: what to tell a user or a log.
pub fn describe(err: &ureq::Error) -> String {
    use ureq::Error as E;
    match err {
        E::Timeout(_) => "timed out".to_owned(),
        E::HostNotFound => "host not found".to_owned(),
        E::ConnectionFailed => "could not connect".to_owned(),
        E::Io(e) if Stopped::is(err) => e.to_string(),
        E::Io(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::ConnectionReset => "connection reset by the server".to_owned(),
            std::io::ErrorKind::UnexpectedEof => {
                "the server closed the connection early".to_owned()
            }
            _ => e.to_string(),
        },
        E::BadUri(_) => "not a valid URL".to_owned(),
        E::TooManyRedirects => "too many redirects".to_owned(),
        E::RedirectFailed => "a redirect could not be followed".to_owned(),
        E::BodyExceedsLimit(n) => format!("the answer is larger than {n} bytes"),
        E::Tls(m) => format!("TLS: {m}"),
        E::Rustls(e) => format!("TLS: {e}"),
        E::LargeResponseHeader(..) => "the response head is too large".to_owned(),
        // The rest carry no URL in their text.
        other => other.to_string(),
    }
}
