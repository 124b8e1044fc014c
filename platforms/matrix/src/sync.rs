//! Logging in, the `/sync` loop, invites, encrypted rooms, and downloads.

use std::sync::Arc;
use std::time::Duration;

use hermes_runtime::store::{KvWrite, StoreError};
use serde_json::{Value, json};
use tokio::sync::watch;

use hermes_platform_kit::adapter::{AdapterError, EventHandler, FetchedMedia};
use hermes_platform_kit::event::MediaRef;

use super::api::{CallError, PLATFORM, backoff, seg};
use super::translate::{RoomView, translate};
use super::{BotAccount, Inner, lock};

/// The filter of every `/sync`: room messages and the state that says who
/// is in a room and whether it is encrypted; no presence, no account data,
/// no receipts.
fn filter() -> String {
    json!({
        "presence": { "not_types": ["*"] },
        "account_data": { "not_types": ["*"] },
        "room": {
            "timeline": { "limit": 50, "types": ["m.room.message", "m.room.encrypted", "m.room.encryption", "m.room.member"] },
            "state": { "types": ["m.room.member", "m.room.encryption"], "lazy_load_members": true },
            "ephemeral": { "not_types": ["*"] },
            "account_data": { "not_types": ["*"] },
        },
    })
    .to_string()
}

fn query(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Store keys of this bot's login and sync position.
fn key(what: &str, user: &str) -> String {
    format!("matrix.{what}.{user}")
}

async fn kv_get(inner: &Inner, key: String) -> Option<String> {
    let store = inner.store.clone()?;
    hermes_runtime::task::spawn_blocking(move || lock(&store).kv_get(&key))
        .await
        .ok()?
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "matrix: cannot read the store");
            None
        })
}

/// Saves `value` under `key`, fenced by the bot's lease when there is one:
/// a gateway that lost the bot cannot move its successor's position back.
async fn kv_set(inner: &Inner, key: String, value: String) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    let lease = inner.gate.lease();
    let saved = hermes_runtime::task::spawn_blocking(move || {
        let writes = [KvWrite::Set {
            key: &key,
            value: &value,
        }];
        let result = match &lease {
            Some(held) => {
                lock(&store).kv_commit_fenced(&writes, std::slice::from_ref(held.fence()))
            }
            None => lock(&store).kv_commit(&writes),
        };
        match (result, &lease) {
            (Err(StoreError::Fenced { .. }), Some(held)) => held.lose(),
            (Err(e), _) => tracing::error!(error = %e, "matrix: cannot save to the store"),
            (Ok(_), _) => {}
        }
    });
    if let Err(e) = saved.await {
        tracing::error!(error = %e, "matrix: saving panicked");
    }
}

/// Makes the access token work: the configured one, the one saved from an
/// earlier login, or a new password login (saved for the next start, so a
/// restart does not add a device each time).
pub(super) async fn log_in(inner: &Inner) -> Result<BotAccount, AdapterError> {
    let config = &inner.config;
    if config.access_token.is_none()
        && let Some(user) = &config.user_id
        && let Some(saved) = kv_get(inner, key("login", user)).await
        && let Ok(saved) = serde_json::from_str::<Value>(&saved)
        && let Some(token) = saved.get("access_token").and_then(Value::as_str)
    {
        inner.api.set_token(token);
        match whoami(inner).await {
            Ok(account) => return Ok(account),
            Err(e) if e.is_auth() => {
                tracing::info!("matrix: the saved login was refused; logging in again");
            }
            Err(e) => return Err(e.into_adapter_error()),
        }
    }
    if config.access_token.is_some() {
        return whoami(inner).await.map_err(CallError::into_adapter_error);
    }
    let (Some(user), Some(password)) = (&config.user_id, &config.password) else {
        return Err(AdapterError::Auth {
            platform: PLATFORM,
            message: "set MATRIX_ACCESS_TOKEN, or MATRIX_USER_ID and MATRIX_PASSWORD".to_owned(),
        });
    };
    inner.api.set_token("");
    let body = json!({
        "type": "m.login.password",
        "identifier": { "type": "m.id.user", "user": user },
        "password": password.expose(),
        "initial_device_display_name": "hermes gateway",
    });
    let answer = inner
        .api
        .call("POST", "/_matrix/client/v3/login", Some(&body), Duration::from_secs(30))
        .await
        .map_err(|e| match e {
            CallError::Api { status: 403, .. } => AdapterError::Auth {
                platform: PLATFORM,
                message: format!("the homeserver refused the login ({e}); check MATRIX_USER_ID and MATRIX_PASSWORD"),
            },
            e => e.into_adapter_error(),
        })?;
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .ok_or_else(|| AdapterError::Rejected {
            platform: PLATFORM,
            message: "the login answer has no access_token".to_owned(),
        })?;
    inner.api.set_token(token);
    let saved = json!({ "access_token": token, "device_id": answer.get("device_id") });
    kv_set(inner, key("login", user), saved.to_string()).await;
    whoami(inner).await.map_err(CallError::into_adapter_error)
}

/// Ends this login (its device is deleted by the homeserver).
pub(super) async fn log_out(inner: &Inner) {
    if let Err(e) = inner
        .api
        .call_once(
            "POST",
            "/_matrix/client/v3/logout",
            Some(&json!({})),
            Duration::from_secs(30),
        )
        .await
    {
        tracing::warn!(error = %e, "matrix: cannot log the check's login out");
    }
    inner.api.set_token("");
}

async fn whoami(inner: &Inner) -> Result<BotAccount, CallError> {
    let answer = inner
        .api
        .call(
            "GET",
            "/_matrix/client/v3/account/whoami",
            None,
            Duration::from_secs(30),
        )
        .await?;
    let user_id = answer
        .get("user_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let account = BotAccount {
        user_id,
        device_id: answer
            .get("device_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    *lock(&inner.account) = Some(account.clone());
    Ok(account)
}

/// The position to sync from: the saved one, or — for a new login — the
/// present, so history is never answered (invites waiting are still seen).
pub(super) async fn first_token(inner: &Inner) -> Result<String, AdapterError> {
    let me = inner.me();
    if let Some(since) = kv_get(inner, key("since", &me)).await {
        return Ok(since);
    }
    let path = format!(
        "/_matrix/client/v3/sync?timeout=0&filter={}",
        query(&filter())
    );
    let answer = inner
        .api
        .call("GET", &path, None, Duration::from_secs(60))
        .await
        .map_err(CallError::into_adapter_error)?;
    handle_invites(inner, &answer).await;
    remember_members(inner, &answer);
    let next = next_batch(&answer)?;
    kv_set(inner, key("since", &me), next.clone()).await;
    Ok(next)
}

fn next_batch(answer: &Value) -> Result<String, AdapterError> {
    answer
        .get("next_batch")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| AdapterError::Rejected {
            platform: PLATFORM,
            message: "a /sync answer without next_batch".to_owned(),
        })
}

/// The long-poll loop. Returns the fatal error it stopped on, or `None`
/// when asked to stop or when the bot's lease is gone.
pub(super) async fn sync_loop(
    inner: Arc<Inner>,
    handler: EventHandler,
    mut since: String,
    mut stop: watch::Receiver<bool>,
) -> Option<AdapterError> {
    let timeout_ms = inner.config.sync_timeout.as_millis();
    let http_timeout = inner
        .config
        .sync_timeout
        .saturating_add(Duration::from_secs(30));
    let filter = query(&filter());
    let me = inner.me();
    let mut failures = 0u32;
    loop {
        if !inner.gate.is_open() {
            tracing::info!("matrix: the bot's lease is gone; syncing stopped");
            return None;
        }
        let path = format!(
            "/_matrix/client/v3/sync?timeout={timeout_ms}&filter={filter}&since={}",
            query(&since)
        );
        let result = tokio::select! {
            r = inner.api.call_once("GET", &path, None, http_timeout) => r,
            _ = stop.wait_for(|s| *s) => return None,
        };
        if !inner.gate.is_open() {
            return None;
        }
        let wait = match result {
            Ok(answer) => {
                failures = 0;
                let Ok(next) = next_batch(&answer) else {
                    tracing::warn!("matrix: a /sync answer without next_batch, retrying");
                    continue;
                };
                handle_invites(&inner, &answer).await;
                remember_members(&inner, &answer);
                deliver(&inner, &answer, &since, &handler).await;
                if next != since {
                    kv_set(&inner, key("since", &me), next.clone()).await;
                    since = next;
                }
                None
            }
            Err(e) if e.is_auth() => return Some(e.into_adapter_error()),
            Err(CallError::Api {
                retry_after: Some(wait),
                ..
            }) => Some(wait.min(super::api::MAX_RETRY_AFTER)),
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %e, attempt = failures, "matrix: /sync failed, retrying");
                Some(backoff(failures))
            }
        };
        if let Some(d) = wait {
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    }
}

fn rooms<'a>(answer: &'a Value, section: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    answer
        .pointer(&format!("/rooms/{section}"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter())
}

fn remember_members(inner: &Inner, answer: &Value) {
    let mut members = lock(&inner.members);
    for (room, data) in rooms(answer, "join") {
        if let Some(n) = data
            .pointer("/summary/m.joined_member_count")
            .and_then(Value::as_u64)
        {
            members.insert(room.clone(), n);
        }
    }
}

/// Joins rooms allowed users invite the bot to, declines the rest; an
/// encrypted room is joined only to say once that the bot cannot read it.
async fn handle_invites(inner: &Inner, answer: &Value) {
    let me = inner.me();
    for (room, data) in rooms(answer, "invite") {
        let events = data
            .pointer("/invite_state/events")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let inviter = events
            .iter()
            .find(|e| {
                e.get("type").and_then(Value::as_str) == Some("m.room.member")
                    && e.get("state_key").and_then(Value::as_str) == Some(me.as_str())
            })
            .and_then(|e| e.get("sender").and_then(Value::as_str))
            .unwrap_or_default();
        let encrypted = events
            .iter()
            .any(|e| e.get("type").and_then(Value::as_str) == Some("m.room.encryption"));
        if !inner.config.may_invite(inviter) || !inner.config.serves_room(room) {
            tracing::info!(
                room,
                inviter,
                "matrix: invite declined (not an allowed user or room)"
            );
            inner.leave(room).await;
            continue;
        }
        let path = format!("/_matrix/client/v3/rooms/{}/join", seg(room));
        match inner
            .api
            .call("POST", &path, Some(&json!({})), Duration::from_secs(30))
            .await
        {
            Ok(_) => tracing::info!(room, inviter, "matrix: joined on invite"),
            Err(e) => {
                tracing::warn!(room, error = %e, "matrix: cannot join");
                continue;
            }
        }
        if encrypted {
            refuse_encrypted(inner, room).await;
        }
    }
}

/// Says once, in plain text, that the bot cannot read the room, and leaves.
async fn refuse_encrypted(inner: &Inner, room: &str) {
    if !lock(&inner.encrypted_told).insert(room.to_owned()) {
        return;
    }
    let notice = json!({
        "msgtype": "m.notice",
        "body": "This room is end-to-end encrypted, and this bot cannot read encrypted messages. \
                 Invite it to a room without encryption instead. Leaving now.",
    });
    if let Err(e) = inner.send_event(room, &notice).await {
        tracing::warn!(room, error = %e, "matrix: cannot tell the room it is encrypted");
    }
    tracing::info!(
        room,
        "matrix: left an end-to-end encrypted room (not supported)"
    );
    inner.leave(room).await;
}

fn is_encryption_event(e: &Value) -> bool {
    matches!(
        e.get("type").and_then(Value::as_str),
        Some("m.room.encryption" | "m.room.encrypted")
    )
}

/// Hands every new message of every joined room to the runner.
async fn deliver(inner: &Inner, answer: &Value, since: &str, handler: &EventHandler) {
    let me = inner.me();
    for (room, data) in rooms(answer, "join") {
        let state = data
            .pointer("/state/events")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut timeline: Vec<Value> = data
            .pointer("/timeline/events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if state.iter().chain(timeline.iter()).any(is_encryption_event) {
            refuse_encrypted(inner, room).await;
            continue;
        }
        if !inner.config.serves_room(room) {
            continue;
        }
        let limited = data.pointer("/timeline/limited").and_then(Value::as_bool) == Some(true);
        if limited && let Some(prev) = data.pointer("/timeline/prev_batch").and_then(Value::as_str)
        {
            let mut earlier = backfill(inner, room, prev, since).await;
            earlier.append(&mut timeline);
            timeline = earlier;
        }
        let members = match lock(&inner.members).get(room) {
            Some(n) => *n,
            None => 0,
        };
        let members = if members == 0 {
            count_members(inner, room).await
        } else {
            members
        };
        let is_ours = |id: &str| inner.is_ours(id);
        let view = RoomView {
            room_id: room,
            me: &me,
            members,
            require_mention: inner.config.require_mention,
            is_ours: &is_ours,
        };
        for event in &timeline {
            if let Some(message) = translate(event, &view) {
                tracing::debug!(room, user = %message.source.user_id, "matrix: message in");
                handler(message);
            }
        }
    }
}

/// The events a `limited` timeline left out: `/messages` backwards from the
/// timeline's start to the previous sync position, oldest first. Bounded:
/// ten pages at most.
async fn backfill(inner: &Inner, room: &str, from: &str, to: &str) -> Vec<Value> {
    let mut pages: Vec<Value> = Vec::new();
    let mut from = from.to_owned();
    for _ in 0..10 {
        let path = format!(
            "/_matrix/client/v3/rooms/{}/messages?dir=b&limit=100&from={}&to={}",
            seg(room),
            query(&from),
            query(to)
        );
        let Ok(answer) = inner
            .api
            .call("GET", &path, None, Duration::from_secs(30))
            .await
        else {
            tracing::warn!(
                room,
                "matrix: cannot fetch the messages a long pause left out"
            );
            break;
        };
        let chunk = answer
            .get("chunk")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if chunk.is_empty() {
            break;
        }
        pages.extend(chunk);
        match answer.get("end").and_then(Value::as_str) {
            Some(end) if end != from => from = end.to_owned(),
            _ => break,
        }
    }
    pages.reverse();
    pages
}

async fn count_members(inner: &Inner, room: &str) -> u64 {
    let path = format!("/_matrix/client/v3/rooms/{}/joined_members", seg(room));
    let n = match inner
        .api
        .call("GET", &path, None, Duration::from_secs(30))
        .await
    {
        Ok(v) => v
            .get("joined")
            .and_then(Value::as_object)
            .map_or(0, |m| m.len() as u64),
        Err(e) => {
            tracing::warn!(room, error = %e, "matrix: cannot count the room's members; treating it as a group");
            3
        }
    };
    lock(&inner.members).insert(room.to_owned(), n);
    n
}

/// Downloads an `mxc://server/id` file through the authenticated media
/// endpoint, at most `max_bytes`.
pub(super) async fn download(
    inner: &Inner,
    media: &MediaRef,
    max_bytes: u64,
) -> Result<FetchedMedia, AdapterError> {
    let rejected = |message: String| AdapterError::Rejected {
        platform: PLATFORM,
        message,
    };
    let (server, id) = media
        .handle
        .strip_prefix("mxc://")
        .and_then(|rest| rest.split_once('/'))
        .ok_or_else(|| rejected("not an mxc:// URL".to_owned()))?;
    if media.size.is_some_and(|s| s > max_bytes) {
        return Err(rejected(format!(
            "the file is larger than {max_bytes} bytes"
        )));
    }
    let path = format!(
        "/_matrix/client/v1/media/download/{}/{}",
        seg(server),
        seg(id)
    );
    let (status, bytes) = inner
        .api
        .exchange("GET", &path, None, Duration::from_secs(120))
        .await
        .map_err(CallError::into_adapter_error)?;
    if !(200..300).contains(&status) {
        return Err(rejected(format!("the download answered HTTP {status}")));
    }
    if bytes.len() as u64 > max_bytes {
        return Err(rejected(format!(
            "the file is larger than {max_bytes} bytes"
        )));
    }
    Ok(FetchedMedia {
        bytes,
        mime_type: media.mime_type.clone(),
        file_name: media.file_name.clone(),
    })
}
