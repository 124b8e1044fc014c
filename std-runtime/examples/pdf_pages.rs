//! PDF text extraction per page (issue 46, BENCHMARKS.md "Documents"): a
//! 500-page PDF written here (one line of text per page, uncompressed, and
//! the same compressed), its first 50 pages read the way `read_file`
//! reads them, best of five runs, in microseconds per page.
//!
//! `cargo run --release -p hermes-runtime --example pdf_pages`

use std::time::Instant;

use hermes_runtime::documents::{Kind, Pages, extract};

/// A classic PDF of `pages` pages, each a line of text; the content
/// streams deflated when `deflate` (hand-written zlib: stored blocks, so
/// the reader's inflate path runs without a compressor here).
fn pdf(pages: usize, deflate: bool) -> Vec<u8> {
    let mut objects: Vec<Vec<u8>> =
        vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {pages} /Resources << /Font << /F1 3 0 R >> >> >>",
            (0..pages).map(|i| format!("{} 0 R", 4 + 2 * i)).collect::<Vec<_>>().join(" ")
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
    ];
    for i in 0..pages {
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /Contents {} 0 R >>",
                5 + 2 * i
            )
            .into_bytes(),
        );
        let text = format!(
            "BT /F1 11 Tf 72 720 Td (Page {i}: the quick brown fox jumps over the lazy dog, again and again.) Tj 0 -14 Td (A second line of ordinary report text, with numbers 12 345 and 67.8 %.) Tj ET"
        );
        let (filter, content) = if deflate {
            ("/Filter /FlateDecode ", stored_zlib(text.as_bytes()))
        } else {
            ("", text.into_bytes())
        };
        let mut s = format!("<< {filter}/Length {} >>\nstream\n", content.len()).into_bytes();
        s.extend_from_slice(&content);
        s.extend_from_slice(b"\nendstream");
        objects.push(s);
    }
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
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// zlib of `data` in one stored block (it is under 64 KiB), with its Adler-32.
fn stored_zlib(data: &[u8]) -> Vec<u8> {
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
    let mut out = vec![0x78, 0x01, 0x01];
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn main() {
    let pages = Pages {
        first: 1,
        count: 50,
    };
    for deflate in [false, true] {
        let bytes = pdf(500, deflate);
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            let doc = match extract(Kind::Pdf, &bytes, pages) {
                Ok(doc) => doc,
                Err(e) => {
                    eprintln!("extraction failed: {e}");
                    std::process::exit(1);
                }
            };
            let elapsed = start.elapsed().as_secs_f64();
            assert!(doc.text.contains("Page 49:"));
            best = best.min(elapsed);
        }
        println!(
            "500-page PDF ({} KB, {}): 50 pages in {:.1} ms, {:.0} µs/page (load included)",
            bytes.len() / 1024,
            if deflate {
                "FlateDecode"
            } else {
                "uncompressed"
            },
            best * 1e3,
            best * 1e6 / 50.0
        );
    }
}
