//! Background processes of chat sessions (issue 43 §4): their end told to
//! the chat exactly once, also across a restart of the gateway.
//!
//! A process outlives the turn that started it but not the gateway (see
//! `hermes_runtime::tools::background`). So:
//! 1. **Started**: before it runs, a record `bgproc:<owner>:<id>` goes into
//!    the store's key-value table: the session's chat, the command, whether
//!    to notify. A record that cannot be written refuses the start.
//! 2. **Ended**: its notice (status, last lines) becomes a one-off
//!    `no_agent` job with the fixed id `b<id>`, delivered to the session's
//!    chat by the scheduler's outbox — stored before it is sent, the
//!    delivery recorded after, retried on a transient failure — then the
//!    record is deleted.
//! 3. **Restart** (also after SIGKILL): every record this gateway (its
//!    home) left behind is a process that died with it; each becomes the
//!    same job id `b<id>` saying the process was lost, and the record is
//!    deleted.
//!
//! 4. **The transcript**: with the notice's job, a note
//!    `bgnote:<session>:<id>` goes into the key-value table (same fixed
//!    key, so a notice queued again after a crash replaces it). The next
//!    turn of that session appends it to the transcript before the user's
//!    message and deletes it, in the one transaction that moves the user's
//!    message from the inbox, under the session's lease
//!    (`runner::transcribe`): the agent learns that the process ended,
//!    once, and never between a tool call and its result.
//!
//! The fixed job id is what makes it once: a notice queued just before a
//! kill (record not yet deleted) meets its own job row at the restart, and
//! no second one is made. Records carry the home they belong to, so
//! gateways sharing one PostgreSQL database each answer for their own.

use std::sync::{Arc, Mutex};

use hermes_core::Clock;
use hermes_runtime::store::{JobRecord, Store, StoreError};
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{
    BackgroundLimits, BackgroundProcesses, BackgroundSink, FinishedProcess, StartedProcess,
};
use serde::{Deserialize, Serialize};

/// Keys of the records start with this.
const KEY_PREFIX: &str = "bgproc:";
/// Job ids of notices start with this.
pub const NOTICE_JOB_PREFIX: &str = "b";
pub use hermes_runner::cron_chat::{NOTE_KEY_PREFIX, PendingNote, note_prefix};

/// What is recorded of a running process.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    session_id: String,
    command: String,
    notify: bool,
    platform: Option<String>,
    chat: Option<String>,
    thread: Option<String>,
}

/// The gateway's [`BackgroundSink`]: records in the store, notices through
/// the scheduler's outbox.
pub struct DurableNotices {
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    owner: String,
}

impl std::fmt::Debug for DurableNotices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableNotices")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl DurableNotices {
    /// Notices over `store`, for the gateway of the home `owner`.
    pub fn new(store: Arc<Mutex<Store>>, clock: Arc<dyn Clock>, owner: &str) -> Self {
        DurableNotices {
            store,
            clock,
            owner: owner.to_owned(),
        }
    }

    fn prefix(&self) -> String {
        format!("{KEY_PREFIX}{}:", self.owner)
    }

    /// Announces every process the last run of this gateway left running:
    /// it died with that gateway. Returns how many notices were queued.
    pub fn announce_lost(&self) -> Result<usize, StoreError> {
        let prefix = self.prefix();
        let records = lock(&self.store).kv_scan(&prefix)?;
        let mut queued = 0;
        for (key, value) in records {
            let id = key[prefix.len()..].to_owned();
            match serde_json::from_str::<Record>(&value) {
                Ok(record) if record.notify => {
                    let text = format!(
                        "Background process {id} ({}) was lost: the gateway stopped while it \
                         ran, and it ended with it. Its outcome is unknown; start it again if \
                         it is still needed.",
                        hermes_runtime::tools::background::short(&record.command)
                    );
                    if self.queue(&id, &record, text)? {
                        queued += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(%key, error = %e, "background: unreadable record dropped"),
            }
            lock(&self.store).kv_delete(&[&key])?;
        }
        if queued > 0 {
            tracing::info!(
                queued,
                "background: processes lost in the last run announced"
            );
        }
        Ok(queued)
    }

    /// Queues `text` to the record's chat as job `b<id>`, unless that job
    /// exists already. `true` when it was queued now.
    fn queue(&self, id: &str, record: &Record, text: String) -> Result<bool, StoreError> {
        let job_id = format!("{NOTICE_JOB_PREFIX}{id}");
        let mut store = lock(&self.store);
        if matches!(store.find_job(&job_id), Ok(Some(job)) if job.id == job_id) {
            return Ok(false);
        }
        // The note first: a crash before the job leaves the record, and
        // the restart writes both again (the note under the same key).
        let note = PendingNote {
            at_ms: self.clock.now_ms(),
            text: text.clone(),
        };
        let note = serde_json::to_string(&note).unwrap_or_default();
        store.kv_set(&format!("{}{id}", note_prefix(&record.session_id)), &note)?;
        let Some((platform, chat)) = record.platform.clone().zip(record.chat.clone()) else {
            tracing::warn!(id, "background: the session has no chat; notice not sent");
            return Ok(false);
        };
        let mut text = text;
        if text.len() > hermes_runtime::cron::MAX_PROMPT_BYTES {
            let mut cut = hermes_runtime::cron::MAX_PROMPT_BYTES - 4;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        let job = JobRecord {
            no_agent: true,
            origin_platform: Some(platform),
            origin_chat: Some(chat),
            origin_thread: record.thread.clone(),
            ..JobRecord::one_off(
                job_id,
                "background process".into(),
                text,
                "origin".into(),
                self.clock.now_ms(),
            )
        };
        store.job_insert(&job)?;
        Ok(true)
    }
}

impl BackgroundSink for DurableNotices {
    fn started(&self, process: &StartedProcess) -> Result<(), String> {
        let session = lock(&self.store)
            .session(&process.session_id)
            .map_err(|e| e.to_string())?;
        let record = Record {
            session_id: process.session_id.clone(),
            command: process.command.clone(),
            notify: process.notify,
            thread: session.as_ref().and_then(super::thread_of),
            platform: session.as_ref().and_then(|s| s.platform.clone()),
            chat: session.as_ref().and_then(|s| s.chat_id.clone()),
        };
        if process.notify && (record.platform.is_none() || record.chat.is_none()) {
            return Err("this session has no chat to tell when it ends".into());
        }
        let value = serde_json::to_string(&record).map_err(|e| e.to_string())?;
        let key = format!("{}{}", self.prefix(), process.id);
        lock(&self.store)
            .kv_set(&key, &value)
            .map_err(|e| e.to_string())
    }

    fn finished(&self, finished: &FinishedProcess) {
        let key = format!("{}{}", self.prefix(), finished.process.id);
        let record = match lock(&self.store).kv_get(&key) {
            Ok(Some(value)) => serde_json::from_str::<Record>(&value).ok(),
            Ok(None) => None,
            Err(e) => {
                // Left recorded: the next start announces it as lost.
                tracing::warn!(error = %e, "background: cannot read the record");
                return;
            }
        };
        if let Some(record) = record
            && record.notify
            && finished.process.notify
            && let Err(e) = self.queue(&finished.process.id, &record, finished.notice())
        {
            // Left recorded: the next start announces it as lost.
            tracing::warn!(error = %e, "background: cannot queue the notice");
            return;
        }
        if let Err(e) = lock(&self.store).kv_delete(&[&key]) {
            tracing::warn!(error = %e, "background: cannot delete the record");
        }
        tracing::info!(id = %finished.process.id, status = %finished.status, "background: process ended");
    }
}

/// The gateway's background processes: output files under
/// `$HERMES_HOME/background/`, notices through `store`. Processes the last
/// run of this gateway left are announced as lost first.
pub fn start(
    home: &std::path::Path,
    file: &toml::Table,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
) -> Result<Arc<BackgroundProcesses>, StoreError> {
    let owner = home.to_string_lossy().into_owned();
    // Output files of processes of earlier runs: all ended (one gateway
    // per home, see `crate::lock`).
    let dir = home.join("background");
    let _ = std::fs::remove_dir_all(&dir);
    let notices = Arc::new(DurableNotices::new(store, clock, &owner));
    notices.announce_lost()?;
    Ok(BackgroundProcesses::new(
        BackgroundLimits::from_config(file),
        dir,
        Some(notices),
    ))
}
