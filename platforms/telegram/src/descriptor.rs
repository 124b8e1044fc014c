//! Telegram, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Env, Platform, SetupHint, no_doctor, secret, split_chat_thread, var,
};

use super::{MemoryOffsets, OffsetStore, StoreOffsets, TelegramAdapter};

/// Telegram's Bot API, long-polled.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "Telegram",
    feature: "telegram",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        secret("TELEGRAM_BOT_TOKEN"),
        var("TELEGRAM_ALLOWED_USERS"),
        var("TELEGRAM_API_URL"),
        var("TELEGRAM_GROUP_POLICY"),
        var("TELEGRAM_POLL_TIMEOUT"),
        var("TELEGRAM_HOME_CHANNEL"),
    ],
    section: None,
    allow_var: Some("TELEGRAM_ALLOWED_USERS"),
    home_channel_var: Some("TELEGRAM_HOME_CHANNEL"),
    enable_hint: "TELEGRAM_BOT_TOKEN",
    split_target: split_chat_thread,
    setup: Some(SetupHint {
        token_var: "TELEGRAM_BOT_TOKEN",
        token_secret: true,
        token_hint: "from @BotFather (/newbot)",
        id_hint: "numeric Telegram user ids (@userinfobot tells yours)",
        more: &[],
    }),
    build: Some(build),
    check_hints,
    doctor: no_doctor,
};

/// The adapter, keeping its poll offset in the store when there is one
/// (so a restart does not replay updates).
fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let token = (ctx.env)("TELEGRAM_BOT_TOKEN").unwrap_or_default();
    let offsets: Arc<dyn OffsetStore> = match &ctx.store {
        Some(s) => Arc::new(StoreOffsets::for_token(Arc::clone(s), &token)),
        None => Arc::new(MemoryOffsets::default()),
    };
    let built = TelegramAdapter::from_env(ctx.env, offsets)?;
    Some(
        built
            .map(|a| Arc::new(a) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}

/// A refused token that does not even look like one says so; ids in the
/// allow-list that are not numbers are named.
fn check_hints(env: Env<'_>, refused: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if refused && let Some(hint) = env("TELEGRAM_BOT_TOKEN").and_then(|t| super::token_problem(&t))
    {
        problems.push(hint);
    }
    problems.extend(super::allow_list_problems(env));
    problems
}
