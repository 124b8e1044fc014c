//! WhatsApp's harness: the fake Cloud API (`whatsapp_support`) POSTs signed
//! webhooks to the gateway's listener on a fixed loopback port and retries
//! each until it is answered 200, as Meta does — which is how what users
//! wrote while no gateway ran reaches the next one.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, SaidMark, Sender, SentFile,
};
use crate::whatsapp_support::{
    APP_SECRET, FakeCloudApi, PHONE_ID, Sent, TOKEN, VERIFY_TOKEN, image_of_type, text,
    user_message, voice,
};

const USERS: [&str; 3] = ["15550000101", "15550000102", "15550000103"];
const STRANGER: &str = "15550000666";
/// The longest wait between two attempts at a webhook.
const RETRY_CAP: Duration = Duration::from_millis(200);

pub struct WhatsApp {
    fake: FakeCloudApi,
    rt: tokio::runtime::Handle,
    webhook: SocketAddr,
    next_id: u64,
}

impl WhatsApp {
    fn number(from: Sender) -> &'static str {
        match from {
            Sender::User(n) => USERS[n],
            Sender::Stranger => STRANGER,
        }
    }

    fn post(
        &mut self,
        from: Sender,
        place: Place,
        wamid: String,
        message: serde_json::Value,
    ) -> Posted {
        assert_eq!(place, Place::Dm, "the Cloud API adapter serves DMs only");
        let number = Self::number(from);
        let _guard = self.rt.enter();
        self.fake
            .deliver_until_accepted(user_message(number, "Conformance", message), RETRY_CAP);
        Posted {
            id: wamid,
            chat: number.to_owned(),
        }
    }

    fn wamid(&mut self) -> String {
        self.next_id += 1;
        format!("wamid.CONF{:08}", self.next_id)
    }

    /// One message the fake accepted, as the suite reads it.
    fn said_of(&self, s: Sent) -> Said {
        Said {
            file: s.media_id.as_deref().and_then(|id| {
                self.fake
                    .upload_of(id)
                    .map(|(name, bytes)| SentFile { name, bytes })
            }),
            chat: s.to,
            reply_to: s.context,
            text: s.text,
        }
    }
}

impl Harness for WhatsApp {
    const NAME: &'static str = "whatsapp";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: false,
            threads: false,
            // Meta retries a webhook until the endpoint answers 200.
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(4096),
            rate_limit: true,
            access: Access::AllowList,
            photo_in: true,
            voice_in: true,
            file_out: true,
            home_channel: true,
        }
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 30,
            users: USERS.len(),
            // Written while no gateway listens: Meta's retries bring them.
            while_down: 2,
            down_in_first_round: true,
            while_up: 0,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::from_millis(900),
            graceful_every: 7,
            before_last: 0,
            settle: Duration::ZERO,
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        let fake = rt.block_on(FakeCloudApi::start());
        // A fixed port every gateway of the test binds in turn.
        let webhook = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        fake.set_webhook(webhook);
        WhatsApp {
            fake,
            rt: rt.handle().clone(),
            webhook,
            next_id: 0,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("WHATSAPP_ACCESS_TOKEN", TOKEN.to_owned()),
            ("WHATSAPP_PHONE_NUMBER_ID", PHONE_ID.to_owned()),
            ("WHATSAPP_APP_SECRET", APP_SECRET.to_owned()),
            ("WHATSAPP_VERIFY_TOKEN", VERIFY_TOKEN.to_owned()),
            ("WHATSAPP_API_URL", self.fake.url.clone()),
            ("WHATSAPP_WEBHOOK_PORT", self.webhook.port().to_string()),
            ("WHATSAPP_ALLOWED_USERS", USERS.join(",")),
            ("WHATSAPP_HOME_CHANNEL", USERS[0].to_owned()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, words: &str) -> Posted {
        let wamid = self.wamid();
        let number = Self::number(from);
        let message = text(number, &wamid, words);
        self.post(from, place, wamid, message)
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        let wamid = self.wamid();
        let number = Self::number(from);
        let media_id = format!("{}", 700_000 + self.next_id);
        let message = match media {
            Media::Photo { png, caption } => {
                self.fake.add_media(&media_id, "image/png", png);
                image_of_type(number, &wamid, &media_id, caption, "image/png")
            }
            Media::Voice { ogg } => {
                self.fake.add_media(&media_id, "audio/ogg", ogg);
                voice(number, &wamid, &media_id)
            }
        };
        self.post(from, place, wamid, message)
    }

    fn said(&self) -> Vec<Said> {
        self.fake
            .sent()
            .into_iter()
            .map(|s| self.said_of(s))
            .collect()
    }

    /// The fake keeps one log of what it accepted, in order.
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        let new = self.fake.sent_since(mark.seen());
        mark.advance_append(new.into_iter().map(|s| self.said_of(s)).collect())
    }

    fn mark(&self) -> usize {
        0
    }

    /// Up once its webhook listener answers.
    fn wait_up(&self, _mark: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, _) = self
                .rt
                .block_on(crate::whatsapp_support::get(self.webhook, "/health"));
            if status == 200 {
                return;
            }
            assert!(Instant::now() < deadline, "the gateway never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn throttle(&mut self, sends: usize) {
        self.fake.rate_limit_next(sends);
    }

    fn throttled(&self) -> usize {
        self.fake.rate_limited()
    }

    fn home_chat(&self) -> String {
        USERS[0].to_owned()
    }
}
