//! Matrix, as the gateway's registry knows it.

use std::sync::Arc;

use hermes_platform_kit::adapter::PlatformAdapter;
use hermes_platform_kit::platform::{
    BuildContext, Platform, no_check_hints, no_doctor, secret, var,
};

use super::MatrixAdapter;

/// The Matrix client-server API.
pub static PLATFORM: Platform = Platform {
    name: super::PLATFORM,
    display_name: "Matrix",
    feature: "matrix",
    log_target: env!("CARGO_CRATE_NAME"),
    vars: &[
        var("MATRIX_HOMESERVER"),
        var("MATRIX_USER_ID"),
        secret("MATRIX_PASSWORD"),
        secret("MATRIX_ACCESS_TOKEN"),
        var("MATRIX_ALLOWED_USERS"),
        var("MATRIX_REQUIRE_MENTION"),
        var("MATRIX_ALLOWED_ROOMS"),
        var("MATRIX_HOME_ROOM"),
    ],
    section: None,
    allow_var: Some("MATRIX_ALLOWED_USERS"),
    home_channel_var: Some("MATRIX_HOME_ROOM"),
    enable_hint: "MATRIX_HOMESERVER with MATRIX_ACCESS_TOKEN or MATRIX_USER_ID and MATRIX_PASSWORD",
    split_target,
    setup: None,
    build: Some(build),
    check_hints: no_check_hints,
    doctor: no_doctor,
};

/// A room id has a colon of its own (`!room:server`); a thread is the id
/// of its root event, which starts with `$`: `!room:server:$event`.
fn split_target(text: &str) -> (&str, Option<&str>) {
    match text.rfind(":$") {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    }
}

fn build(ctx: &BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>> {
    let built = MatrixAdapter::from_env(ctx.env, ctx.store.clone())?;
    Some(
        built
            .map(|a| Arc::new(a) as Arc<dyn PlatformAdapter>)
            .map_err(|e| e.to_string()),
    )
}
