//! The location CA behind `qdnsctl pki`: `init` makes the CA (`ca.pem`, `ca.key`),
//! `issue` a leaf for control (`serverAuth`, the names edges dial) or for an edge
//! (`clientAuth`, its edge id). Keys are ECDSA P-256, written 0600; every file is
//! written to a temporary name and renamed, key before certificate, so a daemon that
//! reads them mid-rotation sees either the old pair or a mismatch it refuses (and keeps
//! the old one), never half a file.
use std::{
    io::Write,
    net::IpAddr,
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::LinkError;

/// The CA certificate's file name in the PKI directory.
pub const CA_CERT: &str = "ca.pem";
/// The CA key's file name in the PKI directory.
pub const CA_KEY: &str = "ca.key";

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An edge: a client certificate naming its edge id.
    Edge,
    /// Control's edge socket: a server certificate for the names edges dial.
    Control,
}

/// The files written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LinkError + '_ {
    move |source| LinkError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), LinkError> {
    // A name of its own for each write: two tasks writing one file at once each rename
    // a whole file (the last one stays), neither finds its temporary file gone.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // An hour back, for clocks a little behind the CA's.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// Makes a new CA in `dir` (created 0700 if missing). Refuses when `dir` already holds a
/// CA key: replacing it would orphan every certificate issued from it.
///
/// # Errors
/// An existing CA key, or a file that cannot be written.
pub fn init(dir: &Path, name: &str, days: u32) -> Result<Written, LinkError> {
    let key_path = dir.join(CA_KEY);
    if key_path.exists() {
        return Err(LinkError::Exists(key_path.display().to_string()));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    // Issues leaves only: no intermediate below it.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let cert_path = dir.join(CA_CERT);
    write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok(Written {
        cert: cert_path,
        key: key_path,
    })
}

/// A certificate subject: a DNS name (letters, digits, `-`, `_`, dots) or an IP address.
fn subject(name: &str) -> Result<SanType, LinkError> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let plain = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !plain {
        return Err(LinkError::Name(format!(
            "{name:?} is not a DNS name (letters, digits, '-', '_', dot-separated) or an IP address"
        )));
    }
    let dns = name
        .to_owned()
        .try_into()
        .map_err(|e| LinkError::Name(format!("{name:?}: {e}")))?;
    Ok(SanType::DnsName(dns))
}

/// Issues `NAME.pem` and `NAME.key` in `dir` from the CA there. An edge's certificate
/// names its edge id (`name`); control's names `name` and every entry of `also` (the
/// DNS names and addresses edges dial). Re-issuing replaces the files: that is rotation.
///
/// # Errors
/// No CA in `dir`, a name that cannot go in a certificate, or a file that cannot be
/// written.
pub fn issue(dir: &Path, name: &str, role: Role, also: &[String], days: u32) -> Result<Written, LinkError> {
    if name == "ca" {
        return Err(LinkError::Name("\"ca\" is the CA's own file name".to_owned()));
    }
    let mut names = vec![subject(name)?];
    if role == Role::Edge && !also.is_empty() {
        return Err(LinkError::Name("an edge certificate names only its edge id".to_owned()));
    }
    if role == Role::Edge && matches!(names.first(), Some(SanType::IpAddress(_))) {
        return Err(LinkError::Name(format!(
            "edge id {name:?} is an address: an edge is named by a DNS name (its --edge-id)"
        )));
    }
    for other in also {
        let san = subject(other)?;
        if !names.contains(&san) {
            names.push(san);
        }
    }
    let issuer = ca_issuer(dir)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = names;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![match role {
        Role::Edge => ExtendedKeyUsagePurpose::ClientAuth,
        Role::Control => ExtendedKeyUsagePurpose::ServerAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}.key"));
    write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok(Written {
        cert: cert_path,
        key: key_path,
    })
}

/// The CA in `dir`, to sign with.
fn ca_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, LinkError> {
    let ca_key_path = dir.join(CA_KEY);
    let ca_cert_path = dir.join(CA_CERT);
    let ca_key_pem = crate::secret::read_to_string(&ca_key_path)?;
    let ca_cert_pem = std::fs::read_to_string(&ca_cert_path).map_err(io(&ca_cert_path))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| LinkError::Pem {
        path: ca_key_path.display().to_string(),
        reason: format!("not a CA key: {e}"),
    })?;
    Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).map_err(|e| LinkError::Pem {
        path: ca_cert_path.display().to_string(),
        reason: format!("not a CA certificate: {e}"),
    })
}

/// The revocation list's file name in the PKI directory (control's `--edge-tls-crl`).
pub const CRL: &str = "crl.pem";
/// The certificates revoked so far, `SERIAL-HEX NAME UNIX-SECONDS` a line.
pub const REVOKED: &str = "revoked.txt";

/// Revokes `dir/NAME.pem` (an edge's leaked or retired certificate): adds its serial to
/// `dir/revoked.txt` and writes `dir/crl.pem`, signed by the CA, listing every revoked
/// serial. Control refuses revoked edges from then on and drops their links (it reads
/// the file again when it changes). Issuing `NAME` again gives a new serial.
///
/// # Errors
/// No CA or no `NAME.pem` in `dir`, or a file that cannot be written.
pub fn revoke(dir: &Path, name: &str) -> Result<PathBuf, LinkError> {
    use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevocationReason, RevokedCertParams, SerialNumber};
    use rustls::pki_types::pem::PemObject as _;
    use std::fmt::Write as _;
    let cert_path = dir.join(format!("{name}.pem"));
    let pem = std::fs::read(&cert_path).map_err(io(&cert_path))?;
    let pem_error = |reason: String| LinkError::Pem {
        path: cert_path.display().to_string(),
        reason,
    };
    let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem)
        .map_err(|e| pem_error(format!("not a PEM certificate: {e}")))?;
    let serial = crate::tls::serial(&der).ok_or_else(|| pem_error("not an X.509 certificate".to_owned()))?;
    let hex = serial.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    });
    let list_path = dir.join(REVOKED);
    let mut list = match std::fs::read_to_string(&list_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(&list_path)(e)),
    };
    let now = time::OffsetDateTime::now_utc();
    if !list
        .lines()
        .any(|line| line.split_whitespace().next() == Some(hex.as_str()))
    {
        let _ = writeln!(list, "{hex} {name} {}", now.unix_timestamp());
    }
    let mut revoked_certs = Vec::new();
    for line in list.lines() {
        let mut words = line.split_whitespace();
        let (Some(serial), Some(_), Some(when)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let bytes: Option<Vec<u8>> = (0..serial.len())
            .step_by(2)
            .map(|i| serial.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect();
        let (Some(bytes), Ok(when)) = (bytes, when.parse::<i64>()) else {
            continue;
        };
        revoked_certs.push(RevokedCertParams {
            serial_number: SerialNumber::from_slice(&bytes),
            revocation_time: time::OffsetDateTime::from_unix_timestamp(when).unwrap_or(now),
            reason_code: Some(RevocationReason::KeyCompromise),
            invalidity_date: None,
        });
    }
    let params = CertificateRevocationListParams {
        this_update: now - time::Duration::hours(1),
        next_update: now + time::Duration::days(3650),
        crl_number: SerialNumber::from(u64::try_from(now.unix_timestamp()).unwrap_or(1)),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&ca_issuer(dir)?)?;
    let crl_path = dir.join(CRL);
    write_atomic(&list_path, list.as_bytes(), 0o644)?;
    write_atomic(&crl_path, crl.pem()?.as_bytes(), 0o644)?;
    Ok(crl_path)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::tls::{certifies, client_certificate, ClientTls, ServerTls, TlsFiles};

    fn files(dir: &Path, name: &str) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join(CA_CERT),
            crl: None,
        }
    }

    /// One handshake over loopback; the server's view of the client certificate, or
    /// the first side's error.
    async fn handshake(
        server: &ServerTls,
        client: &ClientTls,
    ) -> Result<Option<rustls::pki_types::CertificateDer<'static>>, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = server.acceptor();
        let serve = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.map_err(|e| format!("server: {e}"))?;
            let cert = client_certificate(tls.get_ref().1);
            tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
            tls.shutdown().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(cert)
        });
        let (connector, name) = client.connector();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let client_side = async {
            let mut tls = connector.connect(name, tcp).await.map_err(|e| format!("client: {e}"))?;
            let mut got = Vec::new();
            tls.read_to_end(&mut got).await.map_err(|e| format!("client: {e}"))?;
            Ok::<_, String>(got)
        }
        .await;
        let server_side = serve.await.unwrap();
        match (client_side, server_side) {
            (Ok(got), Ok(cert)) => {
                assert_eq!(got, b"ok");
                Ok(cert)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    #[tokio::test]
    async fn a_revoked_edge_is_refused_and_reported_revoked_the_others_link() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), "test CA", 30).unwrap();
        issue(dir.path(), "control", Role::Control, &["127.0.0.1".to_owned()], 30).unwrap();
        issue(dir.path(), "edge-1", Role::Edge, &[], 30).unwrap();
        issue(dir.path(), "edge-2", Role::Edge, &[], 30).unwrap();
        // An empty list first (a CRL naming nothing is what an operator starts with).
        issue(dir.path(), "spare", Role::Edge, &[], 30).unwrap();
        revoke(dir.path(), "spare").unwrap();
        let server = ServerTls::new(TlsFiles {
            crl: Some(dir.path().join(CRL)),
            ..files(dir.path(), "control")
        })
        .unwrap();
        let one = ClientTls::new(files(dir.path(), "edge-1"), "127.0.0.1").unwrap();
        let two = ClientTls::new(files(dir.path(), "edge-2"), "127.0.0.1").unwrap();
        let cert_one = handshake(&server, &one).await.unwrap().unwrap();
        assert!(!server.revokes(&cert_one));
        revoke(dir.path(), "edge-1").unwrap();
        // Revoking twice lists it once.
        revoke(dir.path(), "edge-1").unwrap();
        let listed = std::fs::read_to_string(dir.path().join(REVOKED)).unwrap();
        assert_eq!(listed.lines().count(), 2, "{listed}");
        assert!(server.revokes(&cert_one), "a linked edge is seen revoked");
        assert!(
            handshake(&server, &one).await.is_err(),
            "and refused on its next connection"
        );
        let cert_two = handshake(&server, &two).await.unwrap().unwrap();
        assert!(!server.revokes(&cert_two));
        // Issued again, edge-1 has a new serial and links again.
        issue(dir.path(), "edge-1", Role::Edge, &[], 30).unwrap();
        let again = ClientTls::new(files(dir.path(), "edge-1"), "127.0.0.1").unwrap();
        assert!(handshake(&server, &again).await.is_ok());
        assert!(revoke(dir.path(), "nobody").is_err());
    }

    #[tokio::test]
    async fn one_ca_links_its_own_and_refuses_strangers_either_way() {
        let ours = tempfile::tempdir().unwrap();
        let theirs = tempfile::tempdir().unwrap();
        for dir in [ours.path(), theirs.path()] {
            init(dir, "test CA", 30).unwrap();
            issue(dir, "control", Role::Control, &["127.0.0.1".to_owned()], 30).unwrap();
            issue(dir, "edge-1", Role::Edge, &[], 30).unwrap();
        }
        let server = ServerTls::new(files(ours.path(), "control")).unwrap();
        let client = ClientTls::new(files(ours.path(), "edge-1"), "127.0.0.1").unwrap();
        let cert = handshake(&server, &client).await.unwrap().unwrap();
        assert!(certifies(&cert, "edge-1"));
        assert!(!certifies(&cert, "edge-2"), "the certificate names one edge");

        // An edge of another CA is refused by control; control of another CA by the edge.
        let stranger = ClientTls::new(files(theirs.path(), "edge-1"), "127.0.0.1").unwrap();
        assert!(handshake(&server, &stranger).await.is_err());
        let impostor = ServerTls::new(files(theirs.path(), "control")).unwrap();
        let err = handshake(&impostor, &client).await.unwrap_err();
        assert!(err.contains("client: invalid peer certificate"), "{err}");
        // The wrong name for control.
        let misdialled = ClientTls::new(files(ours.path(), "edge-1"), "control.other.example").unwrap();
        assert!(handshake(&server, &misdialled).await.is_err());
        // An edge's certificate cannot serve as control's (clientAuth only) and control's
        // cannot be used by an edge (serverAuth only).
        issue(ours.path(), "edge-2", Role::Edge, &[], 30).unwrap();
        let posing = ServerTls::new(files(ours.path(), "edge-2")).unwrap();
        let to_edge_2 = ClientTls::new(files(ours.path(), "edge-1"), "edge-2").unwrap();
        assert!(handshake(&posing, &to_edge_2).await.is_err());
        let as_edge = ClientTls::new(files(ours.path(), "control"), "127.0.0.1").unwrap();
        assert!(handshake(&server, &as_edge).await.is_err());
    }

    #[tokio::test]
    async fn reissued_files_are_used_on_the_next_connection_and_a_broken_pair_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), "test CA", 30).unwrap();
        issue(dir.path(), "control", Role::Control, &["old.example".to_owned()], 30).unwrap();
        issue(dir.path(), "edge-1", Role::Edge, &[], 30).unwrap();
        let server = ServerTls::new(files(dir.path(), "control")).unwrap();
        let new_name = ClientTls::new(files(dir.path(), "edge-1"), "new.example").unwrap();
        assert!(
            handshake(&server, &new_name).await.is_err(),
            "not yet issued for new.example"
        );
        issue(dir.path(), "control", Role::Control, &["new.example".to_owned()], 30).unwrap();
        handshake(&server, &new_name).await.unwrap();
        // A key that does not match the certificate (a rotation half done): the last good
        // pair stays in use.
        let stray = KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("control.key"), stray.serialize_pem()).unwrap();
        handshake(&server, &new_name).await.unwrap();
        // A fresh start with the broken pair fails loudly.
        let err = ServerTls::new(files(dir.path(), "control")).err().unwrap();
        assert!(err.to_string().contains("TLS configuration"), "{err}");
    }

    #[test]
    fn init_refuses_to_replace_a_ca_and_keys_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let written = init(dir.path(), "test CA", 30).unwrap();
        let err = init(dir.path(), "test CA", 30).unwrap_err();
        assert!(matches!(err, LinkError::Exists(_)), "{err}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&written.key), 0o600);
        let leaf = issue(dir.path(), "edge-1", Role::Edge, &[], 30).unwrap();
        assert_eq!(mode(&leaf.key), 0o600);
        assert_eq!(mode(&leaf.cert), 0o644);
        for bad in ["", "a..b", "a/b", "../x", "a b", "ca"] {
            assert!(issue(dir.path(), bad, Role::Edge, &[], 30).is_err(), "{bad:?}");
        }
        assert!(issue(dir.path(), "192.0.2.1", Role::Edge, &[], 30).is_err());
        assert!(issue(dir.path(), "edge-1", Role::Edge, &["x".to_owned()], 30).is_err());
        let none = tempfile::tempdir().unwrap();
        let err = issue(none.path(), "edge-1", Role::Edge, &[], 30).unwrap_err();
        assert!(err.to_string().contains("ca.key"), "{err}");
    }
}
