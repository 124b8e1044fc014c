//! The checks before serving, against the loopback fake Discord: the
//! adapter's `check_bot` (what `--check` and `gateway setup` ask) and
//! `hermes doctor`'s lines, which come from the registry's descriptor.

use std::sync::Arc;

use hermes_discord::check_bot;

use super::config;
use crate::discord_support::{self, Behaviour, FakeDiscord, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_validates_the_token_and_the_intents() {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let c = config(&fake);
    let ok = tokio::task::spawn_blocking(move || check_bot(&c))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ok.id.as_str(), ok.message_content),
        (discord_support::BOT_ID, Some(true))
    );
    let fake_off = FakeDiscord::start(Behaviour {
        message_content_enabled: false,
        ..Behaviour::default()
    })
    .await;
    let c = config(&fake_off);
    let off = tokio::task::spawn_blocking(move || check_bot(&c))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(off.message_content, Some(false));
    assert!(
        off.describe().contains("MESSAGE CONTENT INTENT"),
        "{}",
        off.describe()
    );
    let mut c = config(&fake);
    c.token = "OTAw.nope.x".into();
    let err = tokio::task::spawn_blocking(move || check_bot(&c))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.contains("DISCORD_BOT_TOKEN") && !err.contains("nope"),
        "{err}"
    );
}

/// `hermes doctor`'s Discord lines come from the registry's descriptor
/// (issue 40): the token asked live, the MESSAGE CONTENT switch named with
/// where to turn it on, nothing when Discord is not configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lines_come_from_the_descriptor() {
    use hermes_gateway::platform::{DoctorLine, find};
    use hermes_runtime::config::{Environment, Overrides, load};
    let home = tempfile::tempdir().unwrap();
    let doctor = move |vars: Vec<(&'static str, String)>| -> Vec<DoctorLine> {
        let mut pairs = vec![("HERMES_HOME", home.path().display().to_string())];
        pairs.extend(vars);
        let overrides = Overrides {
            workdir: Some(home.path().to_owned()),
            ..Overrides::default()
        };
        let settings = load(&overrides, &Environment::from_pairs(pairs)).unwrap();
        (find("discord").unwrap().doctor)(&settings)
    };
    let doctor = Arc::new(doctor);
    let ask = |vars: Vec<(&'static str, String)>| {
        let doctor = Arc::clone(&doctor);
        tokio::task::spawn_blocking(move || doctor(vars))
    };
    assert_eq!(
        ask(vec![]).await.unwrap(),
        vec![],
        "not configured: no line"
    );
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let vars = |fake: &FakeDiscord, token: &str| {
        vec![
            ("DISCORD_BOT_TOKEN", token.to_owned()),
            ("DISCORD_API_URL", fake.api_url()),
        ]
    };
    let ok = ask(vars(&fake, TOKEN)).await.unwrap();
    assert!(ok.len() == 1 && ok[0].ok, "{ok:?}");
    let fake_off = FakeDiscord::start(Behaviour {
        message_content_enabled: false,
        ..Behaviour::default()
    })
    .await;
    let off = ask(vars(&fake_off, TOKEN)).await.unwrap();
    assert!(off.len() == 1 && !off[0].ok, "{off:?}");
    assert_eq!(off[0].fix, hermes_discord::ENABLE_INTENT);
    let refused = ask(vars(&fake, "OTAw.nope.x")).await.unwrap();
    assert!(
        !refused[0].ok && refused[0].fix.contains("DISCORD_BOT_TOKEN"),
        "{refused:?}"
    );
}
