//! `clarify` questions as buttons (issue 46): the question goes out as a
//! message with one action row of buttons (at most four choices, Discord
//! allows five per row), each button's `custom_id` `clarify:QUESTION:N`.
//! A press arrives over the Gateway as `INTERACTION_CREATE` of type 3
//! (MESSAGE_COMPONENT), which must be answered within 3 s through
//! `POST /interactions/{id}/{token}/callback`:
//!
//! - a press on an open question, by the user it was asked of, in its
//!   channel: type 7 UPDATE_MESSAGE (the buttons disabled, the pick shown),
//!   and a [`MessageType::Choice`] event whose text is the choice's number;
//! - a press on a question this process no longer holds open (answered —
//!   by a press or in words —, timed out, replaced by a newer one, or
//!   asked before a restart: the gateway tells the adapter when a question
//!   stops waiting, `question_closed`), or by someone else: type 4 with
//!   the EPHEMERAL flag, a note only the presser sees, and no event.
//!
//! The user can still answer in their own words, as a message. Which user
//! a question is for: in a DM the chat's user; in a server channel the
//! author of the message the question replies to (remembered from
//! `MESSAGE_CREATE`).

use std::collections::VecDeque;
use std::sync::Arc;

use hermes_runtime::tools::Question;
use serde::Deserialize;
use serde_json::{Value, json};

use super::rest::RestError;
use super::{DiscordAdapter, Inner, MAX_MESSAGE_CHARS, PLATFORM, adapter_error, lock};
use hermes_platform_kit::adapter::{AdapterError, EventHandler};
use hermes_platform_kit::event::{ChatType, MessageEvent, MessageType, SessionSource};

/// The `custom_id` prefix of a choice button.
const CUSTOM_ID_PREFIX: &str = "clarify:";
/// Discord's limit for a button's label, in characters.
const MAX_LABEL_CHARS: usize = 80;
/// Questions held open at once (older ones are forgotten: a press on them
/// is stale).
const MAX_OPEN: usize = 64;
/// Message authors remembered, to know whom a question in a server channel
/// is for.
const MAX_AUTHORS: usize = 256;
/// Interaction type MESSAGE_COMPONENT.
const MESSAGE_COMPONENT: u8 = 3;
/// Callback type CHANNEL_MESSAGE_WITH_SOURCE.
const CHANNEL_MESSAGE: u8 = 4;
/// Callback type UPDATE_MESSAGE.
const UPDATE_MESSAGE: u8 = 7;
/// Message flag EPHEMERAL: only the presser sees the answer.
const EPHEMERAL: u64 = 1 << 6;

/// The line under a question with buttons.
const QUESTION_TAIL: &str = "\n\nPick an option, or reply in your own words.";

/// What the answered question gains: "\n\n✅ " and the label.
const PICK_CHARS: usize = 4 + MAX_LABEL_CHARS;

/// The note for a press on a question that no longer waits.
pub const STALE_NOTE: &str = "That question is no longer waiting for an answer.";

/// A question whose buttons are live.
#[derive(Debug, Clone)]
struct Open {
    id: String,
    /// The channel the message went to.
    channel: String,
    /// The user it was asked of, when known.
    user: Option<String>,
    /// The message it replies to.
    reply_to: Option<String>,
    /// The question's own message, once Discord has created it: its
    /// buttons are disabled when the question stops waiting.
    message_id: Option<String>,
    content: String,
    labels: Vec<String>,
}

/// The questions with live buttons and the recent message authors.
#[derive(Debug, Default)]
pub(super) struct Questions {
    open: VecDeque<Open>,
    authors: VecDeque<(String, String)>,
}

impl Questions {
    /// Remembers that `user` wrote message `message_id`.
    pub(super) fn remember_author(&mut self, message_id: &str, user: &str) {
        if self.authors.len() >= MAX_AUTHORS {
            self.authors.pop_front();
        }
        self.authors
            .push_back((message_id.to_owned(), user.to_owned()));
    }

    fn author_of(&self, message_id: &str) -> Option<String> {
        self.authors
            .iter()
            .rev()
            .find(|(m, _)| m == message_id)
            .map(|(_, u)| u.clone())
    }

    /// Opens `q`; an older question to the same user in the same channel
    /// is superseded (the chat waits for one answer at a time).
    fn open(&mut self, q: Open) {
        self.open
            .retain(|o| !(o.channel == q.channel && o.user == q.user));
        if self.open.len() >= MAX_OPEN {
            self.open.pop_front();
        }
        self.open.push_back(q);
    }

    fn close(&mut self, id: &str) -> Option<Open> {
        let at = self.open.iter().position(|o| o.id == id)?;
        self.open.remove(at)
    }
}

/// A button label within Discord's limit.
fn label(choice: &str) -> String {
    if choice.chars().count() <= MAX_LABEL_CHARS {
        return choice.to_owned();
    }
    let mut s: String = choice.chars().take(MAX_LABEL_CHARS - 1).collect();
    s.push('…');
    s
}

/// What the buttons of a question show.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Row {
    /// Waiting: every button can be pressed.
    Live,
    /// Answered by a press: all disabled, choice N (1-based) green.
    Picked(usize),
    /// No longer waiting (answered in words, timed out, replaced): all
    /// disabled, none green.
    Closed,
}

/// The action row: one button per choice, as `row` says.
fn buttons(id: &str, labels: &[String], row: Row) -> Value {
    let components: Vec<Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let n = i + 1;
            let mut b = json!({
                "type": 2,
                "style": if row == Row::Picked(n) { 3 } else { 2 },
                "label": l,
                "custom_id": format!("{CUSTOM_ID_PREFIX}{id}:{n}"),
            });
            if row != Row::Live {
                b["disabled"] = json!(true);
            }
            b
        })
        .collect();
    json!([{ "type": 1, "components": components }])
}

impl DiscordAdapter {
    pub(super) async fn send_question(
        &self,
        chat_id: &str,
        question: &Question,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        use hermes_platform_kit::adapter::PlatformAdapter;
        if question.choices.is_empty() {
            return self
                .send(chat_id, &question.numbered_text(), reply_to)
                .await;
        }
        let channel = self.inner.channel_for(chat_id);
        let in_dm = channel != chat_id;
        let user = if in_dm {
            Some(chat_id.to_owned())
        } else {
            reply_to.and_then(|m| lock(&self.inner.questions).author_of(m))
        };
        let tail = QUESTION_TAIL;
        // Room is left for the pick shown once answered ([`picked`]).
        let room = MAX_MESSAGE_CHARS - tail.chars().count() - 3 - PICK_CHARS;
        let text: String = question.text.chars().take(room).collect();
        let content = format!("❓ {text}{tail}");
        let id = self.inner.nonce();
        let labels: Vec<String> = question.choices.iter().map(|c| label(c)).collect();
        let mut body = self.message_body(&content, reply_to);
        body["components"] = buttons(&id, &labels, Row::Live);
        // Open before it goes out, so a quick press finds it.
        lock(&self.inner.questions).open(Open {
            id: id.clone(),
            channel: channel.clone(),
            user,
            reply_to: reply_to.map(str::to_owned),
            message_id: None,
            content,
            labels,
        });
        let sent = self.post_message(chat_id, &channel, &body).await;
        match sent {
            Ok((posted_in, message)) => {
                if let Some(q) = lock(&self.inner.questions)
                    .open
                    .iter_mut()
                    .find(|o| o.id == id)
                {
                    // A DM opened on the way: the question lives there.
                    q.channel = posted_in;
                    q.message_id = message["id"].as_str().map(str::to_owned);
                }
                Ok(())
            }
            Err(e) => {
                lock(&self.inner.questions).close(&id);
                Err(e)
            }
        }
    }
}

impl DiscordAdapter {
    /// The question asked in `chat_id` replying to `reply_to` no longer
    /// waits: its buttons stop answering (a press gets the stale note).
    /// Its buttons are disabled (`PATCH` of the message), so that nobody
    /// presses an answer that no longer counts.
    pub(super) async fn close_question(&self, chat_id: &str, reply_to: Option<&str>) {
        let channel = self.inner.channel_for(chat_id);
        let closed: VecDeque<Open> = {
            let mut questions = lock(&self.inner.questions);
            let (closed, open) = std::mem::take(&mut questions.open)
                .into_iter()
                .partition(|o| o.channel == channel && o.reply_to.as_deref() == reply_to);
            questions.open = open;
            closed
        };
        for q in closed {
            let Some(message_id) = &q.message_id else {
                continue;
            };
            let path = format!("/channels/{}/messages/{message_id}", q.channel);
            let body = json!({ "components": buttons(&q.id, &q.labels, Row::Closed) });
            if let Err(e) = self.inner.rest.request("PATCH", &path, Some(&body)).await {
                tracing::warn!(
                    "discord: a closed question's buttons stay live: {}",
                    describe(e)
                );
            }
        }
    }
}

#[derive(Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    global_name: Option<String>,
}

#[derive(Deserialize)]
struct Member {
    user: Option<User>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    custom_id: Option<String>,
}

/// The parts of an Interaction object a button press needs.
#[derive(Deserialize)]
struct Interaction {
    id: String,
    token: String,
    #[serde(rename = "type")]
    kind: u8,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    guild_id: Option<String>,
    #[serde(default)]
    channel_id: Option<String>,
    #[serde(default)]
    member: Option<Member>,
    #[serde(default)]
    user: Option<User>,
}

/// What a press is.
enum Press {
    /// A pick: the question (closed now) and the choice's number.
    Pick(Open, usize),
    /// Someone other than the user the question was asked of.
    Foreign(String),
    Stale,
}

fn classify(inner: &Inner, custom_id: &str, channel: &str, user: &str) -> Press {
    let Some((id, n)) = custom_id
        .strip_prefix(CUSTOM_ID_PREFIX)
        .and_then(|rest| rest.rsplit_once(':'))
    else {
        return Press::Stale;
    };
    let Ok(n) = n.parse::<usize>() else {
        return Press::Stale;
    };
    let mut questions = lock(&inner.questions);
    let Some(q) = questions.open.iter().find(|o| o.id == id) else {
        return Press::Stale;
    };
    if q.channel != channel || n == 0 || n > q.labels.len() {
        return Press::Stale;
    }
    if let Some(owner) = q.user.as_ref().filter(|u| *u != user) {
        return Press::Foreign(owner.clone());
    }
    match questions.close(id) {
        Some(q) => Press::Pick(q, n),
        None => Press::Stale,
    }
}

/// Handles one `INTERACTION_CREATE` dispatch.
pub(super) fn interaction(inner: &Arc<Inner>, handler: &EventHandler, d: &Value) {
    let press: Interaction = match serde_json::from_value(d.clone()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("discord: skipping an INTERACTION_CREATE: {e}");
            return;
        }
    };
    if press.kind != MESSAGE_COMPONENT {
        tracing::debug!(kind = press.kind, "discord: interaction not a button press");
        return;
    }
    if !inner.gate.is_open() {
        tracing::info!("discord: the bot's lease is gone; press left to the gateway that holds it");
        return;
    }
    let Some(presser) = press.member.and_then(|m| m.user).or(press.user) else {
        return;
    };
    let channel = press.channel_id.clone().unwrap_or_default();
    let custom_id = press.data.and_then(|d| d.custom_id).unwrap_or_default();
    let (response, event) = match classify(inner, &custom_id, &channel, &presser.id) {
        Press::Stale => (note(STALE_NOTE), None),
        Press::Foreign(owner) => (
            note(&format!(
                "This question was asked of <@{owner}>; only they can answer it."
            )),
            None,
        ),
        Press::Pick(q, n) => {
            let picked_label = q.labels.get(n - 1).cloned().unwrap_or_default();
            let response = json!({
                "type": UPDATE_MESSAGE,
                "data": {
                    "content": picked(&q.content, &picked_label),
                    "components": buttons(&q.id, &q.labels, Row::Picked(n)),
                    "allowed_mentions": { "parse": [] },
                },
            });
            let in_guild = press.guild_id.is_some();
            if !in_guild {
                lock(&inner.dm_channels).insert(presser.id.clone(), channel.clone());
            }
            let event = MessageEvent {
                // Interaction ids are snowflakes like message ids: unique,
                // so the durable inbox takes a press once.
                message_id: press.id.clone(),
                text: n.to_string(),
                source: SessionSource {
                    platform: PLATFORM.to_owned(),
                    chat_id: if in_guild {
                        channel.clone()
                    } else {
                        presser.id.clone()
                    },
                    chat_type: if in_guild {
                        ChatType::Group
                    } else {
                        ChatType::Dm
                    },
                    user_id: presser.id.clone(),
                    user_name: presser.global_name.clone().or(presser.username.clone()),
                    thread_id: None,
                },
                message_type: MessageType::Choice,
                media: Vec::new(),
            };
            (response, Some(event))
        }
    };
    // Answered first and off this task: Discord allows 3 s.
    let responder = Arc::clone(inner);
    let token = press.token;
    let path = format!("/interactions/{}/{token}/callback", press.id);
    hermes_runtime::task::spawn(async move {
        if let Err(e) = responder.rest.request("POST", &path, Some(&response)).await {
            let why = describe(e).replace(&token, "<interaction token>");
            tracing::warn!("discord: a button press was not answered: {why}");
        }
    });
    if let Some(event) = event {
        handler(event);
    }
}

/// The question's text once answered: the pick under it.
fn picked(content: &str, label: &str) -> String {
    format!("{content}\n\n✅ {label}")
}

/// An ephemeral note to the presser.
fn note(text: &str) -> Value {
    json!({
        "type": CHANNEL_MESSAGE,
        "data": { "content": text, "flags": EPHEMERAL, "allowed_mentions": { "parse": [] } },
    })
}

fn describe(e: RestError) -> String {
    adapter_error(e).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn long_choices_fit_a_button_and_the_row_names_every_choice() {
        let long = "x".repeat(200);
        assert_eq!(label(&long).chars().count(), MAX_LABEL_CHARS);
        let row = buttons("q1", &["a".into(), "b".into()], Row::Live);
        assert_eq!(row[0]["components"][1]["custom_id"], "clarify:q1:2");
        assert!(row[0]["components"][0].get("disabled").is_none());
        let done = buttons("q1", &["a".into(), "b".into()], Row::Picked(2));
        assert_eq!(done[0]["components"][1]["style"], 3);
        assert_eq!(done[0]["components"][0]["disabled"], true);
    }

    #[test]
    fn the_longest_question_with_its_pick_fits_one_message() {
        let tail = QUESTION_TAIL;
        let room = MAX_MESSAGE_CHARS - tail.chars().count() - 3 - PICK_CHARS;
        let content = format!("❓ {}{tail}", "q".repeat(room));
        let shown = picked(&content, &label(&"l".repeat(500)));
        assert!(
            shown.chars().count() <= MAX_MESSAGE_CHARS,
            "{}",
            shown.chars().count()
        );
    }

    #[test]
    fn a_newer_question_to_the_same_user_supersedes_the_older() {
        let mut q = Questions::default();
        let open = |id: &str, user: &str| Open {
            id: id.into(),
            channel: "c".into(),
            user: Some(user.into()),
            reply_to: None,
            message_id: None,
            content: String::new(),
            labels: vec!["a".into()],
        };
        q.open(open("1", "u"));
        q.open(open("2", "v"));
        q.open(open("3", "u"));
        assert!(q.close("1").is_none());
        assert!(q.close("2").is_some());
        assert!(q.close("3").is_some());
    }
}
