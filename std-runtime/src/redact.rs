//! Showing secrets without revealing them: API keys masked to a
//! recognisable stub, credentials cut out of URLs (SPEC E2). Every display
//! of a key or a URL that may carry one goes through here.

/// Shows only enough of a secret to recognise it: `sk-…1234`.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() <= 8 {
        return "****".into();
    }
    let head: String = chars.iter().take(3).collect();
    let tail: String = chars.iter().skip(chars.len() - 4).collect();
    format!("{head}…{tail}")
}

/// `url` for display: credentials written into it (`https://user:pass@host/…`)
/// are replaced by `***`, so logs, errors and `config show` never carry
/// them. Everything else is kept, so the URL stays recognisable.
pub fn redact_url(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((start, end)) = userinfo_span(url) else {
        return std::borrow::Cow::Borrowed(url);
    };
    std::borrow::Cow::Owned(format!("{}***{}", &url[..start], &url[end..]))
}

/// The byte range of the `user:password` part of `url`, if it has one.
pub fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_len].rfind('@')?;
    Some((start, start + at))
}
