//! Errors of zone loading: each names the file, the line or key, and the reason.
use std::{fmt, path::PathBuf};

/// A zone file (or zone directory) that cannot be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneError {
    /// The zone directory or a file in it cannot be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A zone taken from a primary (`[zone] primary`) has no transferred copy yet: it
    /// is served once the first transfer comes (control transfers it).
    #[error("{path}: zone {origin} has no copy from its primary {primary} yet")]
    NotTransferred {
        /// The zone file.
        path: PathBuf,
        /// The zone's origin (text, absolute).
        origin: String,
        /// The primary.
        primary: std::net::SocketAddr,
        /// The key transfers are signed with.
        tsig: Option<String>,
        /// A catalog zone (RFC 9432): its members are taken, it is not served.
        catalog: bool,
    },
    /// The content is invalid.
    #[error("{location}: {reason}")]
    Invalid {
        /// Where: file, line and key.
        location: Location,
        /// What is wrong, and what to do.
        reason: String,
    },
}

/// Where in which file something is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The TOML key path (e.g. `rrset[2].values[0]`), when it applies.
    pub key: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        Ok(())
    }
}

impl ZoneError {
    /// An [`ZoneError::Invalid`] at `path`, `line`, `key`.
    pub fn invalid(
        path: impl Into<PathBuf>,
        line: Option<usize>,
        key: Option<String>,
        reason: impl Into<String>,
    ) -> Self {
        ZoneError::Invalid {
            location: Location {
                path: path.into(),
                line,
                key,
            },
            reason: reason.into(),
        }
    }
}
