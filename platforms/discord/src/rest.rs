//! Discord's REST API: `Authorization: Bot …`, JSON in and out, and the
//! rate limits Discord publishes with every answer.
//!
//! - **Buckets.** Each answer's `X-RateLimit-Bucket`, `-Remaining` and
//!   `-Reset-After` are remembered per route (routes sharing a bucket share
//!   its state, per channel); a request to an exhausted bucket waits for
//!   its reset instead of collecting a 429.
//! - **429.** `retry_after` (the JSON body's seconds, else the
//!   `Retry-After` header) is waited out and the same request sent again:
//!   a 429 means Discord did nothing. `global: true` (or
//!   `X-RateLimit-Global`) holds every request, not only the route's.
//! - **Once.** Requests to one route go one at a time; messages carry a
//!   `nonce` with `enforce_nonce`, so a retry after a network error that hid
//!   a success is answered with the message already created, not a second.
//! - The token never reaches an error or a log line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_runtime::http;
use serde_json::Value;
use tokio::time::Instant;

use super::lock;

/// The largest answer read (a message object is a few KiB).
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;

/// A request that did not succeed.
#[derive(Debug)]
pub(crate) enum RestError {
    /// Discord answered with an error status (after waiting out 429s).
    Api {
        status: u16,
        /// Discord's JSON error code (`10003` unknown channel, `50035`
        /// invalid form body, …), if the body had one.
        code: Option<i64>,
        message: String,
    },
    /// No usable answer (after the retries).
    Network(String),
}

impl std::fmt::Display for RestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestError::Api {
                status,
                code,
                message,
            } => match code {
                Some(c) => write!(f, "HTTP {status} (code {c}): {message}"),
                None => write!(f, "HTTP {status}: {message}"),
            },
            RestError::Network(m) => f.write_str(m),
        }
    }
}

/// One answer: status, the rate-limit headers and the body.
struct Answer {
    status: u16,
    headers: RateHeaders,
    body: Vec<u8>,
}

#[derive(Debug, Default)]
struct RateHeaders {
    bucket: Option<String>,
    remaining: Option<u64>,
    reset_after: Option<f64>,
    retry_after: Option<f64>,
    global: bool,
}

/// What Discord last said about one bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    remaining: u64,
    reset_at: Instant,
}

#[derive(Default)]
struct Limits {
    /// Route → Discord's bucket hash, learned from the answers.
    bucket_of: HashMap<String, String>,
    /// `bucket hash:major parameter` (or the route, before its hash is
    /// known) → state.
    buckets: HashMap<String, Bucket>,
    /// Every request waits until then (a global 429).
    global_until: Option<Instant>,
}

/// The REST client. Cheap to share behind the adapter's `Arc`.
pub(crate) struct Rest {
    base: String,
    token: String,
    timeout: Duration,
    max_retry_after: Duration,
    max_attempts: u32,
    limits: Mutex<Limits>,
    route_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Rest {
    pub(crate) fn new(config: &super::DiscordConfig) -> Self {
        Rest {
            base: config.api_url.trim_end_matches('/').to_owned(),
            token: config.token.expose().to_owned(),
            timeout: config.connect_timeout.max(Duration::from_secs(1)),
            max_retry_after: config.max_retry_after,
            max_attempts: config.max_attempts.max(1),
            limits: Mutex::default(),
            route_locks: Mutex::default(),
        }
    }

    fn redact(&self, s: &str) -> String {
        s.replace(&self.token, "<redacted>")
    }

    /// `method path` with the shared handling (see the module docs).
    /// `route` names the rate-limit route (the path with its major
    /// parameter, the channel id, kept). A 204 answers `Value::Null`.
    pub(crate) async fn request(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RestError> {
        let body = match body {
            Some(v) => Some((
                "application/json".to_owned(),
                serde_json::to_vec(v)
                    .map_err(|e| RestError::Network(format!("cannot encode the request: {e}")))?,
            )),
            None => None,
        };
        self.request_raw(method, path, body).await
    }

    /// [`Rest::request`] with a prepared body and its content type (a
    /// `multipart/form-data` message with a file).
    pub(crate) async fn request_raw(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(String, Vec<u8>)>,
    ) -> Result<Value, RestError> {
        let route = route_name(method, path);
        let route_lock = lock(&self.route_locks)
            .entry(route.clone())
            .or_default()
            .clone();
        let _turn = route_lock.lock().await;
        let mut failures = 0u32;
        loop {
            self.wait_for_limits(&route).await;
            let answer = match self.exchange(method, path, body.clone()).await {
                Ok(a) => a,
                Err(message) => {
                    failures += 1;
                    if failures >= self.max_attempts {
                        return Err(RestError::Network(message));
                    }
                    tracing::warn!(%route, attempt = failures, "discord: {message}; retrying");
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            };
            self.remember_limits(&route, path, &answer.headers);
            let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
            match answer.status {
                200..=299 => return Ok(parsed.unwrap_or(Value::Null)),
                429 => {
                    let wait = retry_after(parsed.as_ref(), &answer.headers);
                    if wait > self.max_retry_after {
                        return Err(RestError::Api {
                            status: 429,
                            code: None,
                            message: format!(
                                "rate limited for {wait:?}, longer than the adapter waits"
                            ),
                        });
                    }
                    let global = answer.headers.global
                        || parsed
                            .as_ref()
                            .and_then(|v| v.get("global"))
                            .and_then(Value::as_bool)
                            .unwrap_or(false);
                    tracing::warn!(%route, wait_ms = wait.as_millis() as u64, global, "discord: rate limited (429), waiting");
                    self.hold(&route, path, wait, global);
                }
                status if status >= 500 => {
                    failures += 1;
                    if failures >= self.max_attempts {
                        return Err(api_error(status, parsed.as_ref(), &answer.body));
                    }
                    tokio::time::sleep(backoff(failures)).await;
                }
                status => {
                    let e = api_error(status, parsed.as_ref(), &answer.body);
                    return Err(match e {
                        RestError::Api {
                            status,
                            code,
                            message,
                        } => RestError::Api {
                            status,
                            code,
                            message: self.redact(&message),
                        },
                        other => other,
                    });
                }
            }
        }
    }

    /// The bucket key of `route` (`path` gives the major parameter).
    fn bucket_key(limits: &Limits, route: &str, path: &str) -> String {
        match limits.bucket_of.get(route) {
            Some(hash) => format!("{hash}:{}", major_parameter(path)),
            None => route.to_owned(),
        }
    }

    async fn wait_for_limits(&self, route: &str) {
        loop {
            let until = {
                let limits = lock(&self.limits);
                let path = route.split_once(' ').map_or("", |(_, p)| p);
                let key = Self::bucket_key(&limits, route, path);
                let bucket = limits
                    .buckets
                    .get(&key)
                    .filter(|b| b.remaining == 0)
                    .map(|b| b.reset_at);
                match (limits.global_until, bucket) {
                    (Some(g), Some(b)) => Some(g.max(b)),
                    (g, b) => g.or(b),
                }
            };
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }

    fn remember_limits(&self, route: &str, path: &str, h: &RateHeaders) {
        let mut limits = lock(&self.limits);
        if let Some(hash) = &h.bucket {
            limits.bucket_of.insert(route.to_owned(), hash.clone());
        }
        if let (Some(remaining), Some(reset_after)) = (h.remaining, h.reset_after) {
            let key = Self::bucket_key(&limits, route, path);
            limits.buckets.insert(
                key,
                Bucket {
                    remaining,
                    reset_at: Instant::now() + secs(reset_after),
                },
            );
        }
    }

    /// After a 429: the route (or everything, `global`) waits `wait`.
    fn hold(&self, route: &str, path: &str, wait: Duration, global: bool) {
        let mut limits = lock(&self.limits);
        let until = Instant::now() + wait;
        if global {
            limits.global_until = Some(limits.global_until.map_or(until, |g| g.max(until)));
        } else {
            let key = Self::bucket_key(&limits, route, path);
            limits.buckets.insert(
                key,
                Bucket {
                    remaining: 0,
                    reset_at: until,
                },
            );
        }
    }

    /// One HTTP exchange on the blocking pool.
    async fn exchange(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(String, Vec<u8>)>,
    ) -> Result<Answer, String> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bot {}", self.token);
        let timeout = self.timeout;
        let run = move || -> Result<Answer, ureq::Error> {
            let agent = http::agent();
            let mut resp = match (method, body) {
                ("GET", _) => agent
                    .get(&url)
                    .config()
                    .timeout_global(Some(timeout))
                    .build()
                    .header("authorization", &auth)
                    .call()?,
                (_, body) => {
                    let req = match method {
                        "PATCH" => agent.patch(&url),
                        _ => agent.post(&url),
                    };
                    let req = req
                        .config()
                        .timeout_global(Some(timeout))
                        .build()
                        .header("authorization", &auth);
                    match body {
                        Some((content_type, b)) => {
                            req.header("content-type", content_type).send(&b[..])?
                        }
                        None => req.send_empty()?,
                    }
                }
            };
            read(&mut resp)
        };
        match http::run_blocking(run).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.redact(&http::describe(&e))),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn read(resp: &mut ureq::http::Response<ureq::Body>) -> Result<Answer, ureq::Error> {
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let headers = RateHeaders {
        bucket: header("x-ratelimit-bucket"),
        remaining: header("x-ratelimit-remaining").and_then(|v| v.parse().ok()),
        reset_after: header("x-ratelimit-reset-after").and_then(|v| v.parse().ok()),
        retry_after: header("retry-after").and_then(|v| v.parse().ok()),
        global: header("x-ratelimit-global").is_some_and(|v| v.eq_ignore_ascii_case("true")),
    };
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_vec()?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// `method path` as logged and as the rate-limit route; an interaction's
/// token (a credential for 15 minutes) is left out.
fn route_name(method: &str, path: &str) -> String {
    match path
        .strip_prefix("/interactions/")
        .and_then(|p| p.split_once('/'))
    {
        Some((id, _)) => format!("{method} /interactions/{id}/<token>/callback"),
        None => format!("{method} {path}"),
    }
}

/// The major parameter of `path` (the channel of `/channels/{id}/…`).
fn major_parameter(path: &str) -> &str {
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next()) {
        (Some("channels" | "guilds" | "webhooks"), Some(id)) => id,
        _ => "",
    }
}

/// How long a 429 asks to wait: the body's `retry_after` (seconds, a
/// float), else the `Retry-After` header, else one second.
fn retry_after(body: Option<&Value>, h: &RateHeaders) -> Duration {
    let s = body
        .and_then(|v| v.get("retry_after"))
        .and_then(Value::as_f64)
        .or(h.retry_after)
        .unwrap_or(1.0);
    secs(s)
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::from_secs(3600))
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << failures.min(6)))
}

fn api_error(status: u16, body: Option<&Value>, raw: &[u8]) -> RestError {
    let code = body.and_then(|v| v.get("code")).and_then(Value::as_i64);
    let message = body
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(raw).chars().take(200).collect());
    RestError::Api {
        status,
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_share_buckets_per_channel() {
        assert_eq!(major_parameter("/channels/123/messages"), "123");
        assert_eq!(major_parameter("/users/@me"), "");
        let h = RateHeaders {
            retry_after: Some(2.0),
            ..RateHeaders::default()
        };
        assert_eq!(retry_after(None, &h), Duration::from_secs(2));
        let body = serde_json::json!({"retry_after": 0.25, "global": false});
        assert_eq!(retry_after(Some(&body), &h), Duration::from_millis(250));
        assert_eq!(
            retry_after(None, &RateHeaders::default()),
            Duration::from_secs(1)
        );
    }
}
