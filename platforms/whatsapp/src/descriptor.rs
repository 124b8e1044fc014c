//! WhatsApp, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, SetupHint, no_check_hints, no_doctor, secret, split_chat_thread, var,
};
use hermes_runtime::config::{Key, Keys, Kind, Section};

use crate::{WhatsAppAdapter, WhatsAppConfig};

const fn key(name: &'static str, kind: Kind) -> Key {
    Key { name, kind }
}

/// Meta's Cloud API: signed webhooks in, the Graph API out.
pub static PLATFORM: Platform = Platform {
    name: crate::PLATFORM,
    display_name: "WhatsApp",
    feature: "whatsapp",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        secret("WHATSAPP_ACCESS_TOKEN"),
        var("WHATSAPP_PHONE_NUMBER_ID"),
        secret("WHATSAPP_APP_SECRET"),
        secret("WHATSAPP_VERIFY_TOKEN"),
        var("WHATSAPP_ALLOWED_USERS"),
        var("WHATSAPP_HOME_CHANNEL"),
        var("WHATSAPP_API_URL"),
        var("WHATSAPP_WEBHOOK_HOST"),
        var("WHATSAPP_WEBHOOK_PORT"),
    ],
    // The adapter checks the values' shapes further (digits, ports).
    section: Some(Section {
        name: "whatsapp",
        keys: Keys::These(&[
            key("access_token", Kind::Str),
            key("phone_number_id", Kind::Str),
            key("app_secret", Kind::Str),
            key("verify_token", Kind::Str),
            key("allowed_users", Kind::List),
            key("home_channel", Kind::Str),
            key("api_url", Kind::Url),
            key("webhook_host", Kind::Str),
            key("webhook_port", Kind::PositiveInt),
        ]),
    }),
    allow_var: Some("WHATSAPP_ALLOWED_USERS"),
    home_channel_var: Some("WHATSAPP_HOME_CHANNEL"),
    enable_hint: "WHATSAPP_ACCESS_TOKEN with WHATSAPP_PHONE_NUMBER_ID, WHATSAPP_APP_SECRET and WHATSAPP_VERIFY_TOKEN",
    split_target: split_chat_thread,
    setup: Some(SetupHint {
        token_var: "WHATSAPP_ACCESS_TOKEN",
        token_secret: true,
        token_hint: "developers.facebook.com → your app → WhatsApp → API Setup (a system user's permanent token for a bot that keeps running)",
        id_hint: "phone numbers as WhatsApp writes them: digits with the country code, no +",
        more: &[
            (
                var("WHATSAPP_PHONE_NUMBER_ID"),
                "the phone number id (digits) shown under WhatsApp → API Setup",
            ),
            (
                secret("WHATSAPP_APP_SECRET"),
                "App settings → Basic → App secret",
            ),
            (
                secret("WHATSAPP_VERIFY_TOKEN"),
                "any string; type the same into WhatsApp → Configuration → Webhook",
            ),
        ],
    }),
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = WhatsAppConfig::from_sources(ctx.env, &ctx.settings.file)?;
    Some(
        built
            .map(|config| Arc::new(WhatsAppAdapter::new(config)) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
