//! Discord attachments: a file on a MESSAGE_CREATE becomes media of the
//! event and is downloaded from the (loopback) CDN URL Discord gave, within
//! the size limit, without the bot token; an oversized file — announced or
//! hidden behind a false `size` — and a URL that is not http(s) are refused
//! with a clear error.
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::discord_support;

use std::time::Duration;

use discord_support::{Behaviour, FakeDiscord, TOKEN};
use hermes_discord::{DiscordAdapter, DiscordConfig};
use hermes_gateway::adapter::{AdapterError, PlatformAdapter};
use hermes_gateway::event::{MediaKind, MessageEvent, MessageType};
use hermes_gateway_testing::{collector, recv_within};
use tokio::sync::mpsc;

const ALICE: &str = "111";

async fn connected() -> (
    FakeDiscord,
    DiscordAdapter,
    mpsc::UnboundedReceiver<MessageEvent>,
) {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let mut c = DiscordConfig::new(TOKEN);
    c.api_url = fake.api_url();
    c.connect_timeout = Duration::from_secs(5);
    let adapter = DiscordAdapter::new(c);
    let (handler, rx) = collector();
    adapter.connect(handler).await.unwrap();
    (fake, adapter, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, Duration::from_secs(20))
        .await
        .expect("no event within 20 s")
}

fn png(len: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend((0..len).map(|i| (i % 251) as u8));
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachment_is_downloaded_from_the_cdn_without_the_token() {
    let (fake, adapter, mut rx) = connected().await;
    let bytes = png(4000);
    fake.dm_with_attachment(
        ALICE,
        "what is this?",
        ("cat.png", "image/png", bytes.clone()),
        bytes.len(),
    );
    let event = next(&mut rx).await;
    assert_eq!(event.text, "what is this?");
    assert_eq!(event.message_type, MessageType::Mixed);
    let media = &event.media[0];
    assert_eq!(media.kind, MediaKind::Image);
    assert_eq!(media.size, Some(bytes.len() as u64));
    let fetched = adapter.fetch_media(media, 1 << 20).await.unwrap();
    assert_eq!(fetched.bytes, bytes);
    assert_eq!(fetched.mime_type.as_deref(), Some("image/png"));
    assert_eq!(fetched.file_name.as_deref(), Some("cat.png"));
    let cdn = fake.cdn_requests();
    assert_eq!(cdn.len(), 1);
    assert!(
        !cdn[0].1.contains(TOKEN) && cdn[0].1.is_empty(),
        "the bot token went to the CDN"
    );
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_hostile_attachments_are_refused_cleanly() {
    let (fake, adapter, mut rx) = connected().await;
    let limit = 10_000u64;

    // Announced as too large: refused before any download.
    let big = png(20_000);
    fake.dm_with_attachment(
        ALICE,
        "big",
        ("big.png", "image/png", big.clone()),
        big.len(),
    );
    let event = next(&mut rx).await;
    let err = adapter
        .fetch_media(&event.media[0], limit)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AdapterError::Rejected { message, .. } if message.contains("larger than 10000")),
        "{err}"
    );
    assert!(fake.cdn_requests().is_empty(), "nothing was downloaded");

    // Announced small, served large: the read stops at the limit.
    fake.dm_with_attachment(
        ALICE,
        "liar",
        ("liar.bin", "application/octet-stream", png(50_000)),
        10,
    );
    let event = next(&mut rx).await;
    assert_eq!(event.media[0].kind, MediaKind::Document);
    let err = adapter
        .fetch_media(&event.media[0], limit)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AdapterError::Rejected { message, .. } if message.contains("larger than 10000")),
        "{err}"
    );
    assert_eq!(fake.cdn_requests().len(), 1);

    // Not an http(s) URL: never opened.
    let mut local = event.media[0].clone();
    local.handle = "file:///etc/passwd".to_owned();
    let err = adapter.fetch_media(&local, limit).await.unwrap_err();
    assert!(
        matches!(&err, AdapterError::Rejected { message, .. } if message.contains("http(s)")),
        "{err}"
    );

    // Gone from the CDN: an error, not empty bytes.
    let mut gone = event.media[0].clone();
    gone.handle = gone.handle.replace("liar.bin", "missing.bin");
    gone.size = None;
    assert!(adapter.fetch_media(&gone, limit).await.is_err());
    adapter.disconnect().await;
}
