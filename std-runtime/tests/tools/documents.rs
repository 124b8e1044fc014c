//! `read_file` and `web_fetch` on documents (issue 46): PDF text by page
//! with markers, `.docx`/`.odt` paragraphs with page breaks, `.xlsx` rows;
//! hostile files (not a PDF, encrypted, a decompression bomb, deep nesting,
//! a zip bomb, 500 pages) refused or bounded with a clear message. Every
//! document is made here, by hand or with the crates that read them.

use std::io::{Cursor, Read, Write};
use std::net::TcpListener;

use serde_json::json;

use super::support::Fx;

/// A classic PDF (header, objects, xref table, trailer) of `objects`
/// (object 1 is the catalog), with `trailer_extra` in the trailer.
pub(crate) fn raw_pdf(objects: &[Vec<u8>], trailer_extra: &str) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for off in offsets {
        out.extend_from_slice(format!("{off:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer_extra} >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

pub(crate) fn stream(dict: &str, content: &[u8]) -> Vec<u8> {
    let mut s = format!("<< {dict} /Length {} >>\nstream\n", content.len()).into_bytes();
    s.extend_from_slice(content);
    s.extend_from_slice(b"\nendstream");
    s
}

/// A PDF whose pages carry these content streams (as given, with their
/// stream dictionary extras), in a Helvetica font.
fn pdf_with_contents(contents: &[(String, Vec<u8>)]) -> Vec<u8> {
    let n = contents.len();
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {n} /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> >>",
            kids.join(" ")
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_vec(),
    ];
    for (i, (extra, content)) in contents.iter().enumerate() {
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /Contents {} 0 R >>",
                5 + 2 * i
            )
            .into_bytes(),
        );
        objects.push(stream(extra, content));
    }
    raw_pdf(&objects, "")
}

/// A PDF with one page of text per item.
fn text_pdf(pages: &[&str]) -> Vec<u8> {
    let contents: Vec<(String, Vec<u8>)> = pages
        .iter()
        .map(|t| {
            (
                String::new(),
                format!("BT /F1 12 Tf 72 720 Td ({t}) Tj ET").into_bytes(),
            )
        })
        .collect();
    pdf_with_contents(&contents)
}

fn write_bytes(fx: &Fx, name: &str, bytes: &[u8]) {
    std::fs::write(fx.path(name), bytes).unwrap();
}

/// A zip archive of these entries, deflated.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn docx(body: &str) -> Vec<u8> {
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>"#
    );
    zip_of(&[
        ("[Content_Types].xml", b"<Types/>"),
        ("word/document.xml", xml.as_bytes()),
    ])
}

#[test]
fn a_pdf_reads_back_page_by_page_with_markers() {
    let fx = Fx::new();
    write_bytes(
        &fx,
        "report.pdf",
        &text_pdf(&["First page text", "Second page text", "Third page"]),
    );
    let out = fx.ok("read_file", json!({"path": "report.pdf"}));
    let first = out.find("--- page 1 ---\nFirst page text").expect(&out);
    let second = out.find("--- page 2 ---\nSecond page text").expect(&out);
    let third = out.find("--- page 3 ---\nThird page").expect(&out);
    assert!(first < second && second < third, "{out}");
    assert!(out.ends_with("[PDF: pages 1-3 of 3]\n"), "{out}");

    // A page range: offset and limit count pages.
    let out = fx.ok(
        "read_file",
        json!({"path": "report.pdf", "offset": 2, "limit": 1}),
    );
    assert!(out.starts_with("--- page 2 ---\nSecond page text"), "{out}");
    assert!(!out.contains("First") && !out.contains("Third"), "{out}");
    assert!(
        out.contains("[PDF: pages 2-2 of 3]\n[use offset=3 to read the next pages]"),
        "{out}"
    );
    let m = fx.err("read_file", json!({"path": "report.pdf", "offset": 9}));
    assert!(
        m.contains("page 9 is past the end: it has 3 page(s)"),
        "{m}"
    );
}

#[test]
fn a_500_page_pdf_is_read_in_bounded_slices() {
    let fx = Fx::new();
    let texts: Vec<String> = (1..=500).map(|n| format!("Body of page {n}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    write_bytes(&fx, "long.pdf", &text_pdf(&refs));
    let out = fx.ok("read_file", json!({"path": "long.pdf"}));
    assert!(out.contains("--- page 20 ---\nBody of page 20\n"), "{out}");
    assert!(!out.contains("page 21"), "{out}");
    assert!(
        out.ends_with("[PDF: pages 1-20 of 500]\n[use offset=21 to read the next pages]\n"),
        "{out}"
    );
    // Asking for a thousand pages gets the most one read returns: 50.
    let out = fx.ok(
        "read_file",
        json!({"path": "long.pdf", "offset": 451, "limit": 1000}),
    );
    assert!(out.contains("Body of page 500"), "{out}");
    assert!(out.ends_with("[PDF: pages 451-500 of 500]\n"), "{out}");
}

#[test]
fn a_scanned_pdf_without_text_says_so() {
    let fx = Fx::new();
    let drawing = (String::new(), b"0 0 m 100 100 l S".to_vec());
    write_bytes(
        &fx,
        "scan.pdf",
        &pdf_with_contents(&[drawing.clone(), drawing]),
    );
    let m = fx.err("read_file", json!({"path": "scan.pdf"}));
    assert!(
        m.contains("has 2 page(s) but no text layer on pages 1-2 (a scanned document?)"),
        "{m}"
    );
}

#[test]
fn hostile_pdfs_are_refused_with_a_reason() {
    let fx = Fx::new();
    // Not a PDF at all, whatever its name says.
    fx.write("fake.pdf", "just some text pretending\n");
    let m = fx.err("read_file", json!({"path": "fake.pdf"}));
    assert!(
        m.contains(
            "cannot read the text of 'fake.pdf': it is not a valid PDF file (no %PDF- header)"
        ),
        "{m}"
    );

    // Encrypted with a password that is not empty.
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [] /Count 0 >>".to_vec(),
    ];
    objects.push(
        format!(
            "<< /Filter /Standard /V 1 /R 2 /O <{o}> /U <{u}> /P -4 >>",
            o = "ab".repeat(32),
            u = "cd".repeat(32)
        )
        .into_bytes(),
    );
    let id = format!("/Encrypt 3 0 R /ID [<{0}> <{0}>]", "01".repeat(16));
    write_bytes(&fx, "locked.pdf", &raw_pdf(&objects, &id));
    let m = fx.err("read_file", json!({"path": "locked.pdf"}));
    assert!(m.contains("it is encrypted (password-protected)"), "{m}");

    // A decompression bomb: 64 KB that inflate to 24 MB of content.
    let mut bomb = lopdf::Stream::new(lopdf::Dictionary::new(), vec![b' '; 24 * 1024 * 1024]);
    bomb.compress().unwrap();
    assert!(bomb.content.len() < 100_000);
    let bytes = pdf_with_contents(&[("/Filter /FlateDecode".into(), bomb.content.clone())]);
    write_bytes(&fx, "bomb.pdf", &bytes);
    let m = fx.err("read_file", json!({"path": "bomb.pdf"}));
    assert!(
        m.contains("refused as hostile") && m.contains("decompression bomb"),
        "{m}"
    );

    // Nesting 100 000 deep: refused by the parser's depth limit, no crash.
    let deep = format!(
        "<< /Type /Catalog /Pages 2 0 R /Deep {}{} >>",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let objects = vec![
        deep.into_bytes(),
        b"<< /Type /Pages /Kids [] /Count 0 >>".to_vec(),
    ];
    write_bytes(&fx, "deep.pdf", &raw_pdf(&objects, ""));
    let m = fx.err("read_file", json!({"path": "deep.pdf"}));
    assert!(m.contains("cannot read the text of 'deep.pdf'"), "{m}");
}

#[test]
fn a_docx_reads_back_as_paragraphs_with_page_markers() {
    let fx = Fx::new();
    let body = r#"<w:p><w:r><w:t>Quarterly report</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">Sales &amp; costs </w:t></w:r><w:r><w:t>rose.</w:t></w:r></w:p>
<w:p><w:r><w:br w:type="page"/><w:t>Appendix</w:t><w:tab/><w:t>A</w:t></w:r></w:p>"#;
    write_bytes(&fx, "report.docx", &docx(body));
    let out = fx.ok("read_file", json!({"path": "report.docx"}));
    assert_eq!(
        out,
        "--- page 1 ---\nQuarterly report\nSales & costs rose.\n\n--- page 2 ---\nAppendix\tA\n"
    );
}

#[test]
fn an_odt_and_an_xlsx_read_back() {
    let fx = Fx::new();
    let content = r#"<office:document-content xmlns:office="o" xmlns:text="t"><office:body><office:text>
<text:h>Title</text:h><text:p>One<text:s/>two<text:line-break/>three</text:p>
<text:soft-page-break/><text:p>Next page</text:p></office:text></office:body></office:document-content>"#;
    write_bytes(
        &fx,
        "notes.odt",
        &zip_of(&[
            ("mimetype", b"application/vnd.oasis.opendocument.text"),
            ("content.xml", content.as_bytes()),
        ]),
    );
    let out = fx.ok("read_file", json!({"path": "notes.odt"}));
    assert_eq!(
        out,
        "--- page 1 ---\nTitle\nOne two\nthree\n\n--- page 2 ---\nNext page\n"
    );

    let shared =
        r#"<sst><si><t>Fruit</t></si><si><t>Qty</t></si><si><t>apples &amp; pears</t></si></sst>"#;
    let workbook = r#"<workbook><sheets><sheet name="Stock" sheetId="1"/><sheet name="Empty" sheetId="2"/></sheets></workbook>"#;
    let sheet = r#"<worksheet><sheetData>
<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>
<row r="2"><c r="A2" t="s"><v>2</v></c><c r="C2"><v>3.5</v></c></row>
<row r="3"><c r="A3" t="inlineStr"><is><t>inline</t></is></c><c r="B3" t="b"><v>1</v></c></row>
</sheetData></worksheet>"#;
    write_bytes(
        &fx,
        "stock.xlsx",
        &zip_of(&[
            ("xl/sharedStrings.xml", shared.as_bytes()),
            ("xl/workbook.xml", workbook.as_bytes()),
            ("xl/worksheets/sheet1.xml", sheet.as_bytes()),
            (
                "xl/worksheets/sheet2.xml",
                b"<worksheet><sheetData/></worksheet>",
            ),
        ]),
    );
    let out = fx.ok("read_file", json!({"path": "stock.xlsx"}));
    assert_eq!(
        out,
        "--- sheet Stock ---\nFruit | Qty\napples & pears |  | 3.5\ninline | TRUE\n--- sheet Empty ---\n"
    );
}

#[test]
fn hostile_office_files_are_refused() {
    let fx = Fx::new();
    // A zip bomb: a .docx whose document inflates to 24 MB.
    let huge = vec![b' '; 24 * 1024 * 1024];
    let bomb = zip_of(&[("word/document.xml", &huge)]);
    assert!(bomb.len() < 200_000);
    write_bytes(&fx, "bomb.docx", &bomb);
    let m = fx.err("read_file", json!({"path": "bomb.docx"}));
    assert!(
        m.contains("refused as hostile: 'word/document.xml' inflates past"),
        "{m}"
    );
    // Not a zip at all.
    fx.write("plain.docx", "hello");
    let m = fx.err("read_file", json!({"path": "plain.docx"}));
    assert!(m.contains("it is not a valid .docx file"), "{m}");
    // A zip without the document part.
    write_bytes(&fx, "empty.docx", &zip_of(&[("other.xml", b"<x/>")]));
    let m = fx.err("read_file", json!({"path": "empty.docx"}));
    assert!(m.contains("it has no word/document.xml"), "{m}");
}

#[test]
fn documents_stay_inside_the_working_directory() {
    let fx = Fx::new();
    let outside = tempfile::TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.pdf"), text_pdf(&["secret"])).unwrap();
    let path = outside.path().join("secret.pdf");
    let m = fx.err("read_file", json!({"path": path.to_str().unwrap()}));
    assert!(!m.contains("secret\n") && m.contains("outside"), "{m}");
}

/// Serves `body` with `content_type` to every request; returns the URL.
fn serve_once(content_type: &'static str, body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{addr}/paper.pdf")
}

#[test]
fn web_fetch_reads_a_pdf_url() {
    let fx = Fx::new();
    let url = serve_once(
        "application/pdf",
        text_pdf(&["Abstract here", "Results there"]),
    );
    let out = fx.ok("web_fetch", json!({"url": url}));
    assert!(out.contains("Content-Type: application/pdf\n\n--- page 1 ---\nAbstract here\n--- page 2 ---\nResults there\n[PDF: pages 1-2 of 2]"), "{out}");

    let url = serve_once("application/pdf", b"<html>not a pdf</html>".to_vec());
    let m = fx.err("web_fetch", json!({"url": url}));
    assert!(
        m.contains("cannot read the text of the PDF at") && m.contains("no %PDF- header"),
        "{m}"
    );
}
