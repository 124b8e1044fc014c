//! Downloading a turn's media through the adapters (SPEC X6), before the
//! turn runs: announced sizes are checked first, every download is bounded
//! by `[gateway] max_file_mb` and a deadline, and each failure becomes a
//! sentence for the user ([`crate::media`] says what happens next).

use std::collections::HashMap;
use std::time::Duration;

use super::{Inner, lock};
use crate::adapter::{AdapterError, PlatformAdapter};
use crate::event::MediaRef;
use crate::media::{Download, human_size};

/// One download's deadline.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

impl Inner {
    /// The downloads of every message this turn transcribes that came with
    /// media, by inbox id; nothing when the factory processes no media.
    pub(super) async fn fetch_media(&self, key: &str, upto: u64) -> HashMap<u64, Vec<Download>> {
        let mut out = HashMap::new();
        if self.agents.factory.media().is_none() {
            return out;
        }
        let pending = lock(&self.inbox).upto(key, upto);
        let max = self.config.max_file_bytes;
        for p in pending.into_iter().filter(|p| !p.media.is_empty()) {
            let adapter = self.delivery.adapter(p.platform.as_str());
            let mut downloads = Vec::with_capacity(p.media.len());
            for media in p.media {
                let result = match adapter {
                    Some(a) => fetch_one(&**a, &media, max).await,
                    None => Err(format!("the {} adapter is not running", p.platform)),
                };
                downloads.push(Download { media, result });
            }
            out.insert(p.id, downloads);
        }
        out
    }
}

/// Downloads one medium, or says why not in words for the user.
async fn fetch_one(
    adapter: &dyn PlatformAdapter,
    media: &MediaRef,
    max: u64,
) -> Result<crate::adapter::FetchedMedia, String> {
    let too_large = |size: u64| {
        format!(
            "it is {}, more than the {} this gateway accepts ([gateway] max_file_mb)",
            human_size(size),
            human_size(max)
        )
    };
    if let Some(size) = media.size.filter(|s| *s > max) {
        return Err(too_large(size));
    }
    let fetched =
        match tokio::time::timeout(DOWNLOAD_TIMEOUT, adapter.fetch_media(media, max)).await {
            Err(_) => {
                return Err(format!(
                    "the download took longer than {} s",
                    DOWNLOAD_TIMEOUT.as_secs()
                ));
            }
            Ok(Err(e)) => return Err(words(&e)),
            Ok(Ok(f)) => f,
        };
    let size = fetched.bytes.len() as u64;
    if size > max {
        return Err(too_large(size));
    }
    if size == 0 {
        return Err("the download was empty".to_owned());
    }
    Ok(fetched)
}

/// An adapter error as the user reads it (the platform name is not news
/// to them).
fn words(e: &AdapterError) -> String {
    match e {
        AdapterError::Rejected { message, .. } | AdapterError::Network { message, .. } => {
            message.clone()
        }
        AdapterError::Unsupported { what, .. } => format!("{what} is not supported here"),
        other => other.to_string(),
    }
}
