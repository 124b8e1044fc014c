//! Reading one setting: the flag, then the environment, then `.env`,
//! then `config.toml`, typed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::{ConfigError, Environment, Origin, split_list};

pub(super) struct Resolver<'a> {
    pub(super) process_env: &'a Environment,
    pub(super) dotenv: &'a BTreeMap<String, String>,
    pub(super) file: &'a toml::Table,
    pub(super) toml_path: &'a Path,
}

impl Resolver<'_> {
    /// A variable from the environment, else `.env`.
    pub(super) fn var(&self, name: &'static str) -> Option<(&str, Origin)> {
        if let Some(v) = self.process_env.get(name) {
            return Some((v, Origin::Env(name)));
        }
        self.dotenv
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .map(|v| (v, Origin::DotEnv(name)))
    }

    pub(super) fn toml_value(&self, section: &str, key: &str) -> Option<&toml::Value> {
        self.file.get(section)?.as_table()?.get(key)
    }

    pub(super) fn type_error(&self, section: &str, key: &str, want: &str) -> ConfigError {
        ConfigError::File {
            path: self.toml_path.to_owned(),
            message: format!("[{section}] {key} must be {want}"),
        }
    }

    pub(super) fn toml_str(&self, section: &str, key: &str) -> Result<Option<&str>, ConfigError> {
        match self.toml_value(section, key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(self.type_error(section, key, "a string")),
        }
    }

    pub(super) fn toml_bool(&self, section: &str, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.toml_value(section, key) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(_) => Err(self.type_error(section, key, "true or false")),
        }
    }

    pub(super) fn toml_int(&self, section: &str, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.toml_value(section, key) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) => u32::try_from(*n)
                .map(Some)
                .map_err(|_| self.type_error(section, key, "a positive whole number")),
            Some(_) => Err(self.type_error(section, key, "a whole number")),
        }
    }

    /// A duration in whole seconds (at least 1) from variable `var`, else
    /// `[section] key`, else `default`.
    pub(super) fn seconds(
        &self,
        var: &'static str,
        (section, key): (&'static str, &'static str),
        default: Duration,
    ) -> Result<(Duration, Origin), ConfigError> {
        let found = match self.var(var) {
            Some((v, origin)) => Some((
                v.trim().parse::<u64>().map_err(|_| ConfigError::Invalid {
                    key: var.into(),
                    message: format!("'{v}' is not a whole number of seconds"),
                })?,
                origin,
                var,
            )),
            None => self.toml_int(section, key)?.map(|n| {
                let origin = match key {
                    "first_byte_timeout_secs" => {
                        Origin::ConfigFile("provider.first_byte_timeout_secs")
                    }
                    _ => Origin::ConfigFile("provider.call_timeout_secs"),
                };
                (u64::from(n), origin, key)
            }),
        };
        match found {
            None => Ok((default, Origin::Default)),
            Some((0, _, name)) => Err(ConfigError::Invalid {
                key: name.into(),
                message: "must be at least 1 second".into(),
            }),
            Some((n, origin, _)) => Ok((Duration::from_secs(n), origin)),
        }
    }

    pub(super) fn toml_string_list(
        &self,
        section: &str,
        key: &str,
    ) -> Result<Option<Vec<String>>, ConfigError> {
        match self.toml_value(section, key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(split_list(s))),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.type_error(section, key, "a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.type_error(section, key, "a list of strings")),
        }
    }
}

/// The first value among: the flag, each variable in the environment, each
/// variable in `.env`, then `[section] key` in config.toml.
pub(super) fn first_of(
    flag: Option<String>,
    r: &Resolver<'_>,
    vars: &[&'static str],
    (section, key): (&'static str, &'static str),
) -> Result<Option<(String, Origin)>, ConfigError> {
    if let Some(v) = flag.filter(|v| !v.is_empty()) {
        return Ok(Some((v, Origin::Flag)));
    }
    for &name in vars {
        if let Some(v) = r.process_env.get(name) {
            return Ok(Some((v.to_owned(), Origin::Env(name))));
        }
    }
    for &name in vars {
        if let Some(v) = r.dotenv.get(name).filter(|v| !v.is_empty()) {
            return Ok(Some((v.clone(), Origin::DotEnv(name))));
        }
    }
    let origin = match (section, key) {
        ("provider", "api_key") => Origin::ConfigFile("provider.api_key"),
        ("provider", "base_url") => Origin::ConfigFile("provider.base_url"),
        _ => Origin::ConfigFile("provider.model"),
    };
    Ok(r.toml_str(section, key)?
        .filter(|v| !v.is_empty())
        .map(|v| (v.to_owned(), origin)))
}
