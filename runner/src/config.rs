//! Gateway settings: the `[gateway]` section of `$HERMES_HOME/config.toml`
//! plus environment variables (environment wins), validated up front.
//!
//! Provider settings (base URL, key, model) are not here: they come from
//! `hermes_runtime::config`, with the same precedence as for the CLI. This
//! module only knows what the runner itself needs: who may talk to the bot,
//! how busy sessions behave, when sessions expire and how much is cached.
//!
//! Every error names the key (or variable) that is wrong, so `hermes gateway
//! run --check` can tell the operator exactly what to fix.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use hermes_platform_kit::platform::Platform;

/// What happens to a message for a session that is already running (SPEC G6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyMode {
    /// Interrupt the running turn; keep only the newest waiting message.
    Interrupt,
    /// Let the running turn finish; waiting messages run in order.
    Queue,
    /// Hand the message to the running turn, which gives it to the model at
    /// its next call (SPEC Y5); text that comes too late for that is
    /// answered after the turn, as in queue mode.
    Steer,
}

impl BusyMode {
    /// The spelling used in config and in `/status`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BusyMode::Interrupt => "interrupt",
            BusyMode::Queue => "queue",
            BusyMode::Steer => "steer",
        }
    }
}

/// A configuration value that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid gateway configuration: {key}: {message}")]
pub struct GatewayConfigError {
    /// The config key (`gateway.busy_mode`) or environment variable
    /// (`GATEWAY_BUSY_MODE`) at fault.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl GatewayConfigError {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        GatewayConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Who may talk to the bot (SPEC E1). The default allows nobody.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList {
    /// `GATEWAY_ALLOW_ALL_USERS=true`: everyone, on every platform.
    pub allow_all: bool,
    /// User ids allowed on every platform (`GATEWAY_ALLOWED_USERS`).
    pub everywhere: HashSet<String>,
    /// User ids allowed per platform (`TELEGRAM_ALLOWED_USERS`, …), keyed by
    /// the lower-case platform name.
    pub per_platform: HashMap<String, HashSet<String>>,
}

impl AllowList {
    /// Whether `user_id` on `platform` may use the bot.
    pub fn allows(&self, platform: &str, user_id: &str) -> bool {
        self.allow_all
            || self.everywhere.contains(user_id)
            || self
                .per_platform
                .get(platform)
                .is_some_and(|ids| ids.contains(user_id))
    }

    /// Whether nobody at all is allowed (worth a warning at start-up).
    pub fn is_empty(&self) -> bool {
        !self.allow_all
            && self.everywhere.is_empty()
            && self.per_platform.values().all(HashSet::is_empty)
    }
}

/// Everything the runner needs to know, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Who may talk to the bot.
    pub allow: AllowList,
    /// Interrupt or queue when a session is busy.
    pub busy_mode: BusyMode,
    /// Each group member has their own conversation (SPEC G2); `false` makes
    /// a group share one.
    pub group_sessions_per_user: bool,
    /// A session idle longer than this starts fresh (SPEC G10); `None` = off.
    pub idle_reset: Option<Duration>,
    /// Local hour (0–23) of the daily reset (SPEC G10); `None` = off.
    pub daily_reset_hour: Option<u8>,
    /// Fixed UTC offset for "local time", in minutes; `None` = the system's
    /// time zone. Lets a server in UTC reset at the users' 04:00.
    pub utc_offset_minutes: Option<i32>,
    /// Turns running at once, across all sessions.
    pub max_workers: usize,
    /// Agents kept in the cache (SPEC G4).
    pub agent_cache_size: usize,
    /// A cached agent unused this long is dropped.
    pub agent_cache_idle: Duration,
    /// How long a `message_id` is remembered for dedup (SPEC G7).
    pub dedup_window: Duration,
    /// How many `message_id`s are remembered per platform.
    pub dedup_capacity: usize,
    /// In queue mode, how many messages may wait per session; more are
    /// refused with a notice rather than silently piling up.
    pub max_queued: usize,
    /// The most platform messages one reply may take. A longer reply sends
    /// its beginning in `max_reply_messages - 1` messages and the rest as a
    /// file, or — where the platform takes no files — a notice that it was
    /// cut (see [`crate::overflow`]).
    pub max_reply_messages: usize,
    /// How long an accepted message's id is remembered in the store, so a
    /// platform's redelivery after a restart is recognised (SPEC X5).
    pub dedup_retention: Duration,
    /// A bot or session lease not renewed for this long lapses, and another
    /// gateway sharing the database takes it over (SPEC X8; PostgreSQL only,
    /// `lease_ttl_ms`, `GATEWAY_LEASE_TTL_MS`).
    pub lease_ttl: Duration,
    /// Show replies as they are written (SPEC X6): Telegram edits one
    /// message, WeCom's AI bot streams; `false` sends each reply whole.
    pub stream_replies: bool,
    /// The largest photo, voice note or file downloaded from a platform,
    /// in bytes (`max_file_mb`).
    pub max_file_bytes: u64,
    /// A stranger's DM gets a pairing code the operator approves with
    /// `hermes pairing approve` (SPEC Y4); `false`: strangers are refused
    /// (`pairing`, `GATEWAY_PAIRING`).
    pub pairing: bool,
    /// How `hermes gateway run` writes its log (`log_format`,
    /// `GATEWAY_LOG_FORMAT`): a line of text or a JSON object per event.
    pub log_format: LogFormat,
    /// The loopback port of `GET /healthz` and `/metrics` (`metrics_port`,
    /// `GATEWAY_METRICS_PORT`); `None`, the default: not served.
    pub metrics_port: Option<u16>,
    /// The zone scheduled jobs are read and shown in (`timezone`, an IANA
    /// name; the system's when unset): `/cron` shows its times in it.
    pub timezone: hermes_runtime::cron::TimeZone,
    /// Spoken replies (`voice_replies`, `voice_text`; see [`crate::voice`]).
    pub voice: crate::voice::VoiceSettings,
    /// Spending caps (`[limits]`, issue 44; none by default).
    pub limits: hermes_runtime::spending::SpendingLimits,
}

/// The gateway log's format (`[gateway] log_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-12-02T03:04:05.123456Z  INFO message in platform=telegram …`
    #[default]
    Text,
    /// One JSON object a line (`timestamp`, `level`, `target`, `message`,
    /// and the event's fields), for a log collector.
    Json,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            allow: AllowList::default(),
            busy_mode: BusyMode::Interrupt,
            group_sessions_per_user: true,
            idle_reset: Some(Duration::from_secs(24 * 3600)),
            daily_reset_hour: Some(4),
            utc_offset_minutes: None,
            max_workers: 4,
            agent_cache_size: 64,
            agent_cache_idle: Duration::from_secs(3600),
            dedup_window: Duration::from_secs(600),
            dedup_capacity: 4096,
            max_queued: 16,
            max_reply_messages: 10,
            dedup_retention: Duration::from_secs(48 * 3600),
            lease_ttl: Duration::from_secs(10),
            stream_replies: true,
            max_file_bytes: crate::media::DEFAULT_MAX_FILE_MB * 1024 * 1024,
            pairing: true,
            log_format: LogFormat::Text,
            metrics_port: None,
            timezone: hermes_runtime::zone::system(),
            voice: crate::voice::VoiceSettings::default(),
            limits: hermes_runtime::spending::SpendingLimits::default(),
        }
    }
}

/// Keys accepted in the `[gateway]` table. Sub-tables (`[gateway.telegram]`,
/// …) belong to the adapters and are not checked here.
const KNOWN_KEYS: &[&str] = &[
    "allow_all_users",
    "allowed_users",
    "busy_mode",
    "group_sessions_per_user",
    "idle_reset_hours",
    "daily_reset_hour",
    "utc_offset_minutes",
    "max_workers",
    "agent_cache_size",
    "agent_cache_idle_secs",
    "dedup_window_secs",
    "dedup_capacity",
    "max_queued",
    "max_reply_messages",
    "dedup_retention_hours",
    "lease_ttl_ms",
    "stream_replies",
    "max_file_mb",
    // Read by `hermes_runtime::cron::CronSettings` (scheduled jobs).
    "timezone",
    "pairing",
    "log_format",
    "metrics_port",
    // Read by `crate::voice::VoiceSettings`.
    "voice_replies",
    "voice_text",
];

impl GatewayConfig {
    /// Reads the gateway settings from the resolved runtime settings (the
    /// parsed `config.toml` and the environment laid over `.env`).
    ///
    /// `platforms` are the platforms of this build (the app's registry,
    /// the gateway's `platform::platforms()`): a platform's own
    /// `allowed_users` key is read from its section.
    pub fn from_settings(
        settings: &hermes_runtime::config::Settings,
        platforms: &[&Platform],
    ) -> Result<Self, GatewayConfigError> {
        let env: BTreeMap<String, String> = settings
            .env
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let mut cfg = Self::from_sources(&settings.file, &env, platforms)?;
        cfg.limits = settings.spending_limits().map_err(|e| match e {
            hermes_runtime::config::ConfigError::Invalid { key, message } => {
                GatewayConfigError { key, message }
            }
            other => GatewayConfigError::new("limits", other.to_string()),
        })?;
        Ok(cfg)
    }

    /// Reads the `[gateway]` table of `file` (the whole parsed config.toml)
    /// and the gateway variables of `env`; a variable overrides the key.
    ///
    /// Per-platform allow-lists are any `{PLATFORM}_ALLOWED_USERS` variable
    /// (`TELEGRAM_ALLOWED_USERS`, `WECOM_ALLOWED_USERS`, …): the runner does
    /// not need to know which platforms exist.
    pub fn from_sources(
        file: &toml::Table,
        env: &BTreeMap<String, String>,
        platforms: &[&Platform],
    ) -> Result<Self, GatewayConfigError> {
        let mut cfg = GatewayConfig::default();
        let empty = toml::Table::new();
        let table = match file.get("gateway") {
            None => &empty,
            Some(toml::Value::Table(t)) => t,
            Some(_) => {
                return Err(GatewayConfigError::new(
                    "gateway",
                    "must be a table ([gateway] section)",
                ));
            }
        };
        for (key, value) in table {
            if !KNOWN_KEYS.contains(&key.as_str()) && !value.is_table() {
                return Err(GatewayConfigError::new(
                    format!("gateway.{key}"),
                    format!(
                        "unknown key{}; known keys: {}",
                        hermes_runtime::config::suggestion(key, KNOWN_KEYS.iter().copied()),
                        KNOWN_KEYS.join(", ")
                    ),
                ));
            }
        }

        let file_val = |k: &str| {
            table
                .get(k)
                .map(|v| (format!("gateway.{k}"), Setting::Toml(v)))
        };
        // An empty variable counts as unset, as everywhere else in Hermes.
        let env_var = |name: &str| env.get(name).filter(|v| !v.trim().is_empty());
        let pick = |env_name: &str, k: &str| match env_var(env_name) {
            Some(s) => Some((env_name.to_owned(), Setting::Env(s))),
            None => file_val(k),
        };

        if let Some((key, v)) = pick("GATEWAY_ALLOW_ALL_USERS", "allow_all_users") {
            cfg.allow.allow_all = v.boolean(&key)?;
        }
        if let Some((key, v)) = file_val("allowed_users") {
            cfg.allow.everywhere.extend(v.id_list(&key)?);
        }
        if let Some(s) = env_var("GATEWAY_ALLOWED_USERS") {
            cfg.allow
                .everywhere
                .extend(Setting::Env(s).id_list("GATEWAY_ALLOWED_USERS")?);
        }
        for (name, value) in env {
            let Some(platform) = name.strip_suffix("_ALLOWED_USERS") else {
                continue;
            };
            if platform == "GATEWAY" || platform.is_empty() {
                continue;
            }
            let ids = Setting::Env(value).id_list(name)?;
            cfg.allow
                .per_platform
                .entry(platform.to_ascii_lowercase())
                .or_default()
                .extend(ids);
        }
        // A platform's own `[section] allowed_users` (`[discord]`,
        // `[email]`: the adapter answers nobody else, so the runner must
        // admit them); its variable, read above, wins.
        for platform in platforms {
            let (Some(section), Some(allow_var)) = (&platform.section, platform.allow_var) else {
                continue;
            };
            let has_key = matches!(section.keys, hermes_runtime::config::Keys::These(keys)
                if keys.iter().any(|k| k.name == "allowed_users"));
            if let Some(list) = file
                .get(section.name)
                .and_then(|d| d.get("allowed_users"))
                .filter(|_| has_key && env_var(allow_var).is_none())
            {
                let ids =
                    Setting::Toml(list).id_list(&format!("{}.allowed_users", section.name))?;
                cfg.allow
                    .per_platform
                    .entry(platform.name.to_owned())
                    .or_default()
                    .extend(ids);
            }
        }
        if let Some((key, v)) = pick("GATEWAY_BUSY_MODE", "busy_mode") {
            cfg.busy_mode = match v.string(&key)?.trim() {
                "interrupt" => BusyMode::Interrupt,
                "queue" => BusyMode::Queue,
                "steer" => BusyMode::Steer,
                other => {
                    return Err(GatewayConfigError::new(
                        key,
                        format!(
                            "`{other}` is not a busy mode{}; use \"interrupt\", \"queue\" or \"steer\"",
                            hermes_runtime::config::suggestion(
                                other,
                                ["interrupt", "queue", "steer"]
                            )
                        ),
                    ));
                }
            };
        }
        if let Some((key, v)) = pick("GATEWAY_GROUP_SESSIONS_PER_USER", "group_sessions_per_user") {
            cfg.group_sessions_per_user = v.boolean(&key)?;
        }
        if let Some((key, v)) = pick("GATEWAY_IDLE_RESET_HOURS", "idle_reset_hours") {
            cfg.idle_reset = v
                .number_or_off(&key, 1, 24 * 365)?
                .map(|h| Duration::from_secs(h * 3600));
        }
        if let Some((key, v)) = pick("GATEWAY_DAILY_RESET_HOUR", "daily_reset_hour") {
            cfg.daily_reset_hour = v
                .number_or_off(&key, 0, 23)?
                .map(|h| u8::try_from(h).unwrap_or(0));
        }
        if let Some(zone) = table.get("timezone") {
            let name = zone.as_str().ok_or_else(|| {
                GatewayConfigError::new(
                    "gateway.timezone",
                    "must be a string such as \"Europe/Berlin\"",
                )
            })?;
            cfg.timezone = hermes_runtime::cron::time_zone(Some(name))
                .map_err(|e| GatewayConfigError::new("gateway.timezone", e.to_string()))?;
        }
        if let Some((key, v)) = pick("GATEWAY_UTC_OFFSET_MINUTES", "utc_offset_minutes") {
            let n = v.signed(&key, -14 * 60, 14 * 60)?;
            cfg.utc_offset_minutes = Some(i32::try_from(n).unwrap_or(0));
        }
        if let Some((key, v)) = pick("GATEWAY_MAX_WORKERS", "max_workers") {
            cfg.max_workers = v.count(&key, 1, 1024)?;
        }
        if let Some((key, v)) = pick("GATEWAY_AGENT_CACHE_SIZE", "agent_cache_size") {
            cfg.agent_cache_size = v.count(&key, 1, 1_000_000)?;
        }
        if let Some((key, v)) = pick("GATEWAY_AGENT_CACHE_IDLE_SECS", "agent_cache_idle_secs") {
            cfg.agent_cache_idle = Duration::from_secs(v.count(&key, 1, 365 * 86400)? as u64);
        }
        if let Some((key, v)) = pick("GATEWAY_DEDUP_WINDOW_SECS", "dedup_window_secs") {
            cfg.dedup_window = Duration::from_secs(v.count(&key, 1, 7 * 86400)? as u64);
        }
        if let Some((key, v)) = pick("GATEWAY_DEDUP_CAPACITY", "dedup_capacity") {
            cfg.dedup_capacity = v.count(&key, 1, 10_000_000)?;
        }
        if let Some((key, v)) = pick("GATEWAY_MAX_QUEUED", "max_queued") {
            cfg.max_queued = v.count(&key, 1, 10_000)?;
        }
        if let Some((key, v)) = pick("GATEWAY_MAX_REPLY_MESSAGES", "max_reply_messages") {
            cfg.max_reply_messages = v.count(&key, 2, 1000)?;
        }
        if let Some((key, v)) = pick("GATEWAY_DEDUP_RETENTION_HOURS", "dedup_retention_hours") {
            cfg.dedup_retention = Duration::from_secs(v.count(&key, 1, 24 * 365)? as u64 * 3600);
        }
        if let Some((key, v)) = pick("GATEWAY_LEASE_TTL_MS", "lease_ttl_ms") {
            cfg.lease_ttl = Duration::from_millis(v.count(&key, 300, 600_000)? as u64);
        }
        if let Some((key, v)) = pick("GATEWAY_STREAM_REPLIES", "stream_replies") {
            cfg.stream_replies = v.boolean(&key)?;
        }
        if let Some((key, v)) = pick("GATEWAY_MAX_FILE_MB", "max_file_mb") {
            cfg.max_file_bytes = v.count(&key, 1, 2048)? as u64 * 1024 * 1024;
        }
        if let Some((key, v)) = pick("GATEWAY_PAIRING", "pairing") {
            cfg.pairing = v.boolean(&key)?;
        }
        if let Some((key, v)) = pick("GATEWAY_LOG_FORMAT", "log_format") {
            cfg.log_format = match v.string(&key)?.trim() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(GatewayConfigError::new(
                        key,
                        format!(
                            "`{other}` is not a log format{}; use \"text\" or \"json\"",
                            hermes_runtime::config::suggestion(other, ["text", "json"])
                        ),
                    ));
                }
            };
        }
        cfg.voice = crate::voice::VoiceSettings::from_sources(table, env)?;
        if let Some((key, v)) = pick("GATEWAY_METRICS_PORT", "metrics_port") {
            let port = v.count(&key, 1, 65_535)?;
            cfg.metrics_port = Some(
                u16::try_from(port).map_err(|_| GatewayConfigError::new(key, "out of range"))?,
            );
        }
        Ok(cfg)
    }
}

/// One raw value, from the environment (a string) or from TOML (typed).
enum Setting<'a> {
    Env(&'a str),
    Toml(&'a toml::Value),
}

impl Setting<'_> {
    fn string(&self, key: &str) -> Result<String, GatewayConfigError> {
        match self {
            Setting::Env(s) => Ok((*s).to_owned()),
            Setting::Toml(toml::Value::String(s)) => Ok(s.clone()),
            Setting::Toml(_) => Err(GatewayConfigError::new(key, "must be a string")),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, GatewayConfigError> {
        match self {
            Setting::Toml(toml::Value::Boolean(b)) => Ok(*b),
            Setting::Toml(_) => Err(GatewayConfigError::new(key, "must be true or false")),
            Setting::Env(s) => match s.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" | "" => Ok(false),
                other => Err(GatewayConfigError::new(
                    key,
                    format!("`{other}` is not a boolean; use true or false"),
                )),
            },
        }
    }

    /// A comma-separated list (env) or an array of strings/integers (TOML).
    fn id_list(&self, key: &str) -> Result<Vec<String>, GatewayConfigError> {
        match self {
            Setting::Env(s) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()),
            Setting::Toml(toml::Value::String(s)) => Setting::Env(s).id_list(key),
            Setting::Toml(toml::Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.trim().to_owned()),
                    toml::Value::Integer(n) => Ok(n.to_string()),
                    _ => Err(GatewayConfigError::new(
                        key,
                        "must be a list of user ids (strings or integers)",
                    )),
                })
                .collect(),
            Setting::Toml(_) => Err(GatewayConfigError::new(
                key,
                "must be a list of user ids or a comma-separated string",
            )),
        }
    }

    fn signed(&self, key: &str, min: i64, max: i64) -> Result<i64, GatewayConfigError> {
        let n = match self {
            Setting::Toml(toml::Value::Integer(n)) => *n,
            Setting::Env(s) => s.trim().parse::<i64>().map_err(|_| {
                GatewayConfigError::new(key, format!("`{s}` is not a whole number"))
            })?,
            Setting::Toml(_) => return Err(GatewayConfigError::new(key, "must be a whole number")),
        };
        if n < min || n > max {
            return Err(GatewayConfigError::new(
                key,
                format!("{n} is out of range {min}..={max}"),
            ));
        }
        Ok(n)
    }

    fn count(&self, key: &str, min: i64, max: i64) -> Result<usize, GatewayConfigError> {
        let n = self.signed(key, min, max)?;
        usize::try_from(n).map_err(|_| GatewayConfigError::new(key, "out of range"))
    }

    /// A number in `min..=max`, or `off` / `false` to disable.
    fn number_or_off(
        &self,
        key: &str,
        min: i64,
        max: i64,
    ) -> Result<Option<u64>, GatewayConfigError> {
        let off = match self {
            Setting::Env(s) => matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "off" | "false" | "none"
            ),
            Setting::Toml(toml::Value::String(s)) => {
                matches!(
                    s.trim().to_ascii_lowercase().as_str(),
                    "off" | "false" | "none"
                )
            }
            Setting::Toml(toml::Value::Boolean(false)) => true,
            Setting::Toml(_) => false,
        };
        if off {
            return Ok(None);
        }
        let n = self
            .signed(key, min, max)
            .map_err(|e| GatewayConfigError::new(e.key, format!("{} (or \"off\")", e.message)))?;
        Ok(Some(u64::try_from(n).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(toml_src: &str, env: &[(&str, &str)]) -> Result<GatewayConfig, GatewayConfigError> {
        let file: toml::Table = toml_src.parse().unwrap();
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        // No platform descriptors here: the registry is the app's, and its
        // tests read a platform's own `allowed_users` through it
        // (the gateway's `platform_tests`).
        GatewayConfig::from_sources(&file, &env, &[])
    }

    #[test]
    fn defaults_allow_nobody() {
        let cfg = parse("", &[]).unwrap();
        assert_eq!(cfg, GatewayConfig::default());
        assert!(!cfg.allow.allows("telegram", "1"));
        assert!(cfg.allow.is_empty());
        assert_eq!(cfg.daily_reset_hour, Some(4));
        assert_eq!(cfg.idle_reset, Some(Duration::from_secs(86400)));
    }

    #[test]
    fn allow_lists_from_env_and_file() {
        let cfg = parse(
            "[gateway]\nallowed_users = [7, \"8\"]",
            &[
                ("TELEGRAM_ALLOWED_USERS", "1, 2"),
                ("WECOM_ALLOWED_USERS", "zhang"),
                ("GATEWAY_ALLOWED_USERS", "9"),
            ],
        )
        .unwrap();
        assert!(cfg.allow.allows("telegram", "1"));
        assert!(!cfg.allow.allows("wecom", "1"));
        assert!(cfg.allow.allows("wecom", "zhang"));
        assert!(cfg.allow.allows("wecom", "7"));
        assert!(cfg.allow.allows("telegram", "8"));
        assert!(cfg.allow.allows("telegram", "9"));
        assert!(!cfg.allow.allows("telegram", "3"));
        let all = parse("", &[("GATEWAY_ALLOW_ALL_USERS", "true")]).unwrap();
        assert!(all.allow.allows("x", "anyone"));
    }

    #[test]
    fn wecom_callback_has_its_own_allow_list() {
        let cfg = parse(
            "",
            &[
                ("WECOM_CALLBACK_ALLOWED_USERS", "zhangsan, lisi"),
                ("WECOM_ALLOWED_USERS", "wangwu"),
            ],
        )
        .unwrap();
        assert!(cfg.allow.allows("wecom_callback", "zhangsan"));
        assert!(cfg.allow.allows("wecom_callback", "lisi"));
        assert!(!cfg.allow.allows("wecom", "zhangsan"));
        assert!(!cfg.allow.allows("wecom_callback", "wangwu"));
        assert!(cfg.allow.allows("wecom", "wangwu"));
    }

    #[test]
    fn env_overrides_file_and_off_disables() {
        let cfg = parse(
            "[gateway]\nbusy_mode = \"interrupt\"\nidle_reset_hours = \"off\"\ndaily_reset_hour = 6",
            &[("GATEWAY_BUSY_MODE", "queue"), ("GATEWAY_DAILY_RESET_HOUR", "off")],
        )
        .unwrap();
        assert_eq!(cfg.busy_mode, BusyMode::Queue);
        assert_eq!(cfg.idle_reset, None);
        assert_eq!(cfg.daily_reset_hour, None);
    }

    #[test]
    fn metrics_port_is_off_unless_set() {
        assert_eq!(parse("", &[]).unwrap().metrics_port, None);
        let cfg = parse("[gateway]\nmetrics_port = 9464", &[]).unwrap();
        assert_eq!(cfg.metrics_port, Some(9464));
        let cfg = parse("", &[("GATEWAY_METRICS_PORT", "9100")]).unwrap();
        assert_eq!(cfg.metrics_port, Some(9100));
        let e = parse("[gateway]\nmetrics_port = 70000", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.metrics_port");
        let e = parse("", &[("GATEWAY_METRICS_PORT", "0")]).unwrap_err();
        assert_eq!(e.key, "GATEWAY_METRICS_PORT");
    }

    #[test]
    fn log_format_from_file_or_env() {
        assert_eq!(parse("", &[]).unwrap().log_format, LogFormat::Text);
        let cfg = parse("[gateway]\nlog_format = \"json\"", &[]).unwrap();
        assert_eq!(cfg.log_format, LogFormat::Json);
        let cfg = parse(
            "[gateway]\nlog_format = \"json\"",
            &[("GATEWAY_LOG_FORMAT", "text")],
        );
        assert_eq!(cfg.unwrap().log_format, LogFormat::Text);
        let e = parse("[gateway]\nlog_format = \"jsn\"", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.log_format");
        assert!(e.to_string().contains("json"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("[gateway]\nbusy_mode = \"panic\"", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.busy_mode");
        let e = parse("[gateway]\nbusy_mode = \"stear\"", &[]).unwrap_err();
        assert!(
            e.to_string().contains("did you mean \"steer\"") || e.to_string().contains("steer"),
            "{e}"
        );
        let cfg = parse("[gateway]\nbusy_mode = \"steer\"", &[]).unwrap();
        assert_eq!(cfg.busy_mode, BusyMode::Steer);
        let e = parse("", &[("GATEWAY_MAX_WORKERS", "zero")]).unwrap_err();
        assert_eq!(e.key, "GATEWAY_MAX_WORKERS");
        let e = parse("[gateway]\ndaily_reset_hour = 24", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.daily_reset_hour");
        assert!(e.to_string().contains("off"), "{e}");
        let e = parse("[gateway]\nbusy_mod = \"queue\"", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.busy_mod");
        let e = parse("[gateway]\nallow_all_users = \"maybe\"", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.allow_all_users");
        let e = parse("gateway = 3", &[]).unwrap_err();
        assert_eq!(e.key, "gateway");
        // Adapter sub-tables are left to the adapters.
        assert!(parse("[gateway.telegram]\nanything = 1", &[]).is_ok());
    }

    #[test]
    fn reply_length_and_dedup_retention() {
        let cfg = parse("", &[]).unwrap();
        assert_eq!(cfg.max_reply_messages, 10);
        assert_eq!(cfg.dedup_retention, Duration::from_secs(48 * 3600));
        let cfg = parse(
            "[gateway]\nmax_reply_messages = 3\ndedup_retention_hours = 2",
            &[],
        )
        .unwrap();
        assert_eq!(cfg.max_reply_messages, 3);
        assert_eq!(cfg.dedup_retention, Duration::from_secs(7200));
        assert_eq!(cfg.lease_ttl, Duration::from_secs(10));
        let cfg = parse("[gateway]\nlease_ttl_ms = 1500", &[]).unwrap();
        assert_eq!(cfg.lease_ttl, Duration::from_millis(1500));
        let e = parse("[gateway]\nlease_ttl_ms = 10", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.lease_ttl_ms");
        let cfg = parse("", &[("GATEWAY_MAX_REPLY_MESSAGES", "25")]).unwrap();
        assert_eq!(cfg.max_reply_messages, 25);
        let e = parse("[gateway]\nmax_reply_messages = 1", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.max_reply_messages");
        let e = parse("", &[("GATEWAY_DEDUP_RETENTION_HOURS", "0")]).unwrap_err();
        assert_eq!(e.key, "GATEWAY_DEDUP_RETENTION_HOURS");
    }

    #[test]
    fn streaming_and_file_size() {
        let cfg = parse("", &[]).unwrap();
        assert!(cfg.stream_replies, "on by default");
        assert_eq!(cfg.max_file_bytes, 20 * 1024 * 1024);
        let cfg = parse("[gateway]\nstream_replies = false\nmax_file_mb = 5", &[]).unwrap();
        assert!(!cfg.stream_replies);
        assert_eq!(cfg.max_file_bytes, 5 * 1024 * 1024);
        let cfg = parse(
            "[gateway]\nstream_replies = false",
            &[("GATEWAY_STREAM_REPLIES", "true")],
        )
        .unwrap();
        assert!(cfg.stream_replies);
        let e = parse("[gateway]\nmax_file_mb = 0", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.max_file_mb");
        let e = parse("[gateway]\nstream_replys = true", &[]).unwrap_err();
        assert!(e.to_string().contains("stream_replies"), "{e}");
    }

    #[test]
    fn pairing_is_on_by_default_and_can_be_turned_off() {
        assert!(parse("", &[]).unwrap().pairing);
        assert!(!parse("[gateway]\npairing = false", &[]).unwrap().pairing);
        assert!(!parse("", &[("GATEWAY_PAIRING", "false")]).unwrap().pairing);
        let e = parse("[gateway]\npairing = \"maybe\"", &[]).unwrap_err();
        assert_eq!(e.key, "gateway.pairing");
        let e = parse("[gateway]\npairng = false", &[]).unwrap_err();
        assert!(e.to_string().contains("pairing"), "{e}");
    }

    #[test]
    fn the_timezone_is_an_iana_name() {
        let cfg = parse("[gateway]\ntimezone = \"Asia/Tokyo\"", &[]).unwrap();
        assert_eq!(cfg.timezone.iana_name(), Some("Asia/Tokyo"));
        for bad in ["timezone = \"Mars/Olympus\"", "timezone = 9"] {
            let e = parse(&format!("[gateway]\n{bad}"), &[]).unwrap_err();
            assert_eq!(e.key, "gateway.timezone", "{bad}");
        }
    }
}
