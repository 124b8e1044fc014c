//! WeCom self-built app's harness: the gateway's callback server receives
//! WeCom's signed, encrypted XML (`wecom_callback_support::WeCom` seals it
//! as WeCom does) and answers through the loopback qyapi fake
//! (`FakeQyApi`, `message/send`). Only direct messages exist; replies are
//! new messages to the user (they point at nothing).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::conformance_kit::{
    Access, Capabilities, Capability, Harness, Place, Plan, Posted, Said, SaidMark, Sender,
};
use crate::wecom_callback_support::{AES_KEY, AGENT, CORP, FakeQyApi, SECRET, TOKEN, WeCom};

/// One message the app sent, as the suite reads it.
fn said_of(s: crate::wecom_callback_support::Sent) -> Said {
    Said {
        chat: s.touser,
        reply_to: None,
        text: s.content,
        file: None,
    }
}

const USERS: [&str; 3] = ["zhangsan", "lisi", "wangwu"];
const STRANGER: &str = "stranger";

pub struct WecomCallback {
    rt: tokio::runtime::Handle,
    qyapi: FakeQyApi,
    addr: SocketAddr,
    wecom: WeCom,
}

static NEXT: AtomicU64 = AtomicU64::new(900_000);

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Harness for WecomCallback {
    const NAME: &'static str = "wecom_callback";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: false,
            threads: false,
            // WeCom posts each callback to a server that must be up (its
            // few quick retries are not a queue).
            answers_while_down: false,
            replies_point_back: false,
            reply_limit: Some(2048),
            rate_limit: true,
            access: Access::Pairing,
            photo_in: true,
            voice_in: true,
            file_out: false,
            home_channel: false,
        }
    }

    fn uncovered() -> &'static [Capability] {
        &[
            Capability::RateLimit,
            Capability::PhotoIn,
            Capability::VoiceIn,
        ]
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 8,
            users: USERS.len(),
            while_down: 0,
            down_in_first_round: false,
            while_up: 2,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::from_millis(900),
            graceful_every: 5,
            before_last: 0,
            settle: Duration::from_millis(500),
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        let qyapi = rt.block_on(FakeQyApi::start());
        // A free port for the gateways' callback server (bound and
        // released; loopback only).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        WecomCallback {
            rt: rt.handle().clone(),
            qyapi,
            addr,
            wecom: WeCom::new(addr, "/wecom/callback"),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("WECOM_CALLBACK_CORP_ID", CORP.to_owned()),
            ("WECOM_CALLBACK_CORP_SECRET", SECRET.to_owned()),
            ("WECOM_CALLBACK_AGENT_ID", AGENT.to_string()),
            ("WECOM_CALLBACK_TOKEN", TOKEN.to_owned()),
            ("WECOM_CALLBACK_ENCODING_AES_KEY", AES_KEY.to_owned()),
            ("WECOM_CALLBACK_HOST", "127.0.0.1".to_owned()),
            ("WECOM_CALLBACK_PORT", self.addr.port().to_string()),
            ("WECOM_CALLBACK_API_URL", self.qyapi.url.clone()),
            ("WECOM_CALLBACK_ALLOWED_USERS", USERS.join(",")),
        ]
    }

    /// WeCom's POST of the callback; it must be taken (200).
    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        assert_eq!(
            place,
            Place::Dm,
            "a self-built app has direct messages only"
        );
        let user = match from {
            Sender::User(n) => USERS[n],
            Sender::Stranger => STRANGER,
        };
        let id = NEXT.fetch_add(1, Ordering::Relaxed).to_string();
        let (status, body) = self.rt.block_on(self.wecom.say(user, text, &id, now_s()));
        assert_eq!(status, 200, "the callback was refused: {body}");
        Posted {
            id,
            chat: user.to_owned(),
        }
    }

    fn said(&self) -> Vec<Said> {
        self.qyapi.sent().into_iter().map(said_of).collect()
    }

    /// The fake keeps one log of what the app sent, in order.
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        let new = self.qyapi.sent_since(mark.seen());
        mark.advance_append(new.into_iter().map(said_of).collect())
    }

    fn mark(&self) -> usize {
        0
    }

    /// Up once its callback server answers `/health` (the previous gateway
    /// is gone by then: the suite waits for it to exit).
    fn wait_up(&self, _: usize) {
        let health = format!("http://{}/health", self.addr);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !hermes_tests::http::request("GET", &health, None).is_ok_and(|r| r.status == 200) {
            assert!(
                Instant::now() < deadline,
                "the callback server never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
