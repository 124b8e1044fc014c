//! A loopback OpenAI-compatible speech service (`POST /v1/audio/speech`)
//! for the voice reply tests: it checks each request as OpenAI's API
//! would (JSON with `model`, `input`, `voice`, and an Opus
//! `response_format`), records it, and answers with real Ogg/Opus bytes —
//! a short spoken sentence made once with espeak-ng and opusenc and
//! committed (`tests/fixtures/speech.ogg`), so no tool is needed here.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The audio every request gets: Ogg/Opus, 2.5 KB.
pub const SPEECH: &[u8] = include_bytes!("../fixtures/speech.ogg");

/// The service; dropping it leaves the listener thread parked on accept.
pub struct SpeechService {
    /// `http://127.0.0.1:PORT/v1`, the `[tts] base_url`.
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl SpeechService {
    /// Starts the service on a free port.
    pub fn start() -> SpeechService {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(sock, &seen));
            }
        });
        SpeechService { base_url, requests }
    }

    /// A base URL where nothing listens: a speech service that is down.
    pub fn down() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        drop(listener);
        url
    }

    /// The JSON bodies received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(sock: TcpStream, seen: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(sock);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut json_type = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if k.eq_ignore_ascii_case("content-type") {
                    json_type = v.trim().starts_with("application/json");
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let path_ok = request_line.starts_with("POST /v1/audio/speech ");
        let fields_ok = ["model", "input", "voice"]
            .iter()
            .all(|k| body[k].as_str().is_some_and(|v| !v.is_empty()))
            && body["response_format"] == "opus";
        let sock = reader.get_mut();
        if !(path_ok && json_type && fields_ok) {
            let error =
                br#"{"error":{"message":"bad speech request","type":"invalid_request_error"}}"#;
            let _ = write!(
                sock,
                "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                error.len()
            );
            let _ = sock.write_all(error);
            continue;
        }
        seen.lock().unwrap().push(body);
        let _ = write!(
            sock,
            "HTTP/1.1 200 OK\r\nContent-Type: audio/ogg\r\nContent-Length: {}\r\n\r\n",
            SPEECH.len()
        );
        let _ = sock.write_all(SPEECH);
    }
}
