//! What the transcription and the speech clients share: one `POST` to an
//! OpenAI-compatible audio service, and the message of its error.

use crate::secret::Secret;

/// One `POST` of `body` to an OpenAI-compatible audio endpoint (`url`):
/// the process's one HTTP agent with the service's deadline, the key as a
/// bearer token when there is one, a fresh connection when a pooled one
/// turns out stale.
pub(super) fn post_to_service(
    url: &str,
    timeout: std::time::Duration,
    api_key: Option<&Secret>,
    content_type: &str,
    body: &[u8],
) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    crate::http::send_fresh_if_stale(|| {
        let mut request = crate::http::agent()
            .post(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", content_type);
        if let Some(key) = api_key.map(Secret::expose) {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        request.send(body)
    })
}

/// The `error.message` of an OpenAI-style error body (or the `error`,
/// `message` or `detail` string local servers answer with), else its start.
///
pub(super) fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("error"))
                .or_else(|| v.get("message"))
                .or_else(|| v.get("detail"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(200).collect())
}
