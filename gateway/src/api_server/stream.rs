//! `stream: true`: Server-Sent Events of `chat.completion.chunk` objects,
//! then `data: [DONE]`.
//!
//! The head waits (up to `stream_head_wait`) for the run's first event, so
//! an upstream failure before any text is still a `502` in OpenAI's error
//! shape; after the head, a failure is an `error` event (which OpenAI's
//! clients raise). While the agent works without text (a tool running), a
//! comment line every few seconds keeps proxies from timing out and finds a
//! client that went away: its run is interrupted.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Frame};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use hermes_core::InterruptFlag;

use super::config::ApiServerConfig;
use super::handler::{Body, InterruptOnDrop};
use super::run::RunEvent;
use super::wire::{ApiError, ChatRequest, Envelope};

/// How often a quiet stream sends a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// A response body fed by a channel: hyper drops it when the client goes
/// away, which closes the channel.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Answers a streamed request: waits for the first event, then hands the
/// rest to a task that writes the stream.
pub(super) async fn respond(
    config: &ApiServerConfig,
    envelope: Envelope,
    request: &ChatRequest,
    mut events: mpsc::UnboundedReceiver<RunEvent>,
    flag: InterruptFlag,
) -> Result<Response<Body>, ApiError> {
    let mut guard = InterruptOnDrop(Some(flag.clone()));
    let first = match tokio::time::timeout(config.stream_head_wait, events.recv()).await {
        Ok(Some(RunEvent::Done(Err(e)))) => {
            guard.disarm();
            return Err(e);
        }
        Ok(None) => {
            guard.disarm();
            return Err(ApiError::other(
                500,
                "The run ended without an answer.",
                "server_error",
                "internal_error",
            ));
        }
        Ok(Some(ev)) => Some(ev),
        Err(_) => None,
    };
    guard.disarm();
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let include_usage = request.include_usage;
    hermes_runtime::task::spawn(async move {
        let pump = Pump {
            tx,
            envelope,
            include_usage,
        };
        if !pump.run(first, events).await {
            tracing::info!("api_server: the streaming client went away; interrupting its run");
            flag.interrupt();
        }
    });
    let mut resp = Response::new(ChannelBody(rx).boxed());
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

struct Pump {
    tx: mpsc::Sender<Bytes>,
    envelope: Envelope,
    include_usage: bool,
}

impl Pump {
    async fn send(&self, bytes: Bytes) -> bool {
        self.tx.send(bytes).await.is_ok()
    }

    async fn delta(&self, delta: Value, finish: Option<&str>) -> bool {
        let chunk = self.envelope.chunk(delta, finish, self.include_usage);
        self.send(event(&chunk)).await
    }

    /// Writes the stream to its end; `false` when the client went away
    /// before it.
    async fn run(
        &self,
        mut next: Option<RunEvent>,
        mut events: mpsc::UnboundedReceiver<RunEvent>,
    ) -> bool {
        if !self
            .delta(json!({"role": "assistant", "content": ""}), None)
            .await
        {
            return false;
        }
        let mut tick = tokio::time::interval(KEEP_ALIVE);
        tick.tick().await;
        loop {
            let ev = match next.take() {
                Some(ev) => ev,
                None => tokio::select! {
                    ev = events.recv() => match ev {
                        Some(ev) => ev,
                        None => return true,
                    },
                    _ = tick.tick() => {
                        if !self.send(Bytes::from_static(b": working\n\n")).await {
                            return false;
                        }
                        continue;
                    }
                    _ = self.tx.closed() => return false,
                },
            };
            match ev {
                RunEvent::Text(t) => {
                    if !self.delta(json!({"content": t}), None).await {
                        return false;
                    }
                }
                RunEvent::Done(Ok(finished)) => {
                    if !finished.streamed
                        && !finished.text.is_empty()
                        && !self.delta(json!({"content": finished.text}), None).await
                    {
                        return false;
                    }
                    if !self.delta(json!({}), Some(finished.finish)).await {
                        return false;
                    }
                    if self.include_usage
                        && !self
                            .send(event(&self.envelope.usage_chunk(&finished.usage)))
                            .await
                    {
                        return false;
                    }
                    return self.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                }
                RunEvent::Done(Err(e)) => {
                    return self.send(event(&e.body())).await;
                }
            }
        }
    }
}
