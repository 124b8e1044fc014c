//! rmcp's streamable-HTTP client transport over ureq.
//!
//! rmcp ships a ready-made backend for reqwest; the project has one HTTP
//! stack, ureq (blocking), so this implements rmcp's
//! [`StreamableHttpClient`] trait over it instead:
//!
//! - **Each exchange runs on a short-lived helper thread.** The thread sends
//!   the request, reports the response head over a oneshot channel, and then
//!   either reads a bounded JSON body or — for `text/event-stream` — keeps
//!   reading the body in chunks into a bounded async channel that becomes
//!   the byte stream rmcp's SSE parser reads. The async side never blocks
//!   a runtime thread.
//! - **Limits are enforced before parsing**: a JSON body is read up to
//!   `max_json_response_size` (more is an error, not a truncation), an error
//!   page only up to `max_error_response_size`, and one SSE event may not
//!   exceed `max_sse_event_size` bytes (counted between blank lines).
//! - **Semantics follow rmcp's reqwest backend**: 202/204 = accepted, 404 on
//!   a request that carried a session id = session expired, 401/403 with a
//!   `WWW-Authenticate` challenge = auth errors, 429/5xx = status errors
//!   (a JSON-RPC error body of a 5xx is kept), a JSON body that cannot be
//!   parsed is an error only when a response was awaited, `405` on the GET
//!   stream = "no standalone SSE stream".
//! - **A stream dropped by rmcp stops its helper** at the next chunk the
//!   server sends, or when the server closes the stream (as it does when the
//!   request is answered or the session is deleted); a blocked `read()` cannot
//!   be cancelled from another thread. Silent GET streams are bounded by
//!   [`STREAM_IDLE`]: then the read fails and rmcp reconnects with
//!   `Last-Event-ID`.
//!
//! Not needed here and not implemented: rmcp's `server/discover` legacy
//! fallback (the client uses the `initialize` lifecycle) and OAuth.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use tokio::sync::{mpsc, oneshot};

const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
const HEADER_SESSION_ID: &str = "mcp-session-id";
const HEADER_LAST_EVENT_ID: &str = "last-event-id";

/// A silent GET (server-to-client) stream is dropped after this long and
/// reopened by rmcp; it bounds how long a forgotten helper thread lives.
pub(crate) const STREAM_IDLE: Duration = Duration::from_secs(300);
/// How long one read of a POST response may wait. Above any call time:
/// the request's own deadline (rmcp's, reset by progress) comes first.
const POST_READ_IDLE: Duration = Duration::from_secs(3600);
/// Read granularity of a streamed body.
const READ_CHUNK: usize = 16 * 1024;
/// Chunks that may wait for the SSE parser.
const CHANNEL_DEPTH: usize = 16;

/// A transport failure of the ureq backend.
#[derive(Debug, thiserror::Error)]
pub enum UreqHttpError {
    /// ureq could not send the request or read the response.
    #[error("{0}")]
    Ureq(#[from] ureq::Error),
    /// Reading the body failed.
    #[error("reading the response failed: {0}")]
    Io(#[from] std::io::Error),
    /// The helper thread ended without reporting (it panicked).
    #[error("the HTTP helper thread stopped unexpectedly")]
    HelperGone,
}

type HttpResult<T> = Result<T, StreamableHttpError<UreqHttpError>>;

/// rmcp's streamable-HTTP backend over a ureq agent (cheap to clone).
#[derive(Clone, Debug)]
pub struct UreqHttpClient {
    agent: ureq::Agent,
}

impl UreqHttpClient {
    /// A client whose connections time out after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_resolve(Some(connect_timeout))
            .timeout_connect(Some(connect_timeout))
            .timeout_per_write(Some(Duration::from_secs(60)))
            .user_agent(concat!("hermes-rs/", env!("CARGO_PKG_VERSION")))
            .build();
        UreqHttpClient {
            agent: crate::http::agent_with(config),
        }
    }
}

/// What the helper reports once the response head is in.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    body: ureq::Body,
}

/// One request, described with owned data so it can move to the helper.
struct Exchange {
    method: http::Method,
    uri: Arc<str>,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<Vec<u8>>,
    read_idle: Duration,
}

impl UreqHttpClient {
    /// Runs `exchange` on a helper thread and waits (asynchronously) for the
    /// response head.
    async fn send(&self, exchange: Exchange) -> HttpResult<Head> {
        let (tx, rx) = oneshot::channel();
        let agent = self.agent.clone();
        let spawned = std::thread::Builder::new()
            .name("hermes-mcp-http".into())
            .spawn(move || {
                let _ = tx.send(perform(&agent, exchange));
            });
        if let Err(e) = spawned {
            return Err(StreamableHttpError::Io(e));
        }
        match rx.await {
            Ok(Ok(head)) => Ok(head),
            Ok(Err(e)) => Err(StreamableHttpError::Client(UreqHttpError::Ureq(e))),
            Err(_) => Err(StreamableHttpError::Client(UreqHttpError::HelperGone)),
        }
    }
}

fn perform(agent: &ureq::Agent, exchange: Exchange) -> Result<Head, ureq::Error> {
    // A pooled connection the server closed meanwhile is sent on again,
    // fresh (see `crate::http::send_fresh_if_stale`).
    let response = crate::http::send_fresh_if_stale(|| {
        let mut request = http::Request::builder()
            .method(exchange.method.clone())
            .uri(exchange.uri.as_ref());
        for (name, value) in &exchange.headers {
            request = request.header(name, value);
        }
        match &exchange.body {
            Some(body) => run(agent, request.body(body.as_slice())?, exchange.read_idle),
            None => run(agent, request.body(())?, exchange.read_idle),
        }
    })?;
    let (parts, body) = response.into_parts();
    Ok(Head {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

fn run(
    agent: &ureq::Agent,
    request: http::Request<impl ureq::AsSendBody>,
    read_idle: Duration,
) -> Result<http::Response<ureq::Body>, ureq::Error> {
    let request = agent
        .configure_request(request)
        .timeout_per_read(Some(read_idle))
        .build();
    agent.run(request)
}

fn common_headers(
    session_id: Option<&str>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> HttpResult<Vec<(HeaderName, HeaderValue)>> {
    let mut headers = Vec::with_capacity(custom_headers.len() + 3);
    if let Some(token) = auth_header {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            StreamableHttpError::UnexpectedServerResponse("invalid authorization token".into())
        })?;
        value.set_sensitive(true);
        headers.push((AUTHORIZATION, value));
    }
    for (name, value) in custom_headers {
        if name == ACCEPT
            || name.as_str().eq_ignore_ascii_case(HEADER_SESSION_ID)
            || name.as_str().eq_ignore_ascii_case(HEADER_LAST_EVENT_ID)
        {
            return Err(StreamableHttpError::ReservedHeaderConflict(
                name.to_string(),
            ));
        }
        headers.push((name, value));
    }
    if let Some(id) = session_id {
        let value = HeaderValue::from_str(id).map_err(|_| {
            StreamableHttpError::UnexpectedServerResponse("invalid session id from server".into())
        })?;
        headers.push((HeaderName::from_static(HEADER_SESSION_ID), value));
    }
    Ok(headers)
}

fn media_type_is(value: &str, expected: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// 401/403 with a challenge become rmcp's auth errors.
fn auth_error(head: &Head) -> HttpResult<()> {
    let Some(challenge) = head.headers.get(WWW_AUTHENTICATE) else {
        return Ok(());
    };
    let challenge = challenge
        .to_str()
        .map_err(|_| {
            StreamableHttpError::UnexpectedServerResponse(Cow::from(
                "invalid www-authenticate header value",
            ))
        })?
        .to_owned();
    match head.status {
        StatusCode::UNAUTHORIZED => Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
            challenge,
        ))),
        StatusCode::FORBIDDEN => {
            let scope = scope_of(&challenge);
            Err(StreamableHttpError::InsufficientScope(
                InsufficientScopeError::new(challenge, scope),
            ))
        }
        _ => Ok(()),
    }
}

/// The `scope=` parameter of a `WWW-Authenticate` challenge.
fn scope_of(challenge: &str) -> Option<String> {
    let lower = challenge.to_ascii_lowercase();
    let start = lower.find("scope=")? + "scope=".len();
    let rest = &challenge[start..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.find('"').map(|end| quoted[..end].to_owned()),
        None => Some(rest.split([',', ' ']).next().unwrap_or_default().to_owned()),
    }
}

/// 429 and 5xx: status metadata, never the body.
fn status_error(head: &Head) -> Option<HttpStatusError> {
    if head.status != StatusCode::TOO_MANY_REQUESTS && !head.status.is_server_error() {
        return None;
    }
    let retry_after = header_str(&head.headers, &RETRY_AFTER).map(str::to_owned);
    Some(HttpStatusError::new(head.status.as_u16(), retry_after))
}

/// Reads at most `max` bytes; more is an error (`exact`) or cut (`!exact`).
fn read_limited(body: ureq::Body, max: usize, exact: bool) -> HttpResult<Vec<u8>> {
    if exact && body.content_length().is_some_and(|n| n > max as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut reader = body.into_reader().take(max as u64 + u64::from(exact));
    let mut out = Vec::new();
    reader
        .read_to_end(&mut out)
        .map_err(|e| StreamableHttpError::Client(UreqHttpError::Io(e)))?;
    if out.len() > max {
        if exact {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        out.truncate(max);
    }
    Ok(out)
}

/// Reads a body on a helper thread (the head came back on one; the body
/// must not be read on a runtime thread either).
async fn read_body(body: ureq::Body, max: usize, exact: bool) -> HttpResult<Vec<u8>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("hermes-mcp-http".into())
        .spawn(move || {
            let _ = tx.send(read_limited(body, max, exact));
        })
        .map_err(StreamableHttpError::Io)?;
    rx.await
        .unwrap_or(Err(StreamableHttpError::Client(UreqHttpError::HelperGone)))
}

/// Counts the bytes of the SSE event being received, so one oversized
/// event fails the stream before it is buffered whole.
#[derive(Debug, Default)]
struct EventSize {
    current: usize,
    /// Consecutive line ends seen (a blank line ends an event).
    newlines: u8,
    after_cr: bool,
}

impl EventSize {
    /// Feeds `chunk`; `false` when an event grew past `max`.
    fn feed(&mut self, chunk: &[u8], max: usize) -> bool {
        for &b in chunk {
            match b {
                b'\r' => {
                    self.newlines += 1;
                    self.after_cr = true;
                }
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' => self.newlines += 1,
                _ => {
                    self.newlines = 0;
                    self.after_cr = false;
                }
            }
            if self.newlines >= 2 {
                self.current = 0;
                self.newlines = 0;
                continue;
            }
            self.current += 1;
            if self.current > max {
                return false;
            }
        }
        true
    }
}

/// The body as an SSE event stream: a helper thread reads chunks into a
/// bounded channel until the body ends, fails, an event is too large, or
/// the stream is dropped.
fn sse_stream(body: ureq::Body, max_event: usize) -> BoxStream<'static, Result<Sse, SseError>> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_DEPTH);
    let reader = std::thread::Builder::new()
        .name("hermes-mcp-sse".into())
        .spawn(move || {
            let mut reader = body.into_reader();
            let mut size = EventSize::default();
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                let item = match reader.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) if !size.feed(&buf[..n], max_event) => Err(std::io::Error::other(
                        format!("an SSE event exceeded the maximum size of {max_event} bytes"),
                    )),
                    Ok(n) => Ok(Bytes::copy_from_slice(&buf[..n])),
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return;
                }
            }
        });
    if let Err(e) = reader {
        return futures::stream::once(async move { Err(SseError::Body(Box::new(e))) }).boxed();
    }
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    SseStream::from_bytes_stream(chunks).boxed()
}

impl StreamableHttpClient for UreqHttpClient {
    type Error = UreqHttpError;

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let mut headers = common_headers(session_id.as_deref(), auth_header, custom_headers)?;
        headers.push((
            ACCEPT,
            HeaderValue::from_static("text/event-stream, application/json"),
        ));
        if let Some(id) = last_event_id {
            let value = HeaderValue::from_str(&id).map_err(|_| {
                StreamableHttpError::UnexpectedServerResponse("invalid SSE event id".into())
            })?;
            headers.push((HeaderName::from_static(HEADER_LAST_EVENT_ID), value));
        }
        let head = self
            .send(Exchange {
                method: http::Method::GET,
                uri,
                headers,
                body: None,
                read_idle: STREAM_IDLE,
            })
            .await?;
        if head.status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        auth_error(&head)?;
        if let Some(e) = status_error(&head) {
            return Err(e.into());
        }
        if !head.status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {} on the event stream", head.status).into(),
            ));
        }
        match header_str(&head.headers, &CONTENT_TYPE) {
            Some(ct) if media_type_is(ct, EVENT_STREAM) || media_type_is(ct, JSON) => {}
            other => {
                return Err(StreamableHttpError::UnexpectedContentType(
                    other.map(str::to_owned),
                ));
            }
        }
        Ok(sse_stream(head.body, max_sse_event_size))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let headers = common_headers(Some(&session_id), auth_header, custom_headers)?;
        let head = self
            .send(Exchange {
                method: http::Method::DELETE,
                uri,
                headers,
                body: None,
                read_idle: Duration::from_secs(10),
            })
            .await?;
        if head.status == StatusCode::METHOD_NOT_ALLOWED || head.status.is_success() {
            return Ok(());
        }
        Err(StreamableHttpError::UnexpectedServerResponse(
            format!("HTTP {} deleting the session", head.status).into(),
        ))
    }

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let session_was_attached = session_id.is_some();
        let mut headers = common_headers(session_id.as_deref(), auth_header, custom_headers)?;
        headers.push((
            ACCEPT,
            HeaderValue::from_static("text/event-stream, application/json"),
        ));
        headers.push((CONTENT_TYPE, HeaderValue::from_static(JSON)));
        // Written the way rmcp's stdio codec writes a message (`to_writer`
        // into a `BytesMut`), so the binary holds one serializer of the
        // message types instead of two (≈ 50 KB).
        let mut buf = BytesMut::new();
        serde_json::to_writer((&mut buf).writer(), &message)?;
        let body = Vec::from(buf);
        let head = self
            .send(Exchange {
                method: http::Method::POST,
                uri,
                headers,
                body: Some(body),
                read_idle: POST_READ_IDLE,
            })
            .await?;
        auth_error(&head)?;
        let status = head.status;
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_was_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type = header_str(&head.headers, &CONTENT_TYPE).map(str::to_owned);
        let is_json = content_type
            .as_deref()
            .is_some_and(|ct| media_type_is(ct, JSON));
        let status_error = match (status_error(&head), is_json) {
            (Some(e), json) if !json || status == StatusCode::TOO_MANY_REQUESTS => {
                return Err(e.into());
            }
            (e, _) => e,
        };
        let session_id = header_str(&head.headers, &HeaderName::from_static(HEADER_SESSION_ID))
            .map(str::to_owned);
        // A notification, response or error awaits nothing: a 2xx is enough.
        let awaits_no_response = matches!(
            message,
            ClientJsonRpcMessage::Notification(_)
                | ClientJsonRpcMessage::Response(_)
                | ClientJsonRpcMessage::Error(_)
        );
        if status.is_success() && head.body.content_length() == Some(0) && awaits_no_response {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !status.is_success() {
            let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
            if is_json && !auth_failure {
                match read_body(head.body, limits.max_json_response_size, true).await {
                    Ok(body) => {
                        if let Ok(error @ JsonRpcMessage::Error(_)) =
                            serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                        {
                            return Ok(StreamableHttpPostResponse::Json(error, session_id));
                        }
                        if let Some(e) = status_error {
                            return Err(e.into());
                        }
                        let shown = &body[..body.len().min(limits.max_error_response_size)];
                        return Err(StreamableHttpError::UnexpectedServerResponse(
                            format!("HTTP {status}: {}", String::from_utf8_lossy(shown)).into(),
                        ));
                    }
                    Err(e @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                        return Err(status_error.map(StreamableHttpError::from).unwrap_or(e));
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(e) = status_error {
                return Err(e.into());
            }
            let shown = read_body(head.body, limits.max_error_response_size, false)
                .await
                .unwrap_or_default();
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}: {}", String::from_utf8_lossy(&shown)).into(),
            ));
        }
        match content_type.as_deref() {
            Some(ct) if media_type_is(ct, EVENT_STREAM) => Ok(StreamableHttpPostResponse::Sse(
                sse_stream(head.body, limits.max_sse_event_size),
                session_id,
            )),
            Some(ct) if media_type_is(ct, JSON) => {
                let body = read_body(head.body, limits.max_json_response_size, true).await?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session_id)),
                    Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => {
                        let shown = &body[..body.len().min(256)];
                        Err(StreamableHttpError::UnexpectedServerResponse(
                            format!(
                                "could not parse the JSON response as JSON-RPC: {e}: {}",
                                String::from_utf8_lossy(shown)
                            )
                            .into(),
                        ))
                    }
                }
            }
            _ if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
            _ => Err(StreamableHttpError::UnexpectedContentType(content_type)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_size_resets_at_blank_lines_of_every_line_ending() {
        for sep in ["\n\n", "\r\n\r\n", "\r\r"] {
            let mut size = EventSize::default();
            let event = format!("data: {}{sep}", "x".repeat(90));
            for _ in 0..10 {
                assert!(size.feed(event.as_bytes(), 100), "separator {sep:?}");
            }
        }
        let mut size = EventSize::default();
        assert!(!size.feed(format!("data: {}\n", "x".repeat(200)).as_bytes(), 100));
    }

    #[test]
    fn scope_is_read_quoted_or_bare() {
        assert_eq!(
            scope_of(r#"Bearer realm="x", scope="files:read files:write""#).as_deref(),
            Some("files:read files:write")
        );
        assert_eq!(
            scope_of("Bearer scope=read:data, realm=x").as_deref(),
            Some("read:data")
        );
        assert_eq!(scope_of("Bearer realm=x"), None);
    }
}
