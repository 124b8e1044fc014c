//! `vision_analyze` (issue 46): an image from the working directory or a
//! URL, sent with the question to a vision model — the fake provider, over
//! real HTTP through the real client — and its answer returned; what is
//! not an image, too large, outside the working directory or behind a
//! redirect to a private address is refused before the model is asked.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::media::{MAX_IMAGE_BYTES, MediaDir, data_url};
use hermes_runtime::tools::{VisionSource, is_public};
use hermes_tests::{FakeProvider, Reply};
use serde_json::json;

use super::support::Fx;

/// A real 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// The tools fixture with `vision_analyze` asking `provider`'s vision
/// model, images kept under a temp home.
fn vision_fx(provider: &FakeProvider, home: &std::path::Path) -> Fx {
    let media = MediaDir::in_home(home);
    let client = OpenAiClient::new(ClientOptions {
        base_url: provider.base_url(),
        api_key: None,
        model: "gpt-4o".into(),
        stream: false,
        images: Some(media.clone()),
        ..ClientOptions::default()
    })
    .unwrap();
    let source = VisionSource {
        model: Arc::new(client),
        media,
        session: "s1".into(),
    };
    Fx::with(move |e| e.vision = Some(source), Some(&["file", "vision"]))
}

#[test]
fn an_image_in_the_working_directory_goes_to_the_vision_model_with_the_question() {
    let provider = FakeProvider::start(vec![Reply::text("A single transparent pixel.")]).unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    std::fs::write(fx.path("shot.png"), PNG).unwrap();
    let out = fx.ok(
        "vision_analyze",
        json!({"image_url": "shot.png", "question": "What colour is it?"}),
    );
    assert_eq!(out, "A single transparent pixel.");
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    let messages = requests[0]["messages"].as_array().unwrap();
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("look at an image")
    );
    let parts = messages[1]["content"].as_array().unwrap();
    assert_eq!(
        parts[0],
        json!({"type": "text", "text": "What colour is it?"})
    );
    assert_eq!(parts[1]["image_url"]["url"], data_url("image/png", PNG));
    // The image is kept like a photo a user sent, private to the session.
    assert!(home.path().join("media/s1").read_dir().unwrap().count() == 1);
}

#[test]
fn what_is_not_an_image_too_large_or_outside_is_refused_before_the_model_is_asked() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    fx.write("notes.png", "not really a png\n");
    let m = fx.err("vision_analyze", json!({"image_url": "notes.png"}));
    assert!(
        m.contains("cannot be looked at: the file is not a JPEG, PNG, GIF or WebP image"),
        "{m}"
    );
    let mut big = PNG.to_vec();
    big.resize(MAX_IMAGE_BYTES as usize + 1, 0);
    std::fs::write(fx.path("big.png"), &big).unwrap();
    let m = fx.err("vision_analyze", json!({"image_url": "big.png"}));
    assert!(m.contains("too large for the vision model"), "{m}");
    let outside = tempfile::TempDir::new().unwrap();
    std::fs::write(outside.path().join("x.png"), PNG).unwrap();
    let path = outside.path().join("x.png");
    let m = fx.err(
        "vision_analyze",
        json!({"image_url": path.to_str().unwrap()}),
    );
    assert!(m.contains("outside"), "{m}");
    assert!(provider.requests().is_empty());
}

/// Serves the PNG at `/cat.png`, a redirect to it at `/redirect`, and an
/// oversized image at `/huge.png`. Returns the base URL.
fn image_server() -> String {
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
            let req = String::from_utf8_lossy(&req).to_string();
            let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (head, body): (String, Vec<u8>) = match path.as_str() {
                "/cat.png" => ("200 OK\r\nContent-Type: image/png".into(), PNG.to_vec()),
                "/redirect" => (
                    format!("302 Found\r\nLocation: http://{addr}/cat.png"),
                    Vec::new(),
                ),
                "/huge.png" => {
                    let mut big = PNG.to_vec();
                    big.resize(MAX_IMAGE_BYTES as usize + 10, 0);
                    ("200 OK\r\nContent-Type: image/png".into(), big)
                }
                _ => ("404 Not Found".into(), Vec::new()),
            };
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{addr}")
}

#[test]
fn an_image_url_is_fetched_but_a_redirect_to_a_private_address_is_refused() {
    let provider = FakeProvider::start(vec![Reply::text("A cat, one pixel wide.")]).unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    let base = image_server();
    let out = fx.ok(
        "vision_analyze",
        json!({"image_url": format!("{base}/cat.png")}),
    );
    assert_eq!(out, "A cat, one pixel wide.");
    let parts = provider.requests()[0]["messages"][1]["content"].clone();
    assert_eq!(parts[0]["text"], "Describe this image.");

    let m = fx.err(
        "vision_analyze",
        json!({"image_url": format!("{base}/redirect")}),
    );
    assert!(
        m.contains("redirects to") && m.contains("a private address (127.0.0.1); refused"),
        "{m}"
    );
    let m = fx.err(
        "vision_analyze",
        json!({"image_url": format!("{base}/huge.png")}),
    );
    assert!(m.contains("too large for the vision model"), "{m}");
    assert_eq!(provider.requests().len(), 1);
}

#[test]
fn without_a_vision_model_the_tool_is_not_offered() {
    let fx = Fx::with(|_| {}, Some(&["file", "vision"]));
    assert!(fx.reg.names().all(|n| n != "vision_analyze"));
}

#[test]
fn public_addresses_are_told_from_private_ones() {
    for ip in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fc00::1",
        "fe80::1",
        "::ffff:10.0.0.1",
    ] {
        assert!(!is_public(ip.parse().unwrap()), "{ip}");
    }
    for ip in ["1.1.1.1", "93.184.216.34", "2606:4700::1111"] {
        assert!(is_public(ip.parse().unwrap()), "{ip}");
    }
}

/// Bytes with a JPEG's signature and end marker (the vision model is a
/// fake: nothing decodes them).
const JPEG: &[u8] = &[
    0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xFF, 0xD9,
];

/// A PDF of scanned pages: each page only draws its own DCTDecode image
/// (`None`: a page that only draws a line).
fn scanned_pdf(pages: &[Option<&[u8]>]) -> Vec<u8> {
    use super::documents::{raw_pdf, stream};
    let n = pages.len();
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 3 + 3 * i)).collect();
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {n} /MediaBox [0 0 595 842] >>",
            kids.join(" ")
        )
        .into_bytes(),
    ];
    for (i, image) in pages.iter().enumerate() {
        let (content, xobject) = (4 + 3 * i, 5 + 3 * i);
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /Contents {content} 0 R /Resources << /XObject << /Im1 {xobject} 0 R >> >> >>"
            )
            .into_bytes(),
        );
        match image {
            Some(jpeg) => {
                objects.push(stream("", b"q 595 0 0 842 0 0 cm /Im1 Do Q"));
                objects.push(stream(
                    "/Type /XObject /Subtype /Image /Width 595 /Height 842 /ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode",
                    jpeg,
                ));
            }
            None => {
                objects.push(stream("", b"0 0 m 100 100 l S"));
                objects.push(stream("/Type /XObject /Subtype /Form /BBox [0 0 1 1]", b""));
            }
        }
    }
    raw_pdf(&objects, "")
}

#[test]
fn a_scanned_pdf_goes_to_the_vision_model_page_by_page() {
    let provider = FakeProvider::start(vec![
        Reply::text("INVOICE 42\nTotal: 10 EUR"),
        Reply::text("Thank you for your order."),
    ])
    .unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    std::fs::write(
        fx.path("scan.pdf"),
        scanned_pdf(&[Some(JPEG), None, Some(JPEG)]),
    )
    .unwrap();
    let out = fx.ok("read_file", json!({"path": "scan.pdf"}));
    assert_eq!(
        out,
        "--- page 1 (scanned; read by the vision model) ---\nINVOICE 42\nTotal: 10 EUR\n\
         --- page 3 (scanned; read by the vision model) ---\nThank you for your order.\n\
         [PDF without a text layer: pages 1-3 of 3 read from their images by the vision model]\n"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one call per page with an image");
    for request in &requests {
        let parts = request["messages"][1]["content"].as_array().unwrap();
        assert!(parts[0]["text"].as_str().unwrap().contains("Transcribe"));
        assert_eq!(parts[1]["image_url"]["url"], data_url("image/jpeg", JPEG));
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn a_scan_without_page_images_still_says_it_has_no_text() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    std::fs::write(fx.path("lines.pdf"), scanned_pdf(&[None, None])).unwrap();
    let m = fx.err("read_file", json!({"path": "lines.pdf"}));
    assert!(
        m.contains("no text layer on pages 1-2")
            && m.contains("hold no JPEG image a vision model could read"),
        "{m}"
    );
    assert!(provider.requests().is_empty());
}

/// `vision_analyze` and a scanned PDF's pages go through one vision
/// request (`tools::vision::look`): the same system prompt, and a model
/// that answers nothing or fails is reported the same way by both.
#[test]
fn vision_analyze_and_scanned_pages_share_one_vision_request() {
    let provider = FakeProvider::start(vec![
        Reply::text(""),
        Reply::text(""),
        Reply::Status(400, "bad image".into()),
        Reply::Status(400, "bad image".into()),
    ])
    .unwrap();
    let home = tempfile::TempDir::new().unwrap();
    let fx = vision_fx(&provider, home.path());
    std::fs::write(fx.path("shot.png"), PNG).unwrap();
    std::fs::write(fx.path("scan.pdf"), scanned_pdf(&[Some(JPEG)])).unwrap();
    let m = fx.err("vision_analyze", json!({"image_url": "shot.png"}));
    assert_eq!(m, "Error: the vision model gave no answer.");
    let out = fx.ok("read_file", json!({"path": "scan.pdf"}));
    assert!(
        out.contains("[this page could not be read: the vision model gave no answer]"),
        "{out}"
    );
    let m = fx.err("vision_analyze", json!({"image_url": "shot.png"}));
    assert!(m.starts_with("Error: the vision model failed: "), "{m}");
    let out = fx.ok("read_file", json!({"path": "scan.pdf"}));
    assert!(
        out.contains("[this page could not be read: the vision model failed: "),
        "{out}"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    let system = |i: usize| requests[i]["messages"][0]["content"].clone();
    assert_eq!(system(0), system(1), "one system prompt for both");
}
