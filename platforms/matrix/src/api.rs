//! The Matrix client-server API over HTTP (`/_matrix/client/v3/…`), JSON in
//! and out, with the fault handling every call shares: `M_LIMIT_EXCEEDED`
//! (429) waits out `retry_after_ms`, 5xx and network errors back off, and
//! the access token never appears in an error or a log line.

use std::sync::Mutex;
use std::time::Duration;

use hermes_runtime::http;
use hermes_runtime::secret::Secret;
use hermes_runtime::sync::lock;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use hermes_platform_kit::adapter::AdapterError;

pub(crate) const PLATFORM: &str = "matrix";

/// The largest answer read from the homeserver. A `/sync` batch is bounded
/// by the filter's timeline limit; a broken or hostile server cannot make
/// the adapter buffer more than this.
const MAX_ANSWER_BYTES: u64 = 32 * 1024 * 1024;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many attempts a call gets for 5xx answers and network errors.
const MAX_ATTEMPTS: u32 = 5;

/// The longest rate-limit wait the adapter accepts for one call; a longer
/// demand fails the call instead of hanging a reply for hours.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Path segments (room ids `!a:b`, user ids `@a:b`, event types, txn ids)
/// keep only unreserved characters as they are.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A path segment, percent-encoded.
pub(crate) fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// One failed call, before it is mapped to an [`AdapterError`].
#[derive(Debug)]
pub(crate) enum CallError {
    /// The homeserver answered with an error (`errcode`, `error`).
    Api {
        status: u16,
        errcode: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The request never got a usable answer.
    Network(String),
}

impl CallError {
    fn retryable(&self) -> bool {
        match self {
            CallError::Network(_) => true,
            CallError::Api { status, .. } => *status >= 500,
        }
    }

    /// Whether the access token was refused (logged out, expired, wrong).
    pub(crate) fn is_auth(&self) -> bool {
        matches!(self, CallError::Api { status: 401, .. })
            || matches!(self, CallError::Api { errcode, .. } if errcode == "M_UNKNOWN_TOKEN" || errcode == "M_MISSING_TOKEN")
    }

    pub(crate) fn into_adapter_error(self) -> AdapterError {
        match self {
            CallError::Network(message) => AdapterError::Network {
                platform: PLATFORM,
                message,
            },
            e if e.is_auth() => AdapterError::Auth {
                platform: PLATFORM,
                message: format!(
                    "the homeserver refused the credentials ({e}); check MATRIX_ACCESS_TOKEN, or MATRIX_USER_ID and MATRIX_PASSWORD"
                ),
            },
            e => AdapterError::Rejected {
                platform: PLATFORM,
                message: e.to_string(),
            },
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Api {
                status,
                errcode,
                message,
                ..
            } => write!(f, "HTTP {status} {errcode}: {message}"),
            CallError::Network(m) => f.write_str(m),
        }
    }
}

/// The HTTP side of the adapter: blocking exchanges on the runtime's shared
/// agent, run on tokio's blocking pool ([`http::run_blocking`]).
#[derive(Debug)]
pub(crate) struct Api {
    base: String,
    token: Mutex<Secret>,
}

impl Api {
    pub(crate) fn new(homeserver: &str) -> Self {
        Api {
            base: homeserver.trim().trim_end_matches('/').to_owned(),
            token: Mutex::new(Secret::default()),
        }
    }

    pub(crate) fn set_token(&self, token: &str) {
        *lock(&self.token) = Secret::new(token);
    }

    fn token(&self) -> Secret {
        lock(&self.token).clone()
    }

    /// `s` with the access token replaced, so no error carries it.
    fn redact(&self, s: &str) -> String {
        let token = self.token();
        if token.is_empty() {
            s.to_owned()
        } else {
            s.replace(token.expose(), "<redacted>")
        }
    }

    /// One attempt: `method` on `path` (below the homeserver's base) with an
    /// optional JSON body. Returns the status and the raw answer.
    pub(crate) async fn exchange(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), CallError> {
        let url = format!("{}{}", self.base, path);
        let token = self.token();
        let json = match body {
            Some(b) => Some(
                serde_json::to_vec(b)
                    .map_err(|e| CallError::Network(format!("cannot encode the request: {e}")))?,
            ),
            None => None,
        };
        let exchange = move || -> Result<(u16, Vec<u8>), ureq::Error> {
            let agent = http::agent();
            let auth = format!("Bearer {}", token.expose());
            let mut resp = match (method, json) {
                ("GET", _) => {
                    let mut req = agent
                        .get(&url)
                        .config()
                        .timeout_global(Some(timeout))
                        .timeout_connect(Some(CONNECT_TIMEOUT))
                        .build();
                    if !token.is_empty() {
                        req = req.header("authorization", &auth);
                    }
                    req.call()?
                }
                (m, json) => {
                    let builder = match m {
                        "PUT" => agent.put(&url),
                        _ => agent.post(&url),
                    };
                    let mut req = builder
                        .config()
                        .timeout_global(Some(timeout))
                        .timeout_connect(Some(CONNECT_TIMEOUT))
                        .build()
                        .header("content-type", "application/json");
                    if !token.is_empty() {
                        req = req.header("authorization", &auth);
                    }
                    req.send(json.as_deref().unwrap_or(b"{}"))?
                }
            };
            let status = resp.status().as_u16();
            let bytes = resp
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES)
                .read_to_vec()?;
            Ok((status, bytes))
        };
        match http::run_blocking(exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(CallError::Network(self.redact(&http::describe(&e)))),
            Err(e) => Err(CallError::Network(e.to_string())),
        }
    }

    /// One attempt, its answer read as JSON.
    pub(crate) async fn call_once(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let (status, bytes) = self.exchange(method, path, body, timeout).await?;
        read_answer(status, &bytes).map_err(|e| match e {
            CallError::Api {
                status,
                errcode,
                message,
                retry_after,
            } => CallError::Api {
                status,
                errcode,
                message: self.redact(&message),
                retry_after,
            },
            CallError::Network(m) => CallError::Network(self.redact(&m)),
        })
    }

    /// A call with the shared fault handling: rate limits are waited out
    /// (not counted as failures), 5xx and network errors retried with
    /// backoff, anything else returned at once. Safe for sends because
    /// every send carries its own transaction id (the homeserver answers a
    /// repeated one with the first event, never a second message).
    pub(crate) async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let mut failures = 0u32;
        loop {
            match self.call_once(method, path, body, timeout).await {
                Ok(v) => return Ok(v),
                Err(CallError::Api {
                    status,
                    errcode,
                    message,
                    retry_after,
                }) if status == 429 || errcode == "M_LIMIT_EXCEEDED" => {
                    let wait = retry_after.unwrap_or(Duration::from_secs(1));
                    if wait > MAX_RETRY_AFTER {
                        return Err(CallError::Api {
                            status,
                            errcode,
                            message,
                            retry_after,
                        });
                    }
                    tracing::warn!(
                        wait_ms = wait.as_millis() as u64,
                        "matrix: rate limited (M_LIMIT_EXCEEDED), waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.retryable() => {
                    failures = failures.saturating_add(1);
                    if failures >= MAX_ATTEMPTS {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, attempt = failures, "matrix: call failed, retrying");
                    tokio::time::sleep(backoff(failures)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The delay after `failures` failed attempts: 0.5 s doubling, at most 30 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1).min(16))
        .unwrap_or(u32::MAX);
    Duration::from_millis(500)
        .saturating_mul(factor)
        .min(Duration::from_secs(30))
}

/// Reads one answer: the JSON of a 2xx, else the error it describes.
pub(crate) fn read_answer(status: u16, bytes: &[u8]) -> Result<Value, CallError> {
    let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
    match parsed {
        Some(v) if (200..300).contains(&status) => Ok(v),
        Some(v) => {
            let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let retry_after = v
                .get("retry_after_ms")
                .and_then(Value::as_u64)
                .map(Duration::from_millis);
            Err(CallError::Api {
                status,
                errcode: text("errcode"),
                message: text("error"),
                retry_after,
            })
        }
        None => {
            let snippet: String = String::from_utf8_lossy(bytes).chars().take(200).collect();
            Err(CallError::Api {
                status: if (200..300).contains(&status) {
                    502
                } else {
                    status
                },
                errcode: String::new(),
                message: format!("non-JSON answer: {snippet}"),
                retry_after: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn debug_and_errors_never_show_the_access_token() {
        let api = Api::new("https://matrix.example.org/");
        api.set_token("syt_Ym90_QmFzZTY0VG9rZW5WYWx1ZQ_1a2b3c");
        let shown = format!("{api:?}");
        assert!(!shown.contains("QmFzZTY0VG9rZW5WYWx1ZQ"), "{shown}");
        assert!(shown.contains("matrix.example.org"), "{shown}");
        assert_eq!(
            api.redact("GET /sync?access_token=syt_Ym90_QmFzZTY0VG9rZW5WYWx1ZQ_1a2b3c failed"),
            "GET /sync?access_token=<redacted> failed"
        );
    }

    #[test]
    fn ids_are_encoded_as_path_segments() {
        assert_eq!(seg("!abc:example.org"), "%21abc%3Aexample.org");
        assert_eq!(seg("@bot:localhost"), "%40bot%3Alocalhost");
        assert_eq!(seg("a/b?c#d"), "a%2Fb%3Fc%23d");
    }

    #[test]
    fn errors_carry_code_and_retry_time() {
        match read_answer(
            429,
            br#"{"errcode":"M_LIMIT_EXCEEDED","error":"Too many","retry_after_ms":1500}"#,
        ) {
            Err(CallError::Api {
                status: 429,
                errcode,
                retry_after: Some(d),
                ..
            }) => {
                assert_eq!(errcode, "M_LIMIT_EXCEEDED");
                assert_eq!(d, Duration::from_millis(1500));
            }
            other => panic!("{other:?}"),
        }
        let auth = read_answer(401, br#"{"errcode":"M_UNKNOWN_TOKEN","error":"x"}"#).unwrap_err();
        assert!(auth.is_auth());
        assert!(matches!(
            read_answer(200, b"<html>"),
            Err(CallError::Api { status: 502, .. })
        ));
    }
}
