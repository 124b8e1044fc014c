//! Loads the scheduler's settings ([`CronSettings`], owned by
//! [`crate::cron`]) from the loaded configuration: `[gateway] timezone`,
//! `[cron] catch_up` and the home channels.

use std::collections::BTreeMap;

use super::{ConfigError, Settings};
use crate::cron::settings::{CatchUp, CronSettings, HOME_CHANNEL_VARS};
use crate::cron::time_zone;

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

fn table<'a>(file: &'a toml::Table, name: &str) -> Option<&'a toml::Table> {
    file.get(name).and_then(toml::Value::as_table)
}

impl CronSettings {
    /// Reads them from the loaded settings.
    pub fn load(settings: &Settings) -> Result<CronSettings, ConfigError> {
        let gateway = table(&settings.file, "gateway");
        let tz_name = match gateway.and_then(|g| g.get("timezone")) {
            None => None,
            Some(toml::Value::String(s)) => Some(s.as_str()),
            Some(_) => {
                return Err(invalid(
                    "[gateway] timezone",
                    "must be a string such as \"Europe/Berlin\"",
                ));
            }
        };
        let tz = time_zone(tz_name).map_err(|e| invalid("[gateway] timezone", e.to_string()))?;
        let catch_up = match table(&settings.file, "cron").and_then(|c| c.get("catch_up")) {
            None => CatchUp::Once,
            Some(toml::Value::String(s)) if s == "once" => CatchUp::Once,
            Some(toml::Value::String(s)) if s == "skip" => CatchUp::Skip,
            Some(_) => return Err(invalid("[cron] catch_up", "must be \"once\" or \"skip\"")),
        };
        let mut home_channels = BTreeMap::new();
        if let Some(homes) = gateway.and_then(|g| g.get("home_channels")) {
            let Some(homes) = homes.as_table() else {
                return Err(invalid(
                    "[gateway.home_channels]",
                    "must be a table: platform = \"chat_id[:thread_id]\"",
                ));
            };
            for (platform, chat) in homes {
                let Some(chat) = chat.as_str().filter(|c| !c.trim().is_empty()) else {
                    return Err(invalid(
                        &format!("[gateway.home_channels] {platform}"),
                        "must be a chat id (\"chat_id[:thread_id]\")",
                    ));
                };
                home_channels.insert(platform.clone(), chat.trim().to_owned());
            }
        }
        for (platform, var) in HOME_CHANNEL_VARS {
            if let Some(chat) = settings.env.get(var).filter(|c| !c.trim().is_empty()) {
                home_channels.insert((*platform).to_owned(), chat.trim().to_owned());
            }
        }
        let silent_marker = match table(&settings.file, "cron").and_then(|c| c.get("silent_marker"))
        {
            None => crate::cron::settings::DEFAULT_SILENT_MARKER.to_owned(),
            Some(toml::Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
            Some(_) => {
                return Err(invalid(
                    "[cron] silent_marker",
                    "must be a non-empty string such as \"[SILENT]\"",
                ));
            }
        };
        Ok(CronSettings {
            tz,
            catch_up,
            home_channels,
            silent_marker,
            limits: settings.spending_limits()?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::{Environment, Overrides, load};
    use crate::cron::CatchUp;

    fn settings(toml: &str, vars: &[(&str, &str)]) -> Result<CronSettings, ConfigError> {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), toml).unwrap();
        let mut pairs = vec![("HERMES_HOME".to_owned(), home.path().display().to_string())];
        pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let overrides = Overrides {
            workdir: Some(std::path::PathBuf::from("/tmp")),
            ..Overrides::default()
        };
        let loaded = load(&overrides, &Environment::from_pairs(pairs))?;
        CronSettings::load(&loaded)
    }

    #[test]
    fn defaults_then_every_setting_and_variable() {
        let s = settings("", &[]).unwrap();
        assert_eq!(s.catch_up, CatchUp::Once);
        assert!(s.home_channels.is_empty());
        let s = settings(
            "[gateway]\ntimezone = \"Europe/Berlin\"\n[gateway.home_channels]\ntelegram = \"-100\"\nwecom = \"ops\"\n\
             [cron]\ncatch_up = \"skip\"\n",
            &[("TELEGRAM_HOME_CHANNEL", "-200:7"), ("DISCORD_HOME_CHANNEL", "99")],
        )
        .unwrap();
        assert_eq!(s.tz.iana_name(), Some("Europe/Berlin"));
        assert_eq!(s.catch_up, CatchUp::Skip);
        assert_eq!(s.home_channels["telegram"], "-200:7", "the variable wins");
        assert_eq!(s.home_channels["wecom"], "ops");
        assert_eq!(s.home_channels["discord"], "99");
    }

    #[test]
    fn bad_values_name_the_setting() {
        for (toml, says) in [
            (
                "[gateway]\ntimezone = \"Mars/Olympus\"\n",
                "[gateway] timezone",
            ),
            ("[gateway]\ntimezone = 3\n", "[gateway] timezone"),
            (
                "[gateway.home_channels]\ntelegram = 5\n",
                "home_channels] telegram",
            ),
        ] {
            let err = settings(toml, &[]).unwrap_err().to_string();
            assert!(err.contains(says), "{toml}: {err}");
        }
        // The loader itself refuses an unknown catch_up (the validation table).
        let err = settings("[cron]\ncatch_up = \"twice\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("catch_up"), "{err}");
    }
}
