//! Email, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_runtime::config::{Key, Keys, Kind, Section};

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, no_check_hints, no_doctor, secret, split_chat_thread, var,
};

use super::EmailAdapter;

const SECURITY: Kind = Kind::OneOf(&["tls", "starttls", "none"]);

/// IMAP in, SMTP out.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "Email",
    feature: "email",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("EMAIL_ADDRESS"),
        secret("EMAIL_PASSWORD"),
        var("EMAIL_IMAP_HOST"),
        var("EMAIL_IMAP_PORT"),
        var("EMAIL_IMAP_SECURITY"),
        var("EMAIL_SMTP_HOST"),
        var("EMAIL_SMTP_PORT"),
        var("EMAIL_SMTP_SECURITY"),
        var("EMAIL_ALLOWED_USERS"),
        var("EMAIL_POLL_INTERVAL"),
        var("EMAIL_HOME_ADDRESS"),
    ],
    // The adapter checks the values further (addresses, `none` only
    // towards loopback).
    section: Some(Section {
        name: "email",
        keys: Keys::These(&[
            Key {
                name: "address",
                kind: Kind::Str,
            },
            Key {
                name: "password",
                kind: Kind::Str,
            },
            Key {
                name: "imap_host",
                kind: Kind::Str,
            },
            Key {
                name: "imap_port",
                kind: Kind::PositiveInt,
            },
            Key {
                name: "imap_security",
                kind: SECURITY,
            },
            Key {
                name: "smtp_host",
                kind: Kind::Str,
            },
            Key {
                name: "smtp_port",
                kind: Kind::PositiveInt,
            },
            Key {
                name: "smtp_security",
                kind: SECURITY,
            },
            Key {
                name: "allowed_users",
                kind: Kind::List,
            },
            Key {
                name: "poll_interval",
                kind: Kind::PositiveInt,
            },
            Key {
                name: "home_address",
                kind: Kind::Str,
            },
        ]),
    }),
    allow_var: Some("EMAIL_ALLOWED_USERS"),
    home_channel_var: Some("EMAIL_HOME_ADDRESS"),
    enable_hint: "EMAIL_ADDRESS with EMAIL_PASSWORD, EMAIL_IMAP_HOST and EMAIL_SMTP_HOST",
    split_target: split_chat_thread,
    setup: None,
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = EmailAdapter::from_sources(ctx.env, &ctx.settings.file, ctx.store.clone())?;
    Some(
        built
            .map(|a| Arc::new(a) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
