//! What a spoken reply adds on hermes's side (issue 29), the speech service
//! and the platform's upload time excluded: making the answer speakable
//! (`spoken_text`), one `POST /audio/speech` round trip to a loopback
//! service that answers at once with a real 2.5 KB Ogg/Opus note (request
//! encoding, the kept-alive connection, reading and checking the audio), and
//! the multipart body of the `sendVoice` upload.
//!
//! `cargo bench -p hermes-benches --bench voice`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_runtime::http::multipart::Form;
use hermes_runtime::media::tts::{
    AudioFormat, DEFAULT_TTS_MAX_CHARS, DEFAULT_TTS_MODEL, DEFAULT_TTS_TIMEOUT, DEFAULT_TTS_VOICE,
    Speaker, TtsSettings, spoken_text,
};

/// The audio the gateway's voice tests serve: a real Ogg/Opus voice note.
const OGG: &[u8] = include_bytes!("../../gateway/tests/fixtures/speech.ogg");

/// A typical answer worth speaking: prose, a list, a code block and a URL
/// (the last two are not read aloud), ≈ 1.4 KB.
fn answer() -> String {
    let mut a = String::from(
        "Here is what I found about the board's temperature. The SoC ran at 71 °C under load, \
         which is inside its limit but close to where it starts throttling.\n\n",
    );
    for i in 1..=6 {
        a.push_str(&format!(
            "{i}. Step {i}: check the **fan** and the airflow around the case; it matters more than the heatsink.\n"
        ));
    }
    a.push_str("\n```sh\nvcgencmd measure_temp\nwatch -n1 cat /sys/class/thermal/thermal_zone0/temp\n```\n\n");
    a.push_str(
        "The vendor's guide is at https://example.com/docs/thermal-management?board=5. \
         If the readings stay above 80 °C for minutes, lower the clock or add a fan. \
         I can schedule a daily check and send you the figures each morning.",
    );
    a
}

/// Serves every request on every connection with `OGG`, keep-alive, at once.
fn speech_service() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    url
}

fn serve(stream: TcpStream) {
    // Head and audio in one write, with Nagle off: otherwise the audio waits
    // for the client's delayed ACK of the head (40 ms), which would measure
    // this fake, not hermes.
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: audio/ogg\r\nContent-Length: {}\r\n\r\n",
            OGG.len()
        )
        .into_bytes();
        response.extend_from_slice(OGG);
        if writer.write_all(&response).is_err() {
            return;
        }
    }
}

fn voice(c: &mut Criterion) {
    let answer = answer();
    c.bench_function("voice/spoken_text (1.4 KB answer)", |b| {
        b.iter(|| black_box(spoken_text(black_box(&answer), DEFAULT_TTS_MAX_CHARS)))
    });

    let speaker = Speaker::new(TtsSettings {
        base_url: speech_service(),
        api_key: None,
        model: DEFAULT_TTS_MODEL.into(),
        voice: DEFAULT_TTS_VOICE.into(),
        format: AudioFormat::Opus,
        max_chars: DEFAULT_TTS_MAX_CHARS,
        timeout: DEFAULT_TTS_TIMEOUT,
    });
    let (spoken, _) = spoken_text(&answer, DEFAULT_TTS_MAX_CHARS);
    assert_eq!(
        speaker.speak(&spoken).unwrap().audio,
        OGG,
        "the service's bytes"
    );
    c.bench_function("voice/speak (loopback service, 2.5 KB Ogg)", |b| {
        b.iter(|| black_box(speaker.speak(black_box(&spoken)).unwrap()))
    });

    c.bench_function("voice/sendVoice multipart body", |b| {
        b.iter(|| {
            black_box(
                Form::new()
                    .text("chat_id", "123456789")
                    .text("reply_to_message_id", "42")
                    .file("voice", "reply.ogg", "audio/ogg", black_box(OGG.to_vec()))
                    .finish(),
            )
        })
    });
}

criterion_group!(benches, voice);
criterion_main!(benches);
