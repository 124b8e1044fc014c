//! The WeCom AI bot, as the registry ([`hermes_platform_kit::platform`]) knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, no_check_hints, no_doctor, secret, split_chat_thread, var,
};

use super::WecomAdapter;

/// WeCom's AI bot over its WebSocket.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "WeCom",
    feature: "wecom",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("WECOM_BOT_ID"),
        secret("WECOM_SECRET"),
        var("WECOM_ALLOWED_USERS"),
        var("WECOM_WS_URL"),
        var("WECOM_HOME_CHANNEL"),
    ],
    section: None,
    allow_var: Some("WECOM_ALLOWED_USERS"),
    home_channel_var: Some("WECOM_HOME_CHANNEL"),
    enable_hint: "WECOM_BOT_ID and WECOM_SECRET",
    split_target: split_chat_thread,
    setup: None,
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = WecomAdapter::from_env(ctx.env)?;
    Some(
        built
            // Pieces of text waiting for their merge are kept in the store.
            .map(|a| match &ctx.store {
                Some(store) => WecomAdapter::with_store(a.config().clone(), Arc::clone(store)),
                None => a,
            })
            .map(|a| Arc::new(a) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
