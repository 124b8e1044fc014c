//! How a platform plugs in (issue 40, item 1): each platform describes
//! itself once, in a [`Platform`] descriptor next to its adapter
//! (`platforms/telegram/src/descriptor.rs`, …), and [`platforms`] is the registry of the
//! ones this build carries (one cargo feature each).
//!
//! The lists that name platforms are iterations over the registry: the
//! adapters `hermes gateway run` builds, the extra findings of `--check`,
//! `hermes doctor`'s platform lines, the "no platform is enabled" error,
//! the allow-list warning, a platform's own `allowed_users` key, the
//! prompt's platform name, the delivery targets of scheduled jobs and the
//! platforms `hermes gateway setup` offers. The runtime's own tables
//! (`KNOWN_VARS`, `config.toml`'s `SECTIONS`, the home-channel variables,
//! `split_chat`) stay in `hermes-runtime`, which every command loads
//! without the gateway; the tests here fail when a descriptor and those
//! tables disagree.
//!
//! This module and the platform modules are the only ones that name a
//! platform's module (`platform::tests::only_the_registry_names_a_platform_module`).

pub use hermes_platform_kit::platform::*;

/// The platforms of this build, in the order their adapters start.
static PLATFORMS: &[&Platform] = &[
    #[cfg(feature = "telegram")]
    &hermes_telegram::descriptor::PLATFORM,
    #[cfg(feature = "wecom")]
    &hermes_wecom::descriptor::PLATFORM,
    #[cfg(feature = "discord")]
    &hermes_discord::descriptor::PLATFORM,
    #[cfg(feature = "wecom_callback")]
    &hermes_wecom_callback::descriptor::PLATFORM,
    #[cfg(feature = "matrix")]
    &hermes_matrix::descriptor::PLATFORM,
    #[cfg(feature = "signal")]
    &hermes_signal::descriptor::PLATFORM,
    #[cfg(feature = "email")]
    &hermes_email::descriptor::PLATFORM,
    #[cfg(feature = "whatsapp")]
    &hermes_whatsapp::descriptor::PLATFORM,
    #[cfg(feature = "slack")]
    &hermes_slack::descriptor::PLATFORM,
    #[cfg(feature = "api_server")]
    &crate::api_server::descriptor::PLATFORM,
];

/// The platforms this build carries.
pub fn platforms() -> &'static [&'static Platform] {
    PLATFORMS
}

/// The platform called `name`, if this build carries it.
pub fn find(name: &str) -> Option<&'static Platform> {
    PLATFORMS.iter().copied().find(|p| p.name == name)
}

/// The platform as people name it; an unknown name as it is.
pub fn display_name(name: &str) -> &str {
    find(name).map_or(name, |p| p.display_name)
}

/// `chat[:thread]` of a delivery target on `platform` (an unknown one
/// splits at the first colon).
pub fn split_target<'a>(platform: &str, text: &'a str) -> (&'a str, Option<&'a str>) {
    match find(platform) {
        Some(p) => (p.split_target)(text),
        None => split_chat_thread(text),
    }
}

/// The "no platform is enabled" error's text: how to enable each.
pub fn no_platform_text() -> String {
    let hints: Vec<&str> = PLATFORMS.iter().map(|p| p.enable_hint).collect();
    if hints.is_empty() {
        return "no platform is enabled: this hermes was built without any platform feature"
            .to_owned();
    }
    format!(
        "no platform is enabled: set {} (environment or $HERMES_HOME/.env)",
        hints.join(", or ")
    )
}

/// The allow-list variables, for "nobody is allowed" (the shared one last).
pub fn allow_vars() -> Vec<&'static str> {
    PLATFORMS
        .iter()
        .filter_map(|p| p.allow_var)
        .chain(["GATEWAY_ALLOWED_USERS"])
        .collect()
}

#[cfg(test)]
#[path = "platform_tests.rs"]
mod tests;
