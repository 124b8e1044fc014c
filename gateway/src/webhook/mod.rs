//! Webhooks in: `POST /hooks/NAME` on `WEBHOOK_HOST:WEBHOOK_PORT` turns a
//! signed event into a one-off scheduled job, so it reaches its chat
//! through the scheduler's outbox exactly as a job's answer does (`cron`:
//! claim, run in a session of its own, answer stored before it is sent,
//! delivery recorded after; retried, reported when it fails).
//!
//! Acceptance, in order: the route exists (`404`), the body is within the
//! cap (`413`), the signature or token is right (`401`, compared in
//! constant time; nothing is stored and no model is called), then the
//! event's job is written — its id is derived from the route and the
//! idempotency key (`X-GitHub-Delivery`, else `Idempotency-Key`, else a
//! hash of the body), so a retried delivery finds its job and is answered
//! `202` without doing anything — unless the route's rate limit is hit
//! (`429`). The `202` goes out only after the job's row is committed.

pub mod config;
pub mod template;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hermes_core::Clock;
use hermes_runtime::store::{JobRecord, Store};
use hermes_runtime::sync::lock;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{Route, RouteAuth, WebhookConfigError, WebhookSettings};

use crate::http_server::{self, Limits};

/// Webhook events' job ids start with this (`cron` jobs' with `j`); their
/// runs take the stored prompt as the whole user message.
pub use crate::cron::WEBHOOK_JOB_PREFIX;

/// The webhook settings of `settings`, `None` when the listener is off.
pub fn settings(
    settings: &hermes_runtime::config::Settings,
) -> Result<Option<WebhookSettings>, WebhookConfigError> {
    config::from_sources(&settings.file, &|name| {
        settings.var(name).map(str::to_owned)
    })
}

/// Starts the listener when `[webhooks]` has a port and a scheduler runs
/// (`delivers`) to carry the events on; `None` otherwise.
pub async fn start(
    settings: &hermes_runtime::config::Settings,
    store: Arc<Mutex<Store>>,
    delivers: bool,
) -> Result<Option<WebhookServer>, crate::error::GatewayError> {
    let config = self::settings(settings)
        .map_err(|e| crate::error::GatewayError::Platform(e.to_string()))?;
    match config {
        Some(config) if delivers => {
            let clock = Arc::new(hermes_runtime::store::SystemClock);
            Ok(Some(WebhookServer::bind(config, store, clock).await?))
        }
        Some(_) => {
            tracing::warn!("webhooks need a chat platform to deliver to; the listener is off");
            Ok(None)
        }
        None => Ok(None),
    }
}

/// What the handler shares.
struct State {
    settings: WebhookSettings,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    /// Accepted events' times (ms) of the last minute, by route.
    recent: Mutex<HashMap<String, VecDeque<u64>>>,
}

/// A running webhook listener.
#[derive(Debug)]
pub struct WebhookServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl WebhookServer {
    /// Binds `settings.listen` and serves on the current runtime; events
    /// become jobs in `store` (the scheduler's).
    pub async fn bind(
        settings: WebhookSettings,
        store: Arc<Mutex<Store>>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(settings.listen).await?;
        let addr = listener.local_addr()?;
        let limits = Limits {
            name: "webhooks",
            max_connections: settings.max_connections,
            header_timeout: settings.header_timeout,
            max_buf_size: 64 * 1024,
            shutdown_grace: settings.shutdown_grace,
        };
        let routes: Vec<&str> = settings.routes.keys().map(String::as_str).collect();
        tracing::info!(%addr, ?routes, "webhooks: listening");
        let state = Arc::new(State {
            settings,
            store,
            clock,
            recent: Mutex::default(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let handler = move |req, _peer| handle(Arc::clone(&state), req);
        let task =
            hermes_runtime::task::spawn(http_server::serve(listener, limits, handler, stop_rx));
        Ok(WebhookServer { addr, stop, task })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for requests in flight (up to the grace).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

type Body = Full<Bytes>;

fn answer(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "status": status.as_u16(), "message": message });
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let Some(name) = req.uri().path().strip_prefix("/hooks/").map(str::to_owned) else {
        return answer(
            StatusCode::NOT_FOUND,
            "not found; routes are POST /hooks/NAME",
        );
    };
    let Some(route) = state.settings.routes.get(&name).cloned() else {
        return answer(StatusCode::NOT_FOUND, "no such webhook route");
    };
    if req.method() != Method::POST {
        return answer(StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    let headers = req.headers().clone();
    let body = match read_body(&state.settings, req).await {
        Ok(body) => body,
        Err(resp) => return resp,
    };
    if !authentic(&route.auth, &headers, &body) {
        tracing::warn!(route = %name, "webhooks: refused an event with a bad signature or token");
        return answer(StatusCode::UNAUTHORIZED, "bad signature or token");
    }
    let key = header_text(&headers, "x-github-delivery")
        .or_else(|| header_text(&headers, "idempotency-key"))
        .unwrap_or_else(|| hex(&Sha256::digest(&body)));
    let job_id = event_job_id(&name, &key);
    let accepted =
        hermes_runtime::task::spawn_blocking(move || state.accept(&route, &job_id, &body)).await;
    match accepted {
        Ok(Accepted::New) => answer(StatusCode::ACCEPTED, "accepted"),
        Ok(Accepted::Duplicate) => answer(StatusCode::ACCEPTED, "already accepted"),
        Ok(Accepted::RateLimited) => {
            let mut resp = answer(
                StatusCode::TOO_MANY_REQUESTS,
                "this route's rate limit is reached; try again in a minute",
            );
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from_static("60"));
            resp
        }
        Ok(Accepted::Failed(why)) => {
            tracing::error!(route = %name, error = %why, "webhooks: cannot store an event");
            answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot store the event; retry later",
            )
        }
        Err(e) => {
            tracing::error!(route = %name, error = %e, "webhooks: the handler panicked");
            answer(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

async fn read_body(
    settings: &WebhookSettings,
    req: Request<Incoming>,
) -> Result<Bytes, Response<Body>> {
    let max = settings.max_body_bytes;
    let too_large = || {
        answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {max} bytes"),
        )
    };
    let declared =
        header_text(req.headers(), CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let body = Limited::new(req.into_body(), max).collect();
    match tokio::time::timeout(settings.body_timeout, body).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(_)) => Err(answer(
            StatusCode::BAD_REQUEST,
            "the body could not be read",
        )),
        Err(_) => Err(answer(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
    }
}

fn header_text(headers: &hyper::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(str::to_owned)
}

/// Whether the request carries the route's proof: the HMAC of the raw
/// body, or the bearer token; both compared in constant time.
fn authentic(auth: &RouteAuth, headers: &hyper::HeaderMap, body: &[u8]) -> bool {
    match auth {
        RouteAuth::Hmac(secret) => {
            let Some(given) = header_text(headers, "x-hub-signature-256")
                .and_then(|v| v.strip_prefix("sha256=").and_then(unhex))
            else {
                return false;
            };
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
                return false;
            };
            mac.update(body);
            mac.verify_slice(&given).is_ok()
        }
        RouteAuth::Bearer(token) => {
            let Some(given) = headers
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
            else {
                return false;
            };
            bool::from(given.trim().as_bytes().ct_eq(token.expose().as_bytes()))
        }
    }
}

/// The job id of route `name`'s event with idempotency `key`.
pub fn event_job_id(name: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0]);
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    format!("{WEBHOOK_JOB_PREFIX}{}", hex(&digest[..8]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

enum Accepted {
    New,
    Duplicate,
    RateLimited,
    Failed(String),
}

impl State {
    /// Stores the event's job once (blocking: the store).
    fn accept(&self, route: &Route, job_id: &str, body: &[u8]) -> Accepted {
        let now = self.clock.now_ms();
        let mut store = lock(&self.store);
        match store.find_job(job_id) {
            Ok(Some(job)) if job.id == job_id => return Accepted::Duplicate,
            Ok(_) => {}
            Err(e) => return Accepted::Failed(e.to_string()),
        }
        {
            let mut recent = lock(&self.recent);
            let times = recent.entry(route.name.clone()).or_default();
            while times
                .front()
                .is_some_and(|t| now.saturating_sub(*t) >= 60_000)
            {
                times.pop_front();
            }
            if times.len() >= route.rate_limit as usize {
                return Accepted::RateLimited;
            }
            times.push_back(now);
        }
        let prompt = if route.no_agent {
            template::render(
                route
                    .prompt
                    .as_deref()
                    .unwrap_or(template::DEFAULT_TEMPLATE),
                body,
                false,
            )
        } else {
            template::agent_message(&route.name, route.prompt.as_deref(), body)
        };
        let job = JobRecord {
            no_agent: route.no_agent,
            ..JobRecord::one_off(
                job_id.to_owned(),
                format!("webhook {}", route.name),
                prompt,
                route.deliver.clone(),
                now,
            )
        };
        match store.job_insert(&job) {
            Ok(()) => {
                tracing::info!(route = %route.name, job = %job.id, "webhooks: event accepted");
                Accepted::New
            }
            // Two copies at once: the second insert meets the first's row.
            Err(e) => match store.find_job(job_id) {
                Ok(Some(found)) if found.id == job_id => Accepted::Duplicate,
                _ => Accepted::Failed(e.to_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_are_stable_per_route_and_key_and_hex_round_trips() {
        assert_eq!(event_job_id("ci", "d1"), event_job_id("ci", "d1"));
        assert_ne!(event_job_id("ci", "d1"), event_job_id("cd", "d1"));
        assert_eq!(event_job_id("ci", "d1").len(), 17);
        assert_eq!(unhex(&hex(&[0, 15, 255])).unwrap(), vec![0, 15, 255]);
        assert!(unhex("zz").is_none() && unhex("abc").is_none());
    }
}
