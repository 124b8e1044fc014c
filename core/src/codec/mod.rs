//! The OpenAI chat-completions wire codec, shared by every transport.
//!
//! (Being written: see the codec submodules.)

// Used by the codec submodules once they land.
use embedded_io as _;
use heapless as _;
use thiserror as _;
