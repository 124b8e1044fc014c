//! The Telegram Bot API adapter (being written).
