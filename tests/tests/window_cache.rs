//! The context window cached in the store (issue 28): resolved once, then
//! taken from the store by later processes for a day, and replaced by a
//! limit a context-length error taught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_core::context::WindowSource;
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::config::{Environment, Overrides, Settings, load};
use hermes_runtime::context::Windows;
use hermes_runtime::store::Store;
use hermes_tests::{Advertise, FakeProvider, Overflow, Window};

fn settings(home: &std::path::Path, base_url: &str) -> Settings {
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.display().to_string()),
        ("HERMES_BASE_URL", base_url.to_owned()),
        ("HERMES_MODEL", "fake-model".to_owned()),
    ]);
    let overrides = Overrides {
        workdir: Some(home.to_path_buf()),
        ..Overrides::default()
    };
    load(&overrides, &env).unwrap()
}

fn client(base_url: &str) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: base_url.to_owned(),
        model: "fake-model".into(),
        ..ClientOptions::default()
    })
    .unwrap()
}

#[test]
fn a_window_is_probed_once_then_read_from_the_store_and_a_learned_one_replaces_it() {
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: 5_000,
            overflow: Overflow::LlamaCpp,
            advertise: Advertise::Props,
        }),
        None,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path(), &provider.base_url());
    let client = client(&provider.base_url());
    let store = Arc::new(Mutex::new(
        Store::open(&dir.path().join("state.db")).unwrap(),
    ));

    let first = Windows::with_store(Arc::clone(&store));
    let window = first.get(&settings, &client, "fake-model");
    assert_eq!(
        (window.tokens(), window.source()),
        (5_000, WindowSource::Provider)
    );
    let probes = provider.auth_headers().len();
    assert_eq!(probes, 2, "GET /models, then GET /props");

    // A later process: no request at all.
    let second = Windows::with_store(Arc::clone(&store));
    let window = second.get(&settings, &client, "fake-model");
    assert_eq!(
        (window.tokens(), window.source()),
        (5_000, WindowSource::Provider)
    );
    assert_eq!(provider.auth_headers().len(), probes);
    assert!(
        second
            .info(client.base_url(), "fake-model")
            .unwrap()
            .detail
            .contains("/props"),
    );

    // A context-length error teaches a smaller limit; it is kept.
    window.learn(4_000);
    second.record_learned();
    let third = Windows::with_store(Arc::clone(&store));
    let window = third.get(&settings, &client, "fake-model");
    assert_eq!(
        (window.tokens(), window.source()),
        (4_000, WindowSource::Learned)
    );
    assert_eq!(provider.auth_headers().len(), probes);

    // `hermes doctor` asks again and refreshes the entry.
    let info = third.refresh(&settings, &client, "fake-model");
    assert_eq!((info.tokens, info.source), (5_000, WindowSource::Provider));
    assert_eq!(provider.auth_headers().len(), probes + 2);
    let fourth = Windows::with_store(store);
    assert_eq!(fourth.get(&settings, &client, "fake-model").tokens(), 5_000);

    // Without a store every process probes.
    Windows::new().get(&settings, &client, "fake-model");
    assert_eq!(provider.auth_headers().len(), probes + 4);
}
