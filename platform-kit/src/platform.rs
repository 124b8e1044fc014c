//! How a platform describes itself (issue 40, item 1): a [`Platform`]
//! descriptor, written once next to the platform's adapter, names its
//! variables, its `config.toml` section, its home channel, how a delivery
//! target splits, what setup asks, its checks and how its adapter is built.
//! The gateway's registry iterates the descriptors of the platforms a build
//! carries; nothing above this kit names a platform.

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
    /// Whether the token is a credential (as its [`Var::secret`] says): setup
    /// reads it hidden. Not where the bot's identity is no secret (an
    /// account's phone number, whose keys another program holds).
    pub token_secret: bool,
    /// Where the token comes from.
    pub token_hint: &'static str,
    /// What a user id looks like and where to find one's own.
    pub id_hint: &'static str,
    /// The other settings the bot needs before the token can be checked
    /// (WhatsApp's phone number id, app secret and verify token), each with
    /// where it comes from; asked after the token, secrets hidden. Empty
    /// for a bot that is one token.
    pub more: &'static [(Var, &'static str)],
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
    /// The crate its adapter logs from (`env!("CARGO_CRATE_NAME")` in the
    /// descriptor): a bare log level (`HERMES_LOG=debug`) applies to it as
    /// to hermes's other crates.
    pub log_target: &'static str,
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
