//! Reading a secret a daemon is given as a file — a TSIG secret, a checker's key, the
//! checkers' keys, a TLS or CA private key. A secret that every user on the host may
//! read is no secret (`tsig-keygen > FILE` makes a 0644 file under the usual umask), so
//! the file is refused, naming it, its mode and the fix, when:
//! - any user may read, write or run it (mode bits for "other");
//! - its group may write it (its group may read it: `root:qdns-control 0640` is the
//!   intended form, a key shared with the daemon's group);
//! - it belongs to a user other than root and the daemon's own (another user could put
//!   their own secret in it).
//!
//! The checks are made on the opened file (`fstat`), not the path, so the file read is
//! the file checked; it is read to at most [`MAX_SECRET_FILE`] octets.
use std::{
    fs,
    io::{self, Read as _},
    os::unix::fs::MetadataExt as _,
    path::Path,
};

/// The largest secret file read (a checkers' key file of thousands of checkers fits).
pub const MAX_SECRET_FILE: u64 = 1 << 20;

/// Why a secret file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// It could not be opened or read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// Every user on the host may read or change it.
    #[error(
        "{path}: mode {mode:04o} lets every user on this host read or change this secret; \
         make it private: chmod 0640 {path} (owner root, group the daemon's: chown root:qdns-control {path})"
    )]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Its group may change it.
    #[error("{path}: mode {mode:04o} lets its group change this secret; chmod 0640 {path}")]
    GroupWritable {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Another user owns it.
    #[error(
        "{path}: owned by uid {owner}, neither root nor this daemon's user (uid {daemon}); \
         chown root {path}"
    )]
    Owner {
        /// The file.
        path: String,
        /// Its owner.
        owner: u32,
        /// The daemon's effective user.
        daemon: u32,
    },
    /// Larger than any secret file.
    #[error("{path}: {size} octets, more than a secret file holds ({MAX_SECRET_FILE} at most)")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
    },
}

/// The contents of the secret file at `path`, after the checks above.
///
/// # Errors
/// [`SecretFileError`], naming the file and the fix.
pub fn read(path: &Path) -> Result<Vec<u8>, SecretFileError> {
    let shown = || path.display().to_string();
    let read_error = |source| SecretFileError::Read { path: shown(), source };
    let file = fs::File::open(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o007 != 0 {
        return Err(SecretFileError::Exposed { path: shown(), mode });
    }
    if mode & 0o020 != 0 {
        return Err(SecretFileError::GroupWritable { path: shown(), mode });
    }
    let daemon = effective_uid().unwrap_or(0);
    if meta.uid() != 0 && meta.uid() != daemon {
        return Err(SecretFileError::Owner {
            path: shown(),
            owner: meta.uid(),
            daemon,
        });
    }
    if meta.len() > MAX_SECRET_FILE {
        return Err(SecretFileError::TooLarge {
            path: shown(),
            size: meta.len(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE).read_to_end(&mut bytes).map_err(read_error)?;
    Ok(bytes)
}

/// This process's effective user, from `/proc/self/status` (`Uid:` real, effective,
/// saved, filesystem); this crate has no unsafe code for `geteuid`.
fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// [`read`], as text.
///
/// # Errors
/// [`SecretFileError`]; a file that is not UTF-8 is a read error.
pub fn read_to_string(path: &Path) -> Result<String, SecretFileError> {
    String::from_utf8(read(path)?).map_err(|e| SecretFileError::Read {
        path: path.display().to_string(),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn with_mode(dir: &Path, mode: u32) -> std::path::PathBuf {
        let path = dir.join(format!("secret-{mode:o}"));
        fs::write(&path, b"c2VjcmV0LXNlY3JldC1zZWNyZXQ=\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn private_files_are_read_and_exposed_ones_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o600, 0o640, 0o400, 0o440] {
            assert_eq!(
                read_to_string(&with_mode(dir.path(), mode)).unwrap(),
                "c2VjcmV0LXNlY3JldC1zZWNyZXQ=\n"
            );
        }
        for mode in [0o644, 0o604, 0o666, 0o601] {
            let path = with_mode(dir.path(), mode);
            let err = read(&path).unwrap_err().to_string();
            assert!(err.contains(&path.display().to_string()), "{err}");
            assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
            assert!(err.contains("chmod 0640"), "{err}");
        }
        let err = read(&with_mode(dir.path(), 0o660)).unwrap_err();
        assert!(
            matches!(err, SecretFileError::GroupWritable { mode: 0o660, .. }),
            "{err}"
        );
        let missing = read(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(missing, SecretFileError::Read { .. }), "{missing}");
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        // chown to another user needs root; the CI runs as root, where this runs.
        assert_eq!(
            effective_uid(),
            Some(0),
            "this test needs root (chown); run it as root, as .ci/run does"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = with_mode(dir.path(), 0o600);
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        let err = read(&path).unwrap_err();
        assert!(
            matches!(
                err,
                SecretFileError::Owner {
                    owner: 4242,
                    daemon: 0,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_file_larger_than_a_secret_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, vec![b'a'; MAX_SECRET_FILE as usize + 1]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(read(&path).unwrap_err(), SecretFileError::TooLarge { .. }));
    }
}
