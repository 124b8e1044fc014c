//! The API server's harness: the OpenAI-compatible endpoint of a real
//! gateway, called as a client calls it (`POST /v1/chat/completions` with
//! the key; each user continues their own session with
//! `x-hermes-session-id`). A request is answered in its response, so only
//! the promises about one turn apply.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::api_server_support::{KEY, call};
use crate::conformance_kit::{
    Access, Capabilities, Harness, Place, Plan, Posted, Said, SaidMark, Sender,
};

pub struct ApiServer {
    port: u16,
    /// Each user's session id, once the server named it.
    sessions: HashMap<usize, String>,
    said: Mutex<Vec<Said>>,
    next: u64,
}

impl ApiServer {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Harness for ApiServer {
    const NAME: &'static str = "api_server";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: 3,
            groups: false,
            threads: false,
            // A request dies with its connection; the client sees it.
            answers_while_down: false,
            replies_point_back: true,
            reply_limit: None,
            rate_limit: false,
            // Every caller with the key is served.
            access: Access::Open,
            photo_in: false,
            voice_in: false,
            file_out: false,
            home_channel: false,
        }
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 0,
            users: 3,
            while_down: 0,
            down_in_first_round: false,
            while_up: 0,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::ZERO,
            graceful_every: 1,
            before_last: 0,
            settle: Duration::ZERO,
        }
    }

    fn start(_: &tokio::runtime::Runtime) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        ApiServer {
            port,
            sessions: HashMap::new(),
            said: Mutex::new(Vec::new()),
            next: 0,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("API_SERVER_ENABLED", "true".to_owned()),
            ("API_SERVER_KEY", KEY.to_owned()),
            ("API_SERVER_HOST", "127.0.0.1".to_owned()),
            ("API_SERVER_PORT", self.port.to_string()),
        ]
    }

    /// One request, answered in its response (recorded for `said`).
    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        assert_eq!(
            place,
            Place::Dm,
            "the API server has one caller per request"
        );
        let Sender::User(user) = from else {
            panic!("the API server serves every caller with the key")
        };
        self.next += 1;
        let id = format!("request-{}", self.next);
        let chat = format!("user-{user}");
        let body =
            json!({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]});
        let session: Vec<(&str, &str)> = self
            .sessions
            .get(&user)
            .map(|s| vec![("x-hermes-session-id", s.as_str())])
            .unwrap_or_default();
        let answer = call(
            "POST",
            &self.url("/v1/chat/completions"),
            Some(KEY),
            Some(body.to_string().as_bytes()),
            &session,
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        if let Some(s) = answer.header("x-hermes-session-id") {
            self.sessions.insert(user, s.to_owned());
        }
        let text = answer.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.said.lock().unwrap().push(Said {
            chat: chat.clone(),
            reply_to: Some(id.clone()),
            text,
            file: None,
        });
        Posted { id, chat }
    }

    fn said(&self) -> Vec<Said> {
        self.said.lock().unwrap().clone()
    }

    /// One log of the answers, in order.
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        let new = self
            .said
            .lock()
            .unwrap()
            .get(mark.seen()..)
            .unwrap_or_default()
            .to_vec();
        mark.advance_append(new)
    }

    fn mark(&self) -> usize {
        0
    }

    /// Up once `/health` answers.
    fn wait_up(&self, _: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !hermes_tests::http::request("GET", &self.url("/health"), None)
            .is_ok_and(|r| r.status == 200)
        {
            assert!(Instant::now() < deadline, "the API server never came up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
