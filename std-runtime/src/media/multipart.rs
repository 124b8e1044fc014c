//! A `multipart/form-data` body (RFC 7578) built in memory: text fields and
//! one file, what `POST /audio/transcriptions` takes.

/// A form being built; [`Form::finish`] gives the body and its type.
#[derive(Debug, Default)]
pub(super) struct Form {
    parts: Vec<(String, Vec<u8>)>,
}

/// A header parameter value in quotes, with `"` and line breaks
/// percent-encoded as browsers send them, so a file name cannot end its
/// header early.
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
    /// Adds a text field.
    pub(super) fn text(mut self, name: &str, value: &str) -> Self {
        let head = format!("Content-Disposition: form-data; name={}\r\n", quoted(name));
        self.parts.push((head, value.as_bytes().to_vec()));
        self
    }

    /// Adds a file field.
    pub(super) fn file(
        mut self,
        name: &str,
        file_name: &str,
        content_type: &str,
        data: &[u8],
    ) -> Self {
        let content_type: String = content_type
            .chars()
            .filter(|c| !matches!(c, '\r' | '\n'))
            .collect();
        let head = format!(
            "Content-Disposition: form-data; name={}; filename={}\r\nContent-Type: {content_type}\r\n",
            quoted(name),
            quoted(file_name)
        );
        self.parts.push((head, data.to_vec()));
        self
    }

    /// The body and its `Content-Type`, with a random boundary found in no
    /// part.
    pub(super) fn finish(self) -> (String, Vec<u8>) {
        loop {
            let boundary = format!("hermes-{:032x}", rand::random::<u128>());
            let needle = boundary.as_bytes();
            let clash = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle);
            if self
                .parts
                .iter()
                .any(|(head, data)| clash(head.as_bytes()) || clash(data))
            {
                continue;
            }
            let mut body = Vec::new();
            for (head, data) in &self.parts {
                body.extend_from_slice(format!("--{boundary}\r\n{head}\r\n").as_bytes());
                body.extend_from_slice(data);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            return (format!("multipart/form-data; boundary={boundary}"), body);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fields_and_a_file_between_boundaries_and_names_cannot_break_headers() {
        let (ct, body) = Form::default()
            .text("model", "whisper-1")
            .file("file", "a\"b\r\n.ogg", "audio/ogg", b"OggS\x00\x01")
            .finish();
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
        )));
        assert!(
            text.contains("filename=\"a%22b%0D%0A.ogg\"\r\nContent-Type: audio/ogg\r\n\r\nOggS")
        );
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
