//! Routing, authentication, CORS and the endpoints.
//!
//! Order of checks for a completion: key (`401`) → body size (`413`) →
//! body (`400`) → model (`404`) → a free run slot (`429`) → session
//! (`404`/`409`) → the run. Nothing before the run calls the model.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue, ORIGIN,
};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use hermes_core::InterruptFlag;

use super::config::ApiServerConfig;
use super::run::{self, Prepared, RunEvent, Services};
use super::stream;
use super::wire::{self, ApiError, Envelope};

/// The response body: a whole JSON document or an event stream.
pub(super) type Body = BoxBody<Bytes, std::convert::Infallible>;

/// The request header that continues a stored session (and the response
/// header that names the session a request ran in).
pub const SESSION_HEADER: &str = "x-hermes-session-id";

/// What every request handler shares.
pub(super) struct State {
    pub config: ApiServerConfig,
    pub services: Arc<Services>,
    pub runs: Arc<Semaphore>,
}

pub(super) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let origin = allowed_origin(&state.config, req.headers());
    let mut resp = route(&state, req, peer).await;
    if let Some(origin) = origin {
        let h = resp.headers_mut();
        h.insert("access-control-allow-origin", origin);
        h.insert("vary", HeaderValue::from_static("Origin"));
        h.insert(
            "access-control-expose-headers",
            HeaderValue::from_static(SESSION_HEADER),
        );
    }
    resp
}

async fn route(state: &Arc<State>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    if method == Method::OPTIONS {
        return preflight();
    }
    if matches!(path.as_str(), "/v1/health" | "/health") {
        return match method {
            Method::GET | Method::HEAD => json_response(200, &json!({"status": "ok"})),
            _ => method_not_allowed("GET"),
        };
    }
    if !authorized(state.config.key.expose(), req.headers()) {
        tracing::info!(%peer, %path, "api_server: refused a request without the right key");
        return error_response(&ApiError::unauthorized());
    }
    let model_path = path.strip_prefix("/v1/models/");
    match (path.as_str(), model_path) {
        ("/v1/models", _) if method == Method::GET => {
            json_response(200, &models(&state.config.model_name))
        }
        ("/v1/models", _) => method_not_allowed("GET"),
        (_, Some(id)) if method == Method::GET => {
            if id == state.config.model_name {
                json_response(200, &model(id))
            } else {
                error_response(&unknown_model(id))
            }
        }
        ("/v1/chat/completions", _) if method == Method::POST => match chat(state, req).await {
            Ok(resp) => resp,
            Err(e) => error_response(&e),
        },
        ("/v1/chat/completions", _) => method_not_allowed("POST"),
        _ => error_response(&ApiError::not_found(
            format!("No route {method} {path}."),
            "not_found",
        )),
    }
}

/// `Authorization: Bearer KEY`, the key compared in constant time.
fn authorized(key: &str, headers: &HeaderMap) -> bool {
    let Some(given) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    !key.is_empty() && bool::from(given.ct_eq(key.as_bytes()))
}

fn allowed_origin(config: &ApiServerConfig, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(ORIGIN)?;
    let text = origin.to_str().ok()?;
    config
        .cors_origins
        .iter()
        .any(|o| o == "*" || o == text)
        .then(|| origin.clone())
}

/// A CORS preflight: what a browser may send (the origin itself is
/// allowed, or not, by [`handle`]).
fn preflight() -> Response<Body> {
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("authorization, content-type, x-hermes-session-id"),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("600"));
    resp
}

fn models(name: &str) -> Value {
    json!({"object": "list", "data": [model(name)]})
}

fn model(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "hermes"})
}

fn unknown_model(id: &str) -> ApiError {
    ApiError::not_found(
        format!(
            "The model '{id}' does not exist; this server serves one model, see GET /v1/models."
        ),
        "model_not_found",
    )
}

fn empty() -> Body {
    Full::new(Bytes::new()).boxed()
}

pub(super) fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub(super) fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.status, &e.body())
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut resp = error_response(&ApiError::other(
        405,
        format!("Method not allowed; use {allow}."),
        "invalid_request_error",
        "method_not_allowed",
    ));
    resp.headers_mut()
        .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

async fn read_body(config: &ApiServerConfig, req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::other(
            413,
            format!(
                "The request body is larger than {} bytes.",
                config.max_body_bytes
            ),
            "invalid_request_error",
            "request_too_large",
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > config.max_body_bytes as u64) {
        return Err(too_large());
    }
    let body = Limited::new(req.into_body(), config.max_body_bytes).collect();
    match tokio::time::timeout(config.body_timeout, body).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::bad_request(
            format!("The request body could not be read: {e}"),
            None,
        )),
        Err(_) => Err(ApiError::other(
            408,
            "The request body did not arrive in time.",
            "invalid_request_error",
            "timeout",
        )),
    }
}

fn session_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    match v.to_str() {
        Ok(s) if !s.trim().is_empty() && s.len() <= 128 => Ok(Some(s.trim().to_owned())),
        _ => Err(ApiError::bad_request(
            "X-Hermes-Session-Id must be a session id (printable ASCII, at most 128 characters).",
            None,
        )),
    }
}

async fn chat(state: &Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let session = session_header(req.headers())?;
    let body = read_body(&state.config, req).await?;
    let request = wire::parse_chat_request(&body, state.config.max_messages)?;
    if request.model != state.config.model_name {
        return Err(unknown_model(&request.model));
    }
    let permit = Arc::clone(&state.runs).try_acquire_owned().map_err(|_| {
        ApiError::other(
            429,
            format!(
                "The server is answering {} requests already (API_SERVER_MAX_CONCURRENT); retry shortly.",
                state.config.max_concurrent
            ),
            "rate_limit_error",
            "rate_limit_exceeded",
        )
    })?;
    let services = Arc::clone(&state.services);
    let prepared = {
        let request = request.clone();
        hermes_runtime::task::spawn_blocking(move || {
            run::prepare(&services, &request, session.as_deref())
        })
        .await
        .map_err(|e| ApiError::other(500, format!("{e}"), "server_error", "internal_error"))??
    };
    let session_id = prepared.session_id.clone();
    let envelope = Envelope {
        id: completion_id(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: state.config.model_name.clone(),
    };
    let flag = InterruptFlag::new();
    let events = start_run(state, prepared, permit, flag.clone(), request.stream);
    let mut resp = if request.stream {
        stream::respond(&state.config, envelope, &request, events, flag).await?
    } else {
        plain(envelope, events, flag).await?
    };
    if let Ok(v) = HeaderValue::from_str(&session_id) {
        resp.headers_mut().insert(SESSION_HEADER, v);
    }
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// Starts the run on the blocking pool; it holds `permit` until it ends.
fn start_run(
    state: &Arc<State>,
    prepared: Prepared,
    permit: OwnedSemaphorePermit,
    flag: InterruptFlag,
    stream: bool,
) -> mpsc::UnboundedReceiver<RunEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    let services = Arc::clone(&state.services);
    hermes_runtime::task::spawn_blocking(move || {
        let result = run::run(&services, prepared, flag, stream, &tx);
        // The slot is free before the client can see the answer: its next
        // request must not find its own finished run still counted.
        drop(permit);
        let _ = tx.send(RunEvent::Done(result));
    });
    rx
}

/// Interrupts the run when dropped before [`Self::disarm`]: the request's
/// future is dropped when its client goes away.
pub(super) struct InterruptOnDrop(pub Option<InterruptFlag>);

impl InterruptOnDrop {
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            tracing::info!("api_server: the client went away; interrupting its run");
            flag.interrupt();
        }
    }
}

async fn plain(
    envelope: Envelope,
    mut events: mpsc::UnboundedReceiver<RunEvent>,
    flag: InterruptFlag,
) -> Result<Response<Body>, ApiError> {
    let mut guard = InterruptOnDrop(Some(flag));
    let result = loop {
        match events.recv().await {
            Some(RunEvent::Text(_)) => {}
            Some(RunEvent::Done(result)) => break result,
            None => {
                break Err(ApiError::other(
                    500,
                    "The run ended without an answer.",
                    "server_error",
                    "internal_error",
                ));
            }
        }
    };
    guard.disarm();
    let finished = result?;
    Ok(json_response(
        200,
        &envelope.completion(&finished.text, finished.finish, &finished.usage),
    ))
}

fn completion_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "chatcmpl-{nanos:x}{:04x}",
        NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}
