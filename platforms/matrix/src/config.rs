//! The Matrix adapter's settings, from hermes-agent's variable names.

use std::collections::HashSet;
use std::time::Duration;

use hermes_runtime::secret::Secret;

/// Settings for [`super::MatrixAdapter`]. The password and the token are
/// [`Secret`]s: `Debug` masks them.
#[derive(Clone, Debug)]
pub struct MatrixConfig {
    /// The homeserver's base URL (`MATRIX_HOMESERVER`), e.g. `https://matrix.org`.
    pub homeserver: String,
    /// The bot's full user id (`MATRIX_USER_ID`), needed for a password login.
    pub user_id: Option<String>,
    /// The bot's password (`MATRIX_PASSWORD`). Never logged.
    pub password: Option<Secret>,
    /// A ready access token (`MATRIX_ACCESS_TOKEN`) instead of a login. Never logged.
    pub access_token: Option<Secret>,
    /// In rooms of more than two members, answer only when mentioned or
    /// replied to (`MATRIX_REQUIRE_MENTION`, default true).
    pub require_mention: bool,
    /// Rooms the bot serves (`MATRIX_ALLOWED_ROOMS`); empty means any room
    /// an allowed user invites it to.
    pub allowed_rooms: HashSet<String>,
    /// Who may invite the bot (`MATRIX_ALLOWED_USERS` and
    /// `GATEWAY_ALLOWED_USERS`); the runner's allow-list decides who is
    /// answered.
    pub inviters: HashSet<String>,
    /// Everyone may invite the bot (`GATEWAY_ALLOW_ALL_USERS=true`).
    pub anyone_may_invite: bool,
    /// The room scheduled jobs and notices go to (`MATRIX_HOME_ROOM`).
    pub home_room: Option<String>,
    /// How long the homeserver holds one `/sync` when nothing happens.
    pub sync_timeout: Duration,
}

/// A Matrix setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum MatrixConfigError {
    /// The homeserver is not an http(s) URL.
    #[error("MATRIX_HOMESERVER must start with http:// or https://, got {0:?}")]
    BadHomeserver(String),
    /// Neither a token nor a user and password.
    #[error(
        "MATRIX_HOMESERVER is set but the bot cannot log in: set MATRIX_ACCESS_TOKEN, or MATRIX_USER_ID and MATRIX_PASSWORD"
    )]
    NoCredentials,
    /// The user id is not `@local:server`.
    #[error("MATRIX_USER_ID must be a full user id like @hermes:example.org, got {0:?}")]
    BadUserId(String),
    /// A yes/no setting that is neither.
    #[error("{0} must be true or false, got {1:?}")]
    BadBool(&'static str, String),
}

fn list(value: Option<String>) -> HashSet<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn flag(
    name: &'static str,
    value: Option<String>,
    default: bool,
) -> Result<bool, MatrixConfigError> {
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(MatrixConfigError::BadBool(name, v.to_owned())),
        },
    }
}

impl MatrixConfig {
    /// The settings from the environment, or `None` when
    /// `MATRIX_HOMESERVER` is unset or blank (Matrix disabled).
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Result<Self, MatrixConfigError>> {
        let get = |name: &str| {
            env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let homeserver = get("MATRIX_HOMESERVER")?;
        let build = || {
            if !(homeserver.starts_with("http://") || homeserver.starts_with("https://")) {
                return Err(MatrixConfigError::BadHomeserver(homeserver.clone()));
            }
            let user_id = get("MATRIX_USER_ID");
            if let Some(u) = &user_id
                && !(u.starts_with('@') && u.contains(':'))
            {
                return Err(MatrixConfigError::BadUserId(u.clone()));
            }
            let password = get("MATRIX_PASSWORD").map(Secret::from);
            let access_token = get("MATRIX_ACCESS_TOKEN").map(Secret::from);
            if access_token.is_none() && (user_id.is_none() || password.is_none()) {
                return Err(MatrixConfigError::NoCredentials);
            }
            let mut inviters = list(get("MATRIX_ALLOWED_USERS"));
            inviters.extend(list(get("GATEWAY_ALLOWED_USERS")));
            Ok(MatrixConfig {
                homeserver: homeserver.clone(),
                user_id,
                password,
                access_token,
                require_mention: flag(
                    "MATRIX_REQUIRE_MENTION",
                    get("MATRIX_REQUIRE_MENTION"),
                    true,
                )?,
                allowed_rooms: list(get("MATRIX_ALLOWED_ROOMS")),
                inviters,
                anyone_may_invite: flag(
                    "GATEWAY_ALLOW_ALL_USERS",
                    get("GATEWAY_ALLOW_ALL_USERS"),
                    false,
                )?,
                home_room: get("MATRIX_HOME_ROOM"),
                sync_timeout: Duration::from_secs(30),
            })
        };
        Some(build())
    }

    /// Whether `user` may invite the bot into a room.
    pub fn may_invite(&self, user: &str) -> bool {
        self.anyone_may_invite || self.inviters.contains(user)
    }

    /// Whether the bot serves `room`.
    pub fn serves_room(&self, room: &str) -> bool {
        self.allowed_rooms.is_empty() || self.allowed_rooms.contains(room)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Option<Result<MatrixConfig, MatrixConfigError>> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        MatrixConfig::from_env(&move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn disabled_without_a_homeserver_and_refused_without_credentials() {
        assert!(from(&[("MATRIX_USER_ID", "@a:b")]).is_none());
        let err = from(&[("MATRIX_HOMESERVER", "http://127.0.0.1:8008")])
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("MATRIX_ACCESS_TOKEN"), "{err}");
        let err = from(&[
            ("MATRIX_HOMESERVER", "matrix.org"),
            ("MATRIX_ACCESS_TOKEN", "t"),
        ])
        .unwrap()
        .unwrap_err();
        assert!(matches!(err, MatrixConfigError::BadHomeserver(_)));
        let err = from(&[
            ("MATRIX_HOMESERVER", "http://h"),
            ("MATRIX_USER_ID", "hermes"),
            ("MATRIX_PASSWORD", "p"),
        ])
        .unwrap()
        .unwrap_err();
        assert!(matches!(err, MatrixConfigError::BadUserId(_)));
    }

    #[test]
    fn lists_and_flags_are_read_and_secrets_not_shown() {
        let c = from(&[
            ("MATRIX_HOMESERVER", "http://h/"),
            ("MATRIX_USER_ID", "@bot:h"),
            ("MATRIX_PASSWORD", "hunter2"),
            ("MATRIX_ALLOWED_USERS", "@a:h, @b:h"),
            ("MATRIX_REQUIRE_MENTION", "false"),
            ("MATRIX_ALLOWED_ROOMS", "!r:h"),
        ])
        .unwrap()
        .unwrap();
        assert!(c.may_invite("@b:h") && !c.may_invite("@c:h"));
        assert!(!c.require_mention);
        assert!(c.serves_room("!r:h") && !c.serves_room("!x:h"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let bad = from(&[
            ("MATRIX_HOMESERVER", "http://h"),
            ("MATRIX_ACCESS_TOKEN", "t"),
            ("MATRIX_REQUIRE_MENTION", "maybe"),
        ])
        .unwrap()
        .unwrap_err();
        assert!(bad.to_string().contains("MATRIX_REQUIRE_MENTION"), "{bad}");
    }

    #[test]
    fn debug_masks_the_password_and_the_access_token() {
        let c = from(&[
            ("MATRIX_HOMESERVER", "https://matrix.example.org"),
            ("MATRIX_USER_ID", "@bot:example.org"),
            ("MATRIX_PASSWORD", "correct-horse-battery-staple"),
            (
                "MATRIX_ACCESS_TOKEN",
                "syt_Ym90_QmFzZTY0VG9rZW5WYWx1ZQ_1a2b3c",
            ),
        ])
        .unwrap()
        .unwrap();
        for shown in [format!("{c:?}"), format!("{c:#?}")] {
            assert!(!shown.contains("horse-battery"), "{shown}");
            assert!(!shown.contains("QmFzZTY0VG9rZW5WYWx1ZQ"), "{shown}");
            assert!(shown.contains("matrix.example.org"), "{shown}");
        }
        assert_eq!(
            c.password.as_ref().map(Secret::expose),
            Some("correct-horse-battery-staple")
        );
    }
}
