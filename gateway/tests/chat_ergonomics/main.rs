//! Letting people in and chatting comfortably (SPEC Y4, Y5), through the
//! whole gateway on Telegram: the Telegram adapter against the Bot API fake,
//! the production agent factory over the real SQLite store, the loopback
//! `FakeProvider` as the model (it records every request, so "no model
//! call" is checked, not assumed).
#![cfg(feature = "telegram")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_debug_implementations
)]

use crate::telegram_gateway;

mod clarify;
mod commands;
mod pairing;
mod steering;
mod threads;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use telegram_gateway::{Gateway, WAIT};

/// Delivers a message from `from` in `chat` (`{"id":…, "type":…}`) with
/// the extra `fields`.
pub fn push(gw: &Gateway, message_id: i64, from: i64, chat: Value, fields: Value) {
    let update_id = gw.next_update.fetch_add(1, Ordering::SeqCst);
    let mut message = json!({
        "message_id": message_id, "date": 0,
        "from": {"id": from, "is_bot": false, "first_name": "Stranger"},
        "chat": chat,
    });
    for (k, v) in fields.as_object().unwrap() {
        message[k] = v.clone();
    }
    gw.fake
        .push_update(json!({"update_id": update_id, "message": message}));
}

/// A DM from `from`.
pub fn dm(gw: &Gateway, message_id: i64, from: i64, text: &str) {
    push(
        gw,
        message_id,
        from,
        json!({"id": from, "type": "private"}),
        json!({ "text": text }),
    );
}

/// The texts of every `sendMessage`, once at least `n` were sent.
pub async fn sent(gw: &Gateway, n: usize) -> Vec<String> {
    gw.replies(n).await
}

/// Waits until `cond` holds (or fails after [`WAIT`]).
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lets the gateway process whatever was pushed (polls are 100 ms apart).
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}
