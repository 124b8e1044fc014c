//! `/background PROMPT` (issue 46): the prompt runs as a separate session
//! while the chat goes on, and its answer comes to the chat when done.
//!
//! The command stores a one-off job of the scheduler (like a webhook's,
//! `JobRecord::one_off`), delivered to the chat it came from. Everything
//! after that is the scheduler's: its run is claimed once, its answer
//! waits in the durable outbox until delivered — exactly once, also when
//! the gateway is stopped or killed in between (the gateway's scheduler). The command
//! itself runs at most once, even when the platform delivers it again
//! (intake's `first_acceptance`).

use hermes_runtime::cron::MAX_PROMPT_BYTES;
use hermes_runtime::store::JobRecord;

use super::Inner;
use super::intake::blocking;
use crate::event::MessageEvent;

/// The id prefix of `/background` jobs.
pub const BACKGROUND_JOB_PREFIX: &str = "bg_";

const USAGE: &str =
    "Usage: /background PROMPT — I work on PROMPT separately and send the answer here when done.";

impl Inner {
    /// Queues `prompt` of `event` as a background job; the reply to send.
    pub(super) fn start_background(&self, event: &MessageEvent, prompt: &str, now: u64) -> String {
        let prompt = prompt.trim();
        if prompt.is_empty() {
            return USAGE.to_owned();
        }
        if prompt.len() > MAX_PROMPT_BYTES {
            return format!(
                "That prompt is {} bytes; /background takes at most {MAX_PROMPT_BYTES}.",
                prompt.len()
            );
        }
        let source = &event.source;
        let id = format!("{BACKGROUND_JOB_PREFIX}{:016x}", rand::random::<u64>());
        let first_line: String = prompt
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect();
        let job = JobRecord {
            origin_platform: Some(source.platform.clone()),
            origin_chat: Some(source.chat_id.clone()),
            origin_thread: source.thread_id.clone(),
            ..JobRecord::one_off(
                id.clone(),
                format!("background: {first_line}"),
                prompt.to_owned(),
                "origin".to_owned(),
                now,
            )
        };
        match blocking(|| self.store().job_insert(&job)) {
            Ok(()) => {
                tracing::info!(job = %id, platform = %source.platform, chat = %source.chat_id, "background: queued");
                format!(
                    "Working on it in the background (job {id}); the answer comes to this chat when it is done."
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "background: the job could not be stored");
                format!("That could not be started in the background: {e}")
            }
        }
    }
}
