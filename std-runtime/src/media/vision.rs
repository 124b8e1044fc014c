//! Which models see images, and a description of an image for one that
//! does not (SPEC X6).
//!
//! A chat model sees images when `[provider] vision` says so, otherwise when
//! its name belongs to a family known to accept image parts
//! ([`model_sees_images`]). For a model that does not, a configured
//! `[provider] vision_model` on the same provider describes each image once,
//! when it arrives; the description is stored with the attachment and the
//! chat model reads it as text.

use hermes_core::{
    Attachment, ChatRequest, LedgerEntry, Message, Model, ModelError, ModelErrorKind, NullSink,
};

use super::settings::MediaSettings;

/// The system prompt of a description call.
pub const DESCRIBE_PROMPT: &str = "You describe images for an assistant that cannot see them. \
Describe the image the user sent so that the assistant can answer questions about it: what it \
shows, any text in it (verbatim), numbers, charts, code, people's expressions and the setting. \
Be factual and complete but concise (at most about 200 words). Do not answer the user's \
question; only describe the image.";

/// The longest description kept.
pub const MAX_DESCRIPTION_CHARS: usize = 4000;

/// Name fragments of model families that accept image parts. Matched,
/// lower-cased, against the model name without its provider prefix
/// (`openai/gpt-4o` → `gpt-4o`).
const VISION_FAMILIES: &[&str] = &[
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "chatgpt-4o",
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "claude-4",
    "gemini",
    "gemma3",
    "gemma-3",
    "llava",
    "bakllava",
    "llama3.2-vision",
    "llama-3.2-11b-vision",
    "llama-3.2-90b-vision",
    "llama-4",
    "llama4",
    "qwen-vl",
    "qwen2-vl",
    "qwen2.5-vl",
    "qwen2.5vl",
    "qwen3-vl",
    "qvq",
    "pixtral",
    "mistral-small-3.1",
    "mistral-small-3.2",
    "minicpm-v",
    "moondream",
    "internvl",
    "glm-4v",
    "glm-4.5v",
    "grok-vision",
    "grok-2-vision",
    "grok-4",
    "phi-3-vision",
    "phi-3.5-vision",
    "phi-4-multimodal",
    "kimi-vl",
    "granite3.2-vision",
];

/// Names that contain a vision family's fragment but take no images.
const NOT_VISION: &[&str] = &[
    "audio",
    "transcribe",
    "tts",
    "embedding",
    "realtime",
    "search",
];

/// Whether `model` belongs to a family known to accept image parts.
pub fn model_sees_images(model: &str) -> bool {
    let lower = model.trim().to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    if NOT_VISION.iter().any(|n| name.contains(n)) {
        return false;
    }
    // OpenAI's reasoning models: o1, o3 and o4-mini see images; o1-mini and
    // o3-mini do not.
    let reasoning = ["o1", "o3", "o4"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    });
    if reasoning {
        return !(name.starts_with("o1-mini") || name.starts_with("o3-mini"));
    }
    VISION_FAMILIES.iter().any(|f| name.contains(f))
}

/// Whether the chat model `model` is sent images, under `settings`.
pub fn sees_images(settings: &MediaSettings, model: &str) -> bool {
    settings.vision.unwrap_or_else(|| model_sees_images(model))
}

/// Asks `model` (a client that sends images, [`crate::client::ClientOptions::images`])
/// to describe `image`; `caption` is what the user wrote with it, so the
/// description can dwell on what matters.
pub fn describe(
    model: &dyn Model,
    image: &Attachment,
    caption: &str,
) -> Result<String, ModelError> {
    let text = if caption.trim().is_empty() {
        "Describe this image.".to_owned()
    } else {
        format!(
            "Describe this image. The user sent it with this text: {}",
            caption.trim()
        )
    };
    let entries = [LedgerEntry::new(Message::user_with(
        text,
        vec![image.clone()],
    ))];
    let request = ChatRequest {
        system_prompt: DESCRIBE_PROMPT,
        messages: &entries,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let completion = model.complete(&request, &mut NullSink)?;
    let description = completion
        .content
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            ModelError::new(
                ModelErrorKind::Protocol,
                "the vision model answered with no description",
            )
        })?;
    Ok(description.chars().take(MAX_DESCRIPTION_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_families_see_images_and_text_only_models_do_not() {
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/gpt-4.1-nano",
            "gpt-5",
            "o1",
            "o3",
            "o4-mini",
            "anthropic/claude-3.5-sonnet",
            "claude-sonnet-4-20250514",
            "google/gemini-2.5-flash",
            "llava:13b",
            "llama3.2-vision",
            "qwen2.5vl:7b",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "gemma3:4b",
            "pixtral-12b",
            "meta-llama/llama-4-maverick",
        ] {
            assert!(model_sees_images(m), "{m}");
        }
        for m in [
            "hermes3",
            "nousresearch/hermes-4-70b",
            "gpt-3.5-turbo",
            "o1-mini",
            "o3-mini",
            "gpt-4o-audio-preview",
            "gpt-4o-mini-transcribe",
            "gpt-4o-search-preview",
            "llama3.1:8b",
            "qwen2.5:7b",
            "deepseek-chat",
            "",
        ] {
            assert!(!model_sees_images(m), "{m}");
        }
    }

    #[test]
    fn the_setting_wins_over_the_family() {
        let mut s = MediaSettings::default();
        assert!(!sees_images(&s, "hermes3"));
        s.vision = Some(true);
        assert!(sees_images(&s, "hermes3"));
        s.vision = Some(false);
        assert!(!sees_images(&s, "gpt-4o"));
    }
}
