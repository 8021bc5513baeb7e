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
//! - [`liveness`]: TCP keepalive and an unacknowledged-data bound, so a dead path is
//!   noticed by both ends of a quiet link.
pub mod liveness;
pub mod pki;
pub mod tls;

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
    /// Refusing to overwrite a CA key.
    #[error("{0} exists: refusing to replace a CA key (remove it yourself to start a new CA)")]
    Exists(String),
}
