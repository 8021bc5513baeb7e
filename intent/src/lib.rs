//! A deployment's **intent** (SPEC §11): what its operators decide, as one value with a
//! revision, the same at every location.
//!
//! This crate holds the part of the intent that is files — the zone directory with every
//! file its zones include (master files, CIDR collections) — and its two sources:
//!
//! - a directory on the host ([`files::read_dir`]): the single-host default, revision 0;
//! - **etcd** ([`store::Store`], `--intent etcd://HOST:PORT[,HOST:PORT…]/PREFIX`):
//!   `qdnsctl publish` writes a directory as one new revision, every location's control
//!   watches from the revision it applied last and applies each one whole
//!   ([`applied::Applied`] keeps it on disk, so a control started while the store is
//!   down serves what it applied before).
//!
//! In the store, under PREFIX: `manifest` (JSON, [`manifest::Manifest`]) lists each file
//! as the SHA-256 names of its chunks, and `chunk/HEX` holds each chunk (content-defined,
//! [`manifest::chunks`], at most [`manifest::MAX_CHUNK`] octets: a request stays within
//! etcd's 1.5 MiB). A publish writes the chunks the store lacks, then the manifest in
//! one transaction that succeeds only if the manifest is still the one it read: the
//! intent's revision is the manifest's `mod_revision`, and a location that reads a
//! manifest reads exactly one revision. A one-record change of a large zone writes a
//! chunk or two and the manifest, not the zone.
//!
//! Beside the files, [`records`] keeps the deployment's small values: what operators set
//! (`operator`, one JSON value changed by compare-and-swap), the zones' keys
//! (`secret/dnssec/ORIGIN`, made once, moved by compare-and-swap), the TSIG and
//! checker keys (`secret/tsig-keys`, `secret/checker-keys`), each location's DNS cookie
//! secrets (`secret/cookies/LOCATION`, rotated by compare-and-swap), and what each
//! location says of itself (`location/NAME`, and `alive/NAME` on a lease).
#![forbid(unsafe_code)]
pub mod applied;
pub mod files;
pub mod manifest;
pub mod records;
pub mod store;
pub mod url;
pub mod watch;

/// Where a deployment's intent is kept and how to reach it (`--intent`, and
/// `--intent-ca`, `--intent-cert`, `--intent-key`).
#[derive(Debug, Clone)]
pub struct Source {
    /// The store's members and the deployment's prefix.
    pub url: url::StoreUrl,
    /// The TLS files.
    pub tls: url::StoreTls,
}

/// One revision of the intent: its number in the store (0 for a directory on the
/// host) and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The store's revision that wrote it.
    pub revision: u64,
    /// The publisher's message.
    pub message: String,
    /// The files, by path relative to the zone directory.
    pub files: files::Files,
    /// The signed zones' origins and algorithms ([`manifest::Manifest::signed`]).
    pub signed: std::collections::BTreeMap<String, String>,
}

/// Why the intent could not be read, written or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntentError {
    /// A local file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A `--intent` URL that cannot be used.
    #[error("--intent {url}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The store could not be reached or refused the request.
    #[error("intent store {endpoints}: {reason}")]
    Store {
        /// The store's endpoints.
        endpoints: String,
        /// Why.
        reason: String,
    },
    /// The intent changed in the store between reading it and writing the new one.
    #[error("the intent changed under this publish (now revision {now}): publish again")]
    Changed {
        /// The revision found.
        now: u64,
    },
    /// What the store holds does not make an intent.
    #[error("intent revision {revision}: {reason}")]
    Damaged {
        /// The revision read.
        revision: u64,
        /// What is wrong.
        reason: String,
    },
    /// A directory that cannot be published.
    #[error("{0}")]
    Files(String),
}

impl IntentError {
    /// An I/O error on `path`.
    #[must_use]
    pub fn io(path: &std::path::Path, source: std::io::Error) -> IntentError {
        IntentError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
