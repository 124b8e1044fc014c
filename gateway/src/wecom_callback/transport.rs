//! The HTTP client seam of the qyapi client: one small trait, implemented
//! with the client the gateway already uses for Telegram (reqwest), so the
//! client stack can be swapped without touching the WeCom logic.
//!
//! Every response body is read up to a cap; a longer one is an error, never
//! buffered whole.

// Body sizes come from the network: arithmetic on them must saturate.
#![warn(clippy::arithmetic_side_effects)]

use std::time::Duration;

use async_trait::async_trait;

/// GET or POST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST with a JSON body.
    Post,
}

/// One request.
#[derive(Clone, Debug)]
pub struct HttpRequest {
    /// GET or POST.
    pub method: Method,
    /// The full URL (may carry the access token: never log it).
    pub url: String,
    /// The JSON body of a POST.
    pub json: Option<Vec<u8>>,
    /// The whole request's deadline.
    pub timeout: Duration,
    /// The longest body the caller accepts.
    pub max_body: usize,
}

/// One response, body fully read.
#[derive(Clone, Debug, Default)]
pub struct HttpResponse {
    /// The HTTP status.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// `Content-Disposition`, if any (file names of `media/get`).
    pub content_disposition: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request got no usable response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Connection, TLS, timeout. Retryable. The message carries no URL.
    #[error("{0}")]
    Network(String),
    /// The body is longer than the caller's cap. Not retryable.
    #[error("response body larger than {0} bytes")]
    TooLarge(usize),
}

/// Sends HTTP requests.
#[async_trait]
pub trait HttpTransport: Send + Sync + std::fmt::Debug {
    /// Sends `request` and reads the response body (up to `max_body`).
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError>;
}

/// [`HttpTransport`] over reqwest (rustls, ring).
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A client with a 10 s connect timeout.
    pub fn new() -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(50))
            .build()
            .map_err(|e| TransportError::Network(e.without_url().to_string()))?;
        Ok(Self { client })
    }
}

fn network(e: reqwest::Error) -> TransportError {
    // Without the URL: it holds the access token or the corp secret.
    TransportError::Network(e.without_url().to_string())
}

#[async_trait]
impl HttpTransport for ReqwestTransport {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let builder = match request.method {
            Method::Get => self.client.get(&request.url),
            Method::Post => self
                .client
                .post(&request.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request.json.unwrap_or_default()),
        };
        let mut resp = builder
            .timeout(request.timeout)
            .send()
            .await
            .map_err(network)?;
        if resp
            .content_length()
            .is_some_and(|n| n > request.max_body as u64)
        {
            return Err(TransportError::TooLarge(request.max_body));
        }
        let header = |name: reqwest::header::HeaderName| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header(reqwest::header::CONTENT_TYPE);
        let content_disposition = header(reqwest::header::CONTENT_DISPOSITION);
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(network)? {
            if chunk.len() > request.max_body.saturating_sub(body.len()) {
                return Err(TransportError::TooLarge(request.max_body));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse {
            status,
            content_type,
            content_disposition,
            body,
        })
    }
}
