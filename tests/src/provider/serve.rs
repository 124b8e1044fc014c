//! The provider's HTTP/1.1 side: one connection's keep-alive loop, the
//! routes (`chat/completions`, `models`, `audio/transcriptions`), the
//! context-window refusals, and the answers (JSON bodies and chunked event
//! streams).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::multipart;

use super::checks::check_request;
use super::{Advertise, Overflow, Reply, State, Window, lock, provider_tokens};

/// Answers the requests of one connection in turn (HTTP/1.1 keep-alive)
/// until the client closes it.
pub(super) fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    while !reader.fill_buf()?.is_empty() {
        let mut cut = false;
        serve_request(&mut reader, &mut out, state, &mut cut)?;
        let idle = if cut {
            Some(Duration::from_millis(500))
        } else {
            idle_close(state)
        };
        if let Some(idle) = idle {
            // Closed at the worst moment for a client: when its next
            // request arrives (unread), or after `idle` if none does.
            out.set_read_timeout(Some(idle.max(Duration::from_millis(1))))?;
            let _ = reader.fill_buf();
            return Ok(());
        }
    }
    Ok(())
}

/// Whether to close this connection after its answer, and how long it may
/// stay idle first, when idle connections are closed at random.
fn idle_close(state: &Mutex<State>) -> Option<Duration> {
    let mut st = lock(state);
    let seed = st.idle_close.as_mut()?;
    // xorshift64: reproducible from the test's seed.
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let draw = *seed;
    (draw % 2 == 0).then(|| Duration::from_millis((draw >> 8) % 30))
}

/// Reads one request and answers it with a self-delimited response
/// (`Content-Length`, or chunked for event streams).
/// `cut` is set when the answer was cut short, the way a server that then
/// closes the connection cuts it.
fn serve_request(
    reader: &mut BufReader<TcpStream>,
    out: &mut TcpStream,
    state: &Mutex<State>,
    cut: &mut bool,
) -> std::io::Result<()> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        // Closed before a request (a client killed after connecting): no
        // request, so nothing to judge.
        return Ok(());
    }
    let mut content_length = 0usize;
    let mut has_json_type = false;
    let mut content_type = String::new();
    let mut auth = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "content-length" {
                content_length = v.trim().parse().unwrap_or(0);
            }
            if k == "authorization" {
                auth = Some(v.trim().to_owned());
            }
            if k == "content-type" {
                has_json_type = v.contains("application/json");
                content_type = v.trim().to_owned();
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));

    let (window, models, models_status) = {
        let mut st = lock(state);
        st.auth.push(auth);
        (st.window, st.models.clone(), st.models_status)
    };
    if method == "GET" && path.ends_with("/models") {
        if let Some(code) = models_status {
            let body = json!({"error": {"message": "Invalid API key provided", "code": code}});
            return respond_json(out, code, &body);
        }
        let data: Vec<Value> = models
            .iter()
            .map(|id| {
                let mut entry = json!({"id": id, "object": "model"});
                match window {
                    Some(w) if w.advertise == Advertise::ModelsContextLength => {
                        entry["context_length"] = w.tokens.into();
                    }
                    Some(w) if w.advertise == Advertise::ModelsMaxModelLen => {
                        entry["max_model_len"] = w.tokens.into();
                    }
                    _ => {}
                }
                entry
            })
            .collect();
        let body = json!({"object": "list", "data": data});
        return respond_json(out, 200, &body);
    }
    if let Some(w) = window {
        if method == "GET" && path == "/props" && w.advertise == Advertise::Props {
            let body =
                json!({"default_generation_settings": {"n_ctx": w.tokens}, "total_slots": 1});
            return respond_json(out, 200, &body);
        }
        if method == "POST" && path == "/api/show" && w.advertise == Advertise::OllamaShow {
            let body = json!({
                "parameters": format!("stop \"<|im_end|>\"\nnum_ctx {}", w.tokens),
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
            });
            return respond_json(out, 200, &body);
        }
    }
    if method == "POST" && path.ends_with("/audio/transcriptions") {
        return transcribe(out, state, &content_type, &body);
    }
    // Other metadata endpoints (llama.cpp's /props, Ollama's /api/…) are
    // probed for the context window; this provider has none, like OpenAI.
    if (method == "GET" && !path.ends_with("/chat/completions")) || path.contains("/api/") {
        return respond_json(out, 404, &json!({"error": {"message": "not found"}}));
    }
    let violation = if method != "POST" || !path.ends_with("/chat/completions") {
        Some(format!("unexpected request {method} {path}"))
    } else if !has_json_type {
        Some("missing Content-Type: application/json".into())
    } else {
        None
    };
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let violation = violation.or_else(|| match &parsed {
        Err(e) => Some(format!("body is not JSON: {e}")),
        Ok(v) => check_request(v).err(),
    });
    if let Some(v) = violation {
        lock(state).violations.push(v.clone());
        return respond_json(out, 400, &json!({"error": {"message": v}}));
    }
    let request = parsed.unwrap_or(Value::Null);
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let count = provider_tokens(&body);
    let (reply, responder, usage) = {
        let mut st = lock(state);
        st.requests.push(request.clone());
        st.counts.push(count);
        if let Some(w) = st.window
            && count > w.tokens
        {
            st.refused.push(count);
            drop(st);
            *cut = w.overflow == Overflow::LlamaCppPython && stream;
            return refuse(out, w, count, stream);
        }
        (st.script.pop_front(), st.responder.clone(), st.usage)
    };
    let count = usage.then_some(count);
    let reply = reply.unwrap_or_else(|| match responder {
        Some(r) => r(&request),
        None => Reply::text("(script exhausted)"),
    });
    let (reply, extra, usage) = match reply {
        Reply::With {
            reply,
            extra,
            usage,
        } => (*reply, extra, usage),
        other => (other, json!({}), None),
    };
    let decoration = Decoration {
        extra: &extra,
        usage: usage.as_ref(),
        prompt_tokens: count,
    };
    match reply {
        Reply::Status(code, message) => respond_json(
            out,
            code,
            &json!({"error": {"message": message, "code": code}}),
        ),
        Reply::Text(t) => answer(out, stream, &[t], Duration::ZERO, None, &decoration),
        Reply::SlowText { pieces, delay } => answer(out, stream, &pieces, delay, None, &decoration),
        Reply::ToolCalls(calls) => {
            answer(out, stream, &[], Duration::ZERO, Some(&calls), &decoration)
        }
        Reply::With { .. } => respond_json(
            out,
            500,
            &json!({"error": {"message": "nested Reply::With in the test script"}}),
        ),
    }
}

/// What an answer reports and adds: a [`Reply::With`]'s fields and usage,
/// else the provider's own prompt count (`None`: no usage at all).
struct Decoration<'a> {
    extra: &'a Value,
    usage: Option<&'a Value>,
    prompt_tokens: Option<u64>,
}

fn merge(target: &mut Value, extra: &Value) {
    if let (Value::Object(t), Value::Object(e)) = (target, extra) {
        for (k, v) in e {
            t.insert(k.clone(), v.clone());
        }
    }
}

/// `POST /audio/transcriptions` as OpenAI's: a form with a `file` part
/// (named, not empty) and a `model` field, else a 400 recorded as a
/// violation; then the configured answer.
fn transcribe(
    out: &mut TcpStream,
    state: &Mutex<State>,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let fields = multipart::fields(content_type, body);
    let file_ok = fields.iter().any(|f| {
        f.name == "file"
            && f.file_name.as_deref().is_some_and(|n| !n.is_empty())
            && !f.data.is_empty()
    });
    let model_ok = fields
        .iter()
        .any(|f| f.name == "model" && !f.data.is_empty());
    let mut st = lock(state);
    if !(file_ok && model_ok) {
        let v = format!(
            "transcription request without a named, non-empty `file` part and a `model` field ({} parts)",
            fields.len()
        );
        st.violations.push(v.clone());
        drop(st);
        return respond_json(out, 400, &json!({"error": {"message": v}}));
    }
    st.transcriptions.push(fields);
    let reply = st.transcript.clone();
    drop(st);
    match reply {
        Some(Reply::Text(text)) => respond_json(out, 200, &json!({ "text": text })),
        Some(Reply::Status(code, message)) => respond_json(
            out,
            code,
            &json!({"error": {"message": message, "type": "invalid_request_error"}}),
        ),
        _ => respond_json(
            out,
            404,
            &json!({"error": {"message": "no transcription model"}}),
        ),
    }
}

/// Refuses a request of `n` tokens over `w`, as the provider `w` imitates.
fn refuse(out: &mut TcpStream, w: Window, n: u64, stream: bool) -> std::io::Result<()> {
    let limit = w.tokens;
    let body = match w.overflow {
        Overflow::OpenAi => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {n} tokens. Please reduce the length of the messages."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        Overflow::OpenRouter => json!({"error": {
            "message": format!("This endpoint's maximum context length is {limit} tokens. However, you requested about {n} tokens ({n} of text input, 0 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically."),
            "code": 400, "metadata": {"provider_name": "Fake"}}}),
        Overflow::Anthropic => json!({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": format!("prompt is too long: {n} tokens > {limit} maximum")}}),
        Overflow::LlamaCpp => json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
            "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": limit}}),
        Overflow::Vllm => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your request has {n} input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value={n})"),
            "type": "BadRequestError", "param": "input_tokens", "code": 400}}),
        Overflow::LlamaCppPython if stream => {
            // Its log says `ValueError: Requested tokens (n) exceed context
            // window of limit`; the client sees a stream that just ends, and
            // the server closes the connection after it.
            let mut events = EventStream::start(out)?;
            return events.end();
        }
        Overflow::LlamaCppPython => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, you requested {n} tokens ({n} in the messages, None in the completion). Please reduce the length of the messages or completion."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    };
    respond_json(out, 400, &body)
}

fn respond_json(out: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

fn tool_calls_json(calls: &[(String, String, String)]) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, (id, name, args))| {
                json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect(),
    )
}

fn answer(
    out: &mut TcpStream,
    stream: bool,
    pieces: &[String],
    delay: Duration,
    calls: Option<&[(String, String, String)]>,
    decoration: &Decoration<'_>,
) -> std::io::Result<()> {
    let finish = if calls.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    // No count: this provider reports no usage (some local servers do not).
    let usage = decoration.usage.cloned().or_else(|| {
        decoration
            .prompt_tokens
            .map(|p| json!({"prompt_tokens": p, "completion_tokens": 7, "total_tokens": p + 7}))
    });
    if !stream {
        for _ in pieces {
            thread::sleep(delay);
        }
        let mut message = json!({"role": "assistant", "content": pieces.concat()});
        if let Some(c) = calls {
            message["content"] = Value::Null;
            message["tool_calls"] = tool_calls_json(c);
        }
        merge(&mut message, decoration.extra);
        let mut body = json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        });
        if let Some(u) = usage {
            body["usage"] = u;
        }
        return respond_json(out, 200, &body);
    }
    let mut events = EventStream::start(out)?;
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut send = |v: Value| events.send(&format!("data: {v}\n\n"));
    let mut first = json!({"role": "assistant", "content": ""});
    merge(&mut first, decoration.extra);
    send(chunk(first, Value::Null))?;
    for p in pieces {
        thread::sleep(delay);
        send(chunk(json!({"content": p}), Value::Null))?;
    }
    if let Some(c) = calls {
        send(chunk(
            json!({"tool_calls": tool_calls_json(c)}),
            Value::Null,
        ))?;
    }
    send(chunk(json!({}), json!(finish)))?;
    if let Some(u) = usage {
        send(
            json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model", "choices": [], "usage": u}),
        )?;
    }
    events.send("data: [DONE]\n\n")?;
    events.end()
}

/// A `text/event-stream` response in chunked transfer encoding, so the
/// connection stays usable for the next request.
struct EventStream<'a> {
    out: &'a mut TcpStream,
}

impl<'a> EventStream<'a> {
    fn start(out: &'a mut TcpStream) -> std::io::Result<Self> {
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )?;
        out.flush()?;
        Ok(EventStream { out })
    }

    /// One piece of the stream, sent at once as its own chunk.
    fn send(&mut self, text: &str) -> std::io::Result<()> {
        let framed = format!("{:x}\r\n{text}\r\n", text.len());
        self.out.write_all(framed.as_bytes())?;
        self.out.flush()
    }

    /// The last chunk: the body ends, the connection stays open.
    fn end(&mut self) -> std::io::Result<()> {
        self.out.write_all(b"0\r\n\r\n")?;
        self.out.flush()
    }
}
