//! Reading a `multipart/form-data` body, as fake servers must to check an
//! upload (`POST /audio/transcriptions`).

/// One part of a form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormField {
    /// The field name.
    pub name: String,
    /// The file name, for a file part.
    pub file_name: Option<String>,
    /// The part's `Content-Type`, if given.
    pub content_type: Option<String>,
    /// The bytes.
    pub data: Vec<u8>,
}

/// The `boundary` of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The parts of `body` sent with `content_type`; empty when it is not a
/// form, what parsed when it is malformed.
pub fn fields(content_type: &str, body: &[u8]) -> Vec<FormField> {
    let Some(boundary) = boundary(content_type) else {
        return Vec::new();
    };
    let delimiter = format!("--{boundary}");
    let find = |from: usize, needle: &[u8]| {
        body.get(from..)?
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let mut out = Vec::new();
    let Some(first) = find(0, delimiter.as_bytes()) else {
        return out;
    };
    let mut at = first + delimiter.len();
    let next_delimiter = format!("\r\n{delimiter}");
    loop {
        if body.get(at..at + 2) == Some(b"--") {
            break;
        }
        let Some(head_end) = find(at, b"\r\n\r\n") else {
            break;
        };
        let Some(next) = find(head_end + 4, next_delimiter.as_bytes()) else {
            break;
        };
        let head = String::from_utf8_lossy(&body[at..head_end]).into_owned();
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .unwrap_or("");
        let param = |name: &str| {
            disposition
                .split(';')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        };
        let content_type = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        });
        if let Some(name) = param("name") {
            out.push(FormField {
                name,
                file_name: param("filename"),
                content_type,
                data: body[head_end + 4..next].to_vec(),
            });
        }
        at = next + next_delimiter.len();
    }
    out
}
