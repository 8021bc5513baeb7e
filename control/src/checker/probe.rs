//! One probe of one endpoint (SPEC §4), with the reason when it fails.
//!
//! - TCP: connect within 10 s.
//! - HTTP(S): TCP connect within 4 s; then, within 2 s of connecting, the TLS handshake
//!   (HTTPS), a 2xx/3xx status with headers, and — with `search_string` — the string
//!   within the first 5120 bytes of the body. By default HTTPS does **not** validate the
//!   server's certificate (SPEC §4: endpoints are often addressed by IP, with internal
//!   certificates); the TLS handshake itself must succeed. With `tls_verify = true` the
//!   certificate must chain to the Mozilla roots or a `--tls-ca` root and match `host`.
//!
//! HTTP is spoken by hyper's client connection API (one request per connection,
//! `Connection: close`), TLS by rustls.
use std::{
    fmt,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{client::conn::http1, Request};
use hyper_util::rt::TokioIo;
use qdns_zone::snapshot::{LoadSource, Probe, ProbeKind};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
    time::timeout,
};

/// TCP connect limit of HTTP(S) checks.
pub const HTTP_CONNECT: Duration = Duration::from_secs(4);
/// Limit for the response (headers, and body for the search string) after connecting.
pub const HTTP_RESPONSE: Duration = Duration::from_secs(2);
/// TCP connect limit of TCP checks.
pub const TCP_CONNECT: Duration = Duration::from_secs(10);
/// How much of the body the search string is looked for in.
pub const SEARCH_BYTES: usize = 5120;
/// How much of the body a `json:` load figure is looked for in.
pub const LOAD_BODY_BYTES: usize = 64 * 1024;

/// Why a probe failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No TCP connection within the limit.
    ConnectTimeout(Duration),
    /// Connection refused (nothing listening).
    Refused,
    /// Another connect error.
    Connect(String),
    /// No (complete) response within the limit after connecting.
    ResponseTimeout(Duration),
    /// A status other than 2xx/3xx.
    Status(u16),
    /// The search string is not in the first 5120 bytes.
    StringNotFound,
    /// TLS failed.
    Tls(String),
    /// The HTTP exchange failed.
    Http(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::ConnectTimeout(d) => write!(f, "timeout: no connection within {}s", d.as_secs()),
            Failure::Refused => write!(f, "connection refused"),
            Failure::Connect(e) => write!(f, "connect failed: {e}"),
            Failure::ResponseTimeout(d) => write!(f, "timeout: no response within {}s of connecting", d.as_secs()),
            Failure::Status(code) => write!(f, "status {code}"),
            Failure::StringNotFound => write!(f, "search string not found in the first {SEARCH_BYTES} bytes"),
            Failure::Tls(e) => write!(f, "TLS error: {e}"),
            Failure::Http(e) => write!(f, "HTTP error: {e}"),
        }
    }
}

/// Connects to `addr`, from `source` when given.
async fn connect(addr: SocketAddr, source: Option<std::net::IpAddr>) -> std::io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect(addr).await;
    };
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(addr).await
}

/// Why a checker's TLS connectors could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// rustls refused the configuration (no usable protocol versions).
    #[error("{0}")]
    Config(#[from] rustls::Error),
    /// The CA bundle cannot be read, or holds something that is not PEM.
    #[error("{}: {source}", .path.display())]
    CaRead {
        /// The bundle.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate of the CA bundle is not a usable root.
    #[error("{}: {source}", .path.display())]
    CaAdd {
        /// The bundle.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
    /// The CA bundle holds no certificate.
    #[error("{}: no certificate in the CA bundle", .path.display())]
    NoCa {
        /// The bundle.
        path: std::path::PathBuf,
    },
}

/// The TLS connectors of a checker.
#[derive(Clone)]
pub struct Tls {
    /// Accepts any certificate (the default, SPEC §4).
    pub insecure: tokio_rustls::TlsConnector,
    /// Validates against the Mozilla roots and the extra CAs (`tls_verify = true`).
    pub verifying: tokio_rustls::TlsConnector,
}

impl Tls {
    /// Both connectors; `extra_ca` is a PEM bundle of further trusted roots.
    pub fn new(extra_ca: Option<&std::path::Path>) -> Result<Tls, TlsError> {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let insecure = insecure_tls()?;
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = extra_ca {
            let read = |source| TlsError::CaRead {
                path: path.to_path_buf(),
                source,
            };
            let mut added = 0;
            for cert in CertificateDer::pem_file_iter(path).map_err(read)? {
                let cert = cert.map_err(read)?;
                roots.add(cert).map_err(|source| TlsError::CaAdd {
                    path: path.to_path_buf(),
                    source,
                })?;
                added += 1;
            }
            if added == 0 {
                return Err(TlsError::NoCa {
                    path: path.to_path_buf(),
                });
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            insecure,
            verifying: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }
}

/// How long a successful probe took (issue 30: latency steering), in microseconds from
/// the probe's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Timing {
    /// Until the TCP connection was up (one round trip and the kernel's work).
    pub connect_us: u32,
    /// HTTP(S): until the response's status line and headers arrived (connect, TLS
    /// handshake, request and the server's time to answer).
    pub first_byte_us: Option<u32>,
}

impl Timing {
    /// The round trip latency steering uses: the time to first byte when there is one,
    /// else the connect time.
    #[must_use]
    pub fn round_trip_us(&self) -> u32 {
        self.first_byte_us.unwrap_or(self.connect_us)
    }
}

/// What a successful probe measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// How long it took.
    pub timing: Timing,
    /// The load figure the check reads (`load`), in thousandths; `None` when the check
    /// reads none or the response did not hold a number where it says.
    pub load_milli: Option<u32>,
}

/// Microseconds since `start`, saturating.
fn micros_since(start: Instant) -> u32 {
    u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX)
}

/// Runs one probe (from `source`, when the checker has one); how long it took and the
/// load it read when it succeeded.
pub async fn probe(p: &Probe, tls: &Tls, source: Option<std::net::IpAddr>) -> Result<Reading, Failure> {
    let tls = if p.tls_verify { &tls.verifying } else { &tls.insecure };
    let addr = SocketAddr::new(p.ip, p.port);
    let limit = if p.kind == ProbeKind::Tcp {
        TCP_CONNECT
    } else {
        HTTP_CONNECT
    };
    let start = Instant::now();
    let stream = match timeout(limit, connect(addr, source)).await {
        Err(_) => return Err(Failure::ConnectTimeout(limit)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(Failure::Refused),
        Ok(Err(e)) => return Err(Failure::Connect(e.to_string())),
        Ok(Ok(stream)) => stream,
    };
    let connect_us = micros_since(start);
    let (first_byte, load_milli) = match p.kind {
        ProbeKind::Tcp => {
            return Ok(Reading {
                timing: Timing {
                    connect_us,
                    first_byte_us: None,
                },
                load_milli: None,
            })
        }
        ProbeKind::Http => timeout(HTTP_RESPONSE, http(stream, p, start))
            .await
            .map_err(|_| Failure::ResponseTimeout(HTTP_RESPONSE))??,
        ProbeKind::Https => timeout(HTTP_RESPONSE, async {
            let name = rustls::pki_types::ServerName::try_from(p.host.clone())
                .map_err(|e| Failure::Tls(format!("bad server name {:?}: {e}", p.host)))?;
            let stream = tls
                .connect(name, stream)
                .await
                .map_err(|e| Failure::Tls(e.to_string()))?;
            http(stream, p, start).await
        })
        .await
        .map_err(|_| Failure::ResponseTimeout(HTTP_RESPONSE))??,
    };
    Ok(Reading {
        timing: Timing {
            connect_us,
            first_byte_us: Some(first_byte),
        },
        load_milli,
    })
}

/// A load figure in text (a header's value, a JSON string) in thousandths: a finite,
/// non-negative number; anything else is no figure.
fn figure(text: &str) -> Option<u32> {
    let value: f64 = text.trim().parse().ok()?;
    milli(value)
}

#[expect(
    clippy::cast_sign_loss,
    clippy::cast_possible_truncation,
    reason = "non-negative and capped at u32::MAX first"
)]
fn milli(value: f64) -> Option<u32> {
    (value.is_finite() && value >= 0.0).then(|| (value * 1000.0).round().min(f64::from(u32::MAX)) as u32)
}

/// The figure at `pointer` in a JSON body: a number, or a string holding one.
fn json_figure(body: &[u8], pointer: &str) -> Option<u32> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    match value.pointer(pointer)? {
        serde_json::Value::Number(n) => milli(n.as_f64()?),
        serde_json::Value::String(s) => figure(s),
        _ => None,
    }
}

/// One HTTP exchange on `stream`: microseconds from `start` to the response's headers,
/// and the load figure the check reads.
async fn http<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    p: &Probe,
    start: Instant,
) -> Result<(u32, Option<u32>), Failure> {
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Failure::Http(e.to_string()))?;
    let driver = tokio::spawn(connection);
    let result = async {
        let request = Request::get(p.path.as_str())
            .header(hyper::header::HOST, p.host.as_str())
            .header(hyper::header::USER_AGENT, "qdns-checker")
            .header(hyper::header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| Failure::Http(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Failure::Http(e.to_string()))?;
        let first_byte = micros_since(start);
        let status = response.status();
        if !(status.is_success() || status.is_redirection()) {
            return Err(Failure::Status(status.as_u16()));
        }
        let header_load = match p.load.as_ref().map(|l| &l.from) {
            Some(LoadSource::Header(name)) => response
                .headers()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(figure),
            _ => None,
        };
        let json = match p.load.as_ref().map(|l| &l.from) {
            Some(LoadSource::Json(pointer)) => Some(pointer.as_str()),
            _ => None,
        };
        if p.search_string.is_none() && json.is_none() {
            return Ok((first_byte, header_load));
        }
        // The body, as far as the search string and a JSON figure need it.
        let want = if json.is_some() { LOAD_BODY_BYTES } else { SEARCH_BYTES };
        let mut body = response.into_body();
        let mut seen: Vec<u8> = Vec::with_capacity(SEARCH_BYTES);
        while seen.len() < want {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let take = data.len().min(want - seen.len());
                        seen.extend_from_slice(&data[..take]);
                    }
                }
                Some(Err(e)) => return Err(Failure::Http(e.to_string())),
                None => break,
            }
        }
        if let Some(needle) = &p.search_string {
            let searched = &seen[..seen.len().min(SEARCH_BYTES)];
            if !searched.windows(needle.len().max(1)).any(|w| w == needle.as_bytes()) {
                return Err(Failure::StringNotFound);
            }
        }
        Ok((
            first_byte,
            header_load.or_else(|| json.and_then(|pointer| json_figure(&seen, pointer))),
        ))
    }
    .await;
    driver.abort();
    result
}

/// A TLS connector that does not validate certificates (see the module docs).
pub fn insecure_tls() -> Result<tokio_rustls::TlsConnector, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Accepts any certificate; still checks the handshake signatures, so the TLS session
/// itself is sound.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
