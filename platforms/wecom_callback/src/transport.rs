//! The HTTP client seam of the qyapi client: one small trait, implemented
//! over the runtime's shared HTTP agent ([`hermes_runtime::http`], the stack
//! the provider client and Telegram use), so the client stack can be swapped
//! without touching the WeCom logic.
//!
//! Every response body is read up to a cap; a longer one is an error, never
//! buffered whole.

// Body sizes come from the network: arithmetic on them must saturate.
#![warn(clippy::arithmetic_side_effects)]

use std::time::Duration;

use async_trait::async_trait;
use hermes_runtime::http;

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

/// [`HttpTransport`] over the shared ureq agent, each exchange on tokio's
/// blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct UreqTransport;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn network(e: &ureq::Error) -> TransportError {
    // Described without the URL: it holds the access token or the corp
    // secret.
    TransportError::Network(http::describe(e))
}

fn exchange(request: HttpRequest) -> Result<HttpResponse, TransportError> {
    let agent = http::agent();
    let body = request.json.as_deref().unwrap_or_default();
    // A pooled connection WeCom closed meanwhile is sent on again, fresh.
    let sent = http::send_fresh_if_stale(|| match request.method {
        Method::Get => agent
            .get(&request.url)
            .config()
            .timeout_global(Some(request.timeout))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .build()
            .call(),
        Method::Post => agent
            .post(&request.url)
            .config()
            .timeout_global(Some(request.timeout))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .build()
            .header("content-type", "application/json")
            .send(body),
    });
    let mut resp = sent.map_err(|e| network(&e))?;
    let cap = request.max_body as u64;
    if resp.body().content_length().is_some_and(|n| n > cap) {
        return Err(TransportError::TooLarge(request.max_body));
    }
    let header = |name: ureq::http::header::HeaderName| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header(ureq::http::header::CONTENT_TYPE);
    let content_disposition = header(ureq::http::header::CONTENT_DISPOSITION);
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(cap)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => TransportError::TooLarge(request.max_body),
            other => network(&other),
        })?;
    Ok(HttpResponse {
        status,
        content_type,
        content_disposition,
        body,
    })
}

#[async_trait]
impl HttpTransport for UreqTransport {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        http::run_blocking(move || exchange(request))
            .await
            .map_err(|e| TransportError::Network(e.to_string()))?
    }
}
