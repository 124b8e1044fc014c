//! Test support for the WeCom callback adapter: a loopback fake of the
//! qyapi REST API that checks WeCom's rules on every request, and a client
//! playing WeCom's side of the callback (encrypts, signs, POSTs).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_wecom_callback::crypto::CallbackCrypto;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub const CORP: &str = "ww1436e0e65a779aee";
pub const SECRET: &str = "corp-secret-NOT-FOR-LOGS";
pub const AGENT: i64 = 1_000_002;
pub const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
pub const AES_KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";

/// One `message/send` the fake accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub touser: String,
    pub msgtype: String,
    pub content: String,
}

#[derive(Debug, Default)]
struct State {
    /// Tokens issued, and whether each is still valid.
    tokens: HashMap<String, bool>,
    issued: usize,
    expires_in: u64,
    sent: Vec<Sent>,
    /// errcodes to answer the next sends with, in order.
    send_faults: VecDeque<i64>,
    /// errcodes `message/send` answered, in order (0 = ok).
    send_answers: Vec<i64>,
    violations: Vec<String>,
    media: HashMap<String, (String, Vec<u8>)>,
}

/// The fake qyapi.
#[derive(Clone)]
pub struct FakeQyApi {
    pub url: String,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl FakeQyApi {
    pub async fn start() -> FakeQyApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = FakeQyApi {
            url: format!("http://{addr}"),
            state: Arc::new(Mutex::new(State {
                expires_in: 7200,
                ..State::default()
            })),
            changed: Arc::new(Notify::new()),
        };
        let f = fake.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let f = f.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let f = f.clone();
                        async move { Ok::<_, Infallible>(f.serve(req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        fake
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `expires_in` of tokens issued from now on.
    pub fn set_expires_in(&self, s: u64) {
        self.state().expires_in = s;
    }

    /// Makes every token issued so far invalid (as after WeCom expired it).
    pub fn expire_tokens(&self) {
        for valid in self.state().tokens.values_mut() {
            *valid = false;
        }
    }

    /// Answers the next sends with these errcodes (then normally).
    pub fn fail_sends(&self, errcodes: &[i64]) {
        self.state().send_faults.extend(errcodes);
    }

    pub fn add_media(&self, id: &str, content_type: &str, bytes: &[u8]) {
        self.state()
            .media
            .insert(id.to_owned(), (content_type.to_owned(), bytes.to_vec()));
    }

    pub fn tokens_issued(&self) -> usize {
        self.state().issued
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state().sent.clone()
    }

    /// What the app sent after the first `n`, in order.
    pub fn sent_since(&self, n: usize) -> Vec<Sent> {
        let s = self.state();
        s.sent.get(n..).unwrap_or_default().to_vec()
    }

    pub fn send_answers(&self) -> Vec<i64> {
        self.state().send_answers.clone()
    }

    pub fn sent_to(&self, user: &str) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.touser == user)
            .collect()
    }

    /// Waits until `done(sent)` holds (30 s at most).
    pub async fn wait_sent(&self, mut done: impl FnMut(&[Sent]) -> bool) -> Vec<Sent> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.changed.notified();
            {
                let st = self.state();
                if done(&st.sent) {
                    return st.sent.clone();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("timed out; sent so far: {:#?}", self.sent());
            }
        }
    }

    /// Fails the test if any request broke WeCom's rules.
    pub fn assert_clean(&self) {
        let v = self.state().violations.clone();
        assert!(v.is_empty(), "protocol violations: {v:#?}");
    }

    fn violation(&self, v: String) {
        self.state().violations.push(v);
    }

    async fn serve(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        let query: HashMap<String, String> = req
            .uri()
            .query()
            .unwrap_or("")
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| {
                (
                    k.to_owned(),
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .into_owned(),
                )
            })
            .collect();
        let method = req.method().clone();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let resp = match (method.as_str(), path.as_str()) {
            ("GET", "/cgi-bin/gettoken") => self.gettoken(&query),
            ("POST", "/cgi-bin/message/send") => self.send(&query, &body),
            ("GET", "/cgi-bin/media/get") => return self.media(&query),
            _ => {
                self.violation(format!("unknown call {method} {path}"));
                json!({"errcode": 40000, "errmsg": "unknown call"})
            }
        };
        self.changed.notify_waiters();
        Response::builder()
            .header("content-type", "application/json; charset=UTF-8")
            .body(Full::new(Bytes::from(resp.to_string())))
            .unwrap()
    }

    fn gettoken(&self, q: &HashMap<String, String>) -> Value {
        if q.get("corpid").map(String::as_str) != Some(CORP) {
            return json!({"errcode": 40013, "errmsg": "invalid corpid"});
        }
        if q.get("corpsecret").map(String::as_str) != Some(SECRET) {
            return json!({"errcode": 40001, "errmsg": "invalid credential"});
        }
        let mut st = self.state();
        st.issued += 1;
        let token = format!("token-{}-{}", st.issued, "x".repeat(40));
        st.tokens.insert(token.clone(), true);
        json!({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": st.expires_in})
    }

    /// `None` when the token is fine, else the errcode WeCom would answer.
    fn token_error(&self, q: &HashMap<String, String>) -> Option<i64> {
        match q.get("access_token") {
            None => Some(41001),
            Some(t) => match self.state().tokens.get(t) {
                None => Some(40014),
                Some(false) => Some(42001),
                Some(true) => None,
            },
        }
    }

    fn send(&self, q: &HashMap<String, String>, body: &[u8]) -> Value {
        let answer = |st: &mut State, code: i64, msg: &str| {
            st.send_answers.push(code);
            json!({"errcode": code, "errmsg": msg})
        };
        if let Some(code) = self.token_error(q) {
            return answer(&mut self.state(), code, "access_token invalid or expired");
        }
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                self.violation(format!("message/send body is not JSON: {e}"));
                return answer(&mut self.state(), 44004, "bad body");
            }
        };
        let touser = v["touser"].as_str().unwrap_or("").to_owned();
        let msgtype = v["msgtype"].as_str().unwrap_or("").to_owned();
        if touser.is_empty() {
            self.violation(format!("message/send without touser: {v}"));
        }
        if v["agentid"].as_i64() != Some(AGENT) {
            self.violation(format!(
                "message/send with agentid {} (want the integer {AGENT})",
                v["agentid"]
            ));
        }
        if !matches!(msgtype.as_str(), "text" | "markdown") {
            self.violation(format!("message/send with msgtype {msgtype:?}"));
        }
        let content = v[&msgtype]["content"].as_str().unwrap_or("").to_owned();
        if content.trim().is_empty() {
            self.violation("message/send with empty content".to_owned());
            return answer(&mut self.state(), 44004, "empty content");
        }
        if content.len() > 2048 {
            self.violation(format!(
                "message/send content of {} bytes (limit 2048)",
                content.len()
            ));
            return answer(&mut self.state(), 45002, "content size out of limit");
        }
        let mut st = self.state();
        if let Some(code) = st.send_faults.pop_front() {
            return answer(&mut st, code, "scripted fault");
        }
        st.sent.push(Sent {
            touser,
            msgtype,
            content,
        });
        st.send_answers.push(0);
        json!({"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": format!("msg{}", st.sent.len())})
    }

    fn media(&self, q: &HashMap<String, String>) -> Response<Full<Bytes>> {
        let json_resp = |v: Value| {
            Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(v.to_string())))
                .unwrap()
        };
        if let Some(code) = self.token_error(q) {
            return json_resp(json!({"errcode": code, "errmsg": "token"}));
        }
        let id = q.get("media_id").cloned().unwrap_or_default();
        match self.state().media.get(&id) {
            Some((ctype, bytes)) => Response::builder()
                .header("content-type", ctype.as_str())
                .header(
                    "content-disposition",
                    format!("attachment; filename=\"{id}.bin\""),
                )
                .body(Full::new(Bytes::from(bytes.clone())))
                .unwrap(),
            None => json_resp(json!({"errcode": 40007, "errmsg": "invalid media_id"})),
        }
    }
}

/// WeCom's side of the callback.
pub struct WeCom {
    pub url: String,
    pub crypto: CallbackCrypto,
    random: Mutex<u8>,
}

/// One text message, as WeCom's XML.
pub fn text_xml(user: &str, text: &str, msg_id: &str, created: u64) -> String {
    format!(
        "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName><CreateTime>{created}</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId><AgentID>{AGENT}</AgentID></xml>"
    )
}

impl WeCom {
    pub fn new(addr: SocketAddr, path: &str) -> WeCom {
        Self::with_crypto(
            addr,
            path,
            CallbackCrypto::new(TOKEN, AES_KEY, CORP).unwrap(),
        )
    }

    /// WeCom with other credentials (a forger, another corp).
    pub fn with_crypto(addr: SocketAddr, path: &str, crypto: CallbackCrypto) -> WeCom {
        WeCom {
            url: format!("http://{addr}{path}"),
            crypto,
            random: Mutex::new(0),
        }
    }

    fn random(&self) -> [u8; 16] {
        let mut r = self.random.lock().unwrap();
        *r = r.wrapping_add(1);
        [*r; 16]
    }

    /// The envelope and the query WeCom would send for `xml` at `timestamp`.
    pub fn sealed(&self, xml: &str, timestamp: u64) -> (String, String) {
        let encrypted = self.crypto.encrypt(xml.as_bytes(), self.random());
        let ts = timestamp.to_string();
        let nonce = format!("n{timestamp}");
        let sig = self.crypto.sign(&ts, &nonce, &encrypted);
        let body = format!(
            "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt><AgentID><![CDATA[{AGENT}]]></AgentID></xml>"
        );
        (
            format!("msg_signature={sig}&timestamp={ts}&nonce={nonce}"),
            body,
        )
    }

    /// POSTs `body` with `query`; returns status and body.
    pub async fn post_raw(&self, query: &str, body: impl Into<Vec<u8>>) -> (u16, String) {
        let url = format!("{}?{query}", self.url);
        let a = hermes_tests::http::request_async("POST", &url, Some(("text/xml", body.into())))
            .await
            .unwrap();
        (a.status, a.body)
    }

    /// Sends `xml` as a signed, encrypted callback.
    pub async fn post(&self, xml: &str, timestamp: u64) -> (u16, String) {
        let (query, body) = self.sealed(xml, timestamp);
        self.post_raw(&query, body).await
    }

    /// Sends a text message from `user`.
    pub async fn say(&self, user: &str, text: &str, msg_id: &str, now_s: u64) -> (u16, String) {
        self.post(&text_xml(user, text, msg_id, now_s), now_s).await
    }

    /// URL verification with `echo` as the secret plaintext.
    pub async fn verify_url(&self, echo: &str, timestamp: u64, tamper: bool) -> (u16, String) {
        let encrypted = self.crypto.encrypt(echo.as_bytes(), self.random());
        let ts = timestamp.to_string();
        let mut sig = self.crypto.sign(&ts, "nonce", &encrypted);
        if tamper {
            sig.replace_range(0..1, if sig.starts_with('0') { "1" } else { "0" });
        }
        let escaped =
            percent_encoding::utf8_percent_encode(&encrypted, percent_encoding::NON_ALPHANUMERIC);
        let url = format!(
            "{}?msg_signature={sig}&timestamp={ts}&nonce=nonce&echostr={escaped}",
            self.url
        );
        let a = hermes_tests::http::request_async("GET", &url, None)
            .await
            .unwrap();
        (a.status, a.body)
    }
}
