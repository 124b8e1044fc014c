//! Discord, as the registry ([`hermes_platform_kit::platform`]) knows it.

use std::sync::Arc;

use hermes_runtime::config::{Key, Keys, Kind, Section, Settings};

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, DoctorLine, Platform, SetupHint, no_check_hints, secret, split_chat_thread, var,
};

use super::{DiscordAdapter, DiscordConfig, ENABLE_INTENT, check_bot};

/// Discord's Gateway WebSocket and REST API.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "Discord",
    feature: "discord",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        secret("DISCORD_BOT_TOKEN"),
        var("DISCORD_ALLOWED_USERS"),
        var("DISCORD_REQUIRE_MENTION"),
        var("DISCORD_FREE_RESPONSE_CHANNELS"),
        var("DISCORD_HOME_CHANNEL"),
        var("DISCORD_API_URL"),
    ],
    // The adapter checks the values' shapes further (ids are numbers).
    section: Some(Section {
        name: "discord",
        keys: Keys::These(&[
            Key {
                name: "bot_token",
                kind: Kind::Str,
            },
            Key {
                name: "allowed_users",
                kind: Kind::List,
            },
            Key {
                name: "require_mention",
                kind: Kind::Bool,
            },
            Key {
                name: "free_response_channels",
                kind: Kind::List,
            },
            Key {
                name: "home_channel",
                kind: Kind::Str,
            },
            Key {
                name: "api_url",
                kind: Kind::Url,
            },
        ]),
    }),
    allow_var: Some("DISCORD_ALLOWED_USERS"),
    home_channel_var: Some("DISCORD_HOME_CHANNEL"),
    enable_hint: "DISCORD_BOT_TOKEN",
    split_target: split_chat_thread,
    setup: Some(SetupHint {
        token_var: "DISCORD_BOT_TOKEN",
        token_secret: true,
        token_hint: "Developer Portal → Applications → your bot → Bot → Reset Token",
        id_hint: "numeric Discord user ids (Developer Mode → Copy User ID)",
        more: &[],
    }),
    build: Some(build),
    check_hints: no_check_hints,
    doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = DiscordConfig::from_sources(ctx.env, &ctx.settings.file)?;
    Some(
        built
            .map(|config| {
                Arc::new(DiscordAdapter::with_store(config, ctx.store.clone()))
                    as Arc<dyn PlatformAdapter>
            })
            .map_err(|e| e.to_string()),
    )
}

/// The token, asked live, and the MESSAGE CONTENT switch without which
/// the bot reads no message.
fn doctor(settings: &Settings) -> Vec<DoctorLine> {
    let env = |name: &str| settings.var(name).map(str::to_owned);
    let line = |ok: bool, text: String, fix: &str| DoctorLine {
        ok,
        text,
        fix: fix.to_owned(),
    };
    match DiscordConfig::from_sources(&env, &settings.file) {
        None => Vec::new(),
        Some(Err(e)) => vec![line(false, e.to_string(), "fix that Discord setting")],
        Some(Ok(config)) => vec![match check_bot(&config) {
            Ok(bot) => line(
                bot.message_content != Some(false),
                bot.describe(),
                ENABLE_INTENT,
            ),
            Err(e) => line(false, e, "check DISCORD_BOT_TOKEN and DISCORD_API_URL"),
        }],
    }
}
