//! The callback crypto against WeCom's own library, npm `@wecom/crypto`
//! (Tencent's, MIT), in both directions: what it encrypts and signs, the
//! adapter verifies and decrypts; what the adapter encrypts and signs, it
//! decrypts and signs identically. Driven through
//! `tests/emulators/wecom-crypto/crypto.js`, one node process per test.
//!
//! Setup: `npm ci --prefix tests/emulators/wecom-crypto` (CI does this first).
#![cfg(feature = "wecom_callback")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use base64::Engine as _;
use hermes_wecom_callback::crypto::{CallbackCrypto, CryptoError, signature};
use hermes_wecom_callback::endpoint::Endpoint;
use hermes_wecom_callback::xml::Inbound;
use proptest::prelude::*;
use serde_json::{Value, json};

/// WeCom's official library, in a node child process.
struct Official {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Official {
    fn start() -> Official {
        hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("wecom-crypto"));
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/emulators/wecom-crypto");
        assert!(
            dir.join("node_modules/@wecom/crypto").is_dir(),
            "WeCom's crypto library is not installed: run `npm ci --prefix tests/emulators/wecom-crypto` \
             from the repository root"
        );
        let mut child = Command::new("node")
            .arg("crypto.js")
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run `node` (is Node.js installed?)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Official {
            child,
            stdin,
            stdout,
        }
    }

    fn call(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("crypto.js answered {line:?}: {e}"));
        assert!(answer.get("error").is_none(), "{request} → {answer}");
        answer
    }

    fn encrypt(&mut self, key: &str, message: &str, id: &str) -> String {
        let a = self.call(json!({"op": "encrypt", "key": key, "message": message, "id": id}));
        a["encrypted"].as_str().unwrap().to_owned()
    }

    /// (message bytes, receive id)
    fn decrypt(&mut self, key: &str, encrypted: &str) -> (Vec<u8>, String) {
        let a = self.call(json!({"op": "decrypt", "key": key, "encrypted": encrypted}));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(a["message_b64"].as_str().unwrap())
            .unwrap();
        (bytes, a["id"].as_str().unwrap().to_owned())
    }

    fn sign(&mut self, token: &str, timestamp: &str, nonce: &str, encrypted: &str) -> String {
        let a = self.call(json!({
            "op": "sign", "token": token, "timestamp": timestamp, "nonce": nonce, "encrypted": encrypted
        }));
        a["signature"].as_str().unwrap().to_owned()
    }
}

impl Drop for Official {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The key of WeCom's published sample: its last character carries bits
/// past the 32 bytes, which both sides must ignore.
const SAMPLE_KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";
const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
const CORP: &str = "ww1436e0e65a779aee";

/// An EncodingAESKey from 32 key bytes, as WeCom shows one.
fn encoding_key(bytes: &[u8; 32]) -> String {
    let mut s = base64::engine::general_purpose::STANDARD.encode(bytes);
    assert_eq!(s.pop(), Some('='));
    s
}

fn messages() -> Vec<String> {
    vec![
        String::new(),
        "hi".to_owned(),
        "你好，世界".to_owned(),
        "emoji 😀 and \u{2005}mention".to_owned(),
        "<xml><ToUserName><![CDATA[ww1]]></ToUserName><Content><![CDATA[a]]></Content></xml>"
            .to_owned(),
        // Lengths around the 32-byte padding blocks (with the 20-byte header
        // and the 18-byte corp id).
        "x".repeat(26),
        "x".repeat(25),
        "x".repeat(27),
        "长".repeat(10_000),
    ]
}

#[test]
fn payloads_the_official_library_encrypts_are_decrypted() {
    hermes_tests::require!(Npm("wecom-crypto"));
    let mut official = Official::start();
    let ours = CallbackCrypto::new(TOKEN, SAMPLE_KEY, CORP).unwrap();
    for (i, message) in messages().iter().enumerate() {
        let encrypted = official.encrypt(SAMPLE_KEY, message, CORP);
        let (ts, nonce) = (format!("17000000{i:02}"), format!("nonce{i}"));
        let sig = official.sign(TOKEN, &ts, &nonce, &encrypted);
        ours.verify(&sig, &ts, &nonce, &encrypted).unwrap();
        assert_eq!(
            ours.decrypt(&encrypted).unwrap(),
            message.as_bytes(),
            "case {i}"
        );
    }
    // Made for another corp: refused after decryption.
    let foreign = official.encrypt(SAMPLE_KEY, "hello", "ww0000000000000000");
    assert_eq!(ours.decrypt(&foreign), Err(CryptoError::ReceiveId));
}

#[test]
fn payloads_the_adapter_encrypts_are_decrypted_by_the_official_library() {
    hermes_tests::require!(Npm("wecom-crypto"));
    let mut official = Official::start();
    let ours = CallbackCrypto::new(TOKEN, SAMPLE_KEY, CORP).unwrap();
    for (i, message) in messages().iter().enumerate() {
        let random = [u8::try_from(i).unwrap(); 16];
        let encrypted = ours.encrypt(message.as_bytes(), random);
        let (bytes, id) = official.decrypt(SAMPLE_KEY, &encrypted);
        assert_eq!(bytes, message.as_bytes(), "case {i}");
        assert_eq!(id, CORP);
        assert_eq!(
            ours.sign("1700000000", "n", &encrypted),
            official.sign(TOKEN, "1700000000", "n", &encrypted)
        );
    }
}

#[test]
fn a_callback_built_by_the_official_library_passes_the_endpoint() {
    hermes_tests::require!(Npm("wecom-crypto"));
    let mut official = Official::start();
    let xml = "<xml><ToUserName><![CDATA[ww1436e0e65a779aee]]></ToUserName><FromUserName><![CDATA[zhangsan]]></FromUserName><CreateTime>1700000000</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[帮我看看 <this> & that]]></Content><MsgId>7301</MsgId><AgentID>1000002</AgentID></xml>";
    let encrypted = official.encrypt(SAMPLE_KEY, xml, CORP);
    let sig = official.sign(TOKEN, "1700000000", "abc", &encrypted);
    let body = format!(
        "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt><AgentID><![CDATA[1000002]]></AgentID></xml>"
    );
    let endpoint = Endpoint::new(
        CallbackCrypto::new(TOKEN, SAMPLE_KEY, CORP).unwrap(),
        Some("1000002".into()),
        Some(300),
    );
    let query = format!("msg_signature={sig}&timestamp=1700000000&nonce=abc");
    let Inbound::Message(m) = endpoint
        .receive(&query, body.as_bytes(), 1_700_000_100)
        .unwrap()
    else {
        panic!("not a message");
    };
    assert_eq!(m.user_id, "zhangsan");
    assert_eq!(m.text, "帮我看看 <this> & that");
    assert_eq!(m.msg_id, "7301");
    // URL verification with an echostr the library encrypted.
    let echo = official.encrypt(SAMPLE_KEY, "5927782489442352469", CORP);
    let sig = official.sign(TOKEN, "1700000000", "n2", &echo);
    let escaped: String = echo
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    let query = format!("msg_signature={sig}&timestamp=1700000000&nonce=n2&echostr={escaped}");
    assert_eq!(
        endpoint.verify_url(&query, 1_700_000_000).unwrap(),
        "5927782489442352469"
    );
}

fn official() -> &'static Mutex<Official> {
    static OFFICIAL: std::sync::OnceLock<Mutex<Official>> = std::sync::OnceLock::new();
    OFFICIAL.get_or_init(|| Mutex::new(Official::start()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random keys, tokens, corp ids and messages: both directions agree.
    #[test]
    fn random_keys_and_messages_agree_with_the_official_library(
        key in any::<[u8; 32]>(),
        message in "\\PC{0,300}",
        corp in "ww[0-9a-f]{16}",
        token in "[A-Za-z0-9]{3,32}",
        timestamp in 1_000_000_000u64..2_000_000_000,
        nonce in "[0-9a-z]{1,16}",
        random in any::<[u8; 16]>(),
    ) {
        if !hermes_tests::tier::require(&[hermes_tests::tier::Component::Npm("wecom-crypto")]) {
            return Ok(());
        }
        let key = encoding_key(&key);
        let ts = timestamp.to_string();
        let mut official = official().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ours = CallbackCrypto::new(&token, &key, &corp).unwrap();

        let theirs = official.encrypt(&key, &message, &corp);
        let sig = official.sign(&token, &ts, &nonce, &theirs);
        prop_assert_eq!(&sig, &signature(&token, &ts, &nonce, &theirs));
        prop_assert!(ours.verify(&sig, &ts, &nonce, &theirs).is_ok());
        prop_assert_eq!(ours.decrypt(&theirs).unwrap(), message.as_bytes());

        let mine = ours.encrypt(message.as_bytes(), random);
        let (bytes, id) = official.decrypt(&key, &mine);
        prop_assert_eq!(bytes, message.as_bytes());
        prop_assert_eq!(id, corp);
    }
}
