//! The runner's part of `clarify` questions ([`crate::clarify`]): sending a
//! question through the chat's adapter, and offering the chat's messages
//! to a waiting question before anything else.

use std::sync::{Arc, Weak};

use hermes_runtime::tools::Question;

use super::{Inner, lock};
use crate::adapter::PlatformAdapter;
use crate::approval::Route;
use crate::clarify::{Offer, QuestionSender};
use crate::event::MessageEvent;

/// Sends `clarify` questions through the adapters, for the turn's thread
/// (a blocking-pool thread, which waits for the platform's answer).
pub(super) struct ChatQuestions(pub(super) Weak<Inner>);

impl ChatQuestions {
    fn adapter(&self, route: &Route) -> Result<(Arc<Inner>, Arc<dyn PlatformAdapter>), String> {
        let inner = self.0.upgrade().ok_or("the gateway is stopping")?;
        let adapter = inner
            .delivery
            .adapter(route.platform.as_str())
            .cloned()
            .ok_or("no adapter for this chat's platform")?;
        Ok((inner, adapter))
    }
}

impl QuestionSender for ChatQuestions {
    fn ask(&self, route: &Route, question: &Question) -> Result<(), String> {
        let (inner, adapter) = self.adapter(route)?;
        let handle = inner
            .handle
            .get()
            .cloned()
            .ok_or("the gateway is not serving yet")?;
        // The question comes after the answer so far: the preview goes on
        // below it.
        if let Some(turn) = lock(&inner.queues.state)
            .sessions
            .get(&route.key)
            .and_then(|slot| slot.turn.as_ref())
        {
            turn.break_preview();
        }
        let reply_to = Some(route.reply_to.as_str()).filter(|r| !r.is_empty());
        hermes_runtime::bridge::wait_outside_runtime(|| {
            handle.block_on(adapter.ask(&route.chat_id, question, reply_to))
        })
        .map_err(|e| e.to_string())
    }

    fn notify(&self, route: &Route, text: String) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let route = route.clone();
        let sender = Arc::clone(&inner);
        inner.spawn(async move {
            let reply_to = Some(route.reply_to.as_str()).filter(|r| !r.is_empty());
            sender
                .delivery
                .send(&route.platform, &route.chat_id, &text, reply_to)
                .await;
        });
    }

    fn closed(&self, route: &Route) {
        self.close(route);
    }
}

impl ChatQuestions {
    /// Tells the chat's adapter that its question no longer waits.
    fn close(&self, route: &Route) {
        let Ok((inner, adapter)) = self.adapter(route) else {
            return;
        };
        let route = route.clone();
        inner.spawn(async move {
            let reply_to = Some(route.reply_to.as_str()).filter(|r| !r.is_empty());
            adapter.question_closed(&route.chat_id, reply_to).await;
        });
    }
}

impl Inner {
    /// Offers `event` (of session key `key`) to a question waiting in its
    /// chat. `true`: it was taken (an answer, a wrong number, a stale
    /// button press) and needs no more handling.
    pub(super) fn offer_to_question(self: &Arc<Self>, key: &str, event: &MessageEvent) -> bool {
        let Some(hub) = self.agents.factory.clarify() else {
            return false;
        };
        match hub.offer(key, event) {
            Offer::NotWaiting | Offer::Ended => false,
            Offer::Answered => true,
            Offer::Invalid(text) => {
                self.reply_later(event, text);
                true
            }
            Offer::Stale => {
                self.reply_later(
                    event,
                    "That question is no longer waiting for an answer.".to_owned(),
                );
                true
            }
        }
    }
}
