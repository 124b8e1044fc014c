//! Entry points for the fuzz targets in `fuzz/` and for the proptests and
//! corpus replay in `gateway/tests/hostile_bytes.rs`. Not API.
//!
//! Each function takes untrusted bytes, runs a parser over them and panics
//! when one of the parser's promises breaks; the fuzzer, the proptests and
//! the committed crash inputs all drive these same functions.
//!
//! The WeCom callback adapter (XML + message crypto) has its own entries in
//! `hermes_wecom_callback::endpoint` (they must never panic); they are re-exported
//! here as [`wecom_callback_body`], [`wecom_decrypt`] and
//! [`wecom_message_xml`] so every target calls into this module.

pub use hermes_platform_kit::fuzz_entry::{command, split_message, split_message_with};

#[cfg(feature = "wecom_callback")]
pub use hermes_wecom_callback::{
    fuzz_callback_body as wecom_callback_body, fuzz_decrypt as wecom_decrypt,
    fuzz_message_xml as wecom_message_xml,
};

#[cfg(feature = "telegram")]
pub use hermes_telegram::fuzz_entry::{telegram_format, telegram_updates};

#[cfg(feature = "wecom")]
pub use hermes_wecom::fuzz_entry::{wecom_frame, wecom_merge};
