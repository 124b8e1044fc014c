//! A quiet Bot API on 127.0.0.1 for measuring an idle gateway
//! (`scripts/budgets.sh`): `getMe` names a bot, `getUpdates` is held for
//! its `timeout` and comes back empty (as Telegram's does when nobody
//! writes), anything else is `{"ok":true,"result":true}`. Prints its base
//! URL, then serves until killed. HTTP/1.1 with keep-alive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let path = request_line.split_whitespace().nth(1).unwrap_or("");
        let answer = if path.ends_with("/getMe") {
            r#"{"ok":true,"result":{"id":4242,"is_bot":true,"first_name":"Idle","username":"idle_bot"}}"#
                .to_owned()
        } else if path.ends_with("/getUpdates") {
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let hold = body["timeout"].as_u64().unwrap_or(0);
            std::thread::sleep(Duration::from_secs(hold));
            r#"{"ok":true,"result":[]}"#.to_owned()
        } else {
            r#"{"ok":true,"result":true}"#.to_owned()
        };
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        )?;
        out.flush()?;
    }
}

fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("http://{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    for stream in listener.incoming() {
        let stream = stream?;
        std::thread::spawn(move || serve(stream));
    }
    Ok(())
}
