//! The scheduler's settings: `[gateway] timezone`, `[cron] catch_up`, and
//! the home channels (`[gateway.home_channels]`, `TELEGRAM_HOME_CHANNEL`,
//! `WECOM_HOME_CHANNEL`, `DISCORD_HOME_CHANNEL`, `MATRIX_HOME_ROOM`,
//! `EMAIL_HOME_ADDRESS`). The configuration loader reads them
//! (`CronSettings::load`, in `config/cron.rs`); the scheduler owns them.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;

/// What happens to a job that fell due while no gateway ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// It runs once when a gateway starts (however many due times passed).
    #[default]
    Once,
    /// The missed run is recorded as skipped; the job waits for its next time.
    Skip,
}

/// The platforms whose home channel a variable sets: each descriptor's
/// `home_channel_var` in `hermes_gateway::platform` (checked there).
pub const HOME_CHANNEL_VARS: &[(&str, &str)] = &[
    ("telegram", "TELEGRAM_HOME_CHANNEL"),
    ("wecom", "WECOM_HOME_CHANNEL"),
    ("discord", "DISCORD_HOME_CHANNEL"),
    ("matrix", "MATRIX_HOME_ROOM"),
    ("signal", "SIGNAL_HOME_CHANNEL"),
    ("email", "EMAIL_HOME_ADDRESS"),
    ("whatsapp", "WHATSAPP_HOME_CHANNEL"),
    ("slack", "SLACK_HOME_CHANNEL"),
];

/// The scheduler's settings.
#[derive(Clone, Debug)]
pub struct CronSettings {
    /// The time zone schedules are read and shown in.
    pub tz: TimeZone,
    /// Missed runs.
    pub catch_up: CatchUp,
    /// Configured home channels by platform (`chat[:thread]`); one set by
    /// `/sethome` (stored) wins.
    pub home_channels: BTreeMap<String, String>,
    /// An answer starting with this is recorded, not delivered (`[cron]
    /// silent_marker`, hermes-agent's `[SILENT]` by default).
    pub silent_marker: String,
    /// Spending caps (issue 44): a job's runs count against
    /// `limits.unattended_account`, and a job whose account reached a cap
    /// does not call the model.
    pub limits: crate::spending::SpendingLimits,
}

/// The marker of a run with nothing to report, unless configured.
pub const DEFAULT_SILENT_MARKER: &str = "[SILENT]";

impl Default for CronSettings {
    fn default() -> Self {
        CronSettings {
            tz: crate::zone::system(),
            catch_up: CatchUp::Once,
            home_channels: BTreeMap::new(),
            silent_marker: DEFAULT_SILENT_MARKER.to_owned(),
            limits: crate::spending::SpendingLimits::default(),
        }
    }
}
