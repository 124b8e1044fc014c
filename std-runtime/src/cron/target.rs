//! Where a job's answer goes (the `deliver` field).

use std::fmt;

/// A delivery target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Back to the chat (and topic) the job was created from.
    Origin,
    /// Only stored.
    Local,
    /// That platform's home channel (`/sethome`, or configured).
    Home(String),
    /// That chat.
    Chat {
        /// The platform.
        platform: String,
        /// The chat id.
        chat: String,
        /// A thread (forum topic) in it.
        thread: Option<String>,
    },
}

/// The accepted forms, for refusals.
pub const TARGET_FORMS: &str = "`origin` (the chat the job was created in), `local` (stored only), \
a platform name such as `telegram` (its home channel) or `platform:chat_id[:thread_id]`";

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && !s.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// A chat and its thread as `chat_id[:thread_id]` writes them (each
/// platform descriptor's `split_target` in `hermes_gateway::platform`
/// splits the same way; checked there). Matrix room
/// ids have a colon of their own (`!room:server`); a Matrix thread is the
/// id of its root event, which starts with `$`.
pub fn split_chat<'a>(platform: &str, text: &'a str) -> (&'a str, Option<&'a str>) {
    if platform == "matrix" {
        return match text.rfind(":$") {
            Some(at) => (&text[..at], Some(&text[at + 1..])),
            None => (text, None),
        };
    }
    match text.split_once(':') {
        Some((chat, thread)) => (chat, Some(thread)),
        None => (text, None),
    }
}

impl Target {
    /// Reads a `deliver` value; empty means `origin`.
    pub fn parse(text: &str) -> Result<Target, String> {
        let text = text.trim();
        let refuse = || format!("cannot read the delivery target {text:?}; use {TARGET_FORMS}");
        match text {
            "" | "origin" => return Ok(Target::Origin),
            "local" => return Ok(Target::Local),
            _ => {}
        }
        let (platform, rest) = match text.split_once(':') {
            Some((platform, rest)) => (platform.to_ascii_lowercase(), Some(rest)),
            None => (text.to_ascii_lowercase(), None),
        };
        if !is_name(&platform) {
            return Err(refuse());
        }
        let Some(rest) = rest else {
            return Ok(Target::Home(platform));
        };
        let (chat, thread) = split_chat(&platform, rest);
        if !is_id(chat) || thread.is_some_and(|t| !is_id(t)) {
            return Err(refuse());
        }
        Ok(Target::Chat {
            platform,
            chat: chat.to_owned(),
            thread: thread.map(str::to_owned),
        })
    }

    /// The platform it names, if any (origin's is the job's).
    pub fn platform(&self) -> Option<&str> {
        match self {
            Target::Home(p) | Target::Chat { platform: p, .. } => Some(p),
            Target::Origin | Target::Local => None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Origin => f.write_str("origin"),
            Target::Local => f.write_str("local"),
            Target::Home(p) => f.write_str(p),
            Target::Chat {
                platform,
                chat,
                thread: None,
            } => write!(f, "{platform}:{chat}"),
            Target::Chat {
                platform,
                chat,
                thread: Some(t),
            } => write!(f, "{platform}:{chat}:{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_form_round_trips() {
        for text in [
            "origin",
            "local",
            "telegram",
            "telegram:-100123",
            "telegram:-100123:77",
            "matrix:!room:example.org",
            "matrix:!room:example.org:$root",
        ] {
            assert_eq!(Target::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(Target::parse("").unwrap(), Target::Origin);
        assert_eq!(
            Target::parse("Telegram").unwrap(),
            Target::Home("telegram".into())
        );
        assert_eq!(
            Target::parse("matrix:!room:example.org:$root").unwrap(),
            Target::Chat {
                platform: "matrix".into(),
                chat: "!room:example.org".into(),
                thread: Some("$root".into()),
            }
        );
    }

    #[test]
    fn junk_is_refused_with_the_forms() {
        for bad in [
            "tele gram",
            "telegram:",
            "x:a b",
            "../etc",
            "telegram:1:\t2",
        ] {
            let err = Target::parse(bad).unwrap_err();
            assert!(err.contains("platform:chat_id"), "{bad}: {err}");
        }
    }
}
