//! Whose memory a session reads and writes (issue 44): one bot, many people.
//!
//! **The identity.** A gateway session serves one person, named by the
//! platform and the platform's user id — the same pair that scopes
//! `session_search`. Their `MEMORY.md` and `USER.md` live in
//! `$HERMES_HOME/memories/users/<platform>/<user id>/`, both path parts
//! encoded by [`encode_component`] so no id (`../..`, `a/b`, `.`) can name a
//! folder outside its own. Nobody else's memory reaches their prompt.
//!
//! **The owner** (`[memory] owner = "telegram:123"`, `HERMES_MEMORY_OWNER`)
//! keeps the files directly in `$HERMES_HOME` — the ones the CLI has always
//! used, so the CLI and the owner's chats share one memory, and the single
//! files of earlier versions become the owner's without moving a byte.
//! Without a configured owner those files are the CLI's only: no chat user
//! sees them.
//!
//! **Shared memory** (`$HERMES_HOME/memories/shared/MEMORY.md`) holds facts
//! about the household or the team: every gateway user's prompt carries it,
//! under a heading that says it is shared; only the owner and the users in
//! `[memory] shared_writers` may write it.

use std::path::{Path, PathBuf};

/// `[memory]`: who owns the single files and who may write shared memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemorySettings {
    /// `PLATFORM:USER_ID` of the owner, when configured.
    pub owner: Option<String>,
    /// `PLATFORM:USER_ID`s that may write the shared memory besides the owner.
    pub shared_writers: Vec<String>,
}

/// Why `[memory]` is refused: a start-up error naming the key.
#[derive(Debug, thiserror::Error)]
#[error("[memory] {key}: {message}")]
pub struct MemoryConfigError {
    /// The key, e.g. `owner`.
    pub key: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

impl MemorySettings {
    /// `[memory] owner` of `config.toml` (or `owner_var`,
    /// `HERMES_MEMORY_OWNER`, which wins) and `[memory] shared_writers`,
    /// each `PLATFORM:USER_ID`. Takes the parsed file rather than the
    /// settings: a feature never imports the loader.
    pub fn from_config(
        file: &toml::Table,
        owner_var: Option<&str>,
    ) -> Result<Self, MemoryConfigError> {
        let section = file.get("memory").and_then(toml::Value::as_table);
        let owner = match owner_var {
            Some(v) if !v.trim().is_empty() => Some(v.trim().to_owned()),
            _ => match section.and_then(|t| t.get("owner")) {
                None => None,
                Some(toml::Value::String(s)) => Some(s.trim().to_owned()),
                Some(_) => return Err(bad("owner", "must be a string PLATFORM:USER_ID")),
            },
        };
        let shared_writers = match section.and_then(|t| t.get("shared_writers")) {
            None => Vec::new(),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(|s| s.trim().to_owned()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("shared_writers", "must be a list of PLATFORM:USER_ID"))?,
            Some(_) => return Err(bad("shared_writers", "must be a list of PLATFORM:USER_ID")),
        };
        for (key, id) in owner
            .iter()
            .map(|o| ("owner", o))
            .chain(shared_writers.iter().map(|w| ("shared_writers", w)))
        {
            if parse_identity(id).is_none() {
                return Err(bad(
                    key,
                    &format!("'{id}' is not PLATFORM:USER_ID (e.g. telegram:123456)"),
                ));
            }
        }
        Ok(MemorySettings {
            owner,
            shared_writers,
        })
    }
}

fn bad(key: &'static str, message: &str) -> MemoryConfigError {
    MemoryConfigError {
        key,
        message: message.to_owned(),
    }
}

/// Where one session's memory tool reads and writes, and what its prompt
/// carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlace {
    /// The folder of this person's `MEMORY.md` and `USER.md`.
    pub dir: PathBuf,
    /// The shared memory's folder, for a gateway user; `None` in the CLI.
    pub shared_dir: Option<PathBuf>,
    /// Whether this person may write the shared memory.
    pub may_write_shared: bool,
}

impl MemoryPlace {
    /// The CLI's memory: the single files in `$HERMES_HOME`, as always.
    pub fn home(hermes_home: &Path) -> Self {
        MemoryPlace {
            dir: hermes_home.to_path_buf(),
            shared_dir: None,
            may_write_shared: false,
        }
    }
}

/// The shared memory's folder.
pub fn shared_dir(hermes_home: &Path) -> PathBuf {
    hermes_home.join("memories").join("shared")
}

/// The root of every user's memory folder.
pub fn users_dir(hermes_home: &Path) -> PathBuf {
    hermes_home.join("memories").join("users")
}

/// `s` as one path component: ASCII letters, digits, `-` and `_` stay;
/// every other byte becomes `%XX`. No result is empty, `.` or `..`, or
/// holds a separator, and different ids never share a folder.
pub fn encode_component(s: &str) -> String {
    if s.is_empty() {
        return "%".to_owned();
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_component`]; `None` for a name it never makes.
pub fn decode_component(s: &str) -> Option<String> {
    if s == "%" {
        return Some(String::new());
    }
    crate::text::percent_decode(s)
}

/// `PLATFORM:USER_ID` as the pair it names; the user id may hold `:`.
pub fn parse_identity(identity: &str) -> Option<(&str, &str)> {
    let (platform, user) = identity.split_once(':')?;
    (!platform.is_empty() && !user.is_empty()).then_some((platform, user))
}

/// The folder of `platform`/`user_id`'s memory (the owner's is
/// `$HERMES_HOME` itself).
pub fn user_dir(
    hermes_home: &Path,
    settings: &MemorySettings,
    platform: &str,
    user: &str,
) -> PathBuf {
    if is_identity(settings.owner.as_deref(), platform, user) {
        return hermes_home.to_path_buf();
    }
    users_dir(hermes_home)
        .join(encode_component(platform))
        .join(encode_component(user))
}

fn is_identity(configured: Option<&str>, platform: &str, user: &str) -> bool {
    configured
        .and_then(parse_identity)
        .is_some_and(|(p, u)| p == platform && u == user)
}

/// Where the memory of the gateway user `platform`/`user_id` is.
pub fn place_for(
    hermes_home: &Path,
    settings: &MemorySettings,
    platform: &str,
    user: &str,
) -> MemoryPlace {
    let owner = is_identity(settings.owner.as_deref(), platform, user);
    let writer = settings
        .shared_writers
        .iter()
        .any(|w| is_identity(Some(w), platform, user));
    MemoryPlace {
        dir: user_dir(hermes_home, settings, platform, user),
        shared_dir: Some(shared_dir(hermes_home)),
        may_write_shared: owner || writer,
    }
}

impl MemorySettings {
    /// Where the tools of the gateway session `session_id` keep memory: its
    /// user's, named by the session's record (platform + user id, as
    /// `session_search`). A session without a known user gets the folder of
    /// nobody (an empty id), never `$HERMES_HOME`'s files, the owner's.
    pub fn place_of_session(
        &self,
        hermes_home: &Path,
        store: Option<&std::sync::Mutex<crate::store::Store>>,
        session_id: &str,
    ) -> MemoryPlace {
        let record = store.and_then(|s| crate::sync::lock(s).session(session_id).ok().flatten());
        let (platform, user) = record
            .map(|s| {
                (
                    s.platform.unwrap_or_default(),
                    s.user_id.unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        place_for(hermes_home, self, &platform, &user)
    }

    /// Where the memory of the gateway user `platform`/`user` is.
    pub fn place(&self, hermes_home: &Path, platform: &str, user: &str) -> MemoryPlace {
        place_for(hermes_home, self, platform, user)
    }
}

/// The files of one person's memory: `MEMORY.md`, then `USER.md`.
pub const FILES: [&str; 2] = ["MEMORY.md", "USER.md"];

/// One person's memory as text, each file under its name (and the shared
/// memory when `place` has one); `None` for a person with none.
pub fn show(place: &MemoryPlace) -> Option<String> {
    let mut out = String::new();
    let mut any = false;
    let shared = place
        .shared_dir
        .iter()
        .map(|d| ("Shared (every user sees it)", d.join("MEMORY.md")));
    let own = FILES.iter().map(|f| (*f, place.dir.join(f)));
    for (title, path) in own.chain(shared) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let text = text.trim();
        if !text.is_empty() {
            any = true;
            out.push_str(&format!("{title}:\n{text}\n\n"));
        }
    }
    any.then(|| out.trim_end().to_owned())
}

/// Erases one person's `MEMORY.md` and `USER.md` (never the shared
/// memory); how many files there were.
pub fn forget(place: &MemoryPlace) -> std::io::Result<usize> {
    let mut removed = 0;
    for file in FILES {
        match std::fs::remove_file(place.dir.join(file)) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// The answer to `/memory` (`forget: false`) or `/forget` in a chat.
pub fn chat_command(place: &MemoryPlace, forget_it: bool) -> String {
    if forget_it {
        return match forget(place) {
            Ok(0) => "I had nothing remembered about you.".to_owned(),
            Ok(_) => "Done: I forgot what I remembered about you. The shared memory is \
                      unchanged; it leaves this conversation's prompt when you send /new."
                .to_owned(),
            Err(e) => format!("I could not erase your memory: {e}"),
        };
    }
    match show(place) {
        Some(text) => format!("What I remember (send /forget to erase yours):\n\n{text}"),
        None => "I remember nothing about you yet.".to_owned(),
    }
}

/// Every user whose memory folder exists, as `PLATFORM:USER_ID`, sorted;
/// the owner (whose memory is `$HERMES_HOME`'s files) first when configured.
pub fn list_users(hermes_home: &Path, settings: &MemorySettings) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(platforms) = std::fs::read_dir(users_dir(hermes_home)) else {
        return settings.owner.iter().cloned().collect();
    };
    for platform in platforms.flatten() {
        let Some(p) = platform.file_name().to_str().and_then(decode_component) else {
            continue;
        };
        let Ok(users) = std::fs::read_dir(platform.path()) else {
            continue;
        };
        for user in users.flatten() {
            if let Some(u) = user.file_name().to_str().and_then(decode_component) {
                found.push(format!("{p}:{u}"));
            }
        }
    }
    found.sort();
    if let Some(owner) = &settings.owner {
        found.retain(|f| f != owner);
        found.insert(0, owner.clone());
    }
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_user_id_with_path_characters_stays_in_its_own_folder() {
        let home = Path::new("/h");
        let s = MemorySettings::default();
        for hostile in ["..", ".", "../../etc", "a/b", "/abs", "", "%2E%2E", "x\0y"] {
            let dir = user_dir(home, &s, "telegram", hostile);
            let rel = dir.strip_prefix("/h/memories/users/telegram").unwrap();
            assert_eq!(rel.components().count(), 1, "{hostile:?} → {dir:?}");
            let name = rel.to_str().unwrap();
            assert!(name != "." && name != ".." && !name.contains('/'), "{name}");
            assert_eq!(decode_component(name).as_deref(), Some(hostile));
        }
        assert_ne!(user_dir(home, &s, "t", "%2E"), user_dir(home, &s, "t", "."));
        let dir = user_dir(home, &s, "../x", "1");
        assert!(dir.starts_with("/h/memories/users/"), "{dir:?}");
        assert_eq!(dir.components().count(), 6, "{dir:?}");
    }

    #[test]
    fn a_malformed_owner_or_writer_is_a_clear_error_and_the_variable_wins() {
        let file: toml::Table =
            toml::from_str("[memory]\nowner = \"telegram:1\"\nshared_writers = [\"bob\"]\n")
                .unwrap();
        let err = MemorySettings::from_config(&file, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[memory] shared_writers: 'bob' is not PLATFORM:USER_ID"),
            "{err}"
        );
        let file: toml::Table = toml::from_str("[memory]\nowner = \"telegram:1\"\n").unwrap();
        let s = MemorySettings::from_config(&file, Some("discord:9")).unwrap();
        assert_eq!(s.owner.as_deref(), Some("discord:9"));
        let err = MemorySettings::from_config(&file, Some(":9"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("owner"), "{err}");
    }

    #[test]
    fn the_owner_keeps_the_home_files_and_may_write_shared() {
        let s = MemorySettings {
            owner: Some("telegram:1".into()),
            shared_writers: vec!["telegram:2".into()],
        };
        let home = Path::new("/h");
        let owner = place_for(home, &s, "telegram", "1");
        assert_eq!(owner.dir, home);
        assert!(owner.may_write_shared);
        assert!(place_for(home, &s, "telegram", "2").may_write_shared);
        let other = place_for(home, &s, "discord", "1");
        assert_ne!(other.dir, home);
        assert!(!other.may_write_shared);
        assert_eq!(other.shared_dir, Some(shared_dir(home)));
    }
}
