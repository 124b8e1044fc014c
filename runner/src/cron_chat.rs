//! What a chat asks of the scheduler, as store operations: `/sethome`
//! (a platform's home channel), `/cron` (this chat's jobs) and the notes a
//! background process leaves for its session's next turn. The runner
//! answers these itself; the scheduler that runs jobs, delivers to home
//! channels and writes the notes is the gateway's (its `cron` module),
//! which reads the same keys — so the runner never names the scheduler.

use hermes_runtime::store::{JobRecord, Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::event::SessionSource;

/// The stored home channel's key.
pub fn home_key(platform: &str) -> String {
    format!("cron:home:{platform}")
}

/// `/sethome`: this chat becomes its platform's home channel. The reply
/// says what was set (and what it replaced).
pub fn set_home(store: &mut Store, source: &SessionSource) -> Result<String, StoreError> {
    let key = home_key(&source.platform);
    let value = match &source.thread_id {
        Some(t) => format!("{}:{t}", source.chat_id),
        None => source.chat_id.clone(),
    };
    let before = store.kv_get(&key)?;
    store.kv_set(&key, &value)?;
    Ok(match before {
        Some(old) if old != value => format!(
            "This chat ({value}) is now the {} home channel (it was {old}). Jobs with deliver \"{}\" send their answers here.",
            source.platform, source.platform
        ),
        _ => format!(
            "This chat ({value}) is now the {} home channel. Jobs with deliver \"{}\" send their answers here.",
            source.platform, source.platform
        ),
    })
}

/// `/cron` in a chat: the jobs created in this chat, their times in `tz`
/// (`[gateway] timezone`), which it names; `/cron remove ID` removes one
/// of them (not another chat's).
pub fn chat_command(
    store: &mut Store,
    source: &crate::event::SessionSource,
    arg: Option<&str>,
    tz: &hermes_runtime::cron::TimeZone,
) -> String {
    let ours = |job: &JobRecord| {
        job.origin_platform.as_deref() == Some(source.platform.as_str())
            && job.origin_chat.as_deref() == Some(source.chat_id.as_str())
    };
    match arg
        .map(str::split_whitespace)
        .map(|mut w| (w.next(), w.next(), w.next()))
    {
        None => match store.jobs(false) {
            Ok(jobs) => {
                let lines: Vec<String> = jobs
                    .iter()
                    .filter(|j| ours(j))
                    .map(|j| hermes_runtime::cron::describe(j, tz))
                    .collect();
                if lines.is_empty() {
                    "No scheduled jobs in this chat.".into()
                } else {
                    format!(
                        "Scheduled jobs of this chat (times in {}):\n{}",
                        hermes_runtime::cron::schedule::zone_name(tz),
                        lines.join("\n")
                    )
                }
            }
            Err(e) => format!("Scheduled jobs are unavailable: {e}"),
        },
        Some((Some("remove" | "rm"), Some(id), None)) => {
            match hermes_runtime::cron::find(store, id) {
                Ok(job) if ours(&job) => match hermes_runtime::cron::remove(store, &job.id) {
                    Ok(job) => format!("Removed job {} ({}).", job.id, job.name),
                    Err(e) => e.to_string(),
                },
                Ok(_) => format!(
                    "Job {id:?} was not created in this chat; only its own jobs can be removed here."
                ),
                Err(e) => e.to_string(),
            }
        }
        Some(_) => "Usage: /cron (this chat's jobs) or /cron remove ID".into(),
    }
}

/// Keys of the notes waiting for a session's next turn start with this;
/// then the session id, `:` and the process id.
pub const NOTE_KEY_PREFIX: &str = "bgnote:";

/// A notice waiting for the next turn of its session, to be appended to
/// its transcript.
#[derive(Debug, Serialize, Deserialize)]
pub struct PendingNote {
    /// When the process ended (or was found lost).
    pub at_ms: u64,
    /// The notice, as the chat got it.
    pub text: String,
}

impl PendingNote {
    /// The note as the transcript holds it: a user-role message marked as
    /// coming from the system, not from the user.
    pub fn message_text(&self) -> String {
        format!("[System note, not from the user: {}]", self.text)
    }
}

/// The prefix of the notes waiting for `session_id`.
pub fn note_prefix(session_id: &str) -> String {
    format!("{NOTE_KEY_PREFIX}{session_id}:")
}
