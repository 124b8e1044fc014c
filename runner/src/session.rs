//! Session keys (SPEC G2).
//!
//! A session key names one conversation. It is derived from where a message
//! came from, never from the platform's payload, so the runner can route
//! every platform the same way (SPEC G1). The spelling is fixed: keys are
//! stored in the database, and changing them would orphan every session.

use crate::event::{ChatType, SessionSource};

/// The key of the conversation `source` belongs to.
///
/// - DM: `agent:main:{platform}:dm:{chat_id}`
/// - group, one conversation per member (the default):
///   `agent:main:{platform}:group:{chat_id}:{user_id}`
/// - group shared by all members (`group_sessions_per_user = false`):
///   `agent:main:{platform}:group:{chat_id}`
///
/// A message in a thread (a Telegram forum topic) has its own conversation
/// (SPEC Y5): the key above, then `:{thread_id}`.
pub fn session_key(source: &SessionSource, group_sessions_per_user: bool) -> String {
    let key = match source.chat_type {
        ChatType::Dm => format!("agent:main:{}:dm:{}", source.platform, source.chat_id),
        ChatType::Group if group_sessions_per_user => format!(
            "agent:main:{}:group:{}:{}",
            source.platform, source.chat_id, source.user_id
        ),
        ChatType::Group => format!("agent:main:{}:group:{}", source.platform, source.chat_id),
    };
    match source.thread_id.as_deref().filter(|t| !t.is_empty()) {
        Some(thread) => format!("{key}:{thread}"),
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(chat_type: ChatType) -> SessionSource {
        SessionSource {
            platform: "telegram".into(),
            chat_id: "-100".into(),
            chat_type,
            user_id: "42".into(),
            user_name: None,
            thread_id: None,
        }
    }

    #[test]
    fn keys_are_spelled_exactly_as_the_spec_says() {
        assert_eq!(
            session_key(&source(ChatType::Dm), true),
            "agent:main:telegram:dm:-100"
        );
        assert_eq!(
            session_key(&source(ChatType::Dm), false),
            "agent:main:telegram:dm:-100"
        );
        assert_eq!(
            session_key(&source(ChatType::Group), true),
            "agent:main:telegram:group:-100:42"
        );
        assert_eq!(
            session_key(&source(ChatType::Group), false),
            "agent:main:telegram:group:-100"
        );
        let mut topic = source(ChatType::Group);
        topic.thread_id = Some("77".into());
        assert_eq!(
            session_key(&topic, true),
            "agent:main:telegram:group:-100:42:77"
        );
        assert_eq!(
            session_key(&topic, false),
            "agent:main:telegram:group:-100:77"
        );
    }
}
