//! Who gets in (SPEC E1, Y4): the configured allow-lists merged with the
//! users approved by pairing, and what a stranger hears.

use std::sync::Arc;

use super::{Inner, intake::blocking, refusal_text};
use crate::event::{ChatType, MessageEvent};
use crate::pairing::{self, Answer};

impl Inner {
    /// Whether the sender of `event` may talk to the bot: on a configured
    /// allow-list, or approved by pairing (read from the store at every
    /// check, so an approval from `hermes pairing approve` counts at once).
    /// A stranger's DM gets a pairing code (when pairing is on); everyone
    /// else refused gets the refusal, at most once per
    /// [`super::REFUSAL_INTERVAL`]. Never calls the model.
    pub(super) fn admit(self: &Arc<Self>, event: &MessageEvent, now: u64) -> bool {
        let source = &event.source;
        if self.config.allow.allows(&source.platform, &source.user_id) {
            return true;
        }
        let approved =
            blocking(|| pairing::is_approved(&self.store(), &source.platform, &source.user_id));
        match approved {
            Ok(true) => return true,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "could not read the approved users; treating the sender as unknown")
            }
        }
        tracing::warn!(platform = %source.platform, user = %source.user_id, "message from a user not on the allow-list");
        if self.config.pairing && source.chat_type == ChatType::Dm {
            let answer = blocking(|| {
                pairing::answer_stranger(
                    &mut self.store(),
                    &source.platform,
                    &source.user_id,
                    source.user_name.as_deref(),
                    now,
                )
            });
            match answer {
                Ok(Answer::Code(code)) => self.reply_later(
                    event,
                    pairing::code_text(&source.platform, &source.user_id, &code),
                ),
                Ok(Answer::Silent) => {}
                Err(e) => tracing::error!(error = %e, "could not issue a pairing code"),
            }
            return false;
        }
        if self
            .intake
            .refuse_now(&source.platform, &source.user_id, now)
        {
            self.reply_later(event, refusal_text(&source.user_id));
        }
        false
    }
}
