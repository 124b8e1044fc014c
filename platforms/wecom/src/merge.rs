//! Joining the pieces of a long user text (SPEC G8).
//!
//! WeCom splits a long user text into ~4000-character messages that arrive
//! one after another. The agent must see one message, not several turns, so
//! the adapter holds each message briefly: after a piece it waits
//! [`MergeConfig::wait`] for another; when the latest piece is close to the
//! limit ([`MergeConfig::near_limit`] characters or more) another piece is
//! probably on its way, so it waits [`MergeConfig::max_wait`] instead. Then
//! the pieces are joined into one [`MessageEvent`].
//!
//! **Bounds.** Merging happens before the runner checks who the sender is,
//! so a stranger must not be able to make the adapter hold text without
//! limit: a merged message is handed out as soon as it holds
//! [`MergeConfig::max_pieces`] pieces, would exceed
//! [`MergeConfig::max_bytes`] with the next piece (which then starts a new
//! message), or [`MergeConfig::max_total_wait`] has passed since its first
//! piece — however steadily more pieces keep coming.
//!
//! **Commands stay commands.** A piece that parses as a slash command
//! ([`hermes_platform_kit::command::parse_command`]) is never merged: what its chat holds
//! is handed out first, then the command alone, at once — so `/stop` sent
//! right after a message still stops (SPEC G12).
//!
//! **Guarantees:** pieces of different chats (and of different senders in
//! one group) never mix; pieces keep their arrival order; nothing is dropped
//! (`flush` hands out everything still held).
//!
//! The merger is sans-IO: it reads no clock. The caller passes `now` (time
//! since any fixed origin) to [`FragmentMerger::push`] and
//! [`FragmentMerger::poll`] and sleeps until [`FragmentMerger::next_deadline`];
//! tests drive it with a fake clock, production with tokio timers.

use std::time::Duration;

use hermes_platform_kit::command::parse_command;
use hermes_platform_kit::event::{ChatType, MessageEvent, MessageType};

/// Timing of the merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeConfig {
    /// How long to wait for another piece after an ordinary piece.
    pub wait: Duration,
    /// How long to wait after a piece that is close to the length limit.
    pub max_wait: Duration,
    /// A piece this long (in characters) or longer is "close to the limit".
    pub near_limit: usize,
    /// A merged message is handed out at the latest this long after its
    /// first piece arrived.
    pub max_total_wait: Duration,
    /// A merged message never grows beyond this many bytes of text (a
    /// single larger piece is handed out as it is).
    pub max_bytes: usize,
    /// A merged message is handed out once it holds this many pieces.
    pub max_pieces: usize,
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self {
            wait: Duration::from_millis(600),
            max_wait: Duration::from_secs(2),
            near_limit: 3900,
            max_total_wait: Duration::from_secs(5),
            max_bytes: 64 * 1024,
            max_pieces: 32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    chat_type: ChatType,
    chat_id: String,
    user_id: String,
}

#[derive(Debug)]
struct Pending {
    key: Key,
    /// The event being built: text accumulates, the id is the latest piece's.
    event: MessageEvent,
    /// Whether the latest piece was close to the limit (then the next piece
    /// continues it directly; otherwise pieces are separate lines).
    last_near_limit: bool,
    deadline: Duration,
    /// When the first piece arrived (for [`MergeConfig::max_total_wait`]).
    first_at: Duration,
    pieces: usize,
    /// Complete: due at its deadline, and no piece joins it any more.
    closed: bool,
    /// The caller's tags of its pieces, in arrival order (the first is the
    /// message's group tag: where the pieces are stored, [`super::staging`]).
    tags: Vec<u64>,
}

/// A joined message and the tags of the pieces it was made of.
#[derive(Debug)]
pub struct Merged {
    /// The message.
    pub event: MessageEvent,
    /// The tags given to [`FragmentMerger::push_tagged`] for its pieces.
    pub tags: Vec<u64>,
}

/// The merge state machine (see the module docs).
#[derive(Debug)]
pub struct FragmentMerger {
    config: MergeConfig,
    /// In arrival order of each chat's first held piece.
    pending: Vec<Pending>,
}

impl FragmentMerger {
    /// An empty merger.
    pub fn new(config: MergeConfig) -> Self {
        Self {
            config,
            pending: Vec::new(),
        }
    }

    /// Holds `event`, received at `now`, joining it to what its chat holds.
    ///
    /// A bound reached or a command makes messages due at `now`: call
    /// [`FragmentMerger::poll`] right after.
    pub fn push(&mut self, now: Duration, event: MessageEvent) {
        self.push_tagged(now, event, 0);
    }

    /// [`FragmentMerger::push`], remembering `tag` with the piece; returns
    /// the tag of the message it joined (its first piece's tag — `tag`
    /// itself when it starts a new one). The caller stores each piece with
    /// that group tag, so that after a restart the same pieces are joined
    /// into the same message again.
    pub fn push_tagged(&mut self, now: Duration, event: MessageEvent, tag: u64) -> u64 {
        let near = event.text.chars().count() >= self.config.near_limit;
        let wait = if near {
            self.config.max_wait
        } else {
            self.config.wait
        };
        let key = Key {
            chat_type: event.source.chat_type,
            chat_id: event.source.chat_id.clone(),
            user_id: event.source.user_id.clone(),
        };
        let open = self.pending.iter_mut().find(|p| p.key == key && !p.closed);
        if parse_command(&event.text).is_some() {
            // What the chat holds goes first, then the command alone.
            if let Some(p) = open {
                p.closed = true;
                p.deadline = now;
            }
            self.pending.push(Pending {
                key,
                event,
                last_near_limit: false,
                deadline: now,
                first_at: now,
                pieces: 1,
                closed: true,
                tags: vec![tag],
            });
            return tag;
        }
        let open = open.and_then(|p| {
            let too_big = p.event.text.len() + 1 + event.text.len() > self.config.max_bytes;
            if too_big {
                // Hand out what is held; this piece starts a new message.
                p.closed = true;
                p.deadline = now;
                None
            } else {
                Some(p)
            }
        });
        if let Some(p) = open {
            // A split piece continues mid-word: join without a separator.
            // Separate short messages sent in a burst become separate lines.
            // A piece that is only an image or a file (SPEC X6) adds no
            // text, and text after one needs no separator.
            let media_only = |e: &MessageEvent| e.text.is_empty() && !e.media.is_empty();
            if !media_only(&event) {
                if !p.last_near_limit && !media_only(&p.event) {
                    p.event.text.push('\n');
                }
                p.event.text.push_str(&event.text);
            }
            p.event.media.extend(event.media);
            if p.event.message_type != event.message_type {
                p.event.message_type = MessageType::Mixed;
            }
            // Replies go to the newest piece: its callback `req_id` is the
            // freshest one.
            p.event.message_id = event.message_id;
            p.last_near_limit = near;
            p.deadline = (now + wait).min(p.first_at + self.config.max_total_wait);
            p.pieces += 1;
            p.tags.push(tag);
            if p.pieces >= self.config.max_pieces {
                p.closed = true;
                p.deadline = now;
            }
            p.tags.first().copied().unwrap_or(tag)
        } else {
            let closed = self.config.max_pieces <= 1;
            self.pending.push(Pending {
                key,
                event,
                last_near_limit: near,
                deadline: if closed {
                    now
                } else {
                    (now + wait).min(now + self.config.max_total_wait)
                },
                first_at: now,
                pieces: 1,
                closed,
                tags: vec![tag],
            });
            tag
        }
    }

    /// Hands out every joined message whose wait is over at `now`, in the
    /// order their chats started.
    pub fn poll(&mut self, now: Duration) -> Vec<MessageEvent> {
        self.poll_tagged(now).into_iter().map(|m| m.event).collect()
    }

    /// [`FragmentMerger::poll`], with each message's piece tags.
    pub fn poll_tagged(&mut self, now: Duration) -> Vec<Merged> {
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].deadline <= now {
                let p = self.pending.remove(i);
                tracing::debug!(
                    pieces = p.pieces,
                    chat = %p.key.chat_id,
                    "wecom: delivering merged message"
                );
                due.push(Merged {
                    event: p.event,
                    tags: p.tags,
                });
            } else {
                i += 1;
            }
        }
        due
    }

    /// When the next held message is due, if any.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.pending.iter().map(|p| p.deadline).min()
    }

    /// Hands out everything held, due or not (at shutdown: nothing is lost).
    pub fn flush(&mut self) -> Vec<MessageEvent> {
        self.flush_tagged().into_iter().map(|m| m.event).collect()
    }

    /// [`FragmentMerger::flush`], with each message's piece tags.
    pub fn flush_tagged(&mut self) -> Vec<Merged> {
        self.pending
            .drain(..)
            .map(|p| Merged {
                event: p.event,
                tags: p.tags,
            })
            .collect()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
