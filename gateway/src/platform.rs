//! How a platform plugs in (issue 40, item 1): each platform describes
//! itself once, in a [`Platform`] descriptor next to its adapter
//! (`telegram/descriptor.rs`, …), and [`platforms`] is the registry of the
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

use std::sync::{Arc, Mutex};

use hermes_runtime::config::{Section, Settings};
use hermes_runtime::store::Store;

use crate::adapter::PlatformAdapter;

/// A variable lookup: the environment, then `$HERMES_HOME/.env`.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// An environment variable a platform reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    /// Its name (`TELEGRAM_BOT_TOKEN`).
    pub name: &'static str,
    /// Whether it holds a credential (a token, secret or password): the
    /// sandbox never passes it on, and setup reads it hidden.
    pub secret: bool,
}

/// A variable that holds no credential.
pub const fn var(name: &'static str) -> Var {
    Var {
        name,
        secret: false,
    }
}

/// A variable that holds a credential.
pub const fn secret(name: &'static str) -> Var {
    Var { name, secret: true }
}

/// What `hermes gateway setup` asks for a platform whose bot is one token.
#[derive(Clone, Copy, Debug)]
pub struct SetupHint {
    /// The token's variable.
    pub token_var: &'static str,
    /// Where the token comes from.
    pub token_hint: &'static str,
    /// What a user id looks like and where to find one's own.
    pub id_hint: &'static str,
}

/// One line of `hermes doctor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoctorLine {
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub text: String,
    /// What to do when it failed.
    pub fix: String,
}

/// What building an adapter may use.
pub struct BuildContext<'a> {
    /// The resolved settings (`[discord]`, `[email]` are read from the file).
    pub settings: &'a Settings,
    /// The variables.
    pub env: Env<'a>,
    /// The session store, when the gateway runs (offsets, leases, sync
    /// tokens); `None` for `--check`.
    pub store: Option<Arc<Mutex<Store>>>,
}

impl std::fmt::Debug for BuildContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildContext")
            .field("store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a platform's adapter: `None` when it is not configured, an error
/// naming the setting when it is configured wrongly.
pub type BuildFn = fn(&BuildContext<'_>) -> Option<Result<Arc<dyn PlatformAdapter>, String>>;

/// A platform, described once.
#[derive(Clone, Copy)]
pub struct Platform {
    /// The name in session keys, targets and allow-lists (`telegram`).
    pub name: &'static str,
    /// The name people use (`Telegram`), in the prompt and in setup.
    pub display_name: &'static str,
    /// The cargo feature that builds it in.
    pub feature: &'static str,
    /// Every variable it reads.
    pub vars: &'static [Var],
    /// Its `config.toml` section, when it has one.
    pub section: Option<Section>,
    /// Who may talk to the bot on it (`TELEGRAM_ALLOWED_USERS`).
    pub allow_var: Option<&'static str>,
    /// The variable naming its home channel (SPEC Y2).
    pub home_channel_var: Option<&'static str>,
    /// How to enable it, for "no platform is enabled".
    pub enable_hint: &'static str,
    /// How `chat[:thread]` of a delivery target (`PLATFORM:chat[:thread]`)
    /// splits on this platform.
    pub split_target: fn(&str) -> (&str, Option<&str>),
    /// What `hermes gateway setup` asks, when it sets this platform up.
    pub setup: Option<SetupHint>,
    /// Builds the chat adapter; `None` for the API server, which is no chat.
    pub build: Option<BuildFn>,
    /// What `--check` adds to the adapter's live `verify` (shape of the
    /// token, the allow-list); `refused` says the check failed and this
    /// platform's `verify` did not pass.
    pub check_hints: fn(Env<'_>, bool) -> Vec<String>,
    /// `hermes doctor`'s lines for it (nothing when not configured).
    pub doctor: fn(&Settings) -> Vec<DoctorLine>,
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Platform")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `chat[:thread]`: the first colon ends the chat.
pub fn split_chat_thread(text: &str) -> (&str, Option<&str>) {
    match text.split_once(':') {
        Some((chat, thread)) => (chat, Some(thread)),
        None => (text, None),
    }
}

/// No findings beyond the adapter's own `verify`.
pub fn no_check_hints(_env: Env<'_>, _refused: bool) -> Vec<String> {
    Vec::new()
}

/// No `hermes doctor` lines.
pub fn no_doctor(_settings: &Settings) -> Vec<DoctorLine> {
    Vec::new()
}

/// The platforms of this build, in the order their adapters start.
static PLATFORMS: &[&Platform] = &[
    #[cfg(feature = "telegram")]
    &crate::telegram::descriptor::PLATFORM,
    #[cfg(feature = "wecom")]
    &crate::wecom::descriptor::PLATFORM,
    #[cfg(feature = "discord")]
    &crate::discord::descriptor::PLATFORM,
    #[cfg(feature = "wecom_callback")]
    &crate::wecom_callback::descriptor::PLATFORM,
    #[cfg(feature = "matrix")]
    &crate::matrix::descriptor::PLATFORM,
    #[cfg(feature = "email")]
    &crate::email::descriptor::PLATFORM,
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
