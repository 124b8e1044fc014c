//! A `multipart/form-data` body (RFC 7578), built in memory: what Telegram's
//! `sendDocument` and a transcription endpoint (`POST
//! /audio/transcriptions`) take. Small on purpose — text fields and in-memory files;
//! ureq's own multipart support would bring a MIME table for guessing types
//! the caller already knows.

use std::fmt::Write as _;

/// A form being built. [`Form::finish`] gives the body and its content type.
#[derive(Debug, Default, Clone)]
pub struct Form {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
struct Part {
    /// The part's headers, without the boundary line.
    head: String,
    data: Vec<u8>,
}

/// A finished body.
#[derive(Debug, Clone)]
pub struct Body {
    /// `multipart/form-data; boundary=…`, for the `Content-Type` header.
    pub content_type: String,
    /// The encoded parts.
    pub bytes: Vec<u8>,
}

/// A name or file name as a quoted header parameter: `"` and line breaks
/// percent-encoded, the way browsers send them (WHATWG HTML, "multipart/
/// form-data encoding algorithm"), so a name cannot end its header early.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("%22"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Form {
    /// An empty form.
    pub fn new() -> Self {
        Form::default()
    }

    /// Adds a text field.
    pub fn text(mut self, name: &str, value: &str) -> Self {
        let head = format!("Content-Disposition: form-data; name={}\r\n", quoted(name));
        self.parts.push(Part {
            head,
            data: value.as_bytes().to_vec(),
        });
        self
    }

    /// Adds a file field with its file name and content type.
    pub fn file(mut self, name: &str, file_name: &str, content_type: &str, data: Vec<u8>) -> Self {
        let content_type: String = content_type
            .chars()
            .filter(|c| !matches!(c, '\r' | '\n'))
            .collect();
        let head = format!(
            "Content-Disposition: form-data; name={}; filename={}\r\nContent-Type: {content_type}\r\n",
            quoted(name),
            quoted(file_name)
        );
        self.parts.push(Part { head, data });
        self
    }

    /// Encodes the form with a random boundary that occurs in none of its
    /// parts.
    pub fn finish(self) -> Body {
        loop {
            let boundary = format!("hermes-{:032x}", rand::random::<u128>());
            if let Some(body) = self.encode(&boundary) {
                return body;
            }
        }
    }

    /// Encodes the form with `boundary`; `None` when a part contains it.
    fn encode(&self, boundary: &str) -> Option<Body> {
        let needle = boundary.as_bytes();
        let clash = |bytes: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        if self
            .parts
            .iter()
            .any(|p| clash(&p.data) || clash(p.head.as_bytes()))
        {
            return None;
        }
        let size: usize = self
            .parts
            .iter()
            .map(|p| p.head.len() + p.data.len() + boundary.len() + 8)
            .sum();
        let mut bytes = Vec::with_capacity(size + boundary.len() + 8);
        for part in &self.parts {
            let mut line = String::new();
            let _ = write!(line, "--{boundary}\r\n{}\r\n", part.head);
            bytes.extend_from_slice(line.as_bytes());
            bytes.extend_from_slice(&part.data);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        Some(Body {
            content_type: format!("multipart/form-data; boundary={boundary}"),
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn parts_are_framed_as_rfc_7578_says() {
        let form = Form::new().text("chat_id", "42").file(
            "document",
            "reply.md",
            "text/markdown; charset=utf-8",
            b"# hi\r\n".to_vec(),
        );
        let body = form.encode("XYZ").unwrap();
        assert_eq!(body.content_type, "multipart/form-data; boundary=XYZ");
        assert_eq!(
            String::from_utf8(body.bytes).unwrap(),
            "--XYZ\r\n\
             Content-Disposition: form-data; name=\"chat_id\"\r\n\
             \r\n\
             42\r\n\
             --XYZ\r\n\
             Content-Disposition: form-data; name=\"document\"; filename=\"reply.md\"\r\n\
             Content-Type: text/markdown; charset=utf-8\r\n\
             \r\n\
             # hi\r\n\
             \r\n\
             --XYZ--\r\n"
        );
    }

    #[test]
    fn a_hostile_file_name_cannot_add_headers_or_end_the_parameter() {
        let form = Form::new().file(
            "document",
            "a\".md\r\nContent-Type: text/html",
            "text/plain\r\nX-Evil: 1",
            b"x".to_vec(),
        );
        let text = String::from_utf8(form.encode("B").unwrap().bytes).unwrap();
        assert!(
            text.contains("filename=\"a%22.md%0D%0AContent-Type: text/html\"\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Content-Type: text/plainX-Evil: 1\r\n"),
            "{text}"
        );
        assert_eq!(text.matches("\r\nContent-Type:").count(), 1, "{text}");
    }

    #[test]
    fn the_boundary_never_occurs_in_the_data() {
        let form = Form::new().text("a", "--B-- and B");
        assert!(form.encode("B").is_none());
        let body = form.finish();
        let boundary = body.content_type.split("boundary=").nth(1).unwrap();
        let text = String::from_utf8(body.bytes).unwrap();
        // The data itself plus the three delimiter lines.
        assert_eq!(text.matches(boundary).count(), 2);
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
