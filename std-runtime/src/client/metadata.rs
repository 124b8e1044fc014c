//! Small JSON requests to a provider's metadata endpoints (`/models`,
//! llama.cpp's `/props`, Ollama's `/api/show`), for the context window
//! (SPEC X1) and `hermes doctor`.
//!
//! One attempt, short timeouts, no retries: this is a probe made once per
//! model and process, and a provider that does not answer it quickly is
//! simply asked the next way (or not at all).

use std::time::Duration;

use hermes_core::{ModelError, ModelErrorKind};

use super::{ClientError, MAX_BODY_BYTES, OpenAiClient};

/// The most of an error answer read (and dropped) to keep its connection.
const MAX_PROBE_ERROR_BYTES: u64 = 64 * 1024;

impl OpenAiClient {
    /// The provider's base URL without a trailing `/`, e.g.
    /// `http://127.0.0.1:8080/v1`.
    pub fn base_url(&self) -> &str {
        self.chat
            .url
            .strip_suffix("/chat/completions")
            .unwrap_or(&self.chat.url)
    }

    /// The server's root: the base URL without a final `/v1` (where
    /// llama.cpp serves `/props` and Ollama `/api/…`).
    pub fn server_root(&self) -> &str {
        let base = self.base_url();
        base.strip_suffix("/v1").unwrap_or(base)
    }

    /// `GET url` (or `POST url` with `body`) with this client's headers,
    /// bounded by `timeout` for connecting and for each read, parsed as
    /// JSON. Any non-2xx status, transport failure or non-JSON body is an
    /// error.
    pub fn fetch_json(
        &self,
        url: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<serde_json::Value, ClientError> {
        let agent = crate::http::agent();
        // Messages name the URL with any credentials in it masked.
        let shown = crate::redact::redact_url(url);
        let failed =
            |what: String| ClientError::Model(ModelError::new(ModelErrorKind::Transport, what));
        macro_rules! configured {
            ($builder:expr) => {{
                let mut req = $builder
                    .config()
                    .timeout_resolve(Some(timeout))
                    .timeout_connect(Some(timeout))
                    .timeout_per_read(Some(timeout))
                    .timeout_per_write(Some(timeout))
                    .build();
                for (name, value) in self.headers.iter() {
                    req = req.header(name.clone(), value.clone());
                }
                req
            }};
        }
        let response = crate::http::send_fresh_if_stale(|| match body {
            Some(body) => configured!(agent.post(url)).send(body.to_string().as_bytes()),
            None => configured!(agent.get(url)).call(),
        })
        .map_err(|e| failed(self.scrubbed(format!("request to {shown} failed: {e}"))))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            // Read a short error body through, so the connection goes back
            // to the pool (a probe's 404 is the common answer).
            let _ = response
                .into_body()
                .with_config()
                .limit(MAX_PROBE_ERROR_BYTES)
                .read_to_vec();
            return Err(ClientError::Model(ModelError::new(
                ModelErrorKind::Status(status),
                format!("HTTP {status} from {shown}"),
            )));
        }
        let bytes = response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES as u64)
            .read_to_vec()
            .map_err(|e| failed(format!("reading the answer of {shown} failed: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ClientError::Model(ModelError::new(
                ModelErrorKind::Protocol,
                format!("the answer of {shown} is not JSON: {e}"),
            ))
        })
    }
}
