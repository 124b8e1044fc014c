//! [`AnthropicClient`]: the native Anthropic Messages API as a [`Model`],
//! for users who hold only an Anthropic key (`[provider] api = "anthropic"`).
//!
//! It is the same HTTP client as [`OpenAiClient`] — one helper thread per
//! exchange, bounded retries with `Retry-After`, interrupt-aware reading,
//! the same error wording — speaking the other wire format: `POST
//! {base_url}/messages` with `x-api-key` and `anthropic-version`, bodies
//! and event streams through the core's `codec::anthropic`. The loop cannot
//! tell the two apart.

use hermes_core::{ChatRequest, Completion, Model, ModelError, StreamSink};

use super::wire::Wire;
use super::{ClientError, ClientOptions, OpenAiClient};

/// Anthropic's API root, the default base URL of this client.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The Anthropic Messages client. `Send + Sync`; clones share the pool.
#[derive(Clone, Debug)]
pub struct AnthropicClient {
    http: OpenAiClient,
}

impl AnthropicClient {
    /// Validates the options (`base_url` up to and including `/v1`, e.g.
    /// [`ANTHROPIC_BASE_URL`]) and builds the HTTP agent. Does no IO.
    pub fn new(opts: ClientOptions) -> Result<Self, ClientError> {
        Ok(AnthropicClient {
            http: OpenAiClient::with_wire(opts, Wire::AnthropicMessages)?,
        })
    }

    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        self.http.options()
    }

    /// The same provider with another model.
    pub fn with_model(&self, model: &str) -> Self {
        AnthropicClient {
            http: self.http.with_model(model),
        }
    }

    /// `POST {base_url}/messages`, the full URL.
    pub fn chat_url(&self) -> &str {
        self.http.chat_url()
    }

    /// `GET {base_url}/models` (the same `{"data":[{"id":…}]}` listing).
    pub fn list_models(&self) -> Result<Vec<String>, ClientError> {
        self.http.list_models()
    }
}

impl Model for AnthropicClient {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        self.http.complete(request, sink)
    }
}
