//! The text of documents: PDF pages, `.docx`/`.odt` paragraphs, `.xlsx`
//! rows (issue 46), for `read_file` and `web_fetch`. Pure functions over
//! bytes the caller read under its own rules (the file tools' confinement,
//! `web_fetch`'s address checks): this module opens nothing itself.
//!
//! **Bounded.** A document is at most [`MAX_DOCUMENT_BYTES`]; one read
//! returns at most [`MAX_PAGES`] PDF pages and [`MAX_TEXT_BYTES`] of text
//! (the caller's output keeper holds the rest); no stream or archive entry
//! inflates past [`MAX_INFLATED_BYTES`]; an archive of more than
//! [`MAX_ENTRIES`] entries is refused; nesting in a PDF is bounded by
//! lopdf's parser (100 levels). Hostile files (a decompression bomb, a zip
//! bomb in a `.docx`, deep nesting, a file that only claims to be a PDF,
//! an encrypted one) are refused with a [`DocumentError`] that says why;
//! `fuzz/fuzz_targets/documents.rs` drives [`extract`] with arbitrary bytes.

mod office;
mod pdf;

/// The largest document read at all, in bytes.
pub const MAX_DOCUMENT_BYTES: u64 = 32 * 1024 * 1024;
/// The most one PDF stream or archive entry may inflate to, in bytes.
pub const MAX_INFLATED_BYTES: usize = 16 * 1024 * 1024;
/// The most entries an Office archive may hold.
pub const MAX_ENTRIES: usize = 5_000;
/// The most PDF pages one read returns.
pub const MAX_PAGES: usize = 50;
/// PDF pages one read returns when the caller names no count.
pub const DEFAULT_PAGES: usize = 20;
/// The most text one read returns, in bytes; the rest is said to be cut.
pub const MAX_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// What a refusal says when the PDF parser panicked on a file (the fuzz
/// entry looks for it: a panic is a bug to report upstream).
#[doc(hidden)]
pub const PARSER_PANICKED: &str = "the parser failed on it";

/// A document format this module reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A PDF: text per page.
    Pdf,
    /// A Word document (Office Open XML).
    Docx,
    /// An OpenDocument text.
    Odt,
    /// An Excel workbook (Office Open XML): rows per sheet.
    Xlsx,
}

impl Kind {
    /// The document kind of a file called `name` that starts with `head`:
    /// by its magic bytes for a PDF, by its extension for the Office
    /// formats (all zip archives), and by its extension for a `.pdf` that
    /// is not one (so it is refused as such instead of read as text).
    pub fn detect(name: &str, head: &[u8]) -> Option<Kind> {
        let lower = name.to_ascii_lowercase();
        if head.starts_with(b"%PDF-") || lower.ends_with(".pdf") {
            return Some(Kind::Pdf);
        }
        [
            (".docx", Kind::Docx),
            (".odt", Kind::Odt),
            (".xlsx", Kind::Xlsx),
        ]
        .into_iter()
        .find(|(ext, _)| lower.ends_with(ext))
        .map(|(_, kind)| kind)
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pdf => "PDF",
            Kind::Docx => ".docx",
            Kind::Odt => ".odt",
            Kind::Xlsx => ".xlsx",
        }
    }
}

/// Which PDF pages to read: 1-based `first`, at most `count` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pages {
    /// The first page, 1-based.
    pub first: usize,
    /// How many pages, at most [`MAX_PAGES`].
    pub count: usize,
}

impl Default for Pages {
    fn default() -> Self {
        Pages {
            first: 1,
            count: DEFAULT_PAGES,
        }
    }
}

/// Why a document's text could not be read. Every variant is told to the
/// model as it is; none is retryable with the same bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The bytes are not a document of the kind their name or type claims.
    #[error("it is not a valid {kind} file ({detail})")]
    Invalid {
        /// The claimed kind.
        kind: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The document is encrypted; no password is tried but the empty one.
    #[error("it is encrypted (password-protected), so its text cannot be read")]
    Encrypted,
    /// Larger than [`MAX_DOCUMENT_BYTES`].
    #[error("it is too large to read ({size} bytes; the limit is {max} bytes)")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A decompression bomb, too many entries, or nesting past the limit.
    #[error("it was refused as hostile: {0}")]
    Hostile(String),
    /// The pages asked for are past the end.
    #[error("page {asked} is past the end: it has {pages} page(s)")]
    PastEnd {
        /// The first page asked for.
        asked: usize,
        /// How many it has.
        pages: usize,
    },
    /// A PDF whose pages carry no text (a scan).
    #[error(
        "it has {pages} page(s) but no text layer on pages {first}-{last} (a scanned document?); \
         its text cannot be extracted"
    )]
    NoText {
        /// How many pages it has.
        pages: usize,
        /// The first page looked at.
        first: usize,
        /// The last page looked at.
        last: usize,
    },
}

/// A document's text as one read returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extracted {
    /// The text, with page (PDF, and explicit page breaks in `.docx` and
    /// `.odt`) or sheet (`.xlsx`) markers, and for a PDF a last line that
    /// says which pages of how many it holds.
    pub text: String,
    /// The PDF page the next read would start at, when pages are left.
    pub next_page: Option<usize>,
}

/// The most pages of a scan one read sends to a vision model (each is a
/// model call).
pub const MAX_SCANNED_PAGES: usize = 10;

/// The page images of a scanned PDF (`pages` of it, at most
/// [`MAX_SCANNED_PAGES`]): each page's embedded JPEG with its page number,
/// from 1; pages without one are left out.
pub fn scanned_pages(bytes: &[u8], pages: Pages) -> Result<Vec<(usize, Vec<u8>)>, DocumentError> {
    let size = bytes.len() as u64;
    if size > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge {
            size,
            max: MAX_DOCUMENT_BYTES,
        });
    }
    pdf::page_jpegs(bytes, pages)
}

/// The text of a document of `kind`; for a PDF only `pages` of it.
pub fn extract(kind: Kind, bytes: &[u8], pages: Pages) -> Result<Extracted, DocumentError> {
    let size = bytes.len() as u64;
    if size > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge {
            size,
            max: MAX_DOCUMENT_BYTES,
        });
    }
    let mut out = match kind {
        Kind::Pdf => pdf::extract(bytes, pages)?,
        Kind::Docx | Kind::Odt | Kind::Xlsx => Extracted {
            text: office::extract(kind, bytes)?,
            next_page: None,
        },
    };
    if out.text.len() > MAX_TEXT_BYTES {
        let cut = crate::text::floor_char_boundary(&out.text, MAX_TEXT_BYTES);
        out.text.truncate(cut);
        out.text.push_str(&format!(
            "\n[document text cut at {MAX_TEXT_BYTES} bytes]\n"
        ));
    }
    Ok(out)
}
