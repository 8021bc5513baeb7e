//! The location's DNS cookie secrets (SPEC §10, RFC 7873 §7.1, RFC 9018): made here,
//! kept in `STATE_DIR/cookies.json` (owner-only, like the rest of the state directory),
//! rotated every `--cookie-rotation`, the one before kept as `previous` (still accepted
//! by the edges) until the next rotation, and sent to every edge that takes them
//! (`ToEdge::Cookies`), so any edge of the location validates another's cookie.
use std::{
    io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The file in the state directory.
const FILE: &str = "cookies.json";
/// How often the rotation is looked at.
const CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The secrets, as kept and as sent.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    /// New cookies are made with it (hex in the file).
    #[serde(with = "hex16")]
    pub current: [u8; 16],
    /// The one before, still accepted.
    #[serde(with = "hex16_option")]
    pub previous: Option<[u8; 16]>,
    /// The one the next rotation makes current: every edge accepts it a whole rotation
    /// before any makes cookies with it (RFC 9018 §5). Made at load when missing.
    #[serde(default, with = "hex16_option")]
    pub next: Option<[u8; 16]>,
    /// When `current` was made (Unix seconds).
    pub made_at: u64,
}

/// The secrets are never printed.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("previous", &self.previous.is_some())
            .field("next", &self.next.is_some())
            .field("made_at", &self.made_at)
            .finish_non_exhaustive()
    }
}

impl Secrets {
    /// The message that gives them to an edge.
    #[must_use]
    pub fn message(&self) -> qdns_link::protocol::ToEdge {
        qdns_link::protocol::ToEdge::Cookies {
            current: self.current,
            previous: self.previous,
            next: self.next,
        }
    }
}

/// Why the cookie secrets could not be read, made or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CookieError {
    /// The secrets file exists but cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The secrets file is damaged.
    #[error("{}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: serde_json::Error,
    },
    /// New secrets could not be saved.
    #[error("{}: {source}", .path.display())]
    Save {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The kernel gave no random octets.
    #[error("no random octets for a cookie secret")]
    Random,
    /// A secret in the file is not 32 ASCII characters. The text is not repeated: it
    /// is (nearly) the secret, and errors reach logs.
    #[error("a cookie secret is 32 hex digits; this one has {length} octets")]
    HexLength {
        /// Its length in octets.
        length: usize,
    },
    /// A secret in the file has a character that is not a hex digit (not repeated either).
    #[error("a cookie secret is 32 hex digits; digits {} and {} are not", .at + 1, .at + 2)]
    Hex {
        /// Where the pair of digits starts (from 0).
        at: usize,
        /// The cause.
        #[source]
        source: std::num::ParseIntError,
    },
}

/// The secrets of the last run, or new ones (saved before they are used).
///
/// # Errors
/// When the file is damaged (the operator decides: a new secret invalidates every
/// cookie the location gave out), or a new secret cannot be made or saved.
pub fn load_or_make(dir: &Path, now: u64) -> Result<Secrets, CookieError> {
    let path = dir.join(FILE);
    let secrets = match std::fs::read(&path) {
        Ok(bytes) => {
            let kept: Secrets = serde_json::from_slice(&bytes).map_err(|source| CookieError::Parse {
                path: path.clone(),
                source,
            })?;
            if kept.next.is_some() {
                return Ok(kept);
            }
            Secrets {
                next: Some(random()?),
                ..kept
            }
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Secrets {
            current: random()?,
            previous: None,
            next: Some(random()?),
            made_at: now,
        },
        Err(source) => return Err(CookieError::Read { path, source }),
    };
    save(dir, &secrets).map_err(|source| CookieError::Save { path, source })?;
    Ok(secrets)
}

/// `secrets` rotated at `now`: the next secret (which every edge accepts already)
/// current, the current one previous, a new next.
///
/// # Errors
/// When the kernel gives no random octets.
pub fn rotated(secrets: &Secrets, now: u64) -> Result<Secrets, CookieError> {
    let current = match secrets.next {
        Some(next) => next,
        None => random()?,
    };
    Ok(Secrets {
        current,
        previous: Some(secrets.current),
        next: Some(random()?),
        made_at: now,
    })
}

fn save(dir: &Path, secrets: &Secrets) -> io::Result<()> {
    crate::persist::write_private(
        dir,
        FILE,
        &serde_json::to_vec_pretty(secrets).map_err(io::Error::other)?,
    )
}

fn random() -> Result<[u8; 16], CookieError> {
    let mut secret = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret).map_err(|_| CookieError::Random)?;
    Ok(secret)
}

/// Rotates the secrets every `every` seconds (counted from when the current one was
/// made, across restarts), saving each before the edges get it.
pub async fn rotate(
    dir: std::path::PathBuf,
    every: u64,
    secrets: std::sync::Arc<tokio::sync::watch::Sender<Secrets>>,
    state: std::sync::Arc<tokio::sync::Mutex<crate::state::State>>,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now = crate::clock::now();
        let held = *secrets.borrow();
        if now < held.made_at.saturating_add(every) {
            continue;
        }
        let next = match rotated(&held, now) {
            Ok(next) => next,
            Err(err) => {
                tracing::error!(%err, "cookie secret not rotated");
                continue;
            }
        };
        if let Err(err) = save(&dir, &next) {
            tracing::error!(%err, "cookie secret not rotated: cannot save it");
            continue;
        }
        secrets.send_replace(next);
        tracing::info!("cookie secret rotated; the previous one is still accepted until the next rotation");
        state.lock().await.event("cookies", "cookie secret rotated".to_owned());
    }
}

mod hex16 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let text = String::deserialize(d)?;
        super::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

mod hex16_option {
    use serde::{Deserialize, Deserializer, Serializer};

    #[expect(clippy::ref_option, reason = "serde's `with` signature")]
    pub fn serialize<S: Serializer>(value: &Option<[u8; 16]>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_some(&super::to_hex(v)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 16]>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::from_hex(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

fn to_hex(octets: &[u8; 16]) -> String {
    use std::fmt::Write as _;
    octets.iter().fold(String::with_capacity(32), |mut out, o| {
        let _ = write!(out, "{o:02x}");
        out
    })
}

fn from_hex(text: &str) -> Result<[u8; 16], CookieError> {
    if text.len() != 32 || !text.is_ascii() {
        return Err(CookieError::HexLength { length: text.len() });
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o =
            u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|source| CookieError::Hex { at: 2 * i, source })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged secret is refused without its text in the error (errors reach logs).
    #[test]
    fn errors_never_repeat_the_secret() {
        let almost = "0123456789abcdef0123456789abcdeZ";
        let err = from_hex(almost).unwrap_err().to_string();
        assert!(err.contains("digits 31 and 32"), "{err}");
        assert!(!err.contains("0123456789abcdef"), "{err}");
        let short = "0123456789abcdef0123456789abcde";
        let err = from_hex(short).unwrap_err().to_string();
        assert!(err.contains("31 octets") && !err.contains("0123456789abcdef"), "{err}");
        assert!(from_hex("0123456789abcdef0123456789abcdef").is_ok());
    }

    #[test]
    fn secrets_are_made_once_kept_and_rotated() {
        let dir = std::env::temp_dir().join(format!("qdns-cookies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = load_or_make(&dir, 1000).unwrap();
        assert_eq!(made.previous, None);
        assert_eq!(load_or_make(&dir, 2000).unwrap(), made, "kept across restarts");
        assert!(made.next.is_some_and(|n| n != made.current));
        let next = rotated(&made, 3000).unwrap();
        assert_eq!((next.previous, next.made_at), (Some(made.current), 3000));
        // The staged secret becomes current; a new one is staged.
        assert_eq!(Some(next.current), made.next);
        assert!(next.next.is_some_and(|n| n != next.current && Some(n) != made.next));
        save(&dir, &next).unwrap();
        assert_eq!(load_or_make(&dir, 4000).unwrap(), next);
        {
            use std::os::unix::fs::PermissionsExt as _;
            let bits = std::fs::metadata(dir.join(FILE)).unwrap().permissions().mode();
            assert_eq!(bits & 0o077, 0, "owner only: {bits:o}");
        }
        // A file from before staging (no `next`): one is made and saved.
        std::fs::write(
            dir.join(FILE),
            r#"{"current":"00112233445566778899aabbccddeeff","previous":null,"made_at":1}"#,
        )
        .unwrap();
        let staged = load_or_make(&dir, 4500).unwrap();
        assert_eq!((staged.current[1], staged.made_at), (0x11, 1));
        assert!(staged.next.is_some());
        assert_eq!(load_or_make(&dir, 4600).unwrap(), staged);
        std::fs::write(dir.join(FILE), "{").unwrap();
        assert!(load_or_make(&dir, 5000)
            .unwrap_err()
            .to_string()
            .contains("cookies.json"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
