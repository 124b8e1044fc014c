//! The Bot API over HTTP: `{base}/bot{token}/{method}`, JSON in and out,
//! with the fault handling every call shares (429 waits, 5xx/network
//! backoff, token redaction).

use std::time::Duration;

use hermes_runtime::http;
use serde_json::Value;

use hermes_platform_kit::adapter::AdapterError;

pub(crate) const PLATFORM: &str = "telegram";

/// The largest answer body read from the Bot API. A full `getUpdates`
/// batch (100 updates of 4096-character texts with replies and entities)
/// stays far below it; a broken or hostile server cannot make the adapter
/// buffer more.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Retry settings for 5xx answers and network errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How many attempts a single call gets (at least 1).
    pub max_attempts: u32,
    /// The first backoff delay; doubled on each further failure.
    pub base_delay: Duration,
    /// The cap on one backoff delay (also the poll loop's cap).
    pub max_delay: Duration,
    /// The longest `retry_after` the adapter is willing to wait out for one
    /// 429 answer; a longer demand fails the call instead of hanging it.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `n + 1` after `n` failures (n ≥ 1).
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1).min(16))
            .unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// One failed call, before it is mapped to an [`AdapterError`].
#[derive(Debug)]
pub(crate) enum CallError {
    /// Telegram answered `ok: false` (or a non-2xx status).
    Api {
        status: u16,
        description: String,
        retry_after: Option<u64>,
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

    /// The adapter-level error. `401`/`404` mean the token is wrong (Telegram
    /// answers 404 for an unknown bot path), `409` another poller or webhook.
    pub(crate) fn into_adapter_error(self) -> AdapterError {
        match self {
            CallError::Network(message) => AdapterError::Network {
                platform: PLATFORM,
                message,
            },
            CallError::Api {
                status: 401 | 404,
                description,
                ..
            } => AdapterError::Auth {
                platform: PLATFORM,
                message: format!(
                    "TELEGRAM_BOT_TOKEN was rejected ({description}); check the token with @BotFather"
                ),
            },
            CallError::Api {
                status: 409,
                description,
                ..
            } => AdapterError::Conflict {
                platform: PLATFORM,
                message: format!(
                    "another process is polling this bot (getUpdates conflict) — stop it or use a \
                     webhook-free single instance ({description})"
                ),
            },
            CallError::Api {
                status,
                description,
                ..
            } => AdapterError::Rejected {
                platform: PLATFORM,
                message: format!("HTTP {status}: {description}"),
            },
        }
    }
}

/// The HTTP side of the adapter: blocking exchanges on the runtime's shared
/// HTTP agent ([`hermes_runtime::http`]), run on tokio's blocking pool. A
/// long poll holds one blocking thread; dropping a call's future (a stop
/// during a poll) makes it give up within a tick.
pub(crate) struct Api {
    base: String,
    token: String,
    pub(crate) retry: RetryPolicy,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Api {
    pub(crate) fn new(base: &str, token: &str, retry: RetryPolicy) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            retry,
        }
    }

    /// Replaces the token in `s` so no error or log line ever carries it.
    pub(crate) fn redact(&self, s: &str) -> String {
        if self.token.is_empty() {
            s.to_owned()
        } else {
            s.replace(&self.token, "<redacted>")
        }
    }

    /// Where a file `getFile` named is downloaded from. Carries the token:
    /// never logged, and errors about it go through [`Api::redact`].
    pub(crate) fn file_url(&self, file_path: &str) -> String {
        format!(
            "{}/file/bot{}/{}",
            self.base,
            self.token,
            file_path.trim_start_matches('/')
        )
    }

    /// One attempt of `method` with a JSON body, with a whole-request `timeout`.
    pub(crate) async fn call_once(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let json = serde_json::to_vec(body)
            .map_err(|e| CallError::Network(format!("cannot encode the request: {e}")))?;
        self.post(method, "application/json".to_owned(), json, timeout)
            .await
    }

    /// One attempt of `method` with a prepared body of `content_type`
    /// (`sendDocument` sends `multipart/form-data`).
    pub(crate) async fn post(
        &self,
        method: &str,
        content_type: String,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let url = format!("{}/bot{}/{}", self.base, self.token, method);
        let exchange = move || -> Result<(u16, Vec<u8>), ureq::Error> {
            let mut resp = http::send_fresh_if_stale(|| {
                http::agent()
                    .post(&url)
                    .config()
                    .timeout_global(Some(timeout))
                    .timeout_connect(Some(CONNECT_TIMEOUT))
                    .timeout_resolve(Some(CONNECT_TIMEOUT))
                    .build()
                    .header("content-type", &content_type)
                    .send(&body[..])
            })?;
            let status = resp.status().as_u16();
            let bytes = resp
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES as u64)
                .read_to_vec()?;
            Ok((status, bytes))
        };
        let (status, bytes) = match http::run_blocking(exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(ureq::Error::BodyExceedsLimit(_))) => {
                return Err(CallError::Network(format!(
                    "the answer is larger than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            Ok(Err(e)) => return Err(CallError::Network(self.redact(&http::describe(&e)))),
            Err(e) => return Err(CallError::Network(e.to_string())),
        };
        read_answer(status, &bytes).map_err(|e| match e {
            CallError::Api {
                status,
                description,
                retry_after,
            } => CallError::Api {
                status,
                description: self.redact(&description),
                retry_after,
            },
            CallError::Network(m) => CallError::Network(self.redact(&m)),
        })
    }

    /// `method` with the shared fault handling: 429 is waited out (not
    /// counted as a failed attempt), 5xx and network errors are retried with
    /// exponential backoff up to `retry.max_attempts`, anything else returns
    /// at once.
    pub(crate) async fn call(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        self.with_retries(method, || self.call_once(method, body, timeout))
            .await
    }

    /// `method` with a `multipart/form-data` body (`sendDocument`), retried
    /// like [`Api::call`].
    pub(crate) async fn call_multipart(
        &self,
        method: &str,
        form: http::multipart::Body,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        self.with_retries(method, || {
            self.post(
                method,
                form.content_type.clone(),
                form.bytes.clone(),
                timeout,
            )
        })
        .await
    }

    async fn with_retries<F, Fut>(&self, method: &str, mut attempt: F) -> Result<Value, CallError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Value, CallError>>,
    {
        let mut failures = 0u32;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(CallError::Api {
                    status: 429,
                    retry_after,
                    description,
                }) => {
                    let wait = Duration::from_secs(retry_after.unwrap_or(1).max(1));
                    if wait > self.retry.max_retry_after {
                        return Err(CallError::Api {
                            status: 429,
                            retry_after,
                            description,
                        });
                    }
                    tracing::warn!(
                        method,
                        wait_s = wait.as_secs(),
                        "telegram: rate limited (429), waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.retryable() => {
                    failures = failures.saturating_add(1);
                    if failures >= self.retry.max_attempts.max(1) {
                        return Err(e);
                    }
                    let wait = self.retry.backoff(failures);
                    tracing::warn!(method, attempt = failures, error = ?e, "telegram: call failed, retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Interprets one Bot API answer: the `result` of an `ok: true` envelope,
/// else the error it describes. Pure, for the fuzz target
/// (`crate::fuzz_entry::telegram_updates`); the caller redacts the token.
pub(crate) fn read_answer(status: u16, bytes: &[u8]) -> Result<Value, CallError> {
    let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
    let success = (200..300).contains(&status);
    match parsed {
        Some(v) if success && v.get("ok") == Some(&Value::Bool(true)) => {
            Ok(v.get("result").cloned().unwrap_or(Value::Null))
        }
        Some(v) => {
            let description = v
                .get("description")
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("no description")
                .to_owned();
            let code = v
                .get("error_code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok());
            // An `ok: false` answer with HTTP 200 still carries its real code.
            let status = if success { code.unwrap_or(500) } else { status };
            let retry_after = v.pointer("/parameters/retry_after").and_then(Value::as_u64);
            Err(CallError::Api {
                status,
                description,
                retry_after,
            })
        }
        None => {
            let snippet: String = String::from_utf8_lossy(bytes).chars().take(200).collect();
            Err(CallError::Api {
                status: if success { 502 } else { status },
                description: format!("non-JSON answer: {snippet}"),
                retry_after: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_endless_answer_body_is_cut_off_at_the_cap() {
        // Found by reading `call_once`: it read the whole body, whatever
        // its size, so a broken server could make the adapter buffer
        // without bound.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = hermes_runtime::task::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 4096];
            let _ = sock.read(&mut head).await;
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await;
            let chunk = [b' '; 64 * 1024];
            let mut sent = 0usize;
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
            // Until the client hangs up.
            while sock.write_all(&framed).await.is_ok() {
                sent += chunk.len();
            }
            sent
        });
        let api = Api::new(&base, "123:abc", RetryPolicy::default());
        let err = api
            .call_once("getMe", &serde_json::json!({}), Duration::from_secs(60))
            .await
            .unwrap_err();
        match err {
            CallError::Network(m) => assert!(m.contains("larger than"), "{m}"),
            other => panic!("unexpected {other:?}"),
        }
        drop(api);
        let sent = server.await.unwrap();
        assert!(sent >= MAX_ANSWER_BYTES, "{sent}");
        // The client stopped reading soon after the cap (socket buffers aside).
        assert!(sent < MAX_ANSWER_BYTES + 16 * 1024 * 1024, "{sent}");
    }

    #[test]
    fn answers_are_read_without_the_network() {
        let ok = read_answer(200, br#"{"ok":true,"result":[1]}"#).unwrap();
        assert_eq!(ok, serde_json::json!([1]));
        match read_answer(
            200,
            br#"{"ok":false,"error_code":429,"parameters":{"retry_after":3}}"#,
        ) {
            Err(CallError::Api {
                status: 429,
                retry_after: Some(3),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_answer(200, b"<html>"),
            Err(CallError::Api { status: 502, .. })
        ));
    }
}
