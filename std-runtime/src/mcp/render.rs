//! What the model sees of an MCP tool: its name, and its results as text.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// The longest function name providers accept (`^[a-zA-Z0-9_-]{1,64}$`).
const MAX_NAME: usize = 64;

/// `mcp_SERVER_TOOL`, with characters providers refuse replaced by `_`;
/// a name too long is cut and ends in a short hash of the full name, so
/// two long names stay distinct. (Two names that differ only in replaced
/// characters can still collide; the registry builder skips the second.)
pub fn tool_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp_{server}_{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME {
        return clean;
    }
    let hash = raw.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let suffix = format!("_{:08x}", hash as u32);
    // `clean` is ASCII, so byte and char positions agree.
    format!("{}{suffix}", &clean[..MAX_NAME - suffix.len()])
}

/// Bytes of base64 in `data` → bytes of content.
fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// The result of one call as text: every content block in order (text as
/// is; images, audio and binary resources described, never pasted as
/// base64), then the structured content when it adds something.
pub fn render(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!(
                "[image: {}, {} bytes — not shown; the model receives text only]",
                i.mime_type,
                decoded_len(&i.data)
            ),
            ContentBlock::Audio(a) => format!(
                "[audio: {}, {} bytes — not shown]",
                a.mime_type,
                decoded_len(&a.data)
            ),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource {uri}: {}, {} bytes of binary data — not shown]",
                    mime_type.as_deref().unwrap_or("unknown type"),
                    decoded_len(blob)
                ),
                _ => "[resource of a kind hermes does not know — not shown]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => {
                let mut s = format!("[resource link: {} ({})", link.uri, link.name);
                if let Some(d) = &link.description {
                    s.push_str(&format!(": {d}"));
                }
                s.push(']');
                s
            }
            _ => "[content of a kind hermes does not know — not shown]".to_owned(),
        });
    }
    if let Some(structured) = &result.structured_content {
        let json = serde_json::to_string_pretty(structured).unwrap_or_default();
        // Servers often repeat the structured result as text; once is enough.
        let compact = serde_json::to_string(structured).unwrap_or_default();
        let repeated = parts.iter().any(|p| {
            let p = p.trim();
            p == json || p == compact
        });
        if !repeated {
            parts.push(format!("structured content:\n{json}"));
        }
    }
    if parts.is_empty() {
        return "(the tool returned no content)".to_owned();
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_what_providers_accept() {
        assert_eq!(tool_name("everything", "get-sum"), "mcp_everything_get-sum");
        let odd = tool_name("fs", "read.file");
        assert_eq!(odd, "mcp_fs_read_file");
        let long_a = tool_name("server", &"a".repeat(80));
        let long_b = tool_name("server", &format!("{}b", "a".repeat(80)));
        assert!(long_a.len() <= 64 && long_b.len() <= 64);
        assert_ne!(long_a, long_b);
        assert!(
            long_a
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn content_blocks_are_described_not_pasted() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///a.gz", "mimeType": "application/gzip", "blob": "H4sIAAAA"}},
                {"type": "resource_link", "uri": "test://r/1", "name": "r1", "description": "first"}
            ],
            "structuredContent": {"temperature": 22}
        }))
        .unwrap();
        let text = render(&result);
        assert!(
            text.starts_with("hello\n[image: image/png, 8 bytes"),
            "{text}"
        );
        assert!(text.contains("[resource file:///a.txt]\ninside"), "{text}");
        assert!(
            text.contains("application/gzip, 6 bytes of binary data"),
            "{text}"
        );
        assert!(
            text.contains("[resource link: test://r/1 (r1): first]"),
            "{text}"
        );
        assert!(
            text.contains("structured content:\n{\n  \"temperature\": 22\n}"),
            "{text}"
        );
        assert!(!text.contains("iVBOR"), "no base64 for the model");
    }

    #[test]
    fn structured_content_repeated_as_text_is_shown_once() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "{\"a\":1}"}],
            "structuredContent": {"a": 1}
        }))
        .unwrap();
        assert_eq!(render(&result), "{\"a\":1}");
    }
}
