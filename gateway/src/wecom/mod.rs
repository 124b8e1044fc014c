//! The WeCom AI-bot WebSocket adapter (being written).
