//! `hermes gateway run --check` and `hermes doctor` for Discord: the token
//! works (`GET /users/@me`) and the application has the MESSAGE CONTENT
//! intent enabled (`GET /applications/@me`, its `flags`) — without it the
//! Gateway refuses the connection (close code 4014). Also attachment
//! downloads, which share the plain-GET code.

use std::time::Duration;

use hermes_runtime::http;
use serde_json::Value;

use super::{DiscordConfig, PLATFORM};
use hermes_platform_kit::adapter::{AdapterError, FetchedMedia};
use hermes_platform_kit::event::MediaRef;

/// `GATEWAY_MESSAGE_CONTENT` (verified bots) and
/// `GATEWAY_MESSAGE_CONTENT_LIMITED` (bots in under 100 servers).
const MESSAGE_CONTENT_FLAGS: u64 = (1 << 18) | (1 << 19);

/// What the check found about a working token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotCheck {
    /// The bot's user name.
    pub name: String,
    /// The bot's user id.
    pub id: String,
    /// Whether the MESSAGE CONTENT intent is enabled (`None`: the
    /// application could not be read).
    pub message_content: Option<bool>,
}

impl BotCheck {
    /// One line for `--check` / `doctor`.
    pub fn describe(&self) -> String {
        let intents = match self.message_content {
            Some(true) => "MESSAGE CONTENT intent enabled".to_owned(),
            Some(false) => format!("MESSAGE CONTENT intent NOT enabled: {}", ENABLE_INTENT),
            None => format!("could not read the intents; make sure: {ENABLE_INTENT}"),
        };
        format!("discord: bot {} ({}), {intents}", self.name, self.id)
    }
}

/// What to do in the Developer Portal.
pub const ENABLE_INTENT: &str = "Developer Portal → Applications → your bot → Bot → Privileged \
     Gateway Intents → turn on MESSAGE CONTENT INTENT (the adapter uses GUILD_MESSAGES, \
     DIRECT_MESSAGES and MESSAGE_CONTENT)";

fn get(config: &DiscordConfig, path: &str) -> Result<(u16, Value), String> {
    let url = format!("{}{path}", config.api_url.trim_end_matches('/'));
    let mut resp = http::agent()
        .get(&url)
        .config()
        .timeout_global(Some(config.connect_timeout))
        .build()
        .header("authorization", &format!("Bot {}", config.token.expose()))
        .call()
        .map_err(|e| http::describe(&e).replace(config.token.expose(), "<redacted>"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(1024 * 1024)
        .read_json::<Value>()
        .unwrap_or(Value::Null);
    Ok((status, body))
}

/// Checks the token and the intents (blocking: for the CLI). The error is
/// one sentence saying what to fix.
pub fn check_bot(config: &DiscordConfig) -> Result<BotCheck, String> {
    let (status, me) = get(config, "/users/@me")
        .map_err(|e| format!("discord: cannot reach {}: {e}", config.api_url))?;
    match status {
        200 => {}
        401 => {
            return Err(
                "discord: DISCORD_BOT_TOKEN was refused (401 Unauthorized); copy it again from \
                 the Developer Portal (Applications → your bot → Bot → Reset Token)"
                    .to_owned(),
            );
        }
        other => {
            return Err(format!(
                "discord: GET /users/@me answered HTTP {other}: {}",
                me["message"].as_str().unwrap_or("no message")
            ));
        }
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let message_content = match get(config, "/applications/@me") {
        Ok((200, app)) => app["flags"]
            .as_u64()
            .map(|f| f & MESSAGE_CONTENT_FLAGS != 0),
        _ => None,
    };
    Ok(BotCheck {
        name: text(&me["username"]),
        id: text(&me["id"]),
        message_content,
    })
}

/// Downloads an attachment (at most `max_bytes`) from the URL Discord gave.
pub(super) async fn fetch(
    media: &MediaRef,
    max_bytes: u64,
    timeout: Duration,
) -> Result<FetchedMedia, AdapterError> {
    let url = media.handle.clone();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(AdapterError::Rejected {
            platform: PLATFORM,
            message: "an attachment without an http(s) URL".to_owned(),
        });
    }
    if media.size.is_some_and(|s| s > max_bytes) {
        return Err(AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("the file is larger than {max_bytes} bytes"),
        });
    }
    let timeout = timeout.max(Duration::from_secs(60));
    let run = move || -> Result<(u16, Vec<u8>, Option<String>), ureq::Error> {
        let mut resp = http::agent()
            .get(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()?;
        let mime = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(max_bytes)
            .read_to_vec()?;
        Ok((resp.status().as_u16(), bytes, mime))
    };
    let network = |message: String| AdapterError::Network {
        platform: PLATFORM,
        message,
    };
    match http::run_blocking(run).await {
        Ok(Ok((200, bytes, mime))) => Ok(FetchedMedia {
            bytes,
            mime_type: media.mime_type.clone().or(mime),
            file_name: media.file_name.clone(),
        }),
        Ok(Ok((status, _, _))) => Err(AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("the attachment download answered HTTP {status}"),
        }),
        Ok(Err(ureq::Error::BodyExceedsLimit(_))) => Err(AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("the file is larger than {max_bytes} bytes"),
        }),
        Ok(Err(e)) => Err(network(http::describe(&e))),
        Err(e) => Err(network(e.to_string())),
    }
}
