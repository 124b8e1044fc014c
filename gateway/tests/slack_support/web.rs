//! The fake's Web API (hyper, HTTP/1.1) under `/api`, the upload URLs and
//! users' files (see the module docs).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

use super::{APP_TOKEN, BOT_TOKEN, BOT_USER, BotMessage, Call, Shared, TEAM};

pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(answer(&shared, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn respond(
    status: u16,
    headers: &[(&str, String)],
    content_type: &str,
    body: Vec<u8>,
) -> Response<Full<Bytes>> {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", content_type);
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Full::new(Bytes::from(body))).unwrap()
}

fn decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_decode(&s)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form(text: &str, into: &mut Map<String, Value>) {
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        into.insert(decode(k), json!(decode(v)));
    }
}

async fn answer(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let auth = header("authorization");
    let content_type = header("content-type");
    let bytes = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut token = auth.strip_prefix("Bearer ").unwrap_or_default().to_owned();
    // Users' files: only with the bot token; else the sign-in page.
    if path.starts_with("/files-pri/") {
        let mut state = shared.state();
        let authorised = token == BOT_TOKEN && !state.bot_revoked;
        state.downloads.push((path.clone(), authorised));
        return match (authorised, state.files.get(&path)) {
            (true, Some((mime, data))) => respond(200, &[], mime, data.clone()),
            (true, None) => respond(404, &[], "text/plain", b"file not found".to_vec()),
            (false, _) => respond(
                200,
                &[],
                "text/html; charset=utf-8",
                b"<html><body>Sign in to Slack</body></html>".to_vec(),
            ),
        };
    }
    if let Some(file_id) = path.strip_prefix("/upload/v1/") {
        let mut state = shared.state();
        return match state.uploads.get_mut(file_id) {
            Some(upload) => {
                let data = if content_type.starts_with("multipart/form-data") {
                    multipart_file(&bytes, &content_type).unwrap_or_default()
                } else {
                    bytes.to_vec()
                };
                let len = data.len();
                upload.2 = Some(data);
                respond(200, &[], "text/plain", format!("OK - {len}").into_bytes())
            }
            None => respond(404, &[], "text/plain", b"unknown upload".to_vec()),
        };
    }
    let Some(method) = path.strip_prefix("/api/") else {
        return respond(404, &[], "text/plain", b"not found".to_vec());
    };
    let mut args = Map::new();
    form(&query, &mut args);
    if content_type.starts_with("application/json") {
        if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&bytes) {
            args.extend(m);
        }
    } else {
        form(&String::from_utf8_lossy(&bytes), &mut args);
    }
    if token.is_empty()
        && let Some(Value::String(t)) = args.get("token")
    {
        token.clone_from(t);
    }
    let args = Value::Object(args);
    let (status, headers, body) = call(shared, method, &token, &args);
    let error = body.get("error").and_then(Value::as_str).map(str::to_owned);
    shared.state().calls.push(Call {
        method: method.to_owned(),
        token: token.chars().take(5).collect(),
        args,
        status,
        error,
        at: Instant::now(),
    });
    shared.changed.notify_waiters();
    respond(
        status,
        &headers,
        "application/json; charset=utf-8",
        body.to_string().into_bytes(),
    )
}

fn fail(error: &str) -> (u16, Vec<(&'static str, String)>, Value) {
    (200, Vec::new(), json!({"ok": false, "error": error}))
}

fn call(
    shared: &Shared,
    method: &str,
    token: &str,
    args: &Value,
) -> (u16, Vec<(&'static str, String)>, Value) {
    let mut state = shared.state();
    // Authentication first, as Slack does.
    let wants_app = method == "apps.connections.open";
    match token {
        "" => return fail("not_authed"),
        t if t == APP_TOKEN => {
            if !wants_app {
                return fail("not_allowed_token_type");
            }
        }
        t if t == BOT_TOKEN => {
            if state.bot_revoked {
                return fail("token_revoked");
            }
            if wants_app {
                return fail("not_allowed_token_type");
            }
        }
        _ => return fail("invalid_auth"),
    }
    if let Some(secs) = state.limits.get_mut(method).and_then(|q| q.pop_front()) {
        state.throttled += 1;
        return (
            429,
            vec![("retry-after", secs.to_string())],
            json!({"ok": false, "error": "ratelimited"}),
        );
    }
    let arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    state.next += 1;
    let n = state.next;
    match method {
        "apps.connections.open" => {
            let ticket = format!("t{n:08}");
            state.tickets.push(ticket.clone());
            (
                200,
                Vec::new(),
                json!({"ok": true, "url": format!("{}/link/?ticket={ticket}&app_id=A0FAKEAPP", shared.ws_base)}),
            )
        }
        "auth.test" => (
            200,
            Vec::new(),
            json!({"ok": true, "url": "https://fake.slack.com/", "team": "Fake Team",
            "user": "hermes", "team_id": TEAM, "user_id": BOT_USER, "bot_id": "B0FAKE", "is_enterprise_install": false}),
        ),
        "chat.postMessage" => {
            let Some(channel) = arg("channel").filter(|c| !c.is_empty()) else {
                return fail("channel_not_found");
            };
            if !channel.starts_with(['C', 'D', 'G']) {
                return fail("channel_not_found");
            }
            let Some(text) = arg("text").filter(|t| !t.trim().is_empty()) else {
                return fail("no_text");
            };
            if text.chars().count() > 40_000 {
                return fail("msg_too_long");
            }
            let ts = format!("1700000001.{n:06}");
            let thread_ts = arg("thread_ts");
            state.posted.push(BotMessage {
                channel: channel.clone(),
                ts: ts.clone(),
                thread_ts: thread_ts.clone(),
                text: text.clone(),
                file: None,
                at: Instant::now(),
            });
            (
                200,
                Vec::new(),
                json!({"ok": true, "channel": channel, "ts": ts,
                "message": {"type": "message", "user": BOT_USER, "bot_id": "B0FAKE", "text": text, "ts": ts, "thread_ts": thread_ts}}),
            )
        }
        "reactions.add" => {
            let (Some(channel), Some(ts), Some(name)) =
                (arg("channel"), arg("timestamp"), arg("name"))
            else {
                return fail("invalid_arguments");
            };
            let reaction = (channel, ts, name);
            if state.reactions.contains(&reaction) {
                return fail("already_reacted");
            }
            state.reactions.push(reaction);
            (200, Vec::new(), json!({"ok": true}))
        }
        "files.getUploadURLExternal" => {
            let name = arg("filename").filter(|f| !f.is_empty());
            let length = args.get("length").and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            });
            let (Some(name), Some(length)) = (name, length) else {
                return fail("invalid_arguments");
            };
            let file_id = format!("F{n:08}");
            state
                .uploads
                .insert(file_id.clone(), (name, length as usize, None));
            (
                200,
                Vec::new(),
                json!({"ok": true, "upload_url": format!("{}/upload/v1/{file_id}", shared.base), "file_id": file_id}),
            )
        }
        "files.completeUploadExternal" => {
            let files = match args.get("files") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let Some(list) = files.as_array().filter(|l| !l.is_empty()) else {
                return fail("invalid_arguments");
            };
            let channel = arg("channel_id");
            let mut shared_files = Vec::new();
            for f in list {
                let id = f.get("id").and_then(Value::as_str).unwrap_or_default();
                match state.uploads.get(id) {
                    Some((name, length, Some(data))) if data.len() == *length => {
                        shared_files.push((id.to_owned(), name.clone(), data.clone()))
                    }
                    _ => return fail("file_not_found"),
                }
            }
            let thread_ts = arg("thread_ts");
            let comment = arg("initial_comment").unwrap_or_default();
            if let Some(channel) = &channel {
                for (_, name, data) in &shared_files {
                    state.next += 1;
                    let ts = format!("1700000001.{:06}", state.next);
                    state.posted.push(BotMessage {
                        channel: channel.clone(),
                        ts,
                        thread_ts: thread_ts.clone(),
                        text: comment.clone(),
                        file: Some((name.clone(), data.clone())),
                        at: Instant::now(),
                    });
                }
            }
            let files: Vec<Value> = shared_files
                .iter()
                .map(|(id, name, _)| json!({"id": id, "title": name}))
                .collect();
            (200, Vec::new(), json!({"ok": true, "files": files}))
        }
        _ => fail("unknown_method"),
    }
}

/// The first file part of a `multipart/form-data` body.
fn multipart_file(body: &[u8], content_type: &str) -> Option<Vec<u8>> {
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let delimiter = format!("--{boundary}");
    let text = body;
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let start = find(text, delimiter.as_bytes(), 0)?;
    let headers_end = find(text, b"\r\n\r\n", start)? + 4;
    let end = find(text, format!("\r\n{delimiter}").as_bytes(), headers_end)?;
    Some(text[headers_end..end].to_vec())
}
