//! The wire formats the provider client speaks: OpenAI chat completions, or
//! the Anthropic Messages API. Everything else about a call — the HTTP
//! exchange on a helper thread, retries, deadlines, interrupts, error
//! naming — is the same for both, so it lives once in the client; this
//! module only picks the path, the auth headers and the core's codec.

use hermes_core::codec::anthropic::{
    MessagesOptions, MessagesStreamDecoder, decode_messages_response, encode_messages_request,
};
use hermes_core::codec::request::{Reasoning, RequestEncoder, RequestOptions, encode_request_with};
use hermes_core::codec::response::decode_response;
use hermes_core::codec::{DecodeError, EncodeError};
use hermes_core::codec::{SseDecoder, SseStatus};
use hermes_core::{AttachmentResolver, ChatRequest, Completion, StreamSink};
use ureq::http::{HeaderName, HeaderValue};

use super::ClientOptions;
use super::options::ReasoningDialect;

/// The `anthropic-version` header every Messages call carries.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Which API a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// `POST {base}/chat/completions`, `Authorization: Bearer`.
    OpenAiChat,
    /// `POST {base}/messages`, `x-api-key` and `anthropic-version`.
    AnthropicMessages,
}

impl Wire {
    /// The path appended to the base URL for a chat call.
    pub(crate) fn chat_path(self) -> &'static str {
        match self {
            Wire::OpenAiChat => "/chat/completions",
            Wire::AnthropicMessages => "/messages",
        }
    }

    /// The headers that authenticate (and version) a call with `key`.
    pub(crate) fn auth_headers(
        self,
        key: Option<&str>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let bad_key =
            || "the API key contains characters that cannot be sent in an HTTP header".to_owned();
        let mut headers = Vec::new();
        match self {
            Wire::OpenAiChat => {
                if let Some(key) = key {
                    let mut value =
                        HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| bad_key())?;
                    value.set_sensitive(true);
                    headers.push((ureq::http::header::AUTHORIZATION, value));
                }
            }
            Wire::AnthropicMessages => {
                if let Some(key) = key {
                    let mut value = HeaderValue::from_str(key).map_err(|_| bad_key())?;
                    value.set_sensitive(true);
                    headers.push((HeaderName::from_static("x-api-key"), value));
                }
                headers.push((
                    HeaderName::from_static("anthropic-version"),
                    HeaderValue::from_static(ANTHROPIC_VERSION),
                ));
            }
        }
        Ok(headers)
    }

    /// The request body for `request` with the client's settings, streamed
    /// or not; `attachments` says how images are sent (SPEC X6: the OpenAI
    /// wire sends image parts, the Anthropic wire their text references).
    pub(crate) fn encode(
        self,
        opts: &ClientOptions,
        stream: bool,
        request: &ChatRequest<'_>,
        attachments: &dyn AttachmentResolver,
        encoder: Option<&mut RequestEncoder>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        match self {
            Wire::OpenAiChat => {
                let reasoning =
                    opts.reasoning_effort
                        .as_deref()
                        .map(|effort| match opts.reasoning_dialect {
                            ReasoningDialect::OpenAi => Reasoning::Effort(effort),
                            ReasoningDialect::OpenRouter => Reasoning::OpenRouter(effort),
                        });
                let wire = RequestOptions {
                    model: &opts.model,
                    stream,
                    max_tokens: opts.max_tokens,
                    temperature: opts.temperature,
                    include_usage: stream,
                    cache: opts.cache,
                    reasoning,
                    reasoning_echo: opts.reasoning_echo,
                };
                // What the encoder keeps is the plain system prompt and tools;
                // a request with attachments goes through the resolver.
                let plain = request
                    .messages
                    .iter()
                    .all(|e| e.message.attachments().is_empty());
                match encoder {
                    Some(encoder) if plain => encoder.encode(&wire, request, out),
                    _ => encode_request_with(&wire, request, attachments, out),
                }
            }
            Wire::AnthropicMessages => {
                let wire = MessagesOptions {
                    model: &opts.model,
                    stream,
                    max_tokens: opts.max_tokens,
                    temperature: opts.temperature,
                    cache: opts.cache,
                    thinking_budget: opts.reasoning_effort.as_deref().and_then(thinking_budget),
                };
                encode_messages_request(&wire, request, out)
            }
        }
    }

    /// Decodes a whole (non-streaming) answer.
    pub(crate) fn decode_body(self, body: &[u8]) -> Result<Completion, DecodeError> {
        match self {
            Wire::OpenAiChat => decode_response(body),
            Wire::AnthropicMessages => decode_messages_response(body),
        }
    }

    /// A decoder for a streamed answer.
    pub(crate) fn stream_decoder(self) -> StreamDecoder {
        match self {
            Wire::OpenAiChat => StreamDecoder::OpenAi(SseDecoder::new()),
            Wire::AnthropicMessages => StreamDecoder::Anthropic(MessagesStreamDecoder::new()),
        }
    }
}

/// Anthropic's extended-thinking budget for a reasoning effort (`None`:
/// thinking off).
pub(crate) fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16_384),
        "xhigh" | "max" => Some(32_000),
        _ => None,
    }
}

/// The stream decoder of either format.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StreamDecoder {
    OpenAi(SseDecoder),
    Anthropic(MessagesStreamDecoder),
}

impl StreamDecoder {
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<SseStatus, DecodeError> {
        match self {
            StreamDecoder::OpenAi(d) => d.feed(bytes, sink),
            StreamDecoder::Anthropic(d) => d.feed(bytes, sink),
        }
    }

    pub(crate) fn partial(&self) -> Completion {
        match self {
            StreamDecoder::OpenAi(d) => d.partial(),
            StreamDecoder::Anthropic(d) => d.partial(),
        }
    }

    pub(crate) fn finish(self) -> Result<Completion, DecodeError> {
        match self {
            StreamDecoder::OpenAi(d) => d.finish(),
            StreamDecoder::Anthropic(d) => d.finish(),
        }
    }
}
