//! The API server, as the registry ([`crate::platform`]) knows it: no chat
//! adapter (the app binds it beside the runner), but its variables, its
//! section and how to enable it are described here like a platform's.

use hermes_runtime::config::{Key, Keys, Kind, Section};

use crate::platform::{Platform, no_check_hints, no_doctor, secret, split_chat_thread, var};

/// The OpenAI-compatible HTTP API.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "API server",
    feature: "api_server",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("API_SERVER_ENABLED"),
        var("API_SERVER_HOST"),
        var("API_SERVER_PORT"),
        secret("API_SERVER_KEY"),
        var("API_SERVER_MODEL_NAME"),
        var("API_SERVER_CORS_ORIGINS"),
        var("API_SERVER_MAX_CONCURRENT"),
    ],
    section: Some(Section {
        name: "api_server",
        keys: Keys::These(&[
            Key {
                name: "enabled",
                kind: Kind::Bool,
            },
            Key {
                name: "host",
                kind: Kind::Str,
            },
            Key {
                name: "port",
                kind: Kind::Int,
            },
            Key {
                name: "key",
                kind: Kind::Str,
            },
            Key {
                name: "model_name",
                kind: Kind::Str,
            },
            Key {
                name: "cors_origins",
                kind: Kind::List,
            },
            Key {
                name: "max_concurrent",
                kind: Kind::PositiveInt,
            },
        ]),
    }),
    allow_var: None,
    home_channel_var: None,
    enable_hint: "API_SERVER_ENABLED=true and API_SERVER_KEY",
    split_target: split_chat_thread,
    setup: None,
    build: None,
    check_hints: no_check_hints,
    doctor: no_doctor,
};
