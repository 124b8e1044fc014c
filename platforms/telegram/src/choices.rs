//! `clarify` questions as an inline keyboard (issue 46): one button per
//! choice, whose `callback_data` is `clarify:N`; a press comes back as a
//! `callback_query` update, which `inbound` turns into a
//! [`hermes_platform_kit::event::MessageType::Choice`] event. The user can still answer in
//! their own words, as a message.

use std::time::Duration;

use hermes_runtime::tools::Question;
use serde_json::{Value, json};

use super::api::{CallError, PLATFORM};
use super::inbound::CHOICE_DATA;
use super::{TelegramAdapter, format, lock};
use hermes_platform_kit::adapter::{AdapterError, PlatformAdapter};

impl TelegramAdapter {
    pub(super) async fn send_question(
        &self,
        chat_id: &str,
        question: &Question,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        if question.choices.is_empty() {
            return self
                .send(chat_id, &question.numbered_text(), reply_to)
                .await;
        }
        let chat: i64 = chat_id.trim().parse().map_err(|_| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("not a Telegram chat id: {chat_id:?}"),
        })?;
        let reply: Option<i64> = reply_to.and_then(|r| r.trim().parse().ok());
        let thread = reply.and_then(|r| lock(&self.inner.recent).thread_of((chat, r)));
        let keyboard: Vec<Value> = (1u8..)
            .zip(&question.choices)
            .map(|(n, choice)| {
                json!([{ "text": choice, "callback_data": format!("{CHOICE_DATA}{n}") }])
            })
            .collect();
        let text = format!(
            "❓ {}\n\nTap an option, or reply in your own words.",
            question.text
        );
        let mut body = json!({
            "chat_id": chat,
            "text": format::markdown_to_html(&text),
            "parse_mode": "HTML",
            "reply_markup": { "inline_keyboard": keyboard },
        });
        if let Some(t) = thread {
            body["message_thread_id"] = json!(t);
        }
        if let Some(r) = reply {
            body["reply_parameters"] =
                json!({ "message_id": r, "allow_sending_without_reply": true });
        }
        let api = &self.inner.api;
        match api
            .call("sendMessage", &body, Duration::from_secs(30))
            .await
        {
            Ok(_) => Ok(()),
            Err(CallError::Api { status: 400, .. }) => {
                // The formatting was refused: the same keyboard, plain text.
                body["text"] = json!(text);
                if let Some(obj) = body.as_object_mut() {
                    obj.remove("parse_mode");
                }
                api.call("sendMessage", &body, Duration::from_secs(30))
                    .await
                    .map(|_| ())
                    .map_err(CallError::into_adapter_error)
            }
            Err(e) => Err(e.into_adapter_error()),
        }
    }
}
