//! IMAP connections: TCP, then TLS from the start, STARTTLS, or (loopback
//! only) nothing; the login; and the few commands the adapter uses.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_imap::Session;
use futures_util::TryStreamExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::config::{EmailConfig, Endpoint, Security};

/// The keyword set on mail handed to the runner, beside `\Seen`: a restart
/// that lost its position (or a new UIDVALIDITY) never answers it again.
pub const DONE_KEYWORD: &str = "$HermesAnswered";

/// How long connecting, the TLS handshake and one command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A plain or TLS connection.
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Why talking to the IMAP server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImapError {
    /// The login was refused: only the operator can fix that.
    #[error("the IMAP server refused the login of {0} (check EMAIL_ADDRESS and EMAIL_PASSWORD)")]
    Auth(String),
    /// Anything else: retried.
    #[error("IMAP {0}")]
    Other(String),
}

impl From<async_imap::error::Error> for ImapError {
    fn from(e: async_imap::error::Error) -> Self {
        ImapError::Other(e.to_string())
    }
}

impl From<std::io::Error> for ImapError {
    fn from(e: std::io::Error) -> Self {
        ImapError::Other(e.to_string())
    }
}

/// The rustls client configuration of both protocols: the webpki roots
/// and any extra roots the config names, with the `ring` provider.
pub(crate) fn tls_config(config: &EmailConfig) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = &config.extra_roots_pem {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("a trusted certificate is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("a trusted certificate was refused: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(tls))
}

async fn within<T, E: Into<ImapError>>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ImapError> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(ImapError::Other(format!("{what} timed out"))),
    }
}

async fn wrap_tls(
    tls: &Arc<rustls::ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> Result<Conn, ImapError> {
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|_| ImapError::Other(format!("{host:?} is not a valid TLS server name")))?;
    let stream = within(
        "the TLS handshake",
        TlsConnector::from(Arc::clone(tls)).connect(name, tcp),
    )
    .await?;
    Ok(Conn::Tls(Box::new(stream)))
}

/// Connects to `endpoint` and logs in as `config.address`.
pub(crate) async fn connect(
    config: &EmailConfig,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Session<Conn>, ImapError> {
    let Endpoint {
        host,
        port,
        security,
    } = &config.imap;
    let tcp = within("connecting", TcpStream::connect((host.as_str(), *port)))
        .await
        .map_err(|e| ImapError::Other(format!("cannot reach {host}:{port}: {e}")))?;
    let mut client = match security {
        Security::Tls => async_imap::Client::new(wrap_tls(tls, host, tcp).await?),
        Security::None => async_imap::Client::new(Conn::Plain(tcp)),
        Security::StartTls => {
            let mut plain = async_imap::Client::new(Conn::Plain(tcp));
            within("the greeting", plain.read_response()).await?;
            within("STARTTLS", plain.run_command_and_check_ok("STARTTLS", None)).await?;
            let Conn::Plain(tcp) = plain.into_inner() else {
                return Err(ImapError::Other("STARTTLS on a TLS connection".to_owned()));
            };
            // No greeting follows the upgrade.
            let client = async_imap::Client::new(wrap_tls(tls, host, tcp).await?);
            return log_in(client, config).await;
        }
    };
    within("the greeting", client.read_response()).await?;
    log_in(client, config).await
}

async fn log_in(
    client: async_imap::Client<Conn>,
    config: &EmailConfig,
) -> Result<Session<Conn>, ImapError> {
    match tokio::time::timeout(
        TIMEOUT,
        client.login(&config.address, config.password.expose()),
    )
    .await
    {
        Ok(Ok(session)) => Ok(session),
        Ok(Err((async_imap::error::Error::No(_), _))) => {
            Err(ImapError::Auth(config.address.clone()))
        }
        Ok(Err((e, _))) => Err(e.into()),
        Err(_) => Err(ImapError::Other("the login timed out".to_owned())),
    }
}

/// The raw mail and flags of `uid`, read without marking it seen.
pub(crate) async fn fetch(
    session: &mut Session<Conn>,
    uid: u32,
) -> Result<Option<(Vec<u8>, bool)>, ImapError> {
    let fetched: Vec<async_imap::types::Fetch> = within("FETCH", async {
        session
            .uid_fetch(uid.to_string(), "(UID FLAGS BODY.PEEK[])")
            .await?
            .try_collect()
            .await
    })
    .await?;
    Ok(fetched
        .into_iter()
        .find(|f| f.uid == Some(uid))
        .and_then(|f| {
            let done = f.flags().any(|flag| {
                matches!(flag, async_imap::types::Flag::Custom(ref k) if k.eq_ignore_ascii_case(DONE_KEYWORD))
            });
            f.body().map(|b| (b.to_vec(), done))
        }))
}

/// When each of `uids` arrived (INTERNALDATE, Unix seconds).
pub(crate) async fn arrival_times(
    session: &mut Session<Conn>,
    uids: &[u32],
) -> Result<std::collections::HashMap<u32, i64>, ImapError> {
    if uids.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let set = uids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let fetched: Vec<async_imap::types::Fetch> = within("FETCH", async {
        session
            .uid_fetch(set, "(UID INTERNALDATE)")
            .await?
            .try_collect()
            .await
    })
    .await?;
    Ok(fetched
        .iter()
        .filter_map(|f| Some((f.uid?, f.internal_date()?.timestamp())))
        .collect())
}

/// Marks `uid` seen and handed on.
pub(crate) async fn mark_done(session: &mut Session<Conn>, uid: u32) -> Result<(), ImapError> {
    let query = format!("+FLAGS.SILENT (\\Seen {DONE_KEYWORD})");
    within("STORE", async {
        session
            .uid_store(uid.to_string(), &query)
            .await?
            .try_collect::<Vec<_>>()
            .await
    })
    .await?;
    Ok(())
}

/// The UIDs matching `query`, ascending.
pub(crate) async fn search(
    session: &mut Session<Conn>,
    query: &str,
) -> Result<Vec<u32>, ImapError> {
    let mut uids: Vec<u32> = within("SEARCH", session.uid_search(query))
        .await?
        .into_iter()
        .collect();
    uids.sort_unstable();
    Ok(uids)
}

/// Logs out, politely and briefly.
pub(crate) async fn log_out(mut session: Session<Conn>) {
    let _ = tokio::time::timeout(Duration::from_secs(5), session.logout()).await;
}
