//! Scanned PDFs through a vision model (issue 46): when a PDF's pages carry
//! no text and a model that sees images is configured, `read_file` sends
//! each page's embedded JPEG (`documents::scanned_pages`, no rendering) to
//! it, page by page, and returns the transcriptions with page markers.

use hermes_core::ToolContext;

use super::VisionSource;
use crate::documents::{DocumentError, MAX_SCANNED_PAGES, Pages, scanned_pages};

/// What the vision model is asked about each page.
const QUESTION: &str = "This is one page of a scanned document. Transcribe all of its text \
verbatim, in reading order; describe figures in one line each. Say nothing else.";

/// The vision model and the call a scan's pages are read for.
pub(super) struct Scans<'a> {
    pub(super) vision: &'a VisionSource,
    pub(super) ctx: &'a ToolContext<'a>,
}

impl Scans<'_> {
    /// The text of `pages` of the scan `bytes` (`no_text` said it has none
    /// of its own), or why it cannot be read.
    pub(super) fn transcribe(
        &self,
        bytes: &[u8],
        pages: Pages,
        no_text: &DocumentError,
    ) -> Result<String, String> {
        let &DocumentError::NoText { pages: total, .. } = no_text else {
            return Err(no_text.to_string());
        };
        let images = scanned_pages(bytes, pages).map_err(|e| e.to_string())?;
        if images.is_empty() {
            return Err(format!(
                "{no_text}, and its pages hold no JPEG image a vision model could read"
            ));
        }
        let first = pages.first.max(1);
        let last = total.min(first.saturating_add(pages.count.clamp(1, MAX_SCANNED_PAGES)) - 1);
        let mut out = String::new();
        for (page, jpeg) in images {
            if self.ctx.interrupt.is_set() {
                out.push_str("[interrupted: the remaining pages were not read]\n");
                break;
            }
            out.push_str(&format!(
                "--- page {page} (scanned; read by the vision model) ---\n"
            ));
            let stem = super::vision::file_stem(&format!("scan-{}-p{page}", self.ctx.tool_call_id));
            match super::vision::look(self.vision, &stem, &jpeg, QUESTION) {
                Ok(text) => out.push_str(text.trim_end()),
                Err(why) => out.push_str(&format!("[this page could not be read: {why}]")),
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "[PDF without a text layer: pages {first}-{last} of {total} read from their images by the vision model]\n"
        ));
        if last < total {
            out.push_str(&format!(
                "[use offset={} to read the next pages]\n",
                last.saturating_add(1)
            ));
        }
        Ok(out)
    }
}
