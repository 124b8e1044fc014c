//! The WebSocket side: accepting connections, reading every client frame
//! and checking the rules of the module docs, and acks.

use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::rules::{markdown_content, stream_frame, upload_step};
use super::{Received, Shared};

pub(super) fn ack(req_id: &str, errcode: i64, errmsg: &str) -> Message {
    Message::text(
        json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": errmsg}).to_string(),
    )
}

pub(super) fn ack_body(req_id: &str, body: Value) -> Message {
    Message::text(
        json!({"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok", "body": body})
            .to_string(),
    )
}

pub(super) async fn serve(
    s: Arc<Shared>,
    conn: usize,
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    let (mut sink, mut stream) = ws.split();
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<(String, Message)>();
    let mut subscribed = false;
    let mut first = true;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => {
                    let close = matches!(m, Message::Close(_));
                    if sink.send(m).await.is_err() || close {
                        return;
                    }
                }
                None => return,
            },
            Some((req_id, m)) = ack_rx.recv() => {
                s.in_flight.lock().unwrap().remove(&req_id);
                if sink.send(m).await.is_err() {
                    return;
                }
            }
            msg = stream.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(other)) => {
                        s.violations.lock().unwrap().push(format!("conn {conn}: non-text frame {other:?}"));
                        continue;
                    }
                };
                let mut problems = Vec::new();
                let frame: Value = match serde_json::from_str(&text) {
                    Ok(v) => v,
                    Err(e) => {
                        s.violations.lock().unwrap().push(format!("conn {conn}: not JSON ({e}): {text}"));
                        continue;
                    }
                };
                let cmd = frame["cmd"].as_str().unwrap_or("").to_owned();
                let req_id = frame["headers"]["req_id"].as_str().unwrap_or("").to_owned();
                if cmd.is_empty() {
                    problems.push(format!("frame without cmd: {text}"));
                }
                if req_id.is_empty() {
                    problems.push(format!("frame without headers.req_id: {text}"));
                }
                if first && cmd != "aibot_subscribe" {
                    problems.push(format!("first frame must be aibot_subscribe, got {cmd}"));
                }
                first = false;
                if cmd != "aibot_subscribe" && !subscribed {
                    problems.push(format!("{cmd} before a successful subscribe"));
                }
                let behaviour = s.behaviour.lock().unwrap().clone();
                let mut reply: Option<Message> = None;
                let mut delayed = false;
                match cmd.as_str() {
                    "aibot_subscribe" => {
                        let body = &frame["body"];
                        let (Some(bot), Some(secret)) = (body["bot_id"].as_str(), body["secret"].as_str()) else {
                            problems.push(format!("subscribe body needs bot_id and secret: {body}"));
                            continue;
                        };
                        if bot == behaviour.bot_id && secret == behaviour.secret {
                            subscribed = true;
                            reply = Some(ack(&req_id, 0, "ok"));
                        } else {
                            reply = Some(ack(&req_id, 40058, "invalid bot_id or secret"));
                        }
                    }
                    "ping" => {
                        if frame.get("body").is_some() {
                            problems.push("ping must have no body".into());
                        }
                        if behaviour.ack_pings && behaviour.mute_pings_on != Some(conn) {
                            reply = Some(ack(&req_id, 0, "ok"));
                        }
                    }
                    "aibot_respond_msg" => {
                        if !s.issued_callbacks.lock().unwrap().contains(&(conn, req_id.clone())) {
                            problems.push(format!("respond_msg with req_id {req_id} that is no callback of this connection"));
                        }
                        if frame["body"]["msgtype"] == "stream" {
                            stream_frame(&s, &req_id, &frame["body"], &mut problems);
                        } else {
                            if s.streams.lock().unwrap().contains_key(&req_id) {
                                problems.push(format!("markdown reply on {req_id}, which streams"));
                            }
                            s.answered.lock().unwrap().insert(req_id.clone());
                            markdown_content(&frame["body"], &mut problems);
                        }
                        delayed = true;
                        if behaviour.ack_replies {
                            reply = Some(match behaviour.refuse_respond {
                                Some(code) => ack(&req_id, code, "req_id expired"),
                                None => ack(&req_id, 0, "ok"),
                            });
                        }
                    }
                    "aibot_send_msg" => {
                        let body = &frame["body"];
                        if body["chatid"].as_str().is_none_or(str::is_empty) {
                            problems.push(format!("send_msg without chatid: {body}"));
                        }
                        let reused = s.issued_callbacks.lock().unwrap().iter().any(|(_, r)| *r == req_id)
                            || !s.send_ids.lock().unwrap().insert(req_id.clone());
                        if reused {
                            problems.push(format!("send_msg must use a fresh req_id, got {req_id}"));
                        }
                        if body["msgtype"] == "file" {
                            let media = body["file"]["media_id"].as_str().and_then(|id| s.media.lock().unwrap().get(id).cloned());
                            match media {
                                Some((name, bytes)) => s.files.lock().unwrap().push((
                                    body["chatid"].as_str().unwrap_or("").to_owned(),
                                    name,
                                    bytes,
                                )),
                                None => problems.push(format!("file message with an unknown media_id: {body}")),
                            }
                        } else {
                            markdown_content(body, &mut problems);
                        }
                        delayed = true;
                        if behaviour.ack_replies {
                            reply = Some(ack(&req_id, 0, "ok"));
                        }
                    }
                    "aibot_respond_welcome_msg" => {
                        if !s.issued_events.lock().unwrap().contains(&(conn, req_id.clone())) {
                            problems.push(format!("welcome with req_id {req_id} that is no event of this connection"));
                        }
                        let body = &frame["body"];
                        if body["msgtype"] != "text" || body["text"]["content"].as_str().is_none() {
                            problems.push(format!("welcome body must be text: {body}"));
                        }
                        delayed = true;
                        reply = Some(ack(&req_id, 0, "ok"));
                    }
                    "aibot_upload_media_init" | "aibot_upload_media_chunk" | "aibot_upload_media_finish" => {
                        delayed = true;
                        reply = Some(upload_step(&s, &cmd, &frame["body"], &req_id, &mut problems));
                    }
                    other => problems.push(format!("unknown cmd {other}")),
                }
                if delayed {
                    let mut in_flight = s.in_flight.lock().unwrap();
                    if !in_flight.insert(req_id.clone()) {
                        problems.push(format!("second frame for {req_id} before the first was acked"));
                    }
                    let mut max = s.max_in_flight.lock().unwrap();
                    *max = (*max).max(in_flight.len());
                }
                if !problems.is_empty() {
                    let mut v = s.violations.lock().unwrap();
                    v.extend(problems.into_iter().map(|p| format!("conn {conn}: {p}")));
                }
                s.received.lock().unwrap().push(Received { conn, cmd, req_id: req_id.clone(), frame, at: Instant::now() });
                s.changed.notify_waiters();
                if let Some(m) = reply {
                    if delayed {
                        let tx = ack_tx.clone();
                        let delay = behaviour.ack_delay;
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send((req_id, m));
                        });
                    } else if sink.send(m).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
