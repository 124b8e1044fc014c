//! The checks of the frames that carry state across frames: chunked file
//! uploads (init, chunks, finish), markdown replies and streamed replies.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::server::{ack, ack_body};
use super::{Shared, Stream, StreamFrame, Upload};

/// Handles the three upload commands; returns the ack.
pub(super) fn upload_step(
    s: &Shared,
    cmd: &str,
    body: &Value,
    req_id: &str,
    problems: &mut Vec<String>,
) -> Message {
    use base64::Engine as _;
    use md5::Digest as _;
    let refuse = |problems: &mut Vec<String>, p: String| {
        problems.push(p);
        ack(req_id, 40001, "invalid upload")
    };
    match cmd {
        "aibot_upload_media_init" => {
            let (Some(kind), Some(filename), Some(total_size), Some(total_chunks), Some(md5)) = (
                body["type"].as_str(),
                body["filename"].as_str(),
                body["total_size"].as_u64(),
                body["total_chunks"].as_u64(),
                body["md5"].as_str(),
            ) else {
                return refuse(
                    problems,
                    format!(
                        "upload init needs type, filename, total_size, total_chunks, md5: {body}"
                    ),
                );
            };
            if !["file", "image", "voice", "video"].contains(&kind)
                || filename.is_empty()
                || total_size < 5
                || !(1..=100).contains(&total_chunks)
                || total_chunks != total_size.div_ceil(512 * 1024)
                || md5.len() != 32
                || !md5.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return refuse(problems, format!("bad upload init: {body}"));
            }
            let upload_id = {
                let mut n = s.next_upload.lock().unwrap();
                *n += 1;
                format!("upload-{n}")
            };
            s.uploads.lock().unwrap().insert(
                upload_id.clone(),
                Upload {
                    filename: filename.to_owned(),
                    total_size,
                    total_chunks,
                    md5: md5.to_owned(),
                    chunks: BTreeMap::new(),
                },
            );
            ack_body(req_id, json!({"upload_id": upload_id}))
        }
        "aibot_upload_media_chunk" => {
            let mut uploads = s.uploads.lock().unwrap();
            let Some(upload) = body["upload_id"]
                .as_str()
                .and_then(|id| uploads.get_mut(id))
            else {
                return refuse(problems, format!("chunk for an unknown upload: {body}"));
            };
            let (Some(index), Some(data)) =
                (body["chunk_index"].as_u64(), body["base64_data"].as_str())
            else {
                return refuse(
                    problems,
                    format!("chunk needs chunk_index and base64_data: {body}"),
                );
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
                return refuse(problems, format!("chunk {index} is not base64"));
            };
            if index >= upload.total_chunks
                || bytes.len() > 512 * 1024
                || upload.chunks.insert(index, bytes).is_some()
            {
                return refuse(problems, format!("bad or repeated chunk {index}"));
            }
            ack(req_id, 0, "ok")
        }
        _ => {
            let Some(upload_id) = body["upload_id"].as_str() else {
                return refuse(problems, format!("finish needs upload_id: {body}"));
            };
            let Some(upload) = s.uploads.lock().unwrap().remove(upload_id) else {
                return refuse(problems, format!("finish of an unknown upload {upload_id}"));
            };
            let bytes: Vec<u8> = upload.chunks.values().flatten().copied().collect();
            let md5: String = md5::Md5::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if upload.chunks.len() as u64 != upload.total_chunks
                || bytes.len() as u64 != upload.total_size
                || md5 != upload.md5
            {
                return refuse(
                    problems,
                    format!("upload {upload_id} incomplete or its MD5 differs"),
                );
            }
            let media_id = format!("media-{upload_id}");
            s.media
                .lock()
                .unwrap()
                .insert(media_id.clone(), (upload.filename, bytes));
            ack_body(req_id, json!({"media_id": media_id}))
        }
    }
}

pub(super) fn markdown_content<'a>(body: &'a Value, problems: &mut Vec<String>) -> Option<&'a str> {
    if body["msgtype"] != "markdown" {
        problems.push(format!("msgtype must be markdown: {body}"));
    }
    match body["markdown"]["content"].as_str() {
        Some(c) => {
            if c.chars().count() > 4000 {
                problems.push(format!(
                    "content longer than 4000 chars: {}",
                    c.chars().count()
                ));
            }
            Some(c)
        }
        None => {
            problems.push(format!("markdown.content missing: {body}"));
            None
        }
    }
}

/// Checks and records one `stream` frame answering `req_id`.
pub(super) fn stream_frame(s: &Shared, req_id: &str, body: &Value, problems: &mut Vec<String>) {
    let stream = &body["stream"];
    let (Some(id), Some(finish), Some(content)) = (
        stream["id"].as_str(),
        stream["finish"].as_bool(),
        stream["content"].as_str(),
    ) else {
        problems.push(format!(
            "stream frame needs stream.id, stream.finish, stream.content: {body}"
        ));
        return;
    };
    if id.is_empty() {
        problems.push(format!("stream frame with an empty stream.id: {body}"));
    }
    if content.len() > 20480 {
        problems.push(format!(
            "stream content longer than 20480 bytes: {}",
            content.len()
        ));
    }
    if s.answered.lock().unwrap().contains(req_id) {
        problems.push(format!(
            "stream frame on {req_id}, already answered with markdown"
        ));
    }
    let mut streams = s.streams.lock().unwrap();
    let entry = streams.entry(req_id.to_owned()).or_insert_with(|| Stream {
        req_id: req_id.to_owned(),
        id: id.to_owned(),
        frames: Vec::new(),
    });
    if entry.id != id {
        problems.push(format!(
            "stream frame on {req_id} with stream.id {id}, the stream is {}",
            entry.id
        ));
    }
    if entry.finished() {
        problems.push(format!("stream frame on {req_id} after finish: true"));
    }
    entry.frames.push(StreamFrame {
        content: content.to_owned(),
        finish,
        at: Instant::now(),
    });
}
