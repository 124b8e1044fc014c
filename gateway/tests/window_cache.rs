//! The gateway reads the context-window cache the CLI writes (issue 28): a
//! window resolved by an earlier gateway (or one-shot) on the same store is
//! taken from it, so a restart does not probe the provider again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::runner::AgentFactory;
use hermes_runtime::config::{Environment, Overrides, Settings, load};
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

#[test]
fn a_restarted_gateway_takes_the_window_from_the_store_without_probing() {
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
    let home = tempfile::tempdir().unwrap();
    let settings = settings(home.path(), &provider.base_url());
    let store = Arc::new(Mutex::new(Store::open(&settings.state_db()).unwrap()));

    // The first gateway probes the provider once for the window.
    let first = RuntimeAgentFactory::new(&settings, None)
        .unwrap()
        .with_window_cache(Arc::clone(&store));
    first.build("s1", "fake-model", "prompt").unwrap();
    let probes = provider.auth_headers().len();
    assert_eq!(probes, 2, "GET /models, then GET /props");
    assert!(
        first
            .window_detail("fake-model")
            .unwrap()
            .contains("/props")
    );

    // A restarted gateway (a new factory on the same store): no request.
    let second = RuntimeAgentFactory::new(&settings, None)
        .unwrap()
        .with_window_cache(Arc::clone(&store));
    second.build("s2", "fake-model", "prompt").unwrap();
    assert_eq!(provider.auth_headers().len(), probes);
    assert!(
        second
            .window_detail("fake-model")
            .unwrap()
            .contains("/props")
    );

    // Without the cache (the old behaviour) the provider is probed again:
    // the test above is not passing by accident.
    let uncached = RuntimeAgentFactory::new(&settings, None).unwrap();
    uncached.build("s3", "fake-model", "prompt").unwrap();
    assert_eq!(provider.auth_headers().len(), probes * 2);
}
