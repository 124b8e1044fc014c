//! The qyapi REST client of a self-built app: `gettoken`, `message/send`,
//! `media/get`.
//!
//! - The access token is cached for its `expires_in` (less a margin) and
//!   fetched by one caller at a time; a send answered with a token errcode
//!   (40001, 40014, 41001, 42001) drops it, fetches a new one and is retried
//!   once.
//! - `-1` (system busy), HTTP 5xx and network errors are retried with
//!   backoff a bounded number of times; any other errcode fails the call.
//! - Neither the corp secret nor the token ever reaches an error or a log
//!   line: URLs are never shown, WeCom's `errmsg` is scrubbed.

// Numbers here come from WeCom (expires_in, errcode): arithmetic on them
// must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use std::sync::Arc;
use std::time::Duration;

use hermes_core::Clock;
use hermes_runtime::media::fetch::disposition_file_name;
use hermes_runtime::secret::Secret;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde_json::json;

use super::transport::{HttpRequest, HttpResponse, HttpTransport, Method, TransportError};
use hermes_platform_kit::adapter::AdapterError;

use super::PLATFORM;

/// The errcodes that mean "this access token is not (or no longer) valid".
pub const TOKEN_ERRCODES: [i64; 4] = [40001, 40014, 41001, 42001];
/// `gettoken` errcodes that mean the corp id or secret is wrong.
const CREDENTIAL_ERRCODES: [i64; 4] = [40001, 40013, 40091, 40056];
/// The request came from an IP outside the app's trusted IPs.
const UNTRUSTED_IP_ERRCODE: i64 = 60020;
/// WeCom is busy; try again.
const BUSY_ERRCODE: i64 = -1;
/// The cap on a JSON answer.
const MAX_JSON_BODY: usize = 1 << 20;

/// How a reply's text is formatted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageFormat {
    /// `msgtype: text` (plain; WeCom and WeChat clients show it as is).
    Text,
    /// `msgtype: markdown` (rendered by the WeCom client only).
    Markdown,
}

impl MessageFormat {
    /// The `msgtype` value.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageFormat::Text => "text",
            MessageFormat::Markdown => "markdown",
        }
    }
}

/// A downloaded media file.
#[derive(Clone, Debug)]
pub struct Media {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `Content-Type`, when WeCom gave one.
    pub content_type: Option<String>,
    /// The file name from `Content-Disposition`, when WeCom gave one.
    pub file_name: Option<String>,
}

/// Credentials and endpoint of the app. The secret is a [`Secret`]:
/// `Debug` masks it.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// `https://qyapi.weixin.qq.com` or a stand-in.
    pub base_url: String,
    /// The corp id.
    pub corp_id: String,
    /// The app's secret. Never logged.
    pub corp_secret: Secret,
    /// The app's agent id.
    pub agent_id: i64,
    /// One request's deadline.
    pub timeout: Duration,
    /// Attempts for busy/5xx/network failures (at least 1).
    pub max_attempts: u32,
    /// The first backoff; doubled per failure.
    pub backoff: Duration,
    /// The largest media file `media/get` accepts.
    pub max_media_bytes: usize,
}

#[derive(Clone)]
struct CachedToken {
    token: String,
    /// Clock milliseconds after which it is fetched again.
    refresh_at_ms: u64,
}

/// One failed qyapi call, before it becomes an [`AdapterError`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// WeCom answered with a non-zero errcode.
    #[error("{call}: errcode {errcode}: {errmsg}")]
    Errcode {
        /// The API call.
        call: &'static str,
        /// WeCom's errcode.
        errcode: i64,
        /// WeCom's errmsg (scrubbed of secrets).
        errmsg: String,
    },
    /// The corp id or secret was refused by `gettoken`.
    #[error(
        "gettoken refused the credentials (errcode {errcode}: {errmsg}); check WECOM_CALLBACK_CORP_ID and WECOM_CALLBACK_CORP_SECRET"
    )]
    Credentials {
        /// WeCom's errcode.
        errcode: i64,
        /// WeCom's errmsg.
        errmsg: String,
    },
    /// HTTP error status without a WeCom answer.
    #[error("{call}: HTTP {status}")]
    Status {
        /// The API call.
        call: &'static str,
        /// The status.
        status: u16,
    },
    /// The answer is not the JSON WeCom sends.
    #[error("{call}: unexpected answer: {detail}")]
    Malformed {
        /// The API call.
        call: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// No answer.
    #[error("{call}: {source}")]
    Transport {
        /// The API call.
        call: &'static str,
        /// The transport's error.
        source: TransportError,
    },
}

impl ApiError {
    fn retryable(&self) -> bool {
        match self {
            ApiError::Errcode { errcode, .. } => *errcode == BUSY_ERRCODE,
            ApiError::Status { status, .. } => *status >= 500,
            ApiError::Transport { source, .. } => matches!(source, TransportError::Network(_)),
            ApiError::Credentials { .. } | ApiError::Malformed { .. } => false,
        }
    }

    fn is_token_error(&self) -> bool {
        matches!(self, ApiError::Errcode { errcode, .. } if TOKEN_ERRCODES.contains(errcode))
    }

    /// The adapter-level error.
    pub fn into_adapter_error(self) -> AdapterError {
        match self {
            ApiError::Credentials { .. } => AdapterError::Auth {
                platform: PLATFORM,
                message: self.to_string(),
            },
            ApiError::Transport { .. } | ApiError::Status { .. } => AdapterError::Network {
                platform: PLATFORM,
                message: self.to_string(),
            },
            ApiError::Errcode { .. } | ApiError::Malformed { .. } => AdapterError::Rejected {
                platform: PLATFORM,
                message: self.to_string(),
            },
        }
    }
}

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    errcode: i64,
    #[serde(default)]
    errmsg: String,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    invaliduser: Option<String>,
}

/// The qyapi client.
pub struct QyApi {
    config: ApiConfig,
    http: Arc<dyn HttpTransport>,
    clock: Arc<dyn Clock>,
    /// Held while a token is fetched, so concurrent sends share one fetch.
    token: tokio::sync::Mutex<Option<CachedToken>>,
}

impl std::fmt::Debug for QyApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QyApi")
            .field("base_url", &self.config.base_url)
            .field("corp_id", &self.config.corp_id)
            .field("agent_id", &self.config.agent_id)
            .finish_non_exhaustive()
    }
}

fn enc(s: &str) -> impl std::fmt::Display + '_ {
    utf8_percent_encode(s, NON_ALPHANUMERIC)
}

impl QyApi {
    /// A client for `config` over `http`, timing tokens with `clock`.
    pub fn new(config: ApiConfig, http: Arc<dyn HttpTransport>, clock: Arc<dyn Clock>) -> Self {
        Self {
            config: ApiConfig {
                base_url: config.base_url.trim_end_matches('/').to_owned(),
                ..config
            },
            http,
            clock,
            token: tokio::sync::Mutex::new(None),
        }
    }

    /// Removes the secret and the token from text WeCom or the transport
    /// produced.
    fn scrub(&self, s: &str, token: Option<&str>) -> String {
        let mut s = s.replace(self.config.corp_secret.expose(), "<redacted>");
        if let Some(t) = token.filter(|t| !t.is_empty()) {
            s = s.replace(t, "<redacted>");
        }
        s
    }

    async fn request(
        &self,
        call: &'static str,
        method: Method,
        url: String,
        json: Option<Vec<u8>>,
        max_body: usize,
    ) -> Result<HttpResponse, ApiError> {
        self.http
            .send(HttpRequest {
                method,
                url,
                json,
                timeout: self.config.timeout,
                max_body,
            })
            .await
            .map_err(|source| ApiError::Transport { call, source })
    }

    fn answer(
        &self,
        call: &'static str,
        resp: &HttpResponse,
        token: Option<&str>,
    ) -> Result<Answer, ApiError> {
        let parsed: Result<Answer, _> = serde_json::from_slice(&resp.body);
        match parsed {
            Ok(a) if a.errcode != 0 => {
                let mut errmsg = self.scrub(&a.errmsg, token);
                if a.errcode == UNTRUSTED_IP_ERRCODE {
                    errmsg.push_str(
                        " — add this server's public IP to the app's trusted IPs (企业可信IP) in the WeCom admin console",
                    );
                }
                Err(ApiError::Errcode {
                    call,
                    errcode: a.errcode,
                    errmsg,
                })
            }
            Ok(a) if (200..300).contains(&resp.status) => Ok(a),
            _ if resp.status >= 300 => Err(ApiError::Status {
                call,
                status: resp.status,
            }),
            Ok(a) => Ok(a),
            Err(e) => Err(ApiError::Malformed {
                call,
                detail: format!("not JSON ({e})"),
            }),
        }
    }

    /// A call with the busy/5xx/network retries.
    async fn with_retries<T, F, Fut>(
        &self,
        call: &'static str,
        mut attempt: F,
    ) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let mut failures = 0u32;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e)
                    if e.retryable()
                        && failures.saturating_add(1) < self.config.max_attempts.max(1) =>
                {
                    failures = failures.saturating_add(1);
                    let wait = self
                        .config
                        .backoff
                        .saturating_mul(1 << failures.saturating_sub(1).min(8));
                    tracing::warn!(call, attempt = failures, error = %e, "wecom_callback: call failed, retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The cached access token, fetched when missing or about to expire.
    pub async fn access_token(&self) -> Result<String, ApiError> {
        let mut cached = self.token.lock().await;
        let now = self.clock.now_ms();
        if let Some(t) = cached.as_ref().filter(|t| now < t.refresh_at_ms) {
            return Ok(t.token.clone());
        }
        let fresh = self.with_retries("gettoken", || self.fetch_token()).await?;
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(token)
    }

    /// Forgets `token` (if it is still the cached one), so the next call
    /// fetches a new one.
    async fn invalidate(&self, token: &str) {
        let mut cached = self.token.lock().await;
        if cached.as_ref().is_some_and(|t| t.token == token) {
            *cached = None;
        }
    }

    async fn fetch_token(&self) -> Result<CachedToken, ApiError> {
        let url = format!(
            "{}/cgi-bin/gettoken?corpid={}&corpsecret={}",
            self.config.base_url,
            enc(&self.config.corp_id),
            enc(self.config.corp_secret.expose())
        );
        let resp = self
            .request("gettoken", Method::Get, url, None, MAX_JSON_BODY)
            .await?;
        let answer = match self.answer("gettoken", &resp, None) {
            Err(ApiError::Errcode {
                errcode, errmsg, ..
            }) if CREDENTIAL_ERRCODES.contains(&errcode) => {
                return Err(ApiError::Credentials { errcode, errmsg });
            }
            other => other?,
        };
        let token = answer
            .access_token
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Malformed {
                call: "gettoken",
                detail: "no access_token".to_owned(),
            })?;
        let expires_s = answer.expires_in.unwrap_or(7200);
        // Refresh a little early (a minute, or a quarter of a short life),
        // so a token does not expire between the check and WeCom's.
        let margin_s = (expires_s / 4).min(60);
        let life_ms = expires_s.saturating_sub(margin_s).saturating_mul(1000);
        tracing::info!(expires_s, "wecom_callback: access token fetched");
        Ok(CachedToken {
            token,
            refresh_at_ms: self.clock.now_ms().saturating_add(life_ms),
        })
    }

    /// A call that needs the access token: on a token errcode the token is
    /// dropped, a new one fetched, and the call made once more.
    async fn with_token<T, F, Fut>(&self, call: &'static str, attempt: F) -> Result<T, ApiError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let token = self.access_token().await?;
        match self.with_retries(call, || attempt(token.clone())).await {
            Err(e) if e.is_token_error() => {
                tracing::warn!(call, error = %e, "wecom_callback: access token refused, fetching a new one");
                self.invalidate(&token).await;
                let token = self.access_token().await?;
                self.with_retries(call, || attempt(token.clone())).await
            }
            other => other,
        }
    }

    /// `message/send` of one piece of text (≤ 2048 bytes) to `user`.
    pub async fn send_message(
        &self,
        user: &str,
        format: MessageFormat,
        content: &str,
    ) -> Result<(), ApiError> {
        let kind = format.as_str();
        let body = json!({
            "touser": user,
            "msgtype": kind,
            "agentid": self.config.agent_id,
            kind: { "content": content },
            "safe": 0,
        });
        let body = serde_json::to_vec(&body).map_err(|e| ApiError::Malformed {
            call: "message/send",
            detail: e.to_string(),
        })?;
        self.with_token("message/send", |token| {
            let body = body.clone();
            async move {
                let url = format!(
                    "{}/cgi-bin/message/send?access_token={}",
                    self.config.base_url,
                    enc(&token)
                );
                let resp = self
                    .request("message/send", Method::Post, url, Some(body), MAX_JSON_BODY)
                    .await?;
                let answer = self.answer("message/send", &resp, Some(&token))?;
                match answer.invaliduser.as_deref().map(str::trim) {
                    Some(bad) if !bad.is_empty() => Err(ApiError::Errcode {
                        call: "message/send",
                        errcode: 0,
                        errmsg: format!("invaliduser: {bad} (not a member the app can reach)"),
                    }),
                    _ => Ok(()),
                }
            }
        })
        .await
    }

    /// `media/get`: downloads the media file `media_id` (≤
    /// [`ApiConfig::max_media_bytes`]).
    pub async fn media(&self, media_id: &str) -> Result<Media, ApiError> {
        self.with_token("media/get", |token| async move {
            let url = format!(
                "{}/cgi-bin/media/get?access_token={}&media_id={}",
                self.config.base_url,
                enc(&token),
                enc(media_id)
            );
            let resp = self
                .request(
                    "media/get",
                    Method::Get,
                    url,
                    None,
                    self.config.max_media_bytes,
                )
                .await?;
            // Errors come as a JSON object with an errcode; a media file of
            // any other type (a text file too) is the answer.
            let is_error = resp.status >= 300
                || resp
                    .content_type
                    .as_deref()
                    .is_some_and(|t| t.contains("json"))
                || (resp.body.first() == Some(&b'{')
                    && serde_json::from_slice::<Answer>(&resp.body).is_ok_and(|a| a.errcode != 0));
            if is_error {
                self.answer("media/get", &resp, Some(&token))?;
            }
            Ok(Media {
                file_name: resp
                    .content_disposition
                    .as_deref()
                    .and_then(disposition_file_name),
                content_type: resp.content_type,
                bytes: resp.body,
            })
        })
        .await
    }
}
