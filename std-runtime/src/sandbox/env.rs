//! The environment a command gets: an allow-list, never a copy of ours.
//!
//! A denylist of "secret-looking" names (the old way) misses whatever it did
//! not think of: `MYSQL_PWD`, `PGPASSWORD`, a proxy URL with a password in
//! it, a platform token with an unusual name. So a command gets only what a
//! shell needs to behave — `PATH`, the locale (`LANG`, `LANGUAGE`,
//! `LC_*`), `TERM`, `TZ` — plus `HOME` set to the working directory and
//! `TMPDIR` to its private temp dir, plus the names the user passes through
//! explicitly (`[agent] env_passthrough`; a trailing `*` matches a prefix).
//! No pattern passes hermes's own credentials on ([`is_hermes_credential`]):
//! `env_passthrough = ["*"]` still keeps the provider key and the bot tokens
//! from every command.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::env::is_hermes_credential;

/// Variables a command inherits from hermes when they are set.
pub const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LANGUAGE", "TERM", "TZ"];

/// The `PATH` a command gets when hermes has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Whether `name` matches one of the user's pass-through patterns (exact,
/// or a prefix ending in `*`) and is not one of hermes's credentials.
fn passed_through(name: &str, passthrough: &[String]) -> bool {
    !is_hermes_credential(name)
        && passthrough.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
}

/// The environment of a command: the allow-listed variables of `parent`,
/// those the user passes through, and `HOME` / `TMPDIR` set to `home` and
/// `tmpdir`. Sorted by name.
pub fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    passthrough: &[String],
    home: &Path,
    tmpdir: Option<&Path>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            name != "HOME"
                && name != "TMPDIR"
                && (INHERITED_ENV.contains(&name.as_ref())
                    || name.starts_with("LC_")
                    || passed_through(&name, passthrough))
        })
        .collect();
    if !env.iter().any(|(n, _)| n == OsStr::new("PATH")) {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push(("HOME".into(), home.as_os_str().to_owned()));
    if let Some(tmp) = tmpdir {
        env.push(("TMPDIR".into(), tmp.as_os_str().to_owned()));
    }
    env.sort();
    env
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "sk-provider"),
            ("OPENAI_ORG_HINT", "not a secret"),
            ("TELEGRAM_BOT_TOKEN", "123:bot"),
            ("WECOM_CALLBACK_CORP_SECRET", "corp"),
            ("HERMES_DATABASE_URL", "postgresql://u:pw@db/h"),
            ("HERMES_BASE_URL", "https://user:pw@llm.example/v1"),
            ("EDITOR", "vi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    /// `env_passthrough = ["*"]` or `["OPENAI_*"]` used to hand every
    /// provider key and bot token hermes holds to every command.
    #[test]
    fn a_pass_through_pattern_never_hands_out_hermes_own_secrets() {
        for patterns in [
            vec!["*".to_owned()],
            vec!["OPENAI_*".into(), "TELEGRAM_*".into(), "WECOM_*".into()],
            vec![
                "OPENAI_API_KEY".into(),
                "TELEGRAM_BOT_TOKEN".into(),
                "HERMES_DATABASE_URL".into(),
                "HERMES_BASE_URL".into(),
            ],
        ] {
            let env = names(&child_env(parent(), &patterns, Path::new("/w"), None));
            for secret in [
                "OPENAI_API_KEY",
                "TELEGRAM_BOT_TOKEN",
                "WECOM_CALLBACK_CORP_SECRET",
                "HERMES_DATABASE_URL",
                "HERMES_BASE_URL",
            ] {
                assert!(!env.contains(&secret.to_owned()), "{patterns:?}: {env:?}");
            }
        }
        // What is not hermes's own still passes.
        let env = names(&child_env(
            parent(),
            &["OPENAI_*".to_owned(), "EDITOR".into()],
            Path::new("/w"),
            None,
        ));
        assert!(env.contains(&"OPENAI_ORG_HINT".to_owned()), "{env:?}");
        assert!(env.contains(&"EDITOR".to_owned()), "{env:?}");
    }
}
