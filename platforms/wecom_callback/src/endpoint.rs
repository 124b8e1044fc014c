//! What the callback URL does with one request, without the HTTP server:
//! query string + body + the time in, an answer or a [`Refusal`] out.
//!
//! Order of checks, cheapest and most telling first: the query parameters,
//! the XML envelope (a POST's ciphertext is what is signed), the signature
//! (constant time), the timestamp's age (the signature covers it, so a stale
//! one is a captured request replayed), the decryption and the corp id, then
//! the message XML. Nothing reaches the agent unless every check passed.
//!
//! The `fuzz_*` functions are the entry points for a fuzzer and for the
//! property tests: they drive the same code with arbitrary bytes.

// The timestamp comes from the request: arithmetic on it must be checked.
#![warn(clippy::arithmetic_side_effects)]

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

use super::crypto::{CallbackCrypto, CryptoError};
use super::xml::{self, Inbound, XmlError};

/// Why a request was refused. Each maps to an HTTP status; the text is safe
/// to log and to answer with (no secrets, no plaintext).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A query parameter WeCom always sends is missing.
    #[error("missing query parameter {0}")]
    MissingParam(&'static str),
    /// `timestamp` is not a number of seconds.
    #[error("timestamp is not a number")]
    BadTimestamp,
    /// The timestamp is further from now than the replay window allows.
    #[error(
        "timestamp {timestamp} is {age_s} s away from now (window {window_s} s): a replayed or delayed request"
    )]
    Stale {
        /// The request's timestamp.
        timestamp: u64,
        /// Its distance from now.
        age_s: u64,
        /// The configured window.
        window_s: u64,
    },
    /// Signature, decryption or corp id check failed.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// The envelope or the message is not the XML WeCom sends.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// The message is for another app of the corp.
    #[error("the message is for agent {got}, not the configured WECOM_CALLBACK_AGENT_ID")]
    WrongAgent {
        /// The message's AgentID.
        got: String,
    },
    /// The decrypted echo string is not text.
    #[error("echostr does not decrypt to UTF-8 text")]
    EchoNotText,
}

impl Refusal {
    /// The HTTP status to answer with: 403 for anything that says "not from
    /// WeCom for this app", 400 for malformed input.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Crypto(CryptoError::Signature | CryptoError::ReceiveId)
            | Refusal::Stale { .. }
            | Refusal::WrongAgent { .. } => 403,
            Refusal::MissingParam(_)
            | Refusal::BadTimestamp
            | Refusal::Crypto(_)
            | Refusal::Xml(_)
            | Refusal::EchoNotText => 400,
        }
    }
}

/// The signed parameters of a callback's query string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// `msg_signature`.
    pub msg_signature: String,
    /// `timestamp` (seconds since the epoch, as text: it is signed as sent).
    pub timestamp: String,
    /// `nonce`.
    pub nonce: String,
    /// `echostr` (URL verification only).
    pub echostr: Option<String>,
}

/// Percent-decodes `v` without turning `+` into a space: `echostr` is
/// base64, whose `+` WeCom may send unescaped.
fn decode(v: &str) -> String {
    match percent_decode_str(v).decode_utf8() {
        Ok(Cow::Borrowed(s)) => s.to_owned(),
        Ok(Cow::Owned(s)) => s,
        Err(_) => percent_decode_str(v).decode_utf8_lossy().into_owned(),
    }
}

impl Query {
    /// Parses a raw query string (without `?`). The first occurrence of a
    /// parameter wins; unknown parameters are ignored.
    pub fn parse(raw: &str) -> Query {
        let mut q = Query::default();
        let (mut sig, mut ts, mut nonce) = (None, None, None);
        for pair in raw.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match k {
                "msg_signature" => &mut sig,
                "timestamp" => &mut ts,
                "nonce" => &mut nonce,
                "echostr" => &mut q.echostr,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(decode(v));
            }
        }
        q.msg_signature = sig.unwrap_or_default();
        q.timestamp = ts.unwrap_or_default();
        q.nonce = nonce.unwrap_or_default();
        q
    }

    fn require(&self) -> Result<(), Refusal> {
        for (name, v) in [
            ("msg_signature", &self.msg_signature),
            ("timestamp", &self.timestamp),
            ("nonce", &self.nonce),
        ] {
            if v.is_empty() {
                return Err(Refusal::MissingParam(name));
            }
        }
        Ok(())
    }
}

/// The checks of one app's callback URL.
#[derive(Clone, Debug)]
pub struct Endpoint {
    crypto: CallbackCrypto,
    agent_id: Option<String>,
    replay_window_s: Option<u64>,
}

impl Endpoint {
    /// An endpoint for `crypto`. `agent_id`, when given, must match the
    /// messages' AgentID; `replay_window_s` bounds how far a request's
    /// timestamp may be from now (`None`: not checked).
    pub fn new(
        crypto: CallbackCrypto,
        agent_id: Option<String>,
        replay_window_s: Option<u64>,
    ) -> Self {
        Self {
            crypto,
            agent_id,
            replay_window_s,
        }
    }

    /// The app's crypto (tests sign requests with it).
    pub fn crypto(&self) -> &CallbackCrypto {
        &self.crypto
    }

    fn check(&self, q: &Query, encrypted: &str, now_s: u64) -> Result<(), Refusal> {
        self.crypto
            .verify(&q.msg_signature, &q.timestamp, &q.nonce, encrypted)?;
        let ts: u64 = q
            .timestamp
            .trim()
            .parse()
            .map_err(|_| Refusal::BadTimestamp)?;
        if let Some(window_s) = self.replay_window_s {
            let age_s = now_s.abs_diff(ts);
            if age_s > window_s {
                return Err(Refusal::Stale {
                    timestamp: ts,
                    age_s,
                    window_s,
                });
            }
        }
        Ok(())
    }

    /// `GET ?msg_signature&timestamp&nonce&echostr`: the plaintext of
    /// `echostr`, which the URL must answer with.
    pub fn verify_url(&self, raw_query: &str, now_s: u64) -> Result<String, Refusal> {
        let q = Query::parse(raw_query);
        q.require()?;
        let echostr = q
            .echostr
            .as_deref()
            .filter(|e| !e.is_empty())
            .ok_or(Refusal::MissingParam("echostr"))?;
        self.check(&q, echostr, now_s)?;
        let plain = self.crypto.decrypt(echostr)?;
        String::from_utf8(plain).map_err(|_| Refusal::EchoNotText)
    }

    /// `POST ?msg_signature&timestamp&nonce` with the encrypted envelope:
    /// the decrypted, parsed callback.
    pub fn receive(&self, raw_query: &str, body: &[u8], now_s: u64) -> Result<Inbound, Refusal> {
        let q = Query::parse(raw_query);
        q.require()?;
        let envelope = xml::parse_envelope(body)?;
        let encrypted = envelope.encrypt.trim();
        self.check(&q, encrypted, now_s)?;
        let plain = self.crypto.decrypt(encrypted)?;
        let inbound = xml::parse_message(&plain)?;
        if let (Inbound::Message(m), Some(want)) = (&inbound, &self.agent_id)
            && let Some(got) = &m.agent_id
            && got != want
        {
            return Err(Refusal::WrongAgent { got: got.clone() });
        }
        Ok(inbound)
    }
}

/// The app the fuzz entries use (the key of WeCom's published sample).
fn fuzz_endpoint() -> Endpoint {
    let crypto = CallbackCrypto::new(
        "fuzz-token",
        "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt",
        "ww1436e0e65a779aee",
    );
    match crypto {
        Ok(c) => Endpoint::new(c, Some("1000002".to_owned()), Some(300)),
        // The key is a valid constant; this arm is unreachable.
        Err(e) => unreachable!("fuzz key: {e}"),
    }
}

/// Fuzz entry: `data` as a POST body, with a correct signature over whatever
/// ciphertext it carries, so the fuzzer reaches decryption and the message
/// parser. Must never panic.
pub fn fuzz_callback_body(data: &[u8]) {
    let endpoint = fuzz_endpoint();
    let encrypted = xml::parse_envelope(data)
        .map(|e| e.encrypt.trim().to_owned())
        .unwrap_or_default();
    let sig = endpoint.crypto.sign("1700000000", "n", &encrypted);
    let query = format!("msg_signature={sig}&timestamp=1700000000&nonce=n");
    let _ = endpoint.receive(&query, data, 1_700_000_000);
}

/// Fuzz entry: `data` as raw ciphertext (decrypted as far as it goes) and,
/// encrypted properly, as the plaintext message document. Must never panic.
pub fn fuzz_decrypt(data: &[u8]) {
    let endpoint = fuzz_endpoint();
    let mut buf = data.to_vec();
    let _ = endpoint.crypto.decrypt_bytes(&mut buf);
    let encrypted = endpoint.crypto.encrypt(data, [0; 16]);
    let body = format!("<xml><Encrypt>{encrypted}</Encrypt></xml>");
    let sig = endpoint.crypto.sign("1700000000", "n", &encrypted);
    let query = format!("msg_signature={sig}&timestamp=1700000000&nonce=n");
    let _ = endpoint.receive(&query, body.as_bytes(), 1_700_000_000);
}

/// Fuzz entry: `data` as a decrypted message document. Must never panic.
pub fn fuzz_message_xml(data: &[u8]) {
    let _ = xml::parse_message(data);
    let _ = xml::parse_envelope(data);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";
    const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
    const CORP: &str = "ww1436e0e65a779aee";

    fn endpoint(window: Option<u64>) -> Endpoint {
        Endpoint::new(
            CallbackCrypto::new(TOKEN, KEY, CORP).unwrap(),
            Some("1000002".into()),
            window,
        )
    }

    #[test]
    fn official_sample_url_with_percent_encoding() {
        // The echostr as it arrives in the URL: `+`, `/`, `=` escaped.
        let q = "msg_signature=012bc692d0a58dd4b10f8dfe5c4ac00ae211ebeb&timestamp=1476416373&nonce=47744683&echostr=fsi1xnbH4yQh0%2BPJxcOdhhK6TDXkjMyhEPA7xB2TGz6b%2Bg7xyAbEkRxN%2F3cNXW9qdqjnoVzEtpbhnFyq6SVHyA%3D%3D";
        assert_eq!(
            endpoint(None).verify_url(q, 0).unwrap(),
            "1288432023552776189"
        );
        // Unescaped `+` is kept (not read as a space).
        let q = "msg_signature=012bc692d0a58dd4b10f8dfe5c4ac00ae211ebeb&timestamp=1476416373&nonce=47744683&echostr=fsi1xnbH4yQh0+PJxcOdhhK6TDXkjMyhEPA7xB2TGz6b+g7xyAbEkRxN/3cNXW9qdqjnoVzEtpbhnFyq6SVHyA==";
        assert_eq!(
            endpoint(None).verify_url(q, 0).unwrap(),
            "1288432023552776189"
        );
        // The 2016 timestamp is refused under a replay window.
        let e = endpoint(Some(300))
            .verify_url(q, 1_800_000_000)
            .unwrap_err();
        assert!(matches!(e, Refusal::Stale { .. }), "{e:?}");
        assert_eq!(e.status(), 403);
    }

    #[test]
    fn official_sample_post() {
        let body = "<xml><ToUserName><![CDATA[ww1436e0e65a779aee]]></ToUserName>\n<Encrypt><![CDATA[Kl7kjoSf6DMD1zh7rtrHjFaDapSCkaOnwu3bqLc5tAybhhMl9pFeK8NslNPVdMwmBQTNoW4mY7AIjeLvEl3NyeTkAgGzBhzTtRLNshw2AEew+kkYcD+Fq72Kt00fT0WnN87hGrW8SqGc+NcT3mu87Ha3dz1pSDi6GaUA6A0sqfde0VJPQbZ9U+3JWcoD4Z5jaU0y9GSh010wsHF8KZD24YhmZH4ch4Ka7ilEbjbfvhKkNL65HHL0J6EYJIZUC2pFrdkJ7MhmEbU2qARR4iQHE7wy24qy0cRX3Mfp6iELcDNfSsPGjUQVDGxQDCWjayJOpcwocugux082f49HKYg84EpHSGXAyh+/oxwaWbvL6aSDPOYuPDGOCI8jmnKiypE+]]></Encrypt>\n<AgentID><![CDATA[1000002]]></AgentID>\n</xml>";
        let q = "msg_signature=0c3914025cb4b4d68103f6bfc8db550f79dcf48e&timestamp=1476422779&nonce=1597212914";
        let Inbound::Message(m) = endpoint(Some(300))
            .receive(q, body.as_bytes(), 1476422779 + 10)
            .unwrap()
        else {
            panic!("not a message")
        };
        assert_eq!(
            (m.user_id.as_str(), m.text.as_str()),
            ("ChenJiaShun", "你好")
        );
        // Another app's agent id is refused.
        let other = Endpoint::new(
            CallbackCrypto::new(TOKEN, KEY, CORP).unwrap(),
            Some("7".into()),
            None,
        );
        let e = other.receive(q, body.as_bytes(), 0).unwrap_err();
        assert_eq!(e.status(), 403, "{e}");
    }

    #[test]
    fn refusals_and_their_statuses() {
        let ep = endpoint(Some(300));
        let e = ep.receive("timestamp=1&nonce=2", b"<xml/>", 0).unwrap_err();
        assert_eq!(e, Refusal::MissingParam("msg_signature"));
        assert_eq!(e.status(), 400);
        let e = ep
            .receive(
                "msg_signature=00&timestamp=1&nonce=2",
                b"<xml><Encrypt>abc</Encrypt></xml>",
                0,
            )
            .unwrap_err();
        assert_eq!(e, Refusal::Crypto(CryptoError::Signature));
        assert_eq!(e.status(), 403);
        let e = ep
            .receive("msg_signature=00&timestamp=1&nonce=2", b"<xml><Enc", 0)
            .unwrap_err();
        assert!(matches!(e, Refusal::Xml(_)), "{e:?}");
        // A signed, non-numeric timestamp.
        let enc = ep.crypto().encrypt(b"<xml/>", [0; 16]);
        let sig = ep.crypto().sign("soon", "n", &enc);
        let body = format!("<xml><Encrypt>{enc}</Encrypt></xml>");
        let e = ep
            .receive(
                &format!("msg_signature={sig}&timestamp=soon&nonce=n"),
                body.as_bytes(),
                0,
            )
            .unwrap_err();
        assert_eq!(e, Refusal::BadTimestamp);
    }

    #[test]
    fn fuzz_entries_accept_anything() {
        for data in [
            &b""[..],
            b"<xml>",
            b"<xml><Encrypt>AAAA</Encrypt></xml>",
            b"\x00\xff\xfe",
            b"<xml><Encrypt>!!!</Encrypt><Encrypt>x</Encrypt></xml>",
        ] {
            fuzz_callback_body(data);
            fuzz_decrypt(data);
            fuzz_message_xml(data);
        }
    }
}
