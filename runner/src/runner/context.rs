//! `/compress [focus]` and the context line of `/status` (SPEC X1).
//!
//! `/compress` runs in its session's queue (between turns), so the view it
//! compacts is the one the next turn loads; the store refuses to record a
//! compaction of a view that changed meanwhile. The summary call is made
//! without holding the store lock.

use hermes_core::context::estimate::fixed_tokens;
use hermes_core::{CompactError, Compaction};
use hermes_runtime::store::{SessionRecord, StoreError};

use super::Inner;
use crate::event::SessionSource;

impl Inner {
    /// `/compress [focus]`: compacts the session's view now and says what
    /// it saved. Store failures are errors; everything else is a reply.
    pub(super) fn compress(
        &self,
        key: &str,
        source: &SessionSource,
        focus: Option<&str>,
    ) -> Result<String, StoreError> {
        let (session, mut view) = {
            let store = self.store();
            let Some(session) = store.active_session_for_key(key)? else {
                return Ok("Nothing to compress yet: there is no conversation.".into());
            };
            let view = store.load_view(&session.id)?;
            (session, view)
        };
        let agent = match self.agent_for(key, &session, source) {
            Ok(a) => a,
            Err(e) => return Ok(format!("Sorry, the assistant is unavailable: {e}.")),
        };
        let before = view.len();
        match agent.compact(&mut view, focus) {
            Ok(c) => {
                self.store().record_compaction(&session.id, &c)?;
                let window = agent.context().map_or(0, |c| c.window.tokens());
                Ok(describe(&c, window))
            }
            Err(CompactError::NothingToCompact) => Ok(format!(
                "Nothing to compress yet ({before} messages in context)."
            )),
            Err(e) => Ok(format!(
                "Could not compress the conversation ({e}); nothing was changed."
            )),
        }
    }

    /// `Context: 1234 / 8192 tokens (15 %) …` for `/status`; `None` when
    /// the session's agent cannot be built or keeps no window.
    pub(super) fn context_line(
        &self,
        key: &str,
        session: &SessionRecord,
        source: &SessionSource,
    ) -> Option<String> {
        let view = self.store().load_view(&session.id).ok()?;
        let agent = self.agent_for(key, session, source).ok()?;
        let usage = agent.context_usage(&view)?;
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.agents.factory.default_model());
        let from = self
            .agents
            .factory
            .window_detail(&model)
            .unwrap_or_else(|| usage.source.to_string());
        // The part every request carries before the conversation (issue
        // 38): on a small local model, what leaves room for the chat.
        let fixed = fixed_tokens(agent.system_prompt(), agent.tools().specs());
        let fixed_pct = (fixed * 100)
            .checked_div(u64::from(usage.window))
            .unwrap_or(0);
        Some(format!(
            "context: {} / {} tokens ({} %), {} messages in context\n\
             Fixed prompt: ~{fixed} tokens ({fixed_pct} % of the window: the system prompt \
             and {} tool definitions)\nWindow from: {from}",
            usage.used,
            usage.window,
            usage.percent(),
            view.len(),
            agent.tools().specs().len(),
        ))
    }
}

/// The reply to a successful `/compress`.
pub(super) fn describe(c: &Compaction, window: u32) -> String {
    let pct = |t: u64| (t * 100).checked_div(u64::from(window)).unwrap_or(0);
    let kept = c.head + c.tail;
    format!(
        "Compressed the conversation: {} older message{} became one summary, {kept} kept as they were. \
         Context: ~{} → ~{} tokens of {window} ({} % → {} %). The originals stay in the history.",
        c.replaced,
        if c.replaced == 1 { "" } else { "s" },
        c.tokens_before,
        c.tokens_after,
        pct(c.tokens_before),
        pct(c.tokens_after),
    )
}
