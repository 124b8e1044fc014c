//! The fake's REST API (hyper, HTTP/1.1), under `/api/v10`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{BOT_ID, Posted, RestCall, Shared, TOKEN};

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

/// An answer: status, extra headers, JSON body (`None`: 204).
pub(super) struct Out {
    pub(super) status: u16,
    pub(super) headers: Vec<(&'static str, String)>,
    pub(super) body: Option<Value>,
}

pub(super) fn out(status: u16, body: Value) -> Out {
    Out {
        status,
        headers: Vec::new(),
        body: Some(body),
    }
}

async fn answer(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    // A message with files: the JSON is the `payload_json` part, the files
    // are recorded under `"files"` (name, file name, text).
    let body: Value = match content_type.split_once("boundary=") {
        Some((_, boundary)) => multipart(&bytes, boundary),
        None => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    // The CDN (no token: attachment URLs are signed by Discord).
    if method == "GET" && path.starts_with("/attachments/") {
        let mut state = shared.state();
        state.cdn_requests.push((path.clone(), auth.clone()));
        let file = state.cdn.get(&path).cloned();
        drop(state);
        shared.changed.notify_waiters();
        return match file {
            Some((mime, bytes)) => Response::builder()
                .status(200)
                .header("content-type", mime)
                .body(Full::new(Bytes::from(bytes))),
            None => Response::builder()
                .status(404)
                .body(Full::new(Bytes::new())),
        }
        .unwrap();
    }
    let route = path.strip_prefix("/api/v10").unwrap_or("").to_owned();
    // Responding to an interaction needs no bot token: the interaction's
    // own token, in the path, is the credential.
    let o = if route.starts_with("/interactions/") {
        super::interactions::callback(shared, &route, &body)
    } else if auth != format!("Bot {TOKEN}") || !shared.state().token_valid {
        out(401, json!({"message": "401: Unauthorized", "code": 0}))
    } else {
        route_request(shared, &method, &route, &query, &body)
    };
    {
        let mut state = shared.state();
        state.rest.push(RestCall {
            method,
            path: route,
            body,
            status: o.status,
            at: Instant::now(),
        });
    }
    shared.changed.notify_waiters();
    let mut resp = Response::builder().status(o.status);
    for (k, v) in &o.headers {
        resp = resp.header(*k, v);
    }
    match o.body {
        Some(b) => resp
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(b.to_string()))),
        None => resp.body(Full::new(Bytes::new())),
    }
    .unwrap()
}

fn route_request(shared: &Shared, method: &str, route: &str, query: &str, body: &Value) -> Out {
    let parts: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["gateway", "bot"]) => out(
            200,
            json!({"url": format!("{}/gw", shared.ws_url), "shards": 1,
                   "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
        ),
        ("GET", ["users", "@me"]) => out(
            200,
            json!({"id": BOT_ID, "username": "hermes", "discriminator": "0", "bot": true}),
        ),
        ("GET", ["applications", "@me"]) => {
            let flags = if shared.behaviour().message_content_enabled {
                1u64 << 19
            } else {
                0
            };
            out(200, json!({"id": BOT_ID, "name": "hermes", "flags": flags}))
        }
        ("POST", ["users", "@me", "channels"]) => {
            let user = body["recipient_id"].as_str().unwrap_or_default().to_owned();
            if user.is_empty() {
                return out(400, json!({"message": "Invalid Form Body", "code": 50035}));
            }
            let id = {
                let mut state = shared.state();
                match state.dm_of.get(&user) {
                    Some(c) => c.clone(),
                    None => {
                        let id = Shared::snowflake(&mut state);
                        state.dm_of.insert(user.clone(), id.clone());
                        state.channels.insert(id.clone());
                        id
                    }
                }
            };
            out(
                200,
                json!({"id": id, "type": 1, "recipients": [{"id": user}]}),
            )
        }
        ("POST", ["channels", channel, "typing"]) => {
            if !shared.state().channels.contains(*channel) {
                return unknown_channel();
            }
            shared.state().typing.push((*channel).to_owned());
            Out {
                status: 204,
                headers: Vec::new(),
                body: None,
            }
        }
        ("POST", ["channels", channel, "messages"]) => create_message(shared, channel, body),
        ("GET", ["channels", channel, "messages"]) => list_messages(shared, channel, query),
        ("PATCH", ["channels", channel, "messages", id]) => edit_message(shared, channel, id, body),
        _ => out(404, json!({"message": "404: Not Found", "code": 0})),
    }
}

fn unknown_channel() -> Out {
    out(404, json!({"message": "Unknown Channel", "code": 10003}))
}

fn limited(retry_after: f64, global: bool, bucket: bool) -> Out {
    let mut headers = vec![("retry-after", format!("{}", retry_after.ceil() as u64))];
    if global {
        headers.push(("x-ratelimit-global", "true".into()));
        headers.push(("x-ratelimit-scope", "global".into()));
    } else {
        headers.push(("x-ratelimit-scope", "user".into()));
    }
    if bucket {
        headers.push(("x-ratelimit-bucket", "chanmsgs".into()));
        headers.push(("x-ratelimit-remaining", "0".into()));
        headers.push(("x-ratelimit-reset-after", format!("{retry_after:.3}")));
    }
    Out {
        status: 429,
        headers,
        body: Some(
            json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": global}),
        ),
    }
}

/// `PATCH /channels/{id}/messages/{id}` (Edit Message): the bot's own
/// message only; the fields sent replace the message's, components checked
/// as on create; 10008 Unknown Message otherwise.
fn edit_message(shared: &Shared, channel: &str, id: &str, body: &Value) -> Out {
    if let Err(why) = super::interactions::check_components(&body["components"]) {
        return out(
            400,
            json!({"message": "Invalid Form Body", "code": 50035, "errors": {"components": {"_errors": [
            {"code": "COMPONENT_INVALID", "message": why}]}}}),
        );
    }
    let mut state = shared.state();
    let Some(message) = state.history.get_mut(channel).and_then(|h| {
        h.iter_mut()
            .find(|m| m["id"] == id && m["author"]["id"] == BOT_ID)
    }) else {
        return out(404, json!({"message": "Unknown Message", "code": 10008}));
    };
    for field in ["content", "components"] {
        if let Some(v) = body.get(field) {
            message[field] = v.clone();
        }
    }
    out(200, message.clone())
}

fn create_message(shared: &Shared, channel: &str, body: &Value) -> Out {
    let behaviour = shared.behaviour();
    let mut state = shared.state();
    if !state.channels.contains(channel) {
        return unknown_channel();
    }
    if let Some((retry_after, global)) = state.forced_429.pop_front() {
        return limited(retry_after, global, false);
    }
    // The channel's bucket.
    let now = Instant::now();
    let entry = state.buckets.entry(channel.to_owned()).or_insert((now, 0));
    if now.duration_since(entry.0) >= behaviour.bucket_window {
        *entry = (now, 0);
    }
    let reset_after = behaviour
        .bucket_window
        .saturating_sub(now.duration_since(entry.0));
    if entry.1 >= behaviour.bucket_limit {
        return limited(reset_after.as_secs_f64(), false, true);
    }
    entry.1 += 1;
    let remaining = behaviour.bucket_limit - entry.1;
    let headers = vec![
        ("x-ratelimit-bucket", "chanmsgs".to_owned()),
        ("x-ratelimit-limit", behaviour.bucket_limit.to_string()),
        ("x-ratelimit-remaining", remaining.to_string()),
        (
            "x-ratelimit-reset-after",
            format!("{:.3}", reset_after.as_secs_f64()),
        ),
    ];
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    let files = body["files"].as_array().cloned().unwrap_or_default();
    if content.chars().count() > 2000 {
        return Out {
            status: 400,
            headers,
            body: Some(
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"content": {"_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}),
            ),
        };
    }
    if content.trim().is_empty() && files.is_empty() {
        return Out {
            status: 400,
            headers,
            body: Some(json!({"message": "Cannot send an empty message", "code": 50006})),
        };
    }
    if let Err(why) = super::interactions::check_components(&body["components"]) {
        return Out {
            status: 400,
            headers,
            body: Some(
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"components": {"_errors": [
                {"code": "COMPONENT_INVALID", "message": why}]}}}),
            ),
        };
    }
    let nonce = match &body["nonce"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if body["enforce_nonce"] == true
        && let Some(existing) = nonce.as_ref().and_then(|n| state.nonces.get(n))
    {
        return Out {
            status: 200,
            headers,
            body: Some(existing.clone()),
        };
    }
    let id = Shared::snowflake(&mut state);
    let reply_to = body["message_reference"]["message_id"]
        .as_str()
        .map(str::to_owned);
    let message = json!({
        "id": id, "channel_id": channel, "content": content, "type": if reply_to.is_some() { 19 } else { 0 },
        "author": {"id": BOT_ID, "username": "hermes", "bot": true},
        "nonce": nonce, "mentions": [], "attachments": [], "embeds": [],
        "components": body.get("components").cloned().unwrap_or_else(|| json!([])),
    });
    if let Some(n) = nonce {
        state.nonces.insert(n, message.clone());
    }
    state
        .history
        .entry(channel.to_owned())
        .or_default()
        .push(message.clone());
    state.posted.push(Posted {
        id,
        channel: channel.to_owned(),
        content,
        reply_to,
        body: body.clone(),
    });
    Out {
        status: 200,
        headers,
        body: Some(message),
    }
}

/// `GET /channels/{id}/messages` as Discord answers it: `limit` 1–100
/// (default 50, else 400); with `after`, the `limit` messages that follow
/// that id; with neither, the newest `limit`; always newest first.
fn list_messages(shared: &Shared, channel: &str, query: &str) -> Out {
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned())
    };
    let limit = match param("limit").map(|l| l.parse::<usize>()) {
        None => 50,
        Some(Ok(l)) if (1..=100).contains(&l) => l,
        _ => {
            return out(
                400,
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"limit": {"_errors": [
                {"code": "NUMBER_TYPE_MAX", "message": "int value should be less than or equal to 100."}]}}}),
            );
        }
    };
    let after = match param("after").map(|a| a.parse::<u64>()) {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(_)) => {
            return out(
                400,
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"after": {"_errors": [
                {"code": "NUMBER_TYPE_COERCE", "message": "Value is not snowflake."}]}}}),
            );
        }
    };
    let state = shared.state();
    if !state.channels.contains(channel) {
        return unknown_channel();
    }
    let id = |m: &Value| {
        m["id"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut all: Vec<Value> = state.history.get(channel).cloned().unwrap_or_default();
    all.sort_by_key(id);
    let mut page: Vec<Value> = match after {
        Some(a) => all.into_iter().filter(|m| id(m) > a).take(limit).collect(),
        None => {
            let skip = all.len().saturating_sub(limit);
            all.into_iter().skip(skip).collect()
        }
    };
    page.reverse();
    out(200, Value::Array(page))
}

/// The parts of a `multipart/form-data` body (RFC 7578): the
/// `payload_json` part as the body, files under `"files"` (name, file name,
/// content type, the content as text and, byte for byte, as hex).
fn multipart(bytes: &[u8], boundary: &str) -> Value {
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let mut payload = Value::Null;
    let mut files = Vec::new();
    for part in hermes_tests::multipart::fields(&content_type, bytes) {
        match &part.file_name {
            None if part.name == "payload_json" => {
                payload = serde_json::from_slice(&part.data).unwrap_or(Value::Null);
            }
            Some(f) => files.push(json!({
                "name": part.name,
                "filename": f,
                "content_type": part.content_type,
                "content": String::from_utf8_lossy(&part.data),
                "hex": part.data.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            })),
            None => {}
        }
    }
    if payload.is_object() {
        payload["files"] = Value::Array(files);
    }
    payload
}
