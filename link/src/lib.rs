//! Security of the control↔edge link (`tls://ADDR:PORT`).
//!
//! **Mutual TLS from a location CA**, chosen over keys pinned per edge: control trusts
//! whatever the location's CA signed, so adding an edge is one `qdnsctl pki issue` on the
//! CA host and no change to control; rotating a certificate is replacing two files (both
//! daemons read them again for each new connection, so nothing restarts); rotating the CA
//! itself is a bundle of old and new CA in the trust file until every leaf is re-issued.
//! Pinning would need control's configuration changed, and reloaded, for every edge added
//! or re-keyed. Each edge's certificate names it (a DNS-name SAN): control refuses an edge
//! whose hello names another, so one edge's key cannot pose as another in `status`.
//!
//! TLS 1.3 only, ring as the provider, ECDSA P-256 keys.
//!
//! - [`tls`]: server and client configurations from PEM files, reloaded when they change.
//! - [`pki`]: the CA behind `qdnsctl pki init` and `qdnsctl pki issue`.
//! - [`message`]: the messages on the link, and why one could not be read.
//! - [`protocol`]: their framing, the hello, and the snapshot file an edge keeps.
//! - [`schema`]: link schema numbers, and the frozen forms of earlier schemas.
//! - [`tlv`]: the type–length–value entries of the hello and report extensions.
//! - [`delta`]: a new snapshot version as changes to one an edge serves.
//! - [`liveness`]: TCP keepalive and an unacknowledged-data bound, so a dead path is
//!   noticed by both ends of a quiet link.
#![forbid(unsafe_code)]
pub mod delta;
pub mod liveness;
pub mod message;
pub mod pki;
pub mod protocol;
pub mod schema;
pub mod secret;
pub mod tls;
pub mod tlv;

/// The flag that accepts a `tcp://` link beyond loopback (SPEC §10), named in the
/// refusal so the operator knows what accepting it takes.
pub const INSECURE_PLAINTEXT_FLAG: &str = "--insecure-plaintext-link";

/// True when a plaintext `tcp://` link to or on `addr` (`ADDR:PORT`) stays on this host:
/// a loopback address, or `localhost`. Anything else crosses a network where the link
/// is neither encrypted nor authenticated.
#[must_use]
pub fn stays_on_host(addr: &str) -> bool {
    if let Ok(socket) = addr.parse::<std::net::SocketAddr>() {
        return socket.ip().is_loopback();
    }
    addr.rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

/// Refuses a `tcp://` link beyond loopback unless the operator accepted it with
/// [`INSECURE_PLAINTEXT_FLAG`]; the error is the reason, for the flag that set the link.
pub fn check_plaintext(endpoint: &str, accepted: bool) -> Result<(), String> {
    match endpoint.strip_prefix("tcp://") {
        Some(addr) if !accepted && !stays_on_host(addr) => Err(format!(
            "{endpoint} leaves this host neither encrypted nor authenticated (anyone on the path reads \
             every zone, and can pose as control): use tls:// (OPERATIONS.md), or accept it with \
             {INSECURE_PLAINTEXT_FLAG} on both ends"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod plaintext_tests {
    use super::{check_plaintext, stays_on_host};

    #[test]
    fn only_loopback_is_plaintext_without_the_flag() {
        assert!(stays_on_host("127.0.0.1:5300") && stays_on_host("[::1]:5300") && stays_on_host("localhost:1"));
        assert!(!stays_on_host("0.0.0.0:5300") && !stays_on_host("10.0.0.1:1") && !stays_on_host("ctl.example:1"));
        assert!(check_plaintext("tcp://127.0.0.2:1", false).is_ok());
        assert!(check_plaintext("/run/qdns/edge.sock", false).is_ok());
        assert!(check_plaintext("tls://10.0.0.1:1", false).is_ok());
        let err = check_plaintext("tcp://10.0.0.1:1", false).unwrap_err();
        assert!(err.contains("--insecure-plaintext-link"), "{err}");
        assert!(check_plaintext("tcp://10.0.0.1:1", true).is_ok());
    }
}

/// A link-security failure: which file, and why.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file held no usable certificate or key.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the combination (key does not match certificate, ...).
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Certificate generation failed.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A name that cannot go in a certificate.
    #[error("{0}")]
    Name(String),
    /// A private key file that is not private (or could not be read).
    #[error("{0}")]
    Secret(#[from] secret::SecretFileError),
    /// Refusing to overwrite a CA key.
    #[error("{0} exists: refusing to replace a CA key (remove it yourself to start a new CA)")]
    Exists(String),
}
