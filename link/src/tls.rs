//! Mutual-TLS configurations for the control↔edge link, read from PEM files.
//!
//! Both ends present a certificate and verify the other's against the CA file (which
//! may hold several CAs, for a CA rotation). Leaves carry one extended key usage:
//! control's `serverAuth`, an edge's `clientAuth` — so an edge's key cannot pose as
//! control. The files are read again when any of them changes (size, mtime, ctime or
//! inode), checked once per connection: certificates rotate without a restart. A change
//! that does not load (say a key written before its certificate) keeps the last good
//! configuration and logs why, so a rotation in progress never closes the link.
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use rustls::{
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName},
    ClientConfig, RootCertStore, ServerConfig,
};

use crate::LinkError;

/// The three files of one end of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This end's certificate (PEM; a chain may follow the leaf).
    pub cert: PathBuf,
    /// This end's private key (PEM, PKCS#8 or SEC1).
    pub key: PathBuf,
    /// The CA certificates the other end must chain to (PEM, one or more).
    pub ca: PathBuf,
    /// Control only: a certificate revocation list (PEM, one or more CRLs, as
    /// `qdnsctl pki revoke` writes) — a revoked edge is refused, and dropped if linked.
    pub crl: Option<PathBuf>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, LinkError> {
    let bytes = std::fs::read(path).map_err(|source| LinkError::Io {
        path: shown(path),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LinkError::Pem {
            path: shown(path),
            reason: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(LinkError::Pem {
            path: shown(path),
            reason: "no certificate in the file".to_owned(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, LinkError> {
    let bytes = crate::secret::read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| LinkError::Pem {
        path: shown(path),
        reason: format!("no private key: {e}"),
    })
}

fn read_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, LinkError> {
    let bytes = std::fs::read(path).map_err(|source| LinkError::Io {
        path: shown(path),
        source,
    })?;
    CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LinkError::Pem {
            path: shown(path),
            reason: format!("not PEM revocation lists: {e}"),
        })
}

/// The serial numbers a CRL file revokes (its issuer's signature is checked by the TLS
/// verifier on each new connection; this reads the file the operator gave).
///
/// # Errors
/// A file that cannot be read, or a CRL that does not parse.
pub fn revoked_serials(path: &Path) -> Result<std::collections::BTreeSet<Vec<u8>>, LinkError> {
    let mut out = std::collections::BTreeSet::new();
    for crl in read_crls(path)? {
        let (_, parsed) = x509_parser::parse_x509_crl(crl.as_ref()).map_err(|e| LinkError::Pem {
            path: shown(path),
            reason: format!("not a revocation list: {e}"),
        })?;
        out.extend(parsed.iter_revoked_certificates().map(|r| r.raw_serial().to_vec()));
    }
    Ok(out)
}

/// A certificate's serial number (DER).
#[must_use]
pub fn serial(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    x509_parser::parse_x509_certificate(cert.as_ref())
        .ok()
        .map(|(_, c)| c.tbs_certificate.raw_serial().to_vec())
}

fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, LinkError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| LinkError::Pem {
            path: shown(path),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// Control's side: its certificate, and every client must present one that chains to
/// the CA file.
///
/// # Errors
/// A file that cannot be read or holds no usable certificate/key, or a key that does not
/// match the certificate.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, LinkError> {
    let provider = provider();
    let mut builder =
        rustls::server::WebPkiClientVerifier::builder_with_provider(read_roots(&files.ca)?, provider.clone());
    if let Some(path) = &files.crl {
        // The location CA issues leaves only: their revocation is all there is to check.
        builder = builder
            .with_crls(read_crls(path)?)
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status();
    }
    let verifier = builder.build().map_err(|e| LinkError::Pem {
        path: shown(&files.ca),
        reason: format!("cannot verify clients with it: {e}"),
    })?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(read_certs(&files.cert)?, read_key(&files.key)?)?;
    Ok(config)
}

/// An edge's side: control's certificate must chain to the CA file and name the server
/// name the edge dials; the edge presents its own.
///
/// # Errors
/// As [`server_config`].
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, LinkError> {
    let roots = read_roots(&files.ca)?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(read_certs(&files.cert)?, read_key(&files.key)?)?;
    Ok(config)
}

/// What identifies one version of the files.
type Stamp = Vec<(u64, i64, i64, u64)>;

fn stamp(files: &TlsFiles) -> Stamp {
    [Some(&files.cert), Some(&files.key), Some(&files.ca), files.crl.as_ref()]
        .into_iter()
        .flatten()
        .map(|path| {
            std::fs::metadata(path).map_or((0, 0, 0, 0), |m| {
                (
                    m.len(),
                    m.mtime_nsec() + m.mtime() * 1_000_000_000,
                    m.ctime_nsec() + m.ctime() * 1_000_000_000,
                    m.ino(),
                )
            })
        })
        .collect()
}

/// A configuration built from files, built again when they change.
struct Reloading<T> {
    files: TlsFiles,
    build: fn(&TlsFiles) -> Result<T, LinkError>,
    current: Mutex<(Stamp, Arc<T>)>,
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl<T> Reloading<T> {
    fn new(files: TlsFiles, build: fn(&TlsFiles) -> Result<T, LinkError>) -> Result<Self, LinkError> {
        let seen = stamp(&files);
        let config = Arc::new(build(&files)?);
        Ok(Reloading {
            files,
            build,
            current: Mutex::new((seen, config)),
        })
    }

    fn get(&self) -> Arc<T> {
        let seen = stamp(&self.files);
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.0 != seen {
            match (self.build)(&self.files) {
                Ok(config) => {
                    tracing::info!(cert = %self.files.cert.display(), "link certificates reloaded");
                    *current = (seen, Arc::new(config));
                }
                Err(err) => {
                    // Remember the stamp so the failure is logged once per change.
                    tracing::error!(%err, "link certificates changed but do not load; keeping the previous ones");
                    current.0 = seen;
                }
            }
        }
        Arc::clone(&current.1)
    }
}

/// Control's TLS for the edge socket, reloaded when its files change.
#[derive(Debug)]
pub struct ServerTls(
    Reloading<ServerConfig>,
    Mutex<(Stamp, std::collections::BTreeSet<Vec<u8>>)>,
);

impl ServerTls {
    /// Loads the files (they must be usable at start).
    ///
    /// # Errors
    /// As [`server_config`].
    pub fn new(files: TlsFiles) -> Result<ServerTls, LinkError> {
        let revoked = match &files.crl {
            Some(path) => revoked_serials(path)?,
            None => std::collections::BTreeSet::new(),
        };
        let seen = stamp(&files);
        Ok(ServerTls(
            Reloading::new(files, server_config)?,
            Mutex::new((seen, revoked)),
        ))
    }

    /// The acceptor for the next connection (the files read again if they changed).
    #[must_use]
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.0.get())
    }

    /// Whether the revocation list (read again if it changed) revokes `cert`: a linked
    /// edge checks this every few seconds and is dropped when it does.
    #[must_use]
    pub fn revokes(&self, cert: &CertificateDer<'_>) -> bool {
        let Some(path) = &self.0.files.crl else { return false };
        let seen = stamp(&self.0.files);
        let mut revoked = self.1.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if revoked.0 != seen {
            match revoked_serials(path) {
                Ok(serials) => *revoked = (seen, serials),
                Err(err) => {
                    tracing::error!(%err, "the revocation list changed but does not load; keeping the previous one");
                    revoked.0 = seen;
                }
            }
        }
        serial(cert).is_some_and(|s| revoked.1.contains(&s))
    }
}

/// An edge's TLS towards control, reloaded when its files change.
#[derive(Debug)]
pub struct ClientTls {
    config: Reloading<ClientConfig>,
    server: ServerName<'static>,
}

impl ClientTls {
    /// Loads the files; `server` is the name (DNS name or IP address) control's
    /// certificate must carry.
    ///
    /// # Errors
    /// As [`client_config`], or a server name that is neither a DNS name nor an address.
    pub fn new(files: TlsFiles, server: &str) -> Result<ClientTls, LinkError> {
        let server = ServerName::try_from(server.to_owned())
            .map_err(|_| LinkError::Name(format!("{server:?} is not a DNS name or an IP address")))?;
        Ok(ClientTls {
            config: Reloading::new(files, client_config)?,
            server,
        })
    }

    /// The connector for the next connection and the name it verifies.
    #[must_use]
    pub fn connector(&self) -> (tokio_rustls::TlsConnector, ServerName<'static>) {
        (tokio_rustls::TlsConnector::from(self.config.get()), self.server.clone())
    }
}

/// Whether `cert` (an end-entity certificate the handshake already verified) names
/// `name` as a DNS-name SAN: the check that an edge's hello is its own.
#[must_use]
pub fn certifies(cert: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(name) = ServerName::try_from(name) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert).is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
}

/// The verified end-entity certificate of a TLS server connection's client.
#[must_use]
pub fn client_certificate(conn: &rustls::ServerConnection) -> Option<CertificateDer<'static>> {
    conn.peer_certificates()?.first().map(|c| c.clone().into_owned())
}
