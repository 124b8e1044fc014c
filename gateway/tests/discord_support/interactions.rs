//! Message components and interactions, as Discord documents them
//! (developers/docs "Message Components", "Receiving and Responding"):
//!
//! - a message's `components` are at most 5 action rows (type 1), each of
//!   1–5 buttons (type 2); a button has a `style` 1–5, a `label` of at
//!   most 80 characters, and — unless it is a link (style 5, `url`, no
//!   `custom_id`) — a `custom_id` of 1–100 characters, unique in the
//!   message; anything else is 400 (50035);
//! - a user presses an enabled button ([`FakeDiscord::press`]; a client
//!   cannot press a disabled one): INTERACTION_CREATE of type 3
//!   (MESSAGE_COMPONENT) with the message, the channel, `member` in a
//!   server or `user` in a DM, an `id` and a `token`;
//! - `POST /interactions/{id}/{token}/callback` (no bot token needed)
//!   answers it once (again: 400, 40060 "Interaction has already been
//!   acknowledged."), within 3 s (later, or an unknown id or token: 404,
//!   10062 "Unknown interaction"); types 4 (a message, EPHEMERAL flag 64:
//!   seen by the presser only), 5, 6 (DEFERRED_UPDATE_MESSAGE), 7
//!   (UPDATE_MESSAGE: edits the message the button is on) and 9 are valid
//!   for a component; the answer is 204.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::rest::{Out, out};
use super::{BOT_ID, FakeDiscord, GUILD, Shared};

/// How long Discord waits for the first response.
const RESPONSE_WINDOW: Duration = Duration::from_secs(3);

/// One interaction the fake dispatched.
#[derive(Debug, Clone)]
pub struct Pressed {
    pub token: String,
    pub user: String,
    pub channel: String,
    pub message: String,
    pub at: Instant,
    /// The response, once given.
    pub response: Option<Value>,
}

/// Checks a message's `components` (absent is fine).
pub(super) fn check_components(components: &Value) -> Result<(), String> {
    let rows = match components {
        Value::Null => return Ok(()),
        Value::Array(rows) => rows,
        _ => return Err("components must be an array".into()),
    };
    if rows.len() > 5 {
        return Err("at most 5 action rows".into());
    }
    let mut ids = HashSet::new();
    for row in rows {
        if row["type"] != 1 {
            return Err("a top-level component must be an action row (type 1)".into());
        }
        let buttons = row["components"].as_array().ok_or("an empty action row")?;
        if buttons.is_empty() || buttons.len() > 5 {
            return Err("an action row holds 1 to 5 buttons".into());
        }
        for b in buttons {
            if b["type"] != 2 {
                return Err(format!("not a button: {b}"));
            }
            let style = b["style"].as_u64().ok_or("a button needs a style")?;
            if !(1..=5).contains(&style) {
                return Err(format!("unknown button style {style}"));
            }
            if b["label"].as_str().is_some_and(|l| l.chars().count() > 80) {
                return Err("a label is at most 80 characters".into());
            }
            if style == 5 {
                if b.get("custom_id").is_some() || b["url"].as_str().is_none() {
                    return Err("a link button has a url and no custom_id".into());
                }
                continue;
            }
            let id = b["custom_id"]
                .as_str()
                .ok_or("a button needs a custom_id")?;
            if id.is_empty() || id.chars().count() > 100 {
                return Err("a custom_id is 1 to 100 characters".into());
            }
            if !ids.insert(id.to_owned()) {
                return Err(format!("custom_id {id:?} is used twice"));
            }
        }
    }
    Ok(())
}

fn unknown_interaction() -> Out {
    out(
        404,
        json!({"message": "Unknown interaction", "code": 10062}),
    )
}

/// `POST /interactions/{id}/{token}/callback`.
pub(super) fn callback(shared: &Shared, route: &str, body: &Value) -> Out {
    let parts: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    let ["interactions", id, token, "callback"] = parts.as_slice() else {
        return out(404, json!({"message": "404: Not Found", "code": 0}));
    };
    let mut state = shared.state();
    let Some(pressed) = state.interactions.get(*id).cloned() else {
        return unknown_interaction();
    };
    if pressed.token != *token {
        return unknown_interaction();
    }
    if pressed.response.is_some() {
        return out(
            400,
            json!({"message": "Interaction has already been acknowledged.", "code": 40060}),
        );
    }
    if pressed.at.elapsed() > RESPONSE_WINDOW {
        return unknown_interaction();
    }
    let kind = body["type"].as_u64().unwrap_or(0);
    if ![4, 5, 6, 7, 9].contains(&kind) {
        return out(
            400,
            json!({"message": "Invalid Form Body", "code": 50035, "errors": {"type": {"_errors": [
                {"code": "INTERACTION_RESPONSE_TYPE_INVALID", "message": "not a response to a component"}]}}}),
        );
    }
    let data = &body["data"];
    if data["content"]
        .as_str()
        .is_some_and(|c| c.chars().count() > 2000)
    {
        return out(400, json!({"message": "Invalid Form Body", "code": 50035}));
    }
    if let Err(why) = check_components(&data["components"]) {
        return out(
            400,
            json!({"message": "Invalid Form Body", "code": 50035, "errors": why}),
        );
    }
    match kind {
        7 => {
            if let Some(m) = state
                .history
                .get_mut(&pressed.channel)
                .and_then(|h| h.iter_mut().find(|m| m["id"] == pressed.message))
            {
                for field in ["content", "components"] {
                    if let Some(v) = data.get(field) {
                        m[field] = v.clone();
                    }
                }
            }
        }
        4 if data["flags"].as_u64().is_some_and(|f| f & 64 != 0) => {
            let text = data["content"].as_str().unwrap_or_default().to_owned();
            state.ephemeral.push((pressed.user.clone(), text));
        }
        4 => {
            let id = Shared::snowflake(&mut state);
            let message = json!({"id": id, "channel_id": pressed.channel, "content": data["content"],
                "author": {"id": BOT_ID, "username": "hermes", "bot": true}, "type": 20});
            state
                .history
                .entry(pressed.channel.clone())
                .or_default()
                .push(message);
        }
        _ => {}
    }
    if let Some(p) = state.interactions.get_mut(*id) {
        p.response = Some(body.clone());
    }
    Out {
        status: 204,
        headers: Vec::new(),
        body: None,
    }
}

impl FakeDiscord {
    /// The message `id` as it stands now (edits applied).
    pub fn message_now(&self, id: &str) -> Option<Value> {
        let state = self.shared.state();
        state
            .history
            .values()
            .flat_map(|h| h.iter())
            .find(|m| m["id"] == id)
            .cloned()
    }

    /// `user` presses the button `custom_id` on message `message_id`, as
    /// the Discord client does: `None` if the message has no such enabled
    /// button (a disabled one cannot be pressed). Returns the
    /// interaction's id.
    pub fn press(&self, message_id: &str, user: &str, custom_id: &str) -> Option<String> {
        let message = self.message_now(message_id)?;
        let enabled = message["components"]
            .as_array()?
            .iter()
            .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
            .any(|b| b["custom_id"] == custom_id && b["disabled"] != true);
        if !enabled {
            return None;
        }
        let channel = message["channel_id"].as_str()?.to_owned();
        let (id, token, in_dm) = {
            let mut state = self.shared.state();
            let id = Shared::snowflake(&mut state);
            let token = format!("aW50ZXJhY3Rpb246{id}:{}", state.next_id * 7919);
            let in_dm = state.dm_of.values().any(|c| *c == channel);
            state.interactions.insert(
                id.clone(),
                Pressed {
                    token: token.clone(),
                    user: user.to_owned(),
                    channel: channel.clone(),
                    message: message_id.to_owned(),
                    at: Instant::now(),
                    response: None,
                },
            );
            (id, token, in_dm)
        };
        let who = json!({"id": user, "username": format!("user{user}"), "global_name": null,
            "discriminator": "0", "avatar": null});
        let mut d = json!({
            "id": id, "application_id": BOT_ID, "type": 3, "token": token, "version": 1,
            "data": {"custom_id": custom_id, "component_type": 2},
            "channel_id": channel,
            "channel": {"id": channel, "type": if in_dm { 1 } else { 0 }},
            "message": message,
            "app_permissions": "562949953421311", "locale": "en-GB", "entitlements": [],
            "authorizing_integration_owners": {"0": if in_dm { "0" } else { GUILD }},
            "context": if in_dm { 1 } else { 0 },
            "attachment_size_limit": 10_485_760,
        });
        if in_dm {
            d["user"] = who;
        } else {
            d["guild_id"] = json!(GUILD);
            d["guild_locale"] = json!("en-US");
            d["member"] = json!({"user": who, "roles": [], "permissions": "1024",
                "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false,
                "flags": 0, "pending": false, "nick": null, "avatar": null});
        }
        self.shared.dispatch("INTERACTION_CREATE", d);
        Some(id)
    }

    /// The response to interaction `id`, once given.
    pub fn interaction_response(&self, id: &str) -> Option<Value> {
        self.shared
            .state()
            .interactions
            .get(id)
            .and_then(|p| p.response.clone())
    }

    /// Waits for the response to interaction `id`.
    pub async fn wait_response(&self, id: &str) -> Value {
        self.wait_for(&format!("the response to interaction {id}"), |f| {
            f.interaction_response(id).is_some()
        })
        .await;
        self.interaction_response(id).unwrap()
    }

    /// The ephemeral notes so far: (the user who sees it, its text).
    pub fn ephemeral_notes(&self) -> Vec<(String, String)> {
        self.shared.state().ephemeral.clone()
    }
}
