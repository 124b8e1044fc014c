//! Downloading a file a chat platform holds (SPEC X6): one bounded GET
//! with ureq. What a platform's file URL may carry (Telegram's bot token,
//! an access token) never reaches an error message.

use std::time::Duration;

use crate::http::describe;

/// A downloaded file.
#[derive(Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// The body.
    pub bytes: Vec<u8>,
    /// `Content-Type`, if given.
    pub content_type: Option<String>,
    /// The file name of `Content-Disposition`, if given.
    pub file_name: Option<String>,
}

impl std::fmt::Debug for Downloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloaded")
            .field("bytes", &self.bytes.len())
            .field("content_type", &self.content_type)
            .field("file_name", &self.file_name)
            .finish()
    }
}

/// Why a download failed. No variant carries the URL.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The server could not be reached or the transfer broke.
    #[error("the download failed: {0}")]
    Network(String),
    /// The server answered with an error status.
    #[error("the download failed with HTTP {0}")]
    Status(u16),
    /// The file is larger than the caller accepts.
    #[error("the file is larger than {0} bytes")]
    TooLarge(u64),
}

/// `GET url`, the body read up to `max_bytes` (a longer one is an error,
/// never buffered whole), within `timeout` for the whole exchange.
pub fn download(url: &str, max_bytes: u64, timeout: Duration) -> Result<Downloaded, DownloadError> {
    // The process's one HTTP agent (one pool, one TLS stack; `crate::http`),
    // with this download's deadline.
    let mut response = crate::http::send_fresh_if_stale(|| {
        crate::http::agent()
            .get(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
    })
    .map_err(|e| DownloadError::Network(describe(&e)))?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(DownloadError::Status(status));
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type");
    let file_name = header("content-disposition").and_then(|d| disposition_file_name(&d));
    if let Some(len) = header("content-length").and_then(|l| l.trim().parse::<u64>().ok())
        && len > max_bytes
    {
        return Err(DownloadError::TooLarge(max_bytes));
    }
    let bytes = response
        .body_mut()
        .with_config()
        .limit(max_bytes)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => DownloadError::TooLarge(max_bytes),
            other => DownloadError::Network(describe(&other)),
        })?;
    Ok(Downloaded {
        bytes,
        content_type,
        file_name,
    })
}

/// The `filename` of a `Content-Disposition` header (`filename*=UTF-8''…`
/// percent-decoded), if any.
pub fn disposition_file_name(header: &str) -> Option<String> {
    let mut plain = None;
    for part in header.split(';').map(str::trim) {
        let Some((key, value)) = part.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim().trim_matches('"');
        if key == "filename*" {
            let encoded = value.split_once("''").map_or(value, |(_, v)| v);
            if let Some(decoded) = crate::text::percent_decode(encoded) {
                return Some(decoded).filter(|n| !n.is_empty());
            }
        } else if key == "filename" {
            plain = Some(value.to_owned()).filter(|n| !n.is_empty());
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_from_content_disposition() {
        assert_eq!(
            disposition_file_name("attachment; filename=\"a b.jpg\"").as_deref(),
            Some("a b.jpg")
        );
        assert_eq!(
            disposition_file_name(
                "attachment; filename=x.pdf; filename*=UTF-8''%E6%8A%A5%E5%91%8A.pdf"
            )
            .as_deref(),
            Some("报告.pdf")
        );
        // Parameter names are case-insensitive (WeCom's media/get).
        assert_eq!(
            disposition_file_name("attachment;FILENAME=x.amr").as_deref(),
            Some("x.amr")
        );
        assert_eq!(disposition_file_name("inline"), None);
    }
}
