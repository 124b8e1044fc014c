//! The text of Office documents: zip archives of XML. Every entry read is
//! checked against the archive's size limits before and while it inflates,
//! so a zip bomb is refused after at most [`MAX_INFLATED_BYTES`] of output.
//! The XML is read as a stream of events (quick-xml): no recursion, no DTD,
//! no entity expansion beyond the five predefined ones and character
//! references.

use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};
use zip::ZipArchive;
use zip::result::ZipError;

use super::{DocumentError, Kind, MAX_ENTRIES, MAX_INFLATED_BYTES, MAX_TEXT_BYTES};

pub(super) fn extract(kind: Kind, bytes: &[u8]) -> Result<String, DocumentError> {
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(|e| invalid(kind, &e))?;
    if archive.len() > MAX_ENTRIES {
        return Err(DocumentError::Hostile(format!(
            "the archive holds {} entries (at most {MAX_ENTRIES})",
            archive.len()
        )));
    }
    match kind {
        Kind::Docx => paragraphs(kind, &entry(&mut archive, kind, "word/document.xml")?, WORD),
        Kind::Odt => paragraphs(kind, &entry(&mut archive, kind, "content.xml")?, ODF),
        Kind::Xlsx | Kind::Pdf => workbook(&mut archive),
    }
}

fn invalid(kind: Kind, e: &dyn std::fmt::Display) -> DocumentError {
    DocumentError::Invalid {
        kind: kind.name(),
        detail: e.to_string(),
    }
}

fn bomb(name: &str) -> DocumentError {
    DocumentError::Hostile(format!(
        "'{name}' inflates past {MAX_INFLATED_BYTES} bytes (a zip bomb?)"
    ))
}

/// One entry's text, refused when it claims or turns out to inflate past
/// the limit (the size in the archive's directory may lie).
fn entry(
    archive: &mut ZipArchive<Cursor<&[u8]>>,
    kind: Kind,
    name: &str,
) -> Result<String, DocumentError> {
    let file = match archive.by_name(name) {
        Ok(f) => f,
        Err(ZipError::FileNotFound) => {
            return Err(invalid(kind, &format!("it has no {name}")));
        }
        Err(e) => return Err(invalid(kind, &e)),
    };
    if file.size() > MAX_INFLATED_BYTES as u64 {
        return Err(bomb(name));
    }
    let mut out = Vec::new();
    file.take(MAX_INFLATED_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| invalid(kind, &e))?;
    if out.len() > MAX_INFLATED_BYTES {
        return Err(bomb(name));
    }
    String::from_utf8(out).map_err(|_| invalid(kind, &format!("{name} is not UTF-8")))
}

/// The element names that shape a word-processing document's text.
struct Vocabulary {
    /// Elements whose text is the document's text.
    text: &'static [&'static str],
    /// Elements that end a paragraph.
    paragraph: &'static [&'static str],
    /// Empty elements that stand for a tab.
    tab: &'static [&'static str],
    /// Empty elements that stand for a line break.
    line_break: &'static [&'static str],
    /// Empty elements that stand for a space (ODF's `text:s`).
    space: &'static [&'static str],
    /// Whether an element starts a new page.
    page_break: fn(&BytesStart<'_>) -> bool,
}

const WORD: &Vocabulary = &Vocabulary {
    text: &["w:t"],
    paragraph: &["w:p"],
    tab: &["w:tab"],
    line_break: &["w:br", "w:cr"],
    space: &[],
    page_break: |e| {
        e.name().as_ref() == "w:br"
            && e.try_get_attribute("w:type")
                .ok()
                .flatten()
                .is_some_and(|a| a.value == "page")
    },
};

const ODF: &Vocabulary = &Vocabulary {
    text: &["text:p", "text:h", "text:span", "text:a"],
    paragraph: &["text:p", "text:h"],
    tab: &["text:tab"],
    line_break: &["text:line-break"],
    space: &["text:s"],
    page_break: |e| e.name().as_ref() == "text:soft-page-break",
};

/// A predefined XML entity or character reference, as text.
fn entity(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        _ => {
            let num = name.strip_prefix('#')?;
            let code = match num.strip_prefix('x') {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => num.parse().ok()?,
            };
            char::from_u32(code)?
        }
    })
}

/// A `.docx` or `.odt` body as paragraphs, a `--- page N ---` marker at
/// the start and at every explicit page break.
fn paragraphs(kind: Kind, xml: &str, words: &Vocabulary) -> Result<String, DocumentError> {
    let mut reader = Reader::from_str(xml);
    let mut out = String::from("--- page 1 ---\n");
    let mut page = 1;
    // How many text-bearing elements enclose the reader now.
    let mut inside = 0usize;
    loop {
        let event = reader.read_event().map_err(|e| invalid(kind, &e))?;
        match event {
            Event::Start(e) if words.text.contains(&e.name().as_ref()) => inside += 1,
            Event::End(e) => {
                let name = e.name();
                if words.text.contains(&name.as_ref()) {
                    inside = inside.saturating_sub(1);
                }
                if words.paragraph.contains(&name.as_ref()) {
                    out.push('\n');
                }
            }
            Event::Empty(e) => {
                let name = e.name();
                if (words.page_break)(&e) {
                    page += 1;
                    out.push_str(&format!("\n--- page {page} ---\n"));
                } else if words.tab.contains(&name.as_ref()) {
                    out.push('\t');
                } else if words.line_break.contains(&name.as_ref()) {
                    out.push('\n');
                } else if words.space.contains(&name.as_ref()) {
                    out.push(' ');
                } else if words.paragraph.contains(&name.as_ref()) {
                    out.push('\n');
                }
            }
            Event::Text(t) if inside > 0 => out.push_str(&t.xml10_content()),
            Event::CData(t) if inside > 0 => out.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if inside > 0 => {
                if let Some(c) = entity(&r.xml10_content()) {
                    out.push(c);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if out.len() > MAX_TEXT_BYTES {
            break;
        }
    }
    Ok(out)
}

/// The cells of one sheet's XML, row by row: `(row, column, value)` with
/// the value's `t` attribute still to resolve.
struct Cell {
    column: usize,
    kind: String,
    value: String,
}

/// An `.xlsx` workbook: every sheet in order, a `--- sheet NAME ---`
/// marker, then one line per row, cells separated by ` | ` (empty ones
/// kept, so columns line up).
fn workbook(archive: &mut ZipArchive<Cursor<&[u8]>>) -> Result<String, DocumentError> {
    let kind = Kind::Xlsx;
    let shared = match entry(archive, kind, "xl/sharedStrings.xml") {
        Ok(xml) => shared_strings(&xml)?,
        // A workbook of numbers only has none.
        Err(DocumentError::Invalid { .. }) => Vec::new(),
        Err(e) => return Err(e),
    };
    let names = sheet_names(&entry(archive, kind, "xl/workbook.xml")?)?;
    let mut out = String::new();
    for (i, name) in names.iter().enumerate() {
        let path = format!("xl/worksheets/sheet{}.xml", i + 1);
        let xml = match entry(archive, kind, &path) {
            Ok(x) => x,
            Err(DocumentError::Invalid { .. }) => continue,
            Err(e) => return Err(e),
        };
        out.push_str(&format!("--- sheet {name} ---\n"));
        rows(&xml, &shared, &mut out)?;
        if out.len() > MAX_TEXT_BYTES {
            break;
        }
    }
    Ok(out)
}

/// The text of every `<si>` of `sharedStrings.xml`, in order.
fn shared_strings(xml: &str) -> Result<Vec<String>, DocumentError> {
    let mut reader = Reader::from_str(xml);
    let mut strings = Vec::new();
    let mut in_t = false;
    loop {
        match reader.read_event().map_err(|e| invalid(Kind::Xlsx, &e))? {
            Event::Start(e) if e.name().as_ref() == "si" => strings.push(String::new()),
            Event::Start(e) if e.name().as_ref() == "t" => in_t = true,
            Event::End(e) if e.name().as_ref() == "t" => in_t = false,
            Event::Text(t) if in_t => {
                if let Some(s) = strings.last_mut() {
                    s.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) if in_t => {
                if let (Some(s), Some(c)) = (strings.last_mut(), entity(&r.xml10_content())) {
                    s.push(c);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(strings)
}

/// The sheets' names, in workbook order.
fn sheet_names(xml: &str) -> Result<Vec<String>, DocumentError> {
    let mut reader = Reader::from_str(xml);
    let mut names = Vec::new();
    loop {
        match reader.read_event().map_err(|e| invalid(Kind::Xlsx, &e))? {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == "sheet" => {
                let name = e
                    .try_get_attribute("name")
                    .ok()
                    .flatten()
                    .and_then(|a| {
                        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .ok()
                            .map(|v| v.into_owned())
                    })
                    .unwrap_or_else(|| format!("{}", names.len() + 1));
                names.push(name);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(names)
}

/// The 0-based column of a cell reference such as `C7`.
fn column_of(reference: &str) -> Option<usize> {
    let letters: String = reference
        .chars()
        .take_while(char::is_ascii_uppercase)
        .collect();
    if letters.is_empty() || letters.len() > 3 {
        return None;
    }
    let n = letters
        .bytes()
        .fold(0usize, |n, b| n * 26 + usize::from(b - b'A' + 1));
    Some(n - 1)
}

/// The most columns one row is laid out over; a cell further right is
/// put after the last one instead of after thousands of empty cells.
const MAX_COLUMNS: usize = 256;

/// One sheet's rows into `out`.
fn rows(xml: &str, shared: &[String], out: &mut String) -> Result<(), DocumentError> {
    let mut reader = Reader::from_str(xml);
    let mut row: Vec<Cell> = Vec::new();
    let mut cell: Option<Cell> = None;
    let mut in_value = false;
    loop {
        match reader.read_event().map_err(|e| invalid(Kind::Xlsx, &e))? {
            Event::Start(e) if e.name().as_ref() == "c" => {
                let attr = |name: &str| {
                    e.try_get_attribute(name)
                        .ok()
                        .flatten()
                        .map(|a| a.value.into_owned())
                };
                let column = attr("r")
                    .and_then(|r| column_of(&r))
                    .unwrap_or(row.last().map_or(0, |c| c.column + 1));
                cell = Some(Cell {
                    column,
                    kind: attr("t").unwrap_or_default(),
                    value: String::new(),
                });
            }
            Event::End(e) if e.name().as_ref() == "c" => row.extend(cell.take()),
            Event::Start(e) if matches!(e.name().as_ref(), "v" | "t") => in_value = true,
            Event::End(e) if matches!(e.name().as_ref(), "v" | "t") => in_value = false,
            Event::Text(t) if in_value => {
                if let Some(c) = cell.as_mut() {
                    c.value.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) if in_value => {
                if let (Some(c), Some(ch)) = (cell.as_mut(), entity(&r.xml10_content())) {
                    c.value.push(ch);
                }
            }
            Event::End(e) if e.name().as_ref() == "row" => {
                write_row(&row, shared, out);
                row.clear();
                if out.len() > MAX_TEXT_BYTES {
                    break;
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(())
}

fn write_row(row: &[Cell], shared: &[String], out: &mut String) {
    if row.is_empty() {
        return;
    }
    let mut line: Vec<&str> = Vec::new();
    for cell in row {
        // Empty cells before this one keep the columns in place.
        let column = cell.column.min(MAX_COLUMNS).max(line.len());
        line.resize(column, "");
        line.push(match cell.kind.as_str() {
            "s" => cell
                .value
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(|n| shared.get(n))
                .map_or("", String::as_str),
            "b" => match cell.value.trim() {
                "1" => "TRUE",
                _ => "FALSE",
            },
            _ => cell.value.as_str(),
        });
    }
    out.push_str(&line.join(" | "));
    out.push('\n');
}
