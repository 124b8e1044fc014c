//! signal-cli's JSON-RPC 2.0 over HTTP (`POST {SIGNAL_HTTP_URL}/api/v1/rpc`,
//! `man signal-cli-jsonrpc`): one request per call on the runtime's shared
//! HTTP agent, its `result` or its `error` read back. The error codes are
//! signal-cli's (`SignalJsonRpcCommandHandler`): -1 user error, -3 I/O
//! error, -4 untrusted identity, -5 rate limit, -6 captcha rejected, and
//! JSON-RPC's own -326xx.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hermes_runtime::http;
use serde_json::{Value, json};

/// signal-cli's error code for a user error (bad parameter, a missing
/// attachment, "already receiving").
pub const USER_ERROR: i64 = -1;
/// signal-cli's error code for an I/O error talking to Signal's servers.
pub const IO_ERROR: i64 = -3;
/// signal-cli's error code for a send refused because a recipient's
/// identity key changed and is not trusted.
pub const UNTRUSTED_KEY_ERROR: i64 = -4;
/// signal-cli's error code for a send refused by Signal's rate limit.
pub const RATELIMIT_ERROR: i64 = -5;

/// The largest answer read from the daemon (a `receive` batch, an
/// attachment as base64).
const MAX_ANSWER_BYTES: u64 = 160 * 1024 * 1024;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One failed call.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcError {
    /// The daemon answered with a JSON-RPC error.
    Rpc {
        /// signal-cli's code.
        code: i64,
        /// Its message.
        message: String,
        /// Its `data` (for sends: `{"response": {"results": [...]}}`).
        data: Value,
    },
    /// No daemon answered (not running, wrong URL, connection cut).
    Unreachable(String),
    /// Something answered, but not signal-cli's JSON-RPC.
    Protocol(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Rpc { code, message, .. } => write!(f, "signal-cli error {code}: {message}"),
            RpcError::Unreachable(m) => write!(f, "the signal-cli daemon is not answering: {m}"),
            RpcError::Protocol(m) => write!(f, "not a signal-cli JSON-RPC answer: {m}"),
        }
    }
}

impl RpcError {
    /// The error's code, when the daemon gave one.
    pub fn code(&self) -> Option<i64> {
        match self {
            RpcError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The per-recipient results a failed send carries
    /// (`data.response.results`).
    pub fn send_results(&self) -> &[Value] {
        match self {
            RpcError::Rpc { data, .. } => data
                .pointer("/response/results")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            _ => &[],
        }
    }

    /// The longest `retryAfterSeconds` of a rate-limited send.
    pub fn retry_after(&self) -> Option<Duration> {
        self.send_results()
            .iter()
            .filter_map(|r| r.get("retryAfterSeconds").and_then(Value::as_u64))
            .max()
            .map(Duration::from_secs)
    }
}

/// The daemon's endpoint.
#[derive(Debug)]
pub struct Rpc {
    url: String,
    next_id: AtomicU64,
}

impl Rpc {
    /// The endpoint below `base` (`http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        Rpc {
            url: format!("{}/api/v1/rpc", base.trim_end_matches('/')),
            next_id: AtomicU64::new(1),
        }
    }

    /// Calls `method` with `params`; waits at most `timeout` for the answer.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "method": method, "params": params, "id": id });
        let bytes = serde_json::to_vec(&body).map_err(|e| RpcError::Protocol(e.to_string()))?;
        let url = self.url.clone();
        let exchange = move || -> Result<(u16, Vec<u8>), ureq::Error> {
            let mut resp = http::agent()
                .post(&url)
                .config()
                .timeout_global(Some(timeout))
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .http_status_as_error(false)
                .build()
                .header("content-type", "application/json")
                .send(&bytes[..])?;
            let status = resp.status().as_u16();
            let body = resp
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES)
                .read_to_vec()?;
            Ok((status, body))
        };
        let (status, answer) = match http::run_blocking(exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(RpcError::Unreachable(http::describe(&e))),
            Err(e) => return Err(RpcError::Unreachable(e.to_string())),
        };
        read_answer(status, &answer, id)
    }
}

/// Reads one HTTP answer of the daemon as the JSON-RPC response to `id`.
pub fn read_answer(status: u16, body: &[u8], id: u64) -> Result<Value, RpcError> {
    if status != 200 {
        return Err(RpcError::Protocol(format!(
            "HTTP {status} from /api/v1/rpc"
        )));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let snippet: String = String::from_utf8_lossy(body).chars().take(120).collect();
        RpcError::Protocol(format!("{e}: {snippet:?}"))
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(RpcError::Rpc {
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            data: err.get("data").cloned().unwrap_or(Value::Null),
        });
    }
    if v.get("id").and_then(Value::as_u64) != Some(id) {
        return Err(RpcError::Protocol(format!(
            "an answer to another request: {}",
            v.get("id").unwrap_or(&Value::Null)
        )));
    }
    Ok(v.get("result").cloned().unwrap_or(Value::Null))
}

/// The delay after `failures` failed attempts: 0.5 s doubling, at most 30 s.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1).min(16))
        .unwrap_or(u32::MAX);
    Duration::from_millis(500)
        .saturating_mul(factor)
        .min(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn answers_errors_and_foreign_bodies_are_told_apart() {
        assert_eq!(
            read_answer(
                200,
                br#"{"jsonrpc":"2.0","result":{"timestamp":9},"id":4}"#,
                4
            )
            .unwrap(),
            json!({"timestamp": 9})
        );
        let e = read_answer(
            200,
            br#"{"jsonrpc":"2.0","error":{"code":-5,"message":"Failed to send message due to rate limiting","data":{"response":{"timestamp":1,"results":[{"recipientAddress":{"uuid":"u","number":"+1"},"type":"RATE_LIMIT_FAILURE","retryAfterSeconds":3}]}}},"id":4}"#,
            4,
        )
        .unwrap_err();
        assert_eq!(e.code(), Some(RATELIMIT_ERROR));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert!(matches!(
            read_answer(404, b"", 1),
            Err(RpcError::Protocol(_))
        ));
        assert!(matches!(
            read_answer(200, b"<html>", 1),
            Err(RpcError::Protocol(_))
        ));
        assert!(matches!(
            read_answer(200, br#"{"jsonrpc":"2.0","result":1,"id":2}"#, 1),
            Err(RpcError::Protocol(_))
        ));
    }
}
