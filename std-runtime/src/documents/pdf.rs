//! PDF text through lopdf: loaded with bounded decompression, on a thread
//! with a stack large enough for its parser's bounded nesting.

use lopdf::{DecompressError, Document, Error as PdfError, LoadOptions};

use super::{DocumentError, Extracted, MAX_INFLATED_BYTES, MAX_PAGES, Pages};

/// The parser recurses once per nesting level (at most 100, lopdf's
/// limit); an unoptimised build needs more than a default thread's stack
/// for that, so parsing gets its own thread with room to spare.
const PARSER_STACK_BYTES: usize = 32 * 1024 * 1024;

/// How far into the file the `%PDF-` header may be (readers accept junk
/// before it, as the specification's implementation notes allow).
const HEADER_WINDOW: usize = 1024;

pub(super) fn extract(bytes: &[u8], pages: Pages) -> Result<Extracted, DocumentError> {
    let head = &bytes[..bytes.len().min(HEADER_WINDOW)];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        return Err(invalid("no %PDF- header"));
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("pdf-text".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(s, || read_pages(bytes, pages))
            .map_err(|e| invalid(format!("cannot start the parser: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(invalid(super::PARSER_PANICKED)))
    })
}

fn invalid(detail: impl Into<String>) -> DocumentError {
    DocumentError::Invalid {
        kind: "PDF",
        detail: detail.into(),
    }
}

/// What a lopdf error means for the model.
fn refusal(e: PdfError) -> DocumentError {
    match e {
        PdfError::Decompress(DecompressError::MemoryLimitExceeded { limit }) => {
            DocumentError::Hostile(format!(
                "a stream inflates past {limit} bytes (a decompression bomb?)"
            ))
        }
        PdfError::RecursionLimit | PdfError::ReferenceLimit | PdfError::ReferenceCycle(_) => {
            DocumentError::Hostile(format!("its objects nest or refer too deeply ({e})"))
        }
        PdfError::Decryption(_)
        | PdfError::InvalidPassword
        | PdfError::UnsupportedSecurityHandler(_) => DocumentError::Encrypted,
        other => invalid(other.to_string()),
    }
}

/// The embedded JPEG (`DCTDecode`) images of `pages`, the largest of each
/// page, for a scan without a text layer (issue 46). No rendering: a scan's
/// page is almost always one JPEG, which goes to a vision model as it is;
/// pages without one are left out.
pub(super) fn page_jpegs(
    bytes: &[u8],
    pages: Pages,
) -> Result<Vec<(usize, Vec<u8>)>, DocumentError> {
    let head = &bytes[..bytes.len().min(HEADER_WINDOW)];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        return Err(invalid("no %PDF- header"));
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("pdf-images".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(s, || read_jpegs(bytes, pages))
            .map_err(|e| invalid(format!("cannot start the parser: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(invalid(super::PARSER_PANICKED)))
    })
}

fn read_jpegs(bytes: &[u8], pages: Pages) -> Result<Vec<(usize, Vec<u8>)>, DocumentError> {
    let doc = load(bytes)?;
    let numbers: Vec<(u32, lopdf::ObjectId)> = doc.get_pages().into_iter().collect();
    let first = pages.first.max(1);
    if first > numbers.len() {
        return Err(DocumentError::PastEnd {
            asked: first,
            pages: numbers.len(),
        });
    }
    let count = pages.count.clamp(1, super::MAX_SCANNED_PAGES);
    let mut out = Vec::new();
    for (index, (_, id)) in numbers.iter().enumerate().skip(first - 1).take(count) {
        let Ok(images) = doc.get_page_images(*id) else {
            continue;
        };
        let largest = images
            .iter()
            .filter(|i| {
                i.filters.as_deref() == Some(&["DCTDecode".to_owned()][..])
                    && i.content.len() as u64 <= crate::media::MAX_IMAGE_BYTES
            })
            .max_by_key(|i| i.width.saturating_mul(i.height));
        if let Some(image) = largest {
            out.push((index + 1, image.content.to_vec()));
        }
    }
    Ok(out)
}

/// The document, loaded with bounded decompression; an encrypted one that
/// does not open with the empty password is refused.
fn load(bytes: &[u8]) -> Result<Document, DocumentError> {
    let options = LoadOptions {
        max_decompressed_size: Some(MAX_INFLATED_BYTES),
        ..LoadOptions::default()
    };
    let doc = Document::load_mem_with_options(bytes, options).map_err(|e| {
        match refusal(e) {
            // A security handler lopdf cannot even parse is still one.
            DocumentError::Invalid { .. } if mentions_encrypt(bytes) => DocumentError::Encrypted,
            other => other,
        }
    })?;
    // Loaded with the empty password: an encrypted file that opened is
    // readable (its text decrypted); one that stayed encrypted is not.
    if doc.is_encrypted() && doc.encryption_state.is_none() {
        return Err(DocumentError::Encrypted);
    }
    Ok(doc)
}

fn read_pages(bytes: &[u8], pages: Pages) -> Result<Extracted, DocumentError> {
    let doc = load(bytes)?;
    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
    let total = numbers.len();
    if total == 0 {
        return Err(invalid("it has no pages"));
    }
    let first = pages.first.max(1);
    if first > total {
        return Err(DocumentError::PastEnd {
            asked: first,
            pages: total,
        });
    }
    let last = total.min(first + pages.count.clamp(1, MAX_PAGES) - 1);
    let mut text = String::new();
    let mut any_text = false;
    for (index, number) in numbers.iter().enumerate().take(last).skip(first - 1) {
        text.push_str(&format!("--- page {} ---\n", index + 1));
        match doc.extract_text_with_limit(&[*number], MAX_INFLATED_BYTES) {
            Ok(page) => {
                let page = page.trim_end();
                any_text |= !page.trim().is_empty();
                text.push_str(page);
                text.push('\n');
            }
            Err(e @ PdfError::Decompress(DecompressError::MemoryLimitExceeded { .. })) => {
                return Err(refusal(e));
            }
            Err(e) => text.push_str(&format!("[the text of this page cannot be read: {e}]\n")),
        }
    }
    if !any_text {
        return Err(DocumentError::NoText {
            pages: total,
            first,
            last,
        });
    }
    text.push_str(&format!("[PDF: pages {first}-{last} of {total}]\n"));
    Ok(Extracted {
        text,
        next_page: (last < total).then_some(last + 1),
    })
}

/// Whether the file names a security handler (`/Encrypt` in a trailer).
fn mentions_encrypt(bytes: &[u8]) -> bool {
    bytes.windows(8).any(|w| w == b"/Encrypt")
}
