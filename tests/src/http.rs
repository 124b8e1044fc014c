//! A plain HTTP client for tests that play the other side (a platform
//! posting callbacks, a user of an emulator's control API): its own ureq
//! agent, nothing shared with the code under test, statuses as answers.

use std::time::Duration;

/// One answer: status and body text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, decoded lossily.
    pub body: String,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
}

/// Sends `method url` with an optional body of `content_type`, blocking.
pub fn request(
    method: &str,
    url: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Result<Answer, ureq::Error> {
    let agent = agent();
    let request = ureq::http::Request::builder().method(method).uri(url);
    let mut response = match body {
        Some((content_type, bytes)) => {
            let request = request
                .header("content-type", content_type)
                .body(bytes)
                .map_err(ureq::Error::Http)?;
            agent.run(request)?
        }
        None => {
            let request = request.body(()).map_err(ureq::Error::Http)?;
            agent.run(request)?
        }
    };
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_vec()?;
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// [`request`] on tokio's blocking pool, awaitable from a test's runtime
/// (the server under test may run on that runtime's own thread).
pub async fn request_async(
    method: &str,
    url: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Result<Answer, ureq::Error> {
    let (method, url) = (method.to_owned(), url.to_owned());
    let body = body.map(|(ct, b)| (ct.to_owned(), b));
    tokio::task::spawn_blocking(move || match body {
        Some((content_type, bytes)) => request(&method, &url, Some((&content_type, bytes))),
        None => request(&method, &url, None),
    })
    .await
    .unwrap_or_else(|e| Err(ureq::Error::Io(std::io::Error::other(e.to_string()))))
}
