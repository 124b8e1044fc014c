//! The environment a command gets: an allow-list, never a copy of ours.
//!
//! A denylist of "secret-looking" names (the old way) misses whatever it did
//! not think of: `MYSQL_PWD`, `PGPASSWORD`, a proxy URL with a password in
//! it, a platform token with an unusual name. So a command gets only what a
//! shell needs to behave — `PATH`, the locale (`LANG`, `LANGUAGE`,
//! `LC_*`), `TERM`, `TZ` — plus `HOME` set to the working directory and
//! `TMPDIR` to its private temp dir, plus the names the user passes through
//! explicitly (`[agent] env_passthrough`; a trailing `*` matches a prefix).

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Variables a command inherits from hermes when they are set.
pub const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LANGUAGE", "TERM", "TZ"];

/// The `PATH` a command gets when hermes has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Whether `name` matches one of the user's pass-through patterns (exact,
/// or a prefix ending in `*`).
fn passed_through(name: &str, passthrough: &[String]) -> bool {
    passthrough.iter().any(|p| match p.strip_suffix('*') {
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
