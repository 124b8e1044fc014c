//! Failed attempts: what went wrong, in words that say what to check, and
//! whether another attempt is worth making.

use std::time::Duration;

use hermes_core::codec::DecodeError;
use hermes_core::codec::response::decode_error_body;
use hermes_core::{ModelError, ModelErrorKind};

use super::{ClientOptions, retry};

/// Longest raw body excerpt quoted in an error when the body is not JSON.
const ERROR_EXCERPT_CHARS: usize = 300;

/// A failed attempt and whether another one is worth making.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: ModelError,
    pub(super) retryable: bool,
    pub(super) retry_after: Option<Duration>,
}

impl Failure {
    pub(super) fn fatal(error: ModelError) -> Self {
        Failure {
            error,
            retryable: false,
            retry_after: None,
        }
    }

    pub(super) fn retryable(error: ModelError) -> Self {
        Failure {
            error,
            retryable: true,
            retry_after: None,
        }
    }
}

pub(super) type AttemptResult<T> = Result<T, Failure>;

/// The provider did not start answering in time: within the attempt's
/// first-byte timeout (worth another attempt) or by the call's deadline
/// (the retry loop gives up, since no time is left).
pub(super) fn no_answer(url: &str, opts: &ClientOptions, call_deadline: bool) -> Failure {
    let message = if call_deadline {
        format!(
            "no answer from {url} within the call timeout of {:?} — the provider is stalled or overloaded (raise call_timeout_secs for slow models)",
            opts.call_timeout
        )
    } else {
        format!(
            "no response from {url} within {:?} (first-byte timeout) — the provider is stalled or overloaded",
            opts.first_byte_timeout
        )
    };
    Failure::retryable(ModelError::new(ModelErrorKind::Timeout, message))
}

/// Whether `body` is an HTML page rather than JSON or an event stream: its
/// first non-blank byte is `<` (`<!DOCTYPE html>`, `<html>`, `<?xml …>`).
pub(super) fn looks_like_html(body: &[u8]) -> bool {
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'<')
}

/// A 2xx answer that is an HTML page: almost always a base URL pointing at a
/// web site or a proxy's login page instead of the API. Never retried.
pub(super) fn html_answer(url: &str, status: u16, body: &[u8]) -> Failure {
    let mut message = format!(
        "the provider answered with HTML, not JSON — wrong base URL? ({url} sent HTTP {status} with an HTML page"
    );
    if let Some(title) = html_title(body) {
        message.push_str(&format!(" titled {title:?}"));
    }
    message
        .push_str("; the base URL should end at the API version, e.g. https://api.openai.com/v1)");
    Failure::fatal(ModelError::new(ModelErrorKind::Protocol, message))
}

/// The text of the page's `<title>`, if it has a short one.
fn html_title(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(64 * 1024)]);
    let lower = text.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = start + lower[start..].find('>')? + 1;
    let close = open_end + lower[open_end..].find("</title")?;
    let title = text[open_end..close].trim();
    (!title.is_empty()).then(|| title.chars().take(120).collect())
}

pub(super) fn helper_gone(url: &str) -> Failure {
    Failure::retryable(ModelError::new(
        ModelErrorKind::Transport,
        format!("the HTTP exchange with {url} ended unexpectedly"),
    ))
}

/// Names a transport failure and decides whether it is worth a retry:
/// connection and read failures and timeouts are; bad URLs, TLS and protocol
/// violations are not.
pub(super) fn transport_failure(err: &ureq::Error, url: &str, opts: &ClientOptions) -> Failure {
    use std::io::ErrorKind as Io;
    use ureq::Error as E;
    use ureq::Timeout as T;
    let (kind, retryable, message) = match err {
        E::Timeout(T::Connect | T::Resolve) => (
            ModelErrorKind::Timeout,
            true,
            format!(
                "cannot reach {url}: connecting timed out after {:?} — is the server running? set --base-url to the provider's address",
                opts.connect_timeout
            ),
        ),
        E::Timeout(t) => (
            ModelErrorKind::Timeout,
            true,
            format!(
                "no data from {url} for {:?} ({t}) — the provider is stalled or overloaded",
                opts.idle_read_timeout
            ),
        ),
        E::Io(io) if io.kind() == Io::ConnectionRefused => (
            ModelErrorKind::Transport,
            true,
            format!(
                "cannot reach {url}: connection refused — is the server running? set --base-url to the provider's address"
            ),
        ),
        E::Io(io) if io.kind() == Io::TimedOut || io.kind() == Io::WouldBlock => (
            ModelErrorKind::Timeout,
            true,
            format!("no data from {url} for {:?}: {io}", opts.idle_read_timeout),
        ),
        // rustls reports a peer that does not speak TLS (a plain HTTP
        // server answering the hello with "HTTP/1.1 400") as invalid data;
        // the same server would answer the same way again.
        E::Io(io) if io.kind() == Io::InvalidData && url.starts_with("https://") => (
            ModelErrorKind::Transport,
            false,
            format!(
                "{url} did not answer in TLS — the server does not seem to speak HTTPS; if it is a plain HTTP server, use http:// in the base URL"
            ),
        ),
        E::Io(io) => (
            ModelErrorKind::Transport,
            true,
            format!("connection to {url} failed: {io}"),
        ),
        E::HostNotFound => (
            ModelErrorKind::Transport,
            true,
            format!("cannot reach {url}: host not found — check --base-url"),
        ),
        E::ConnectionFailed => (
            ModelErrorKind::Transport,
            true,
            format!(
                "cannot reach {url}: connection failed — is the server running? set --base-url to the provider's address"
            ),
        ),
        E::BodyStalled => (
            ModelErrorKind::Timeout,
            true,
            format!("the response from {url} stalled"),
        ),
        E::Protocol(p) => (
            ModelErrorKind::Protocol,
            false,
            format!("{url} broke the HTTP protocol: {p}"),
        ),
        other => (
            ModelErrorKind::Transport,
            false,
            format!("request to {url} failed: {other}"),
        ),
    };
    Failure {
        error: ModelError::new(kind, message),
        retryable,
        retry_after: None,
    }
}

/// A response past the body cap: a runaway or hostile server. Not retried:
/// the same request would run away again.
pub(super) fn body_too_large(url: &str, cap: usize) -> Failure {
    Failure::fatal(ModelError::new(
        ModelErrorKind::Protocol,
        format!("the response from {url} exceeds {} MiB", cap >> 20),
    ))
}

/// Names a decoding failure. A broken stream (`Truncated`) and an error the
/// provider reported mid-stream are retryable unless text was shown; malformed
/// data is not (the same server would send it again).
pub(super) fn decode_failure(
    err: DecodeError,
    partial_text: Option<String>,
    shown: bool,
    url: &str,
) -> Failure {
    let (kind, transient) = match &err {
        DecodeError::Truncated { .. } => (ModelErrorKind::Transport, true),
        // An error event mid-stream can be a context-length error too
        // (OpenRouter sends some that way): not worth a retry.
        DecodeError::Provider { message } => {
            match hermes_core::context::overflow::classify(message) {
                Some(o) => (ModelErrorKind::ContextOverflow { window: o.window }, false),
                None => (ModelErrorKind::Protocol, true),
            }
        }
        _ => (ModelErrorKind::Protocol, false),
    };
    let mut message = match &err {
        DecodeError::Truncated { .. } => format!("the stream from {url} broke: {err}"),
        _ => format!("bad response from {url}: {err}"),
    };
    if shown {
        message.push_str(" (after part of the answer was shown)");
    }
    Failure {
        error: ModelError {
            kind,
            message,
            partial_text: if shown { partial_text } else { None },
        },
        retryable: transient && !shown,
        retry_after: None,
    }
}

/// A short, printable excerpt of a non-JSON error body.
pub(super) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text.chars().take(ERROR_EXCERPT_CHARS).collect();
    if text.chars().count() > ERROR_EXCERPT_CHARS {
        out.push('…');
    }
    out
}

/// Names a non-2xx answer from its status, its `Retry-After` headers
/// (`retry_after_ms`, `retry_after`) and (capped) error body: the
/// provider's own message when the body has one, and what to check
/// (`key_sent`: whether the request carried an API key at all).
pub(super) fn status_failure(
    status: u16,
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    url: &str,
    body: &[u8],
    key_sent: bool,
) -> Failure {
    let html = decode_error_body(body).is_none() && looks_like_html(body);
    let detail = match decode_error_body(body) {
        Some(d) => d,
        None if html => match html_title(body) {
            Some(title) => format!("an HTML page titled {title:?}"),
            None => "an HTML page".to_owned(),
        },
        None => excerpt(body),
    };
    // Several servers put the limit outside the message (llama.cpp's
    // `n_ctx`), so the whole body is read.
    let overflow = hermes_core::context::overflow::classify(&String::from_utf8_lossy(body));
    let retryable = retry::status_is_retryable(status) && overflow.is_none();
    let hint = match status {
        401 if !key_sent => " — no API key was sent; this provider needs one",
        401 => " — check the API key",
        403 => " — the API key is not allowed to use this model or endpoint",
        404 => " — check the model name and the base URL",
        429 => " — rate limited by the provider",
        _ => "",
    };
    let reason = ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut message = format!("HTTP {status} {reason} from {url}");
    if !detail.is_empty() {
        message.push_str(": ");
        message.push_str(&detail);
    }
    message.push_str(hint);
    if html {
        message.push_str(" (the provider answered with HTML, not JSON — wrong base URL?)");
    }
    let kind = match overflow {
        Some(o) => ModelErrorKind::ContextOverflow { window: o.window },
        None => ModelErrorKind::Status(status),
    };
    Failure {
        error: ModelError::new(kind, message),
        retryable,
        retry_after: retry::parse_retry_after(retry_after_ms, retry_after),
    }
}
