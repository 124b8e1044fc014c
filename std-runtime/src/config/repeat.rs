//! `[agent] repeat_guard` (SPEC Y6): `{ warn_after = 3, stop_after = 5 }`
//! (either key may be left out), or `false` / `"off"`. On by default.

use hermes_core::RepeatGuard;

use super::ConfigError;
use super::resolve::Resolver;

/// What `[agent] repeat_guard` must be, for error messages.
const WANT: &str = "a table { warn_after = N, stop_after = M }, or false / \"off\"";

/// The repeat guard as configured; `None` when turned off.
pub(super) fn repeat_guard(resolver: &Resolver<'_>) -> Result<Option<RepeatGuard>, ConfigError> {
    let value = match resolver.toml_value("agent", "repeat_guard") {
        None => return Ok(Some(RepeatGuard::DEFAULT)),
        Some(v) => v,
    };
    let table = match value {
        toml::Value::Boolean(false) => return Ok(None),
        toml::Value::Boolean(true) => return Ok(Some(RepeatGuard::DEFAULT)),
        toml::Value::String(s) if s == "off" => return Ok(None),
        toml::Value::String(s) if s == "on" => return Ok(Some(RepeatGuard::DEFAULT)),
        toml::Value::Table(t) => t,
        _ => return Err(resolver.type_error("agent", "repeat_guard", WANT)),
    };
    let mut warn_after = RepeatGuard::DEFAULT.warn_after();
    let mut stop_after = RepeatGuard::DEFAULT.stop_after();
    for (key, v) in table {
        let slot = match key.as_str() {
            "warn_after" => &mut warn_after,
            "stop_after" => &mut stop_after,
            other => {
                return Err(resolver.type_error(
                    "agent",
                    "repeat_guard",
                    &format!("{WANT} (unknown key '{other}')"),
                ));
            }
        };
        *slot = v
            .as_integer()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                resolver.type_error("agent", &format!("repeat_guard.{key}"), "a whole number")
            })?;
    }
    RepeatGuard::new(warn_after, stop_after)
        .map(Some)
        .map_err(|e| resolver.type_error("agent", "repeat_guard", &format!("{WANT}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::PathBuf;

    use super::super::{Environment, Overrides, load};
    use super::*;

    fn loaded(agent_section: &str) -> Result<Option<RepeatGuard>, ConfigError> {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            format!("[agent]\n{agent_section}\n"),
        )
        .unwrap();
        let env = Environment::from_pairs(vec![(
            "HERMES_HOME".to_owned(),
            home.path().display().to_string(),
        )]);
        let overrides = Overrides {
            workdir: Some(PathBuf::from("/tmp")),
            ..Overrides::default()
        };
        load(&overrides, &env).map(|s| s.repeat_guard)
    }

    #[test]
    fn on_by_default_tunable_and_can_be_turned_off() {
        assert_eq!(loaded("").unwrap(), Some(RepeatGuard::DEFAULT));
        assert_eq!(
            loaded("repeat_guard = { warn_after = 2, stop_after = 4 }").unwrap(),
            Some(RepeatGuard::new(2, 4).unwrap())
        );
        assert_eq!(
            loaded("repeat_guard = { stop_after = 9 }").unwrap(),
            Some(RepeatGuard::new(3, 9).unwrap())
        );
        assert_eq!(loaded("repeat_guard = false").unwrap(), None);
        assert_eq!(loaded("repeat_guard = \"off\"").unwrap(), None);
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        for (toml, needle) in [
            (
                "repeat_guard = { warn_after = 4, stop_after = 2 }",
                "below warn_after",
            ),
            ("repeat_guard = { warn_after = 1 }", "never a repeat"),
            (
                "repeat_guard = { warn_afterr = 3 }",
                "unknown key 'warn_afterr'",
            ),
            (
                "repeat_guard = { stop_after = \"5\" }",
                "repeat_guard.stop_after",
            ),
            (
                "repeat_guard = { stop_after = -5 }",
                "repeat_guard.stop_after",
            ),
            ("repeat_guard = 5", "repeat_guard"),
            ("repeat_guard = \"sometimes\"", "repeat_guard"),
        ] {
            let err = loaded(toml).unwrap_err().to_string();
            assert!(err.contains(needle), "{toml}: {err}");
        }
    }
}
