//! Reading a platform's settings: a variable (`SLACK_BOT_TOKEN`), else the
//! key of the platform's `config.toml` section (`[slack] bot_token`). A
//! variable wins; a blank variable counts as unset.
//!
//! Every platform reads its settings this way, so the reading lives here
//! once: [`Sources::pick`] finds a [`Setting`], whose readers
//! ([`Setting::string`], [`Setting::boolean`], [`Setting::list`], …) turn
//! it into a value or a [`SettingError`] naming the variable or key at
//! fault. The platform checks what the value means (a token's prefix, an id's
//! shape) and wraps the error into its own (`From<SettingError>`).

/// Where a platform's settings come from: the environment and one section
/// of `config.toml`.
pub struct Sources<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    section_name: &'static str,
    section: Option<&'a toml::Table>,
}

impl std::fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values stay out: some of them are secrets.
        f.debug_struct("Sources")
            .field("section", &self.section_name)
            .finish_non_exhaustive()
    }
}

impl<'a> Sources<'a> {
    /// The variables `env` gives and the `[section_name]` table of `file`
    /// (absent, or not a table: only the variables count).
    pub fn new(
        env: &'a dyn Fn(&str) -> Option<String>,
        file: &'a toml::Table,
        section_name: &'static str,
    ) -> Self {
        Sources {
            env,
            section_name,
            section: file.get(section_name).and_then(toml::Value::as_table),
        }
    }

    /// The setting of variable `var`, else of key `key` in the section;
    /// `None` when neither is set (a blank variable is not set).
    pub fn pick(&self, var: &str, key: &str) -> Option<Setting<'a>> {
        match (self.env)(var).filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(Setting {
                key: var.to_owned(),
                raw: Raw::Env(v),
            }),
            None => self.section.and_then(|t| t.get(key)).map(|v| Setting {
                key: format!("{}.{key}", self.section_name),
                raw: Raw::Toml(v),
            }),
        }
    }
}

/// A setting that cannot be read as what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SettingError {
    /// The variable (`SLACK_API_URL`) or key (`slack.api_url`) at fault.
    pub key: String,
    /// What is wrong and what is accepted. Never the value of a secret.
    pub message: String,
}

/// One raw value: a variable (always a string) or a `config.toml` value.
#[derive(Clone)]
enum Raw<'a> {
    Env(String),
    Toml(&'a toml::Value),
}

/// One setting found by [`Sources::pick`], with the name to blame.
#[derive(Clone)]
pub struct Setting<'a> {
    /// The variable, or `section.key` when it came from `config.toml`.
    pub key: String,
    raw: Raw<'a>,
}

impl std::fmt::Debug for Setting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The value may be a secret.
        f.debug_struct("Setting")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Setting<'_> {
    /// An error about this setting.
    pub fn error(&self, message: impl Into<String>) -> SettingError {
        SettingError {
            key: self.key.clone(),
            message: message.into(),
        }
    }

    /// A string, trimmed.
    pub fn string(&self) -> Result<String, SettingError> {
        match &self.raw {
            Raw::Env(s) | Raw::Toml(toml::Value::String(s)) => Ok(s.trim().to_owned()),
            Raw::Toml(_) => Err(self.error("must be a string")),
        }
    }

    /// The value as text whatever its TOML type (a number as its digits),
    /// for settings whose own check then names what is wrong.
    pub fn text(&self) -> String {
        match &self.raw {
            Raw::Env(s) | Raw::Toml(toml::Value::String(s)) => s.trim().to_owned(),
            Raw::Toml(toml::Value::Integer(n)) => n.to_string(),
            Raw::Toml(other) => other.to_string(),
        }
    }

    /// `true`/`false` in TOML; `1`/`true`/`yes`/`on` or
    /// `0`/`false`/`no`/`off` (any case) in a variable.
    pub fn boolean(&self) -> Result<bool, SettingError> {
        match &self.raw {
            Raw::Toml(toml::Value::Boolean(b)) => Ok(*b),
            Raw::Toml(_) => Err(self.error("must be true or false")),
            Raw::Env(s) => match s.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                other => Err(self.error(format!("`{other}` is not true or false"))),
            },
        }
    }

    /// A whole number from 1 to `max`: a TOML integer, or its digits.
    pub fn number(&self, max: u64) -> Result<u64, SettingError> {
        let n = match &self.raw {
            Raw::Toml(toml::Value::Integer(n)) => u64::try_from(*n).ok(),
            Raw::Env(s) | Raw::Toml(toml::Value::String(s)) => s.trim().parse().ok(),
            Raw::Toml(_) => None,
        };
        n.filter(|n| (1..=max).contains(n))
            .ok_or_else(|| self.error(format!("must be a whole number from 1 to {max}")))
    }

    /// A list of `what` (`"member ids"`, for the error): a comma-separated
    /// string (empty items dropped) or a TOML list of strings, each
    /// trimmed. An empty string inside a TOML list is kept, for the
    /// platform's check to refuse.
    pub fn list(&self, what: &str) -> Result<Vec<String>, SettingError> {
        self.items(what, false)
    }

    /// [`Self::list`] that also takes TOML integers as items (numeric ids
    /// such as Discord's, which a TOML file may write unquoted).
    pub fn list_with_numbers(&self, what: &str) -> Result<Vec<String>, SettingError> {
        self.items(what, true)
    }

    fn items(&self, what: &str, numbers: bool) -> Result<Vec<String>, SettingError> {
        match &self.raw {
            Raw::Env(s) | Raw::Toml(toml::Value::String(s)) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()),
            Raw::Toml(toml::Value::Array(list)) => list
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.trim().to_owned()),
                    toml::Value::Integer(n) if numbers => Ok(n.to_string()),
                    _ => Err(self.error(format!("must be a list of {what}"))),
                })
                .collect(),
            Raw::Toml(_) => Err(self.error(format!(
                "must be a list of {what} or a comma-separated string"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read<T>(
        vars: &[(&str, &str)],
        file: &str,
        read: impl Fn(&Setting<'_>) -> T,
    ) -> Option<(String, T)> {
        let file: toml::Table = toml::from_str(file).unwrap();
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let sources = Sources::new(&env, &file, "chat");
        sources
            .pick("CHAT_VALUE", "value")
            .map(|s| (s.key.clone(), read(&s)))
    }

    #[test]
    fn a_variable_wins_over_the_key_and_a_blank_one_is_unset() {
        let file = "[chat]\nvalue = \" from file \"\n";
        let got = read(&[("CHAT_VALUE", " from env ")], file, |s| s.string());
        assert_eq!(got, Some(("CHAT_VALUE".into(), Ok("from env".into()))));
        let got = read(&[("CHAT_VALUE", "  ")], file, |s| s.string());
        assert_eq!(got, Some(("chat.value".into(), Ok("from file".into()))));
        assert_eq!(read(&[], "", |s| s.string()), None);
        assert_eq!(read(&[], "chat = 3\n", |s| s.string()), None);
    }

    #[test]
    fn each_reader_takes_its_forms_and_names_the_setting_otherwise() {
        let b = |v: &str| read(&[("CHAT_VALUE", v)], "", |s| s.boolean()).map(|(_, r)| r);
        assert_eq!(b("Yes"), Some(Ok(true)));
        assert_eq!(b("off"), Some(Ok(false)));
        let e = b("maybe").and_then(Result::err).map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("CHAT_VALUE: `maybe` is not true or false")
        );
        let t = |file: &str| read(&[], file, |s| s.boolean()).map(|(_, r)| r);
        assert_eq!(t("[chat]\nvalue = true"), Some(Ok(true)));
        assert!(t("[chat]\nvalue = \"true\"").is_some_and(|r| r.is_err()));

        let n = |file: &str| read(&[], file, |s| s.number(10)).map(|(_, r)| r);
        assert_eq!(n("[chat]\nvalue = 7"), Some(Ok(7)));
        assert_eq!(n("[chat]\nvalue = \"7\""), Some(Ok(7)));
        for bad in ["0", "11", "-1", "1.5", "\"x\""] {
            let e = n(&format!("[chat]\nvalue = {bad}")).and_then(Result::err);
            assert_eq!(
                e.map(|e| e.to_string()).as_deref(),
                Some("chat.value: must be a whole number from 1 to 10"),
                "{bad}"
            );
        }
        let s = read(&[], "[chat]\nvalue = 1", |s| s.string()).map(|(_, r)| r);
        assert_eq!(
            s,
            Some(Err(SettingError {
                key: "chat.value".into(),
                message: "must be a string".into()
            }))
        );
        let text = read(&[], "[chat]\nvalue = 15551234", |s| s.text()).map(|(_, r)| r);
        assert_eq!(text.as_deref(), Some("15551234"));
    }

    #[test]
    fn lists_come_comma_separated_or_as_toml_lists() {
        let l =
            |vars: &[(&str, &str)], file: &str| read(vars, file, |s| s.list("ids")).map(|(_, r)| r);
        let two = Some(Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(l(&[("CHAT_VALUE", " a, ,b,")], ""), two);
        assert_eq!(l(&[], "[chat]\nvalue = \"a,b\""), two);
        assert_eq!(l(&[], "[chat]\nvalue = [\" a\", \"b \"]"), two);
        // An empty item of a TOML list reaches the platform's check.
        assert_eq!(
            l(&[], "[chat]\nvalue = [\"\"]"),
            Some(Ok(vec![String::new()]))
        );
        let e = |file: &str| l(&[], file).and_then(Result::err).map(|e| e.message);
        assert_eq!(
            e("[chat]\nvalue = [1]").as_deref(),
            Some("must be a list of ids")
        );
        assert_eq!(
            e("[chat]\nvalue = 1").as_deref(),
            Some("must be a list of ids or a comma-separated string")
        );
        let numbers = read(&[], "[chat]\nvalue = [1, \"2\"]", |s| {
            s.list_with_numbers("ids")
        })
        .map(|(_, r)| r);
        assert_eq!(numbers, Some(Ok(vec!["1".to_owned(), "2".to_owned()])));
    }

    #[test]
    fn debug_output_keeps_values_out() {
        let file: toml::Table = toml::from_str("[chat]\nvalue = \"hunter2\"").unwrap();
        let env = |_: &str| None;
        let sources = Sources::new(&env, &file, "chat");
        let setting = sources.pick("CHAT_VALUE", "value");
        let shown = format!("{sources:?} {setting:?}");
        assert!(
            shown.contains("chat.value") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
