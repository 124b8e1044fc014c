//! The fake's Gateway: one WebSocket per connection, the opcodes of
//! Discord's Gateway (see the module docs of `discord_support`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{BOT_ID, Control, FromClient, MESSAGE_CONTENT, SessionLog, Shared, TOKEN};

#[allow(clippy::result_large_err)] // tungstenite's callback signature
pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let mut n = 0usize;
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        n += 1;
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut path = String::new();
            let ws = tokio_tungstenite::accept_hdr_async(tcp, |req: &Request, resp: Response| {
                path = req.uri().to_string();
                Ok(resp)
            })
            .await;
            if let Ok(ws) = ws {
                connection(shared, n, path, ws).await;
            }
        });
    }
}

fn close_frame(code: u16) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: match code {
            4004 => "Authentication failed.",
            4014 => "Disallowed intent(s).",
            _ => "",
        }
        .into(),
    }))
}

async fn connection(
    shared: Arc<Shared>,
    n: usize,
    path: String,
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) {
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
    {
        let mut state = shared.state();
        state.connections.push(path);
        state.live = Some((n, None, tx.clone()));
    }
    shared.changed.notify_waiters();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": shared.behaviour().heartbeat_ms}});
    let _ = sink.send(Message::text(hello.to_string())).await;
    loop {
        tokio::select! {
            c = rx.recv() => match c {
                Some(Control::Send(v)) => {
                    if sink.send(Message::text(v.to_string())).await.is_err() {
                        break;
                    }
                }
                Some(Control::Close(code)) => {
                    let _ = sink.send(close_frame(code)).await;
                    break;
                }
                Some(Control::Drop) | None => break,
            },
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(t))) => {
                    let Ok(payload) = serde_json::from_str::<Value>(t.as_str()) else {
                        let _ = sink.send(close_frame(4002)).await;
                        break;
                    };
                    handle(&shared, n, &tx, payload);
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    {
        let mut state = shared.state();
        if state.live.as_ref().is_some_and(|l| l.0 == n) {
            state.live = None;
        }
    }
    shared.changed.notify_waiters();
}

fn handle(shared: &Arc<Shared>, n: usize, tx: &mpsc::UnboundedSender<Control>, payload: Value) {
    {
        let mut state = shared.state();
        state.from_client.push(FromClient {
            connection: n,
            payload: payload.clone(),
            at: Instant::now(),
        });
    }
    shared.changed.notify_waiters();
    let d = &payload["d"];
    match payload["op"].as_u64() {
        Some(1) if shared.state().acks => {
            let _ = tx.send(Control::Send(json!({"op": 11})));
        }
        Some(2) => identify(shared, n, tx, d),
        Some(6) => resume(shared, n, tx, d),
        _ => {}
    }
}

fn token_ok(shared: &Shared, d: &Value) -> bool {
    d["token"] == TOKEN && shared.state().token_valid
}

fn identify(shared: &Arc<Shared>, n: usize, tx: &mpsc::UnboundedSender<Control>, d: &Value) {
    if !token_ok(shared, d) {
        let _ = tx.send(Control::Close(4004));
        return;
    }
    let intents = d["intents"].as_u64().unwrap_or(0);
    if intents & MESSAGE_CONTENT != 0 && !shared.behaviour().message_content_enabled {
        let _ = tx.send(Control::Close(4014));
        return;
    }
    let session = {
        let mut state = shared.state();
        let id = format!("sess{}", Shared::snowflake(&mut state));
        state.sessions.insert(id.clone(), SessionLog::default());
        state.current = Some((id.clone(), intents));
        if let Some(live) = state.live.as_mut().filter(|l| l.0 == n) {
            live.1 = Some(id.clone());
        }
        id
    };
    shared.dispatch(
        "READY",
        json!({
            "v": 10,
            "user": {"id": BOT_ID, "username": "hermes", "discriminator": "0", "bot": true},
            "guilds": [],
            "session_id": session,
            "resume_gateway_url": format!("{}/resume", shared.ws_url),
            "application": {"id": BOT_ID, "flags": 0},
        }),
    );
}

fn resume(shared: &Arc<Shared>, n: usize, tx: &mpsc::UnboundedSender<Control>, d: &Value) {
    if !token_ok(shared, d) {
        let _ = tx.send(Control::Close(4004));
        return;
    }
    let session = d["session_id"].as_str().unwrap_or_default().to_owned();
    let seq = d["seq"].as_u64();
    let ok = {
        let mut state = shared.state();
        let known = state.current.as_ref().is_some_and(|c| c.0 == session);
        let replay_all = state.replay_all;
        let missed: Option<Vec<Value>> = match (known, state.sessions.get(&session)) {
            (true, Some(log)) if seq.is_none_or(|s| s <= log.seq) => {
                let after = if replay_all { 0 } else { seq.unwrap_or(0) };
                Some(
                    log.events
                        .iter()
                        .filter(|e| e["s"].as_u64() > Some(after))
                        // Session events are not replayed, messages are.
                        .filter(|e| e["t"] != "READY" && e["t"] != "RESUMED")
                        .cloned()
                        .collect(),
                )
            }
            _ => None,
        };
        match missed {
            Some(events) => {
                for e in events {
                    let _ = tx.send(Control::Send(e));
                }
                state.replay_all = false;
                if let Some(live) = state.live.as_mut().filter(|l| l.0 == n) {
                    live.1 = Some(session.clone());
                }
                true
            }
            None => false,
        }
    };
    if ok {
        shared.dispatch("RESUMED", json!(null));
    } else {
        // Discord waits a moment before telling a client its session is gone.
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(Control::Send(json!({"op": 9, "d": false})));
        });
    }
}
