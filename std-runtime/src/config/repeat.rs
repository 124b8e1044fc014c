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
