//! The WeCom self-built app (callback mode), as the gateway's registry
//! knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, no_check_hints, no_doctor, secret, split_chat_thread, var,
};

use super::WecomCallbackAdapter;

/// WeCom's encrypted callbacks in, the qyapi REST API out.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "WeCom",
    feature: "wecom_callback",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("WECOM_CALLBACK_AGENT_ID"),
        var("WECOM_CALLBACK_ALLOWED_USERS"),
        var("WECOM_CALLBACK_API_URL"),
        var("WECOM_CALLBACK_CORP_ID"),
        secret("WECOM_CALLBACK_CORP_SECRET"),
        secret("WECOM_CALLBACK_ENCODING_AES_KEY"),
        var("WECOM_CALLBACK_HOST"),
        var("WECOM_CALLBACK_MESSAGE_FORMAT"),
        var("WECOM_CALLBACK_PATH"),
        var("WECOM_CALLBACK_PORT"),
        var("WECOM_CALLBACK_REPLAY_WINDOW_SECS"),
        secret("WECOM_CALLBACK_TOKEN"),
    ],
    section: None,
    allow_var: Some("WECOM_CALLBACK_ALLOWED_USERS"),
    home_channel_var: None,
    enable_hint: "the WECOM_CALLBACK_* settings of a self-built app",
    split_target: split_chat_thread,
    setup: None,
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = WecomCallbackAdapter::from_env(ctx.env)?;
    Some(
        built
            .map(|a| Arc::new(a) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
