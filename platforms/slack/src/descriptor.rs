//! Slack, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, DoctorLine, Env, Platform, SetupHint, secret, split_chat_thread, var,
};
use hermes_runtime::config::{Key, Keys, Kind, Section, Settings};

use crate::{SlackAdapter, SlackConfig, check_bot};

/// Slack over Socket Mode.
pub static PLATFORM: Platform = Platform {
    name: crate::PLATFORM,
    display_name: "Slack",
    feature: "slack",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        secret("SLACK_BOT_TOKEN"),
        secret("SLACK_APP_TOKEN"),
        var("SLACK_ALLOWED_USERS"),
        var("SLACK_HOME_CHANNEL"),
        var("SLACK_REQUIRE_MENTION"),
        var("SLACK_API_URL"),
    ],
    // The adapter checks the values' shapes further (xoxb-/xapp-, ids).
    section: Some(Section {
        name: "slack",
        keys: Keys::These(&[
            Key {
                name: "bot_token",
                kind: Kind::Str,
            },
            Key {
                name: "app_token",
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
            Key {
                name: "api_url",
                kind: Kind::Url,
            },
        ]),
    }),
    allow_var: Some("SLACK_ALLOWED_USERS"),
    home_channel_var: Some("SLACK_HOME_CHANNEL"),
    enable_hint: "SLACK_BOT_TOKEN and SLACK_APP_TOKEN",
    // `C0123:1700000000.000100`: a channel, then a thread's ts.
    split_target: split_chat_thread,
    setup: Some(SetupHint {
        token_var: "SLACK_BOT_TOKEN",
        token_secret: true,
        token_hint: "api.slack.com/apps → your app → OAuth & Permissions → Bot User OAuth Token (xoxb-…)",
        id_hint: "Slack member ids such as U012AB3CD (profile → ⋮ → Copy member ID)",
        more: &[(
            secret("SLACK_APP_TOKEN"),
            "Basic Information → App-Level Tokens, with connections:write (xapp-…)",
        )],
    }),
    build: Some(build),
    check_hints,
    doctor,
};

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = SlackConfig::from_sources(ctx.env, &ctx.settings.file)?;
    Some(
        built
            .map(|config| Arc::new(SlackAdapter::new(config)) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}

/// What to check when Slack's `verify` failed: the app's switches and
/// scopes, which `auth.test` cannot see. Nothing when Slack is not set up
/// or passed (every finding counts as a problem).
fn check_hints(env: Env<'_>, refused: bool) -> Vec<String> {
    let set = |var: &str| env(var).is_some_and(|t| !t.trim().is_empty());
    if !refused || !set("SLACK_BOT_TOKEN") {
        return Vec::new();
    }
    vec!["slack: the app needs Socket Mode on, an app-level token with connections:write, and the bot scopes app_mentions:read, chat:write, im:history, channels:history, files:read, files:write, reactions:write".to_owned()]
}

/// The tokens, asked live.
fn doctor(settings: &Settings) -> Vec<DoctorLine> {
    let env = |name: &str| settings.var(name).map(str::to_owned);
    let line = |ok: bool, text: String, fix: &str| DoctorLine {
        ok,
        text,
        fix: fix.to_owned(),
    };
    match SlackConfig::from_sources(&env, &settings.file) {
        None => Vec::new(),
        Some(Err(e)) => vec![line(false, e.to_string(), "fix that Slack setting")],
        Some(Ok(config)) => {
            // `hermes doctor` is synchronous; inside a runtime (a test) the
            // live check is left to `--check`.
            if tokio::runtime::Handle::try_current().is_ok() {
                return vec![line(
                    true,
                    "slack: configured (the live check is `hermes gateway run --check`)".to_owned(),
                    "",
                )];
            }
            let checked = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| rt.block_on(check_bot(&config)));
            vec![match checked {
                Ok(bot) => line(true, format!("slack: {bot}"), ""),
                Err(e) => line(
                    false,
                    e,
                    "check SLACK_BOT_TOKEN, SLACK_APP_TOKEN and SLACK_API_URL",
                ),
            }]
        }
    }
}
