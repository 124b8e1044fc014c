//! Signal, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, SetupHint, no_check_hints, no_doctor, split_chat_thread, var,
};
use hermes_runtime::config::{Key, Keys, Kind, Section};

use crate::{PLATFORM as NAME, SignalAdapter, SignalConfig};

/// signal-cli's JSON-RPC daemon.
pub static PLATFORM: Platform = Platform {
    name: NAME,
    display_name: "Signal",
    feature: "signal",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("SIGNAL_HTTP_URL"),
        var("SIGNAL_ACCOUNT"),
        var("SIGNAL_ALLOWED_USERS"),
        var("SIGNAL_HOME_CHANNEL"),
        var("SIGNAL_REQUIRE_MENTION"),
    ],
    section: Some(Section {
        name: "signal",
        keys: Keys::These(&[
            Key {
                name: "http_url",
                kind: Kind::Url,
            },
            Key {
                name: "account",
                kind: Kind::Str,
            },
            Key {
                name: "allowed_users",
                kind: Kind::List,
            },
            Key {
                name: "home_channel",
                kind: Kind::Str,
            },
            Key {
                name: "require_mention",
                kind: Kind::Bool,
            },
        ]),
    }),
    allow_var: Some("SIGNAL_ALLOWED_USERS"),
    home_channel_var: Some("SIGNAL_HOME_CHANNEL"),
    enable_hint: "SIGNAL_HTTP_URL and SIGNAL_ACCOUNT",
    // Numbers, UUIDs and `group.<base64>` have no colon: no threads.
    split_target: split_chat_thread,
    // The "token" is the account: the daemon holds Signal's keys, and
    // `getUserStatus` on the account checks both the address and the number.
    setup: Some(SetupHint {
        token_var: "SIGNAL_ACCOUNT",
        token_secret: false,
        token_hint: "the account's number as signal-cli registered or linked it (+ and country code, e.g. +4915112345678)",
        id_hint: "phone numbers with + and country code, or Signal UUIDs",
        more: &[(
            var("SIGNAL_HTTP_URL"),
            "the address of `signal-cli -a NUMBER daemon --http 127.0.0.1:8080 --receive-mode manual`, e.g. http://127.0.0.1:8080",
        )],
    }),
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = SignalConfig::from_sources(ctx.env, &ctx.settings.file)?;
    Some(
        built
            .map(|c| Arc::new(SignalAdapter::new(c)) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
