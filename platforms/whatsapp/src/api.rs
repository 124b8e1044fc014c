//! The Graph API calls of the Cloud API, over the runtime's shared HTTP
//! agent (`hermes_runtime::http`), each exchange on tokio's blocking pool.
//!
//! Meta answers an error with an HTTP 4xx (or 5xx) and a JSON body
//! `{"error": {"code", "message", "error_data": {"details"}}}`; the code
//! decides: 130429 (throughput), 131056 (pair rate limit), 80007 and 4
//! (app/account limits) are rate limits, sent without `Retry-After`, and
//! retried with a doubling backoff for as long as
//! [`ApiConfig::rate_limit_patience`]; 131047 (the 24-hour window) is
//! [`ApiError::OutsideWindow`], never retried; 190 and HTTP 401 are refused
//! credentials. Network errors and 5xx are retried a few times.
//!
//! The access token travels in the `Authorization` header only, never in a
//! URL, a log line or an error.

use std::time::{Duration, Instant};

use hermes_platform_kit::adapter::AdapterError;
use hermes_runtime::http;
use hermes_runtime::secret::Secret;
use serde_json::{Value, json};

use crate::PLATFORM;

/// The 24-hour customer-service window is closed for this user.
pub const CODE_OUTSIDE_WINDOW: i64 = 131_047;
/// "Rate limit hit": too many messages for the number's throughput.
pub const CODE_RATE_LIMIT: i64 = 130_429;
/// Too many messages to one user in a short time.
pub const CODE_PAIR_RATE_LIMIT: i64 = 131_056;
/// The largest JSON answer read from the Graph API.
const MAX_JSON: usize = 1024 * 1024;

/// What the Graph client needs.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The Graph base, version included, no trailing slash.
    pub base_url: String,
    /// The phone number's id.
    pub phone_number_id: String,
    /// The access token.
    pub access_token: Secret,
    /// Each request's deadline.
    pub timeout: Duration,
    /// The first wait after a rate limit or transient failure.
    pub backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// How long a rate-limited request is retried.
    pub rate_limit_patience: Duration,
    /// Attempts at a transient failure.
    pub max_attempts: u32,
}

/// Why a Graph call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// Error 131047: the user has not written within 24 hours, so only a
    /// template may be sent.
    #[error("outside WhatsApp's 24-hour window (error {code}: {details})")]
    OutsideWindow {
        /// Meta's code (131047).
        code: i64,
        /// Meta's words.
        details: String,
    },
    /// The token or the phone number id was refused.
    #[error(
        "the access token was refused (error {code}: {message}); check WHATSAPP_ACCESS_TOKEN and WHATSAPP_PHONE_NUMBER_ID"
    )]
    Credentials {
        /// Meta's code.
        code: i64,
        /// Meta's words.
        message: String,
    },
    /// Any other refusal.
    #[error("WhatsApp error {code} (HTTP {status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Meta's code.
        code: i64,
        /// Meta's words.
        message: String,
    },
    /// Rate limited for longer than the patience allows.
    #[error("still rate limited (error {code}) after {waited:?}")]
    RateLimited {
        /// Meta's code.
        code: i64,
        /// How long it was retried.
        waited: Duration,
    },
    /// The network, a 5xx or an unreadable answer, after the retries.
    #[error("{0}")]
    Network(String),
}

impl ApiError {
    /// The adapter-level error.
    pub fn into_adapter_error(self) -> AdapterError {
        match self {
            e @ ApiError::OutsideWindow { .. } => AdapterError::Undeliverable {
                platform: PLATFORM,
                message: e.to_string(),
            },
            e @ ApiError::Credentials { .. } => AdapterError::Auth {
                platform: PLATFORM,
                message: e.to_string(),
            },
            e @ (ApiError::Refused { .. } | ApiError::RateLimited { .. }) => {
                AdapterError::Rejected {
                    platform: PLATFORM,
                    message: e.to_string(),
                }
            }
            ApiError::Network(message) => AdapterError::Network {
                platform: PLATFORM,
                message,
            },
        }
    }
}

/// Meta's error object, as the Graph API and `failed` statuses carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphError {
    /// The code.
    pub code: i64,
    /// The message (or the status error's title).
    pub message: String,
    /// `error_data.details`, when given.
    pub details: Option<String>,
}

impl GraphError {
    /// Reads `{"code", "message"|"title", "error_data": {"details"}}`.
    pub fn from_value(v: &Value) -> Self {
        GraphError {
            code: v.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: v
                .get("message")
                .or_else(|| v.get("title"))
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_owned(),
            details: v
                .pointer("/error_data/details")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }

    fn is_rate_limit(&self) -> bool {
        matches!(
            self.code,
            CODE_RATE_LIMIT | CODE_PAIR_RATE_LIMIT | 80_007 | 4
        )
    }

    /// The error as an [`ApiError`] (rate limits excepted, the caller
    /// retries those).
    pub fn into_api_error(self, status: u16) -> ApiError {
        let details = self.details.clone().unwrap_or_else(|| self.message.clone());
        match self.code {
            CODE_OUTSIDE_WINDOW => ApiError::OutsideWindow {
                code: self.code,
                details,
            },
            190 => ApiError::Credentials {
                code: self.code,
                message: self.message,
            },
            _ if status == 401 => ApiError::Credentials {
                code: self.code,
                message: self.message,
            },
            code => ApiError::Refused {
                status,
                code,
                message: details,
            },
        }
    }
}

/// A request body.
#[derive(Clone, Debug)]
enum Payload {
    None,
    Json(Vec<u8>),
    Multipart { content_type: String, body: Vec<u8> },
}

/// An answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// Downloaded media.
#[derive(Clone, Debug)]
pub struct Downloaded {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The MIME type from `GET /{media-id}`.
    pub mime_type: Option<String>,
}

/// The Graph client.
#[derive(Debug, Clone)]
pub struct Graph {
    config: ApiConfig,
}

fn exchange(
    url: &str,
    token: &str,
    payload: &Payload,
    timeout: Duration,
    max_body: usize,
) -> Result<Answer, String> {
    let agent = http::agent();
    let bearer = format!("Bearer {token}");
    let sent = http::send_fresh_if_stale(|| {
        let config = |b: ureq::RequestBuilder<ureq::typestate::WithoutBody>| {
            b.config()
                .timeout_global(Some(timeout))
                .timeout_connect(Some(http::DEFAULT_CONNECT_TIMEOUT))
                .build()
                .header("authorization", &bearer)
        };
        let with_body = |b: ureq::RequestBuilder<ureq::typestate::WithBody>| {
            b.config()
                .timeout_global(Some(timeout))
                .timeout_connect(Some(http::DEFAULT_CONNECT_TIMEOUT))
                .build()
                .header("authorization", &bearer)
        };
        match payload {
            Payload::None => config(agent.get(url)).call(),
            Payload::Json(body) => with_body(agent.post(url))
                .header("content-type", "application/json")
                .send(&body[..]),
            Payload::Multipart { content_type, body } => with_body(agent.post(url))
                .header("content-type", content_type)
                .send(&body[..]),
        }
    });
    // Described without the URL (a media URL is a capability).
    let mut resp = sent.map_err(|e| http::describe(&e))?;
    let cap = max_body as u64;
    if resp.body().content_length().is_some_and(|n| n > cap) {
        return Err(format!("the answer is larger than {max_body} bytes"));
    }
    let content_type = resp
        .headers()
        .get(ureq::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(cap)
        .read_to_vec()
        .map_err(|e| http::describe(&e))?;
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

impl Graph {
    /// A client for `config`.
    pub fn new(config: ApiConfig) -> Self {
        Graph { config }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        self.config
            .backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.config.max_backoff)
    }

    async fn raw(&self, url: String, payload: Payload, max_body: usize) -> Result<Answer, String> {
        let token = self.config.access_token.expose().to_owned();
        let timeout = self.config.timeout;
        http::run_blocking(move || exchange(&url, &token, &payload, timeout, max_body))
            .await
            .map_err(|e| e.to_string())?
    }

    /// One Graph call answering JSON, with the retries the module's
    /// documentation describes.
    async fn call(&self, url: String, payload: Payload) -> Result<Value, ApiError> {
        let started = Instant::now();
        let mut transient = 0u32;
        let mut limited = 0u32;
        loop {
            let answer = self.raw(url.clone(), payload.clone(), MAX_JSON).await;
            let wait = match answer {
                Err(e) => {
                    transient = transient.saturating_add(1);
                    if transient >= self.config.max_attempts {
                        return Err(ApiError::Network(e));
                    }
                    tracing::warn!(error = %e, attempt = transient, "whatsapp: Graph API unreachable; retrying");
                    self.backoff(transient)
                }
                Ok(a) if (200..300).contains(&a.status) => {
                    return serde_json::from_slice(&a.body).map_err(|e| {
                        ApiError::Network(format!("the Graph API answered no JSON ({e})"))
                    });
                }
                Ok(a) => {
                    let body: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
                    let error = body.get("error").map(GraphError::from_value);
                    match error {
                        Some(e) if e.is_rate_limit() => {
                            let waited = started.elapsed();
                            if waited >= self.config.rate_limit_patience {
                                return Err(ApiError::RateLimited {
                                    code: e.code,
                                    waited,
                                });
                            }
                            limited = limited.saturating_add(1);
                            let wait = self.backoff(limited);
                            tracing::warn!(
                                code = e.code,
                                ?wait,
                                "whatsapp: rate limited; waiting before sending again"
                            );
                            wait
                        }
                        Some(e) if a.status < 500 => return Err(e.into_api_error(a.status)),
                        _ => {
                            transient = transient.saturating_add(1);
                            if transient >= self.config.max_attempts || a.status < 500 {
                                let e = error.unwrap_or(GraphError {
                                    code: 0,
                                    message: format!("HTTP {}", a.status),
                                    details: None,
                                });
                                return Err(e.into_api_error(a.status));
                            }
                            tracing::warn!(
                                status = a.status,
                                "whatsapp: Graph API error; retrying"
                            );
                            self.backoff(transient)
                        }
                    }
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    fn messages_url(&self) -> String {
        format!(
            "{}/{}/messages",
            self.config.base_url, self.config.phone_number_id
        )
    }

    /// Sends one message object (`type` and its field already in `message`)
    /// to `to`; returns the message's `wamid`.
    pub async fn send_message(
        &self,
        to: &str,
        mut message: Value,
        reply_to: Option<&str>,
    ) -> Result<String, ApiError> {
        if let Some(obj) = message.as_object_mut() {
            obj.insert("messaging_product".into(), json!("whatsapp"));
            obj.insert("recipient_type".into(), json!("individual"));
            obj.insert("to".into(), json!(to));
            if let Some(id) = reply_to {
                obj.insert("context".into(), json!({ "message_id": id }));
            }
        }
        let body = serde_json::to_vec(&message).map_err(|e| ApiError::Network(e.to_string()))?;
        let answer = self.call(self.messages_url(), Payload::Json(body)).await?;
        answer
            .pointer("/messages/0/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Network("the Graph API answered no message id".into()))
    }

    /// Sends `text` (at most 4096 characters) to `to`.
    pub async fn send_text(
        &self,
        to: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<String, ApiError> {
        let message = json!({ "type": "text", "text": { "preview_url": false, "body": text } });
        self.send_message(to, message, reply_to).await
    }

    /// Marks the user's message read (the blue ticks).
    pub async fn mark_read(&self, message_id: &str) -> Result<(), ApiError> {
        let body = json!({
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
        });
        let body = serde_json::to_vec(&body).map_err(|e| ApiError::Network(e.to_string()))?;
        self.call(self.messages_url(), Payload::Json(body)).await?;
        Ok(())
    }

    /// `GET /{media-id}` for its URL, then the URL fetched with the token:
    /// at most `max_bytes`.
    pub async fn download(&self, media_id: &str, max_bytes: u64) -> Result<Downloaded, ApiError> {
        if media_id.is_empty() || !media_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(ApiError::Refused {
                status: 0,
                code: 0,
                message: "not a media id".into(),
            });
        }
        let meta = self
            .call(
                format!("{}/{}", self.config.base_url, media_id),
                Payload::None,
            )
            .await?;
        let url = meta
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::Network("the media has no URL".into()))?
            .to_owned();
        let mime_type = meta
            .get("mime_type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let declared = meta.get("file_size").and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        });
        if declared.is_some_and(|n| n > max_bytes) {
            return Err(ApiError::Refused {
                status: 0,
                code: 0,
                message: format!("the file is larger than the {max_bytes} bytes accepted"),
            });
        }
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let answer = self
            .raw(url, Payload::None, cap)
            .await
            .map_err(ApiError::Network)?;
        if !(200..300).contains(&answer.status) {
            return Err(ApiError::Refused {
                status: answer.status,
                code: 0,
                message: "the media download was refused (expired or gone)".into(),
            });
        }
        Ok(Downloaded {
            bytes: answer.body,
            mime_type: mime_type.or(answer.content_type),
        })
    }

    /// Uploads a file (`POST /{phone-number-id}/media`, multipart); returns
    /// its media id.
    pub async fn upload(
        &self,
        file_name: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<String, ApiError> {
        let form = http::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", content_type)
            .file("file", file_name, content_type, bytes)
            .finish();
        let payload = Payload::Multipart {
            content_type: form.content_type.clone(),
            body: form.bytes,
        };
        let url = format!(
            "{}/{}/media",
            self.config.base_url, self.config.phone_number_id
        );
        let answer = self.call(url, payload).await?;
        answer
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Network("the upload answered no media id".into()))
    }

    /// Checks the token and the number (`GET /{phone-number-id}`): the
    /// number as Meta shows it.
    pub async fn phone_number(&self) -> Result<String, ApiError> {
        let url = format!(
            "{}/{}?fields=display_phone_number,verified_name",
            self.config.base_url, self.config.phone_number_id
        );
        let v = self.call(url, Payload::None).await?;
        let number = v
            .get("display_phone_number")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let name = v.get("verified_name").and_then(Value::as_str).unwrap_or("");
        Ok(format!("{name} {number}").trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn error(code: i64) -> GraphError {
        GraphError::from_value(&json!({"code": code, "message": "m",
            "error_data": {"details": "d"}}))
    }

    #[test]
    fn meta_error_codes_decide_what_a_failure_is() {
        for code in [130_429, 131_056, 80_007, 4] {
            assert!(error(code).is_rate_limit(), "{code}");
        }
        assert!(!error(131_047).is_rate_limit());
        let window = error(131_047).into_api_error(400);
        assert!(matches!(
            window,
            ApiError::OutsideWindow { code: 131_047, .. }
        ));
        assert!(matches!(
            window.into_adapter_error(),
            AdapterError::Undeliverable { .. }
        ));
        assert!(matches!(
            error(190).into_api_error(400).into_adapter_error(),
            AdapterError::Auth { .. }
        ));
        assert!(matches!(
            error(100).into_api_error(401),
            ApiError::Credentials { .. }
        ));
        let other = error(131_026).into_api_error(400);
        assert!(matches!(other, ApiError::Refused { code: 131_026, .. }));
        assert_eq!(other.to_string(), "WhatsApp error 131026 (HTTP 400): d");
    }
}
