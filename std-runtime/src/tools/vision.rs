//! `vision_analyze` (issue 46): a question about an image in the working
//! directory or at a URL, answered by a model that sees images.
//!
//! - **A path** is opened like `read_file` opens one: beneath the working
//!   directory, `$HERMES_HOME`'s secrets refused.
//! - **A URL** is fetched on the shared HTTP agent with redirects followed
//!   by hand (at most [`MAX_REDIRECTS`]): a redirect to a loopback,
//!   private, link-local or otherwise non-public address is refused before
//!   it is requested, so a public page cannot point the tool into the
//!   user's network. (The address the model names itself is its choice, as
//!   for `web_fetch`.) The body stops at [`MAX_IMAGE_BYTES`].
//! - **Either way** the bytes must be a PNG, JPEG, GIF or WebP image (by
//!   their signature, whatever a name or a content type says) of at most
//!   [`MAX_IMAGE_BYTES`]; it is kept in `$HERMES_HOME/media/<session>/`
//!   like a photo a user sent, and sent with the question to the vision
//!   model ([`VisionSource::model`]: the chat model when it sees images,
//!   else `[provider] vision_model`), whose answer is the result.

use std::io::Read;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use hermes_core::{
    ChatRequest, LedgerEntry, Message, Model, NullSink, Tool, ToolContext, ToolError, ToolSpec,
    schema_text,
};
use serde::Deserialize;

use super::workdir::io_error;
use super::{Access, Workdir, failed, parse_args, spec};
use crate::http::{self, Wake};
use crate::media::{MAX_IMAGE_BYTES, MediaDir};
use crate::spill::cap_result;

/// Redirects followed for an image URL.
pub const MAX_REDIRECTS: usize = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The system prompt of a question about an image.
const VISION_PROMPT: &str = "You look at an image for an assistant that cannot see it and answer \
its question about the image: factually, quoting any text in the image verbatim, saying what you \
cannot make out.";

/// Where images go and who looks at them.
#[derive(Clone)]
pub struct VisionSource {
    /// A model that sees images (a client sent images from `media`).
    pub model: Arc<dyn Model>,
    /// Where the images are kept while the model looks at them.
    pub media: MediaDir,
    /// The session the images are kept under.
    pub session: String,
}

impl std::fmt::Debug for VisionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionSource")
            .field("media", &self.media)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// Answers questions about images.
#[derive(Debug)]
pub struct VisionAnalyzeTool {
    spec: ToolSpec,
    workdir: Workdir,
    source: VisionSource,
    cap: usize,
}

#[derive(Deserialize)]
pub(super) struct VisionArgs {
    image_url: String,
    #[serde(default)]
    question: Option<String>,
}

impl VisionAnalyzeTool {
    pub(crate) fn new(workdir: Workdir, source: VisionSource, cap: usize) -> Self {
        VisionAnalyzeTool {
            spec: spec(
                "vision_analyze",
                "Look at an image (PNG, JPEG, GIF, WebP; a file path or an http(s) URL) and \
                 answer a question about it.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "image_url": {"type": "string", "description": "A path in the working directory, or an http(s) URL."},
                        "question": {"type": "string", "description": "What to find out. Default: describe it."}
                    },
                    "required": ["image_url"]
                }"#,
                ),
            ),
            workdir,
            source,
            cap,
        }
    }

    fn read_path(&self, path: &str) -> Result<Vec<u8>, ToolError> {
        let opened = self.workdir.open_file(path, Access::Read)?;
        let shown = self.workdir.display(&opened.real);
        if !opened.meta.is_file() {
            return Err(failed(format!("Error: '{shown}' is not a regular file.")));
        }
        if opened.meta.len() > MAX_IMAGE_BYTES {
            return Err(too_large(&shown, opened.meta.len()));
        }
        let mut bytes = Vec::new();
        opened
            .file
            .take(MAX_IMAGE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("read", &shown, &e))?;
        Ok(bytes)
    }
}

fn too_large(shown: &str, size: u64) -> ToolError {
    failed(format!(
        "Error: '{shown}' is too large for the vision model ({size} bytes; at most \
         {MAX_IMAGE_BYTES})."
    ))
}

/// Whether `ip` is an address on the public internet (not loopback,
/// private, link-local, shared, documentation, multicast or unspecified).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// Refuses a redirect target that resolves to any non-public address.
fn check_redirect(target: &ureq::http::Uri) -> Result<(), ToolError> {
    let host = target.host().unwrap_or("").trim_matches(['[', ']']);
    let port = target.port_u16().unwrap_or(match target.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    let addrs = (host, port).to_socket_addrs().map_err(|e| {
        failed(format!(
            "Error: cannot resolve the redirect to {target}: {e}."
        ))
    })?;
    for addr in addrs {
        if !is_public(addr.ip()) {
            return Err(failed(format!(
                "Error: the image URL redirects to {target}, a private address ({}); refused.",
                addr.ip()
            )));
        }
    }
    Ok(())
}

/// The image at `url`, following redirects by hand.
fn fetch(url: &str, interrupted: &dyn Fn() -> bool) -> Result<Vec<u8>, ToolError> {
    let mut target: ureq::http::Uri = url
        .parse()
        .map_err(|e| failed(format!("Error: '{url}' is not a URL: {e}.")))?;
    for hop in 0..=MAX_REDIRECTS {
        if !matches!(target.scheme_str(), Some("http" | "https")) {
            return Err(failed(format!(
                "Error: only http(s) image URLs are fetched, not {target}."
            )));
        }
        if hop > 0 {
            check_redirect(&target)?;
        }
        let mut probe = || {
            if interrupted() {
                Wake::Stop
            } else {
                Wake::Continue
            }
        };
        let answer = http::interruptible(&mut probe, || {
            let resp = http::agent()
                .get(&target)
                .config()
                .timeout_global(Some(REQUEST_TIMEOUT))
                .max_redirects(0)
                .build()
                .call()?;
            let status = resp.status();
            let location = resp
                .headers()
                .get(ureq::http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut bytes = Vec::new();
            resp.into_body()
                .into_reader()
                .take(MAX_IMAGE_BYTES + 1)
                .read_to_end(&mut bytes)?;
            Ok::<_, ureq::Error>((status, location, bytes))
        });
        let (status, location, bytes) = answer.map_err(|e| {
            if interrupted() {
                failed("Error: fetching the image was interrupted.")
            } else {
                failed(format!(
                    "Error: fetching {target} failed: {}",
                    http::describe(&e)
                ))
            }
        })?;
        if status.is_redirection() {
            let Some(next) = location else {
                return Err(failed(format!(
                    "Error: {target} redirects without a Location."
                )));
            };
            target = join(&target, &next)?;
            continue;
        }
        if !status.is_success() {
            return Err(failed(format!("Error: {target} answered HTTP {status}.")));
        }
        if bytes.len() as u64 > MAX_IMAGE_BYTES {
            return Err(too_large(&target.to_string(), bytes.len() as u64));
        }
        return Ok(bytes);
    }
    Err(failed(format!(
        "Error: the image URL redirects more than {MAX_REDIRECTS} times."
    )))
}

/// A `Location` against the URL it came from.
fn join(base: &ureq::http::Uri, location: &str) -> Result<ureq::http::Uri, ToolError> {
    let absolute = if location.contains("://") {
        location.to_owned()
    } else {
        let scheme = base.scheme_str().unwrap_or("http");
        let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
        if location.starts_with('/') {
            format!("{scheme}://{authority}{location}")
        } else {
            let path = base.path();
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{scheme}://{authority}{dir}{location}")
        }
    };
    absolute.parse().map_err(|e| {
        failed(format!(
            "Error: a redirect to '{location}' is not a URL: {e}."
        ))
    })
}

impl Tool for VisionAnalyzeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: VisionArgs = parse_args("vision_analyze", arguments)?;
        let image = args.image_url.trim();
        if image.is_empty() {
            return Err(failed("Error: 'image_url' is empty."));
        }
        let bytes = if image.starts_with("http://") || image.starts_with("https://") {
            fetch(image, &|| ctx.interrupt.is_set())?
        } else {
            self.read_path(image)?
        };
        // Named after the call, so a call retried replaces its own copy.
        let stem = file_stem(&format!("vision-{}", ctx.tool_call_id));
        let question = args
            .question
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .unwrap_or("Describe this image.");
        let answer = look(&self.source, &stem, &bytes, question).map_err(|e| match e {
            LookError::Store(e) => failed(format!("Error: '{image}' cannot be looked at: {e}.")),
            other => failed(format!("Error: {other}.")),
        })?;
        Ok(cap_result(answer, self.cap, "ask a narrower question"))
    }
}

/// Why [`look`] has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LookError {
    /// The image could not be kept for the model (not an image, too large,
    /// the media directory not writable).
    Store(String),
    /// The model's call failed.
    Model(String),
    /// The model answered nothing.
    NoAnswer,
}

impl std::fmt::Display for LookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookError::Store(e) => write!(f, "it cannot be looked at: {e}"),
            LookError::Model(e) => write!(f, "the vision model failed: {e}"),
            LookError::NoAnswer => f.write_str("the vision model gave no answer"),
        }
    }
}

/// `raw` as a media file stem: the characters safe in a file name, at most
/// 64 of them.
pub(crate) fn file_stem(raw: &str) -> String {
    raw.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(64)
        .collect()
}

/// Asks `source`'s model `question` about the image `bytes`, kept under
/// `stem` in the session's media directory: the one vision request, used
/// by `vision_analyze` and by `read_file` for scanned PDF pages
/// (`super::scan`).
pub(crate) fn look(
    source: &VisionSource,
    stem: &str,
    bytes: &[u8],
    question: &str,
) -> Result<String, LookError> {
    let attachment = source
        .media
        .store_image(&source.session, stem, bytes)
        .map_err(|e| LookError::Store(e.to_string()))?;
    let entries = [LedgerEntry::new(Message::user_with(
        question,
        vec![attachment],
    ))];
    let request = ChatRequest {
        system_prompt: VISION_PROMPT,
        messages: &entries,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let completion = source
        .model
        .complete(&request, &mut NullSink)
        .map_err(|e| LookError::Model(e.to_string()))?;
    completion
        .content
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .ok_or(LookError::NoAnswer)
}
