//! Files as WeCom serves them: the loopback HTTP file server, and
//! AES-256-CBC encryption under a message's `aeskey`.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{FileReply, Shared};

/// A WeCom file key: 32 bytes from `seed`, base64 without padding (43
/// characters, as WeCom sends it).
pub fn aeskey(seed: u8) -> String {
    use base64::Engine as _;
    let key: Vec<u8> = (0..32u8)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i))
        .collect();
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(key)
}

/// `plain` encrypted as WeCom encrypts an AI-bot file: AES-256-CBC under the
/// decoded `aeskey`, the IV its first 16 bytes, PKCS#7 padding to a multiple
/// of 32 bytes.
pub fn encrypt_file(plain: &[u8], aeskey: &str) -> Vec<u8> {
    use aes::Aes256;
    use base64::Engine as _;
    use cbc::cipher::block_padding::NoPadding;
    use cbc::cipher::{BlockModeEncrypt, KeyIvInit};
    let key: [u8; 32] = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(aeskey.trim_end_matches('='))
        .unwrap()
        .try_into()
        .unwrap();
    let pad = 32 - plain.len() % 32;
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + pad, pad as u8);
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&key[..16]);
    let len = buf.len();
    cbc::Encryptor::<Aes256>::new(&key.into(), &iv.into())
        .encrypt_padded::<NoPadding>(&mut buf, len)
        .unwrap()
        .to_vec()
}

/// Answers one HTTP/1.1 request of the file server, then closes.
pub(super) async fn serve_file_request(s: Arc<Shared>, mut tcp: tokio::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" {
        s.violations
            .lock()
            .unwrap()
            .push(format!("file server: {method} {path}, downloads are GETs"));
    }
    s.downloads.lock().unwrap().push(path.to_owned());
    s.changed.notify_waiters();
    let reply = s.served.lock().unwrap().get(path).cloned();
    let (status, body, sent) = match reply {
        Some(FileReply::Bytes(b)) => {
            let n = b.len();
            (200, b, n)
        }
        Some(FileReply::Status(code)) => (code, Vec::new(), 0),
        Some(FileReply::CutShort(b, n)) => (200, b, n),
        None => (404, Vec::new(), 0),
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tcp.write_all(head.as_bytes()).await;
    let _ = tcp.write_all(&body[..sent.min(body.len())]).await;
    let _ = tcp.shutdown().await;
}
