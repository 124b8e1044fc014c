//! Slack's Web API: `POST {api}/METHOD` with `Authorization: Bearer`,
//! JSON (or form) in, `{"ok": …}` out.
//!
//! - **Errors.** Slack answers HTTP 200 with `ok: false` and an `error`
//!   code; [`WebError::Api`] keeps the code. `invalid_auth`,
//!   `token_revoked`, `account_inactive`, `not_authed` and
//!   `token_expired` mean the token is gone ([`WebError::is_auth`]).
//! - **429.** The request was not acted on: `Retry-After` (seconds) is
//!   waited out and the same request sent again, up to
//!   `max_retry_after`. 5xx and network errors are retried with backoff.
//! - The tokens never reach an error or a log line.

use std::time::Duration;

use hermes_runtime::http;
use serde_json::Value;

use crate::settings::SlackConfig;

/// The largest Web API answer read.
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;

/// A call that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebError {
    /// Slack said `ok: false` (or an HTTP error status) with this code.
    Api {
        /// The HTTP status.
        status: u16,
        /// Slack's `error` code (`channel_not_found`, `invalid_auth`, …).
        error: String,
    },
    /// No usable answer (after the retries).
    Network(String),
}

impl WebError {
    /// Whether the token itself was refused: the adapter stops.
    pub fn is_auth(&self) -> bool {
        matches!(self, WebError::Api { error, .. } if is_auth_error(error))
    }
}

/// Slack's error codes that say a token no longer works.
pub fn is_auth_error(code: &str) -> bool {
    matches!(
        code,
        "invalid_auth" | "token_revoked" | "account_inactive" | "not_authed" | "token_expired"
    )
}

impl std::fmt::Display for WebError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WebError::Api { status: 200, error } => f.write_str(error),
            WebError::Api { status, error } => write!(f, "HTTP {status}: {error}"),
            WebError::Network(m) => f.write_str(m),
        }
    }
}

/// A request body.
#[derive(Clone, Debug)]
pub enum Body {
    /// `application/json; charset=utf-8`.
    Json(Value),
    /// `application/x-www-form-urlencoded`.
    Form(Vec<(String, String)>),
}

/// Which token a call carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// `xoxb-`: everything but opening the socket.
    Bot,
    /// `xapp-`: `apps.connections.open`.
    App,
}

struct Answer {
    status: u16,
    retry_after: Option<f64>,
    body: Vec<u8>,
}

/// The Web API client (its `Debug` shows no token).
pub struct Web {
    base: String,
    bot: String,
    app: String,
    timeout: Duration,
    max_retry_after: Duration,
    max_attempts: u32,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Web {
    /// A client for `config`'s API base and tokens.
    pub fn new(config: &SlackConfig) -> Self {
        Web {
            base: config.api_url.trim_end_matches('/').to_owned(),
            bot: config.bot_token.expose().to_owned(),
            app: config.app_token.expose().to_owned(),
            timeout: config.connect_timeout.max(Duration::from_secs(1)),
            max_retry_after: config.max_retry_after,
            max_attempts: config.max_attempts.max(1),
        }
    }

    fn redact(&self, s: &str) -> String {
        s.replace(&self.bot, "<redacted>")
            .replace(&self.app, "<redacted>")
    }

    /// Calls `method` (see the module docs); `Ok` is the whole answer.
    pub async fn call(&self, token: Token, method: &str, body: Body) -> Result<Value, WebError> {
        let url = format!("{}/{method}", self.base);
        let mut failures = 0u32;
        loop {
            let answer = match self.exchange(token, &url, body.clone()).await {
                Ok(a) => a,
                Err(message) => {
                    failures += 1;
                    if failures >= self.max_attempts {
                        return Err(WebError::Network(message));
                    }
                    tracing::warn!(method, attempt = failures, "slack: {message}; retrying");
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            };
            let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
            match answer.status {
                429 => {
                    let wait = Duration::from_secs_f64(
                        answer.retry_after.unwrap_or(1.0).clamp(0.0, 3600.0),
                    );
                    if wait > self.max_retry_after {
                        return Err(WebError::Api {
                            status: 429,
                            error: format!(
                                "ratelimited for {wait:?}, longer than the adapter waits"
                            ),
                        });
                    }
                    tracing::warn!(
                        method,
                        wait_ms = wait.as_millis() as u64,
                        "slack: rate limited (429), waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                status if status >= 500 => {
                    failures += 1;
                    if failures >= self.max_attempts {
                        return Err(WebError::Api {
                            status,
                            error: "server error".to_owned(),
                        });
                    }
                    tokio::time::sleep(backoff(failures)).await;
                }
                status => {
                    let Some(v) = parsed else {
                        return Err(WebError::Api {
                            status,
                            error: "the answer is not JSON".to_owned(),
                        });
                    };
                    if v.get("ok").and_then(Value::as_bool) == Some(true) {
                        return Ok(v);
                    }
                    let error = v
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown_error")
                        .chars()
                        .take(200)
                        .collect();
                    return Err(WebError::Api { status, error });
                }
            }
        }
    }

    async fn exchange(&self, token: Token, url: &str, body: Body) -> Result<Answer, String> {
        let auth = format!(
            "Bearer {}",
            match token {
                Token::Bot => &self.bot,
                Token::App => &self.app,
            }
        );
        let url = url.to_owned();
        let timeout = self.timeout;
        let run = move || -> Result<Answer, ureq::Error> {
            let req = http::agent()
                .post(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .header("authorization", &auth);
            let mut resp = match body {
                Body::Json(v) => req
                    .header("content-type", "application/json; charset=utf-8")
                    .send(v.to_string().as_bytes())?,
                Body::Form(pairs) => req
                    .header("content-type", "application/x-www-form-urlencoded")
                    .send(form(&pairs).as_bytes())?,
            };
            read(&mut resp, MAX_ANSWER_BYTES)
        };
        match http::run_blocking(run).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.redact(&http::describe(&e))),
            Err(e) => Err(e.to_string()),
        }
    }

    /// POSTs `bytes` to an upload URL `files.getUploadURLExternal` gave
    /// (no token: the URL is the credential).
    pub async fn upload(
        &self,
        upload_url: &str,
        file_name: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<(), WebError> {
        let url = upload_url.to_owned();
        let timeout = self.timeout.max(Duration::from_secs(60));
        let form = http::multipart::Form::new()
            .file("file", file_name, content_type, bytes)
            .finish();
        let run = move || -> Result<Answer, ureq::Error> {
            let mut resp = http::agent()
                .post(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .header("content-type", &form.content_type)
                .send(&form.bytes[..])?;
            read(&mut resp, 64 * 1024)
        };
        match http::run_blocking(run).await {
            Ok(Ok(a)) if (200..300).contains(&a.status) => Ok(()),
            Ok(Ok(a)) => Err(WebError::Api {
                status: a.status,
                error: "the upload was refused".to_owned(),
            }),
            Ok(Err(e)) => Err(WebError::Network(self.redact(&http::describe(&e)))),
            Err(e) => Err(WebError::Network(e.to_string())),
        }
    }

    /// GETs a file's `url_private_download` with the bot token, at most
    /// `max_bytes`. The token goes only to `base`'s host or to Slack's
    /// file hosts, never to a URL an event could point anywhere.
    pub async fn download(
        &self,
        url: &str,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, Option<String>), WebError> {
        if !self.may_carry_token(url) {
            return Err(WebError::Api {
                status: 0,
                error: "the file is not on a Slack host; not sending the bot token there"
                    .to_owned(),
            });
        }
        let auth = format!("Bearer {}", self.bot);
        let url = url.to_owned();
        let timeout = self.timeout.max(Duration::from_secs(60));
        let run = move || -> Result<(Answer, Option<String>), ureq::Error> {
            let mut resp = http::agent()
                .get(&url)
                .config()
                .timeout_global(Some(timeout))
                // A redirect would carry the token elsewhere.
                .max_redirects(0)
                .build()
                .header("authorization", &auth)
                .call()?;
            let mime = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            Ok((read(&mut resp, max_bytes.saturating_add(1))?, mime))
        };
        match http::run_blocking(run).await {
            Ok(Ok((a, mime))) if a.status == 200 => {
                if a.body.len() as u64 > max_bytes {
                    return Err(WebError::Api {
                        status: 200,
                        error: format!("the file is larger than {max_bytes} bytes"),
                    });
                }
                // Without the right scope Slack answers a login page.
                if mime.as_deref().is_some_and(|m| m.starts_with("text/html")) {
                    return Err(WebError::Api {
                        status: 200,
                        error: "Slack answered a web page, not the file (the bot token needs the files:read scope)".to_owned(),
                    });
                }
                Ok((a.body, mime))
            }
            Ok(Ok((a, _))) => Err(WebError::Api {
                status: a.status,
                error: "the file could not be fetched".to_owned(),
            }),
            Ok(Err(e)) => Err(WebError::Network(self.redact(&http::describe(&e)))),
            Err(e) => Err(WebError::Network(e.to_string())),
        }
    }

    fn may_carry_token(&self, url: &str) -> bool {
        let host = |u: &str| -> Option<String> {
            let rest = u
                .strip_prefix("https://")
                .or_else(|| u.strip_prefix("http://"))?;
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            Some(rest[..end].to_ascii_lowercase())
        };
        let (Some(file_host), Some(api_host)) = (host(url), host(&self.base)) else {
            return false;
        };
        url.starts_with("https://")
            && (file_host == "files.slack.com" || file_host.ends_with(".slack.com"))
            || file_host == api_host
    }
}

fn form(pairs: &[(String, String)]) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, NON_ALPHANUMERIC),
                utf8_percent_encode(v, NON_ALPHANUMERIC)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn read(resp: &mut ureq::http::Response<ureq::Body>, limit: u64) -> Result<Answer, ureq::Error> {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let body = resp.body_mut().with_config().limit(limit).read_to_vec()?;
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << failures.min(6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bot_token_goes_only_to_slack_file_hosts_or_the_api_host() {
        let mut config = SlackConfig::new("xoxb-1", "xapp-1");
        config.api_url = "http://127.0.0.1:9/api".to_owned();
        let web = Web::new(&config);
        assert!(web.may_carry_token("https://files.slack.com/files-pri/T1-F1/download/a.png"));
        assert!(web.may_carry_token("http://127.0.0.1:9/files-pri/T1-F1/download/a.png"));
        for evil in [
            "https://evil.example/files.slack.com/a",
            "https://files.slack.com.evil.example/a",
            "http://files.slack.com/a",
            "https://evil.example@files.slack.com.evil.example/a",
            "http://127.0.0.1:10/a",
            "file:///etc/passwd",
        ] {
            assert!(!web.may_carry_token(evil), "{evil}");
        }
    }
}
