//! Home channels (SPEC Y2): the chat of a platform that `deliver:
//! PLATFORM` means. `/sethome` stores one (`cron:home:PLATFORM` in the
//! store's key-value table, so every gateway on a shared database sees
//! it); configuration (`[gateway.home_channels]`, `TELEGRAM_HOME_CHANNEL`,
//! `MATRIX_HOME_ROOM`, …) gives the one used while none is stored.

use std::collections::BTreeMap;

use hermes_runtime::cron::{TARGET_FORMS, Target};
use hermes_runtime::store::{JobRecord, Store};

pub use hermes_runner::cron_chat::{home_key, set_home};

/// Where a delivery goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The platform.
    pub platform: String,
    /// The chat.
    pub chat: String,
    /// A thread in it (a forum topic): `PlatformAdapter::send_to_thread`.
    pub thread: Option<String>,
}

fn split(platform: &str, value: &str) -> Destination {
    let (chat, thread) = crate::platform::split_target(platform, value);
    Destination {
        platform: platform.to_owned(),
        chat: chat.to_owned(),
        thread: thread.map(str::to_owned),
    }
}

/// Where `job`'s answer goes, or why it cannot go anywhere (one sentence,
/// recorded as the run's failure). `Ok(None)`: stored only.
pub fn destination(
    store: &Store,
    job: &JobRecord,
    configured: &BTreeMap<String, String>,
) -> Result<Option<Destination>, String> {
    let target = Target::parse(&job.deliver).map_err(|_| {
        format!(
            "the delivery target {:?} is unreadable; use {TARGET_FORMS}",
            job.deliver
        )
    })?;
    match target {
        Target::Local => Ok(None),
        Target::Origin => match (&job.origin_platform, &job.origin_chat) {
            (Some(platform), Some(chat)) => Ok(Some(Destination {
                platform: platform.clone(),
                chat: chat.clone(),
                thread: job.origin_thread.clone(),
            })),
            _ => Err(
                "the job has no chat of origin to deliver to (it was created outside a chat)"
                    .into(),
            ),
        },
        Target::Chat {
            platform,
            chat,
            thread,
        } => Ok(Some(Destination {
            platform,
            chat,
            thread,
        })),
        Target::Home(platform) => {
            let stored = store
                .kv_get(&home_key(&platform))
                .map_err(|e| format!("cannot read the {platform} home channel: {e}"))?;
            match stored.or_else(|| configured.get(&platform).cloned()) {
                Some(value) => Ok(Some(split(&platform, &value))),
                None => Err(format!(
                    "{platform} has no home channel: send /sethome in the chat that should get these answers, or set {}",
                    hermes_runtime::cron::settings::HOME_CHANNEL_VARS
                        .iter()
                        .find(|(p, _)| *p == platform)
                        .map_or_else(
                            || format!("{}_HOME_CHANNEL", platform.to_ascii_uppercase()),
                            |(_, var)| (*var).to_owned()
                        )
                )),
            }
        }
    }
}

/// The platform a job's answer goes to (`None`: stored only, or no origin).
pub fn target_platform(job: &JobRecord) -> Option<String> {
    match Target::parse(&job.deliver).ok()? {
        Target::Local => None,
        Target::Origin => job.origin_platform.clone(),
        Target::Home(p) | Target::Chat { platform: p, .. } => Some(p),
    }
}
