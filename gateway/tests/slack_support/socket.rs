//! The fake's Socket Mode WebSocket: one-use ticket URLs, `hello` first,
//! envelopes out, acknowledgements in (see the module docs).

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

use super::{Control, Shared};

#[allow(clippy::result_large_err)] // tungstenite's callback signature
pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                let ticket = req
                    .uri()
                    .query()
                    .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("ticket=")))
                    .unwrap_or_default()
                    .to_owned();
                let mut state = shared.state();
                match state.tickets.iter().position(|t| *t == ticket) {
                    Some(i) => {
                        state.tickets.remove(i);
                        Ok(resp)
                    }
                    None => {
                        let mut refused = ErrorResponse::new(Some("invalid ticket".to_owned()));
                        *refused.status_mut() =
                            tokio_tungstenite::tungstenite::http::StatusCode::UNAUTHORIZED;
                        Err(refused)
                    }
                }
            };
            if let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, check).await {
                connection(shared, ws).await;
            }
        });
    }
}

async fn connection(
    shared: Arc<Shared>,
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) {
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
    let n = {
        let mut state = shared.state();
        state.connections += 1;
        let n = state.connections;
        state.live.push((n, tx.clone()));
        n
    };
    let live = shared.state().live.len();
    let hello = json!({"type": "hello", "num_connections": live,
        "debug_info": {"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A0FAKEAPP"}});
    let _ = sink.send(Message::text(hello.to_string())).await;
    shared.changed.notify_waiters();
    if shared.state().behaviour.cut_after_hello {
        shared.state().live.retain(|(k, _)| *k != n);
        return;
    }
    shared.pump();
    loop {
        tokio::select! {
            c = rx.recv() => match c {
                Some(Control::Send(v)) => {
                    if sink.send(Message::text(v.to_string())).await.is_err() {
                        break;
                    }
                }
                Some(Control::Raw(text)) => {
                    if sink.send(Message::text(text)).await.is_err() {
                        break;
                    }
                }
                Some(Control::CloseAfter(grace)) => {
                    // No new envelopes go to a socket told to go.
                    shared.state().live.retain(|(k, _)| *k != n);
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = tx.send(Control::Drop);
                    });
                }
                Some(Control::Drop) | None => break,
            },
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    if let Some(id) = v.get("envelope_id").and_then(Value::as_str) {
                        shared.ack(n, id);
                    }
                }
                Some(Ok(Message::Ping(p))) => {
                    let _ = sink.send(Message::Pong(p)).await;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    let mut state = shared.state();
    state.live.retain(|(k, _)| *k != n);
    // What this socket did not acknowledge goes to the next one at once.
    for p in state.pending.iter_mut() {
        if p.in_flight.is_some() {
            p.in_flight = None;
        }
    }
    drop(state);
    shared.changed.notify_waiters();
}
