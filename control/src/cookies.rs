//! The location's DNS cookie secrets (SPEC §10, RFC 7873 §7.1, RFC 9018): made here,
//! kept in `STATE_DIR/cookies.json` (owner-only, like the rest of the state directory),
//! rotated every `--cookie-rotation`, the one before kept as `previous` (still accepted
//! by the edges) until the next rotation, and sent to every edge that takes them
//! (`ToEdge::Cookies`), so any edge of the location validates another's cookie.
//!
//! In a deployment (`--intent`) the location's secrets are intent (SPEC §11): kept in
//! the store as `PREFIX/secret/cookies/LOCATION` (the location's own become them when
//! it has none there), taken by the follower ([`crate::intent`]) whenever they change,
//! and rotated by compare-and-swap there, so every control of the location gives its
//! edges the same secrets. Cut off from the store, a location does not rotate: the
//! current secret stays (a late rotation costs nothing; two controls of a location
//! rotating apart would make each one's edges refuse the other's cookies).
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
    /// As kept in the store (the file's form).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Read from the store; the reason when they do not read (the text is not repeated).
    ///
    /// # Errors
    /// Not the file's form.
    pub fn decode(data: &[u8]) -> Result<Secrets, String> {
        serde_json::from_slice(data).map_err(|e| {
            format!(
                "the cookie secrets do not read ({:?} error at line {} column {})",
                e.classify(),
                e.line(),
                e.column()
            )
        })
    }

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

/// Puts `secrets` in force: saved (so a restart has them), then sent to every edge.
///
/// # Errors
/// When they cannot be saved (nothing is sent then).
pub fn install(dir: &Path, sender: &tokio::sync::watch::Sender<Secrets>, secrets: Secrets) -> Result<(), CookieError> {
    save(dir, &secrets).map_err(|source| CookieError::Save {
        path: dir.join(FILE),
        source,
    })?;
    sender.send_replace(secrets);
    Ok(())
}

/// At start, before any edge is served: the secrets the store holds for this location
/// (`data`) saved as the ones in force here, so a second control of the location hands
/// its edges the same secrets from its first frame (issue 54 §2). True when they were
/// not the ones saved here.
///
/// # Errors
/// Secrets that do not read, or cannot be saved.
pub fn adopt(dir: &Path, data: &[u8]) -> Result<bool, String> {
    let theirs = Secrets::decode(data)?;
    let ours = std::fs::read(dir.join(FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Secrets>(&bytes).ok());
    if ours == Some(theirs) {
        return Ok(false);
    }
    save(dir, &theirs).map_err(|e| format!("{}: {e}", dir.join(FILE).display()))?;
    Ok(true)
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
/// made, across restarts), saving each before the edges get it; in a deployment, by
/// compare-and-swap in the store first ([`rotate_in_store`]).
pub async fn rotate(
    dir: std::path::PathBuf,
    every: u64,
    secrets: std::sync::Arc<tokio::sync::watch::Sender<Secrets>>,
    state: std::sync::Arc<tokio::sync::Mutex<crate::state::State>>,
    deployment: Option<std::sync::Arc<crate::deployed::Deployment>>,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // New secrets in force (taken from the store) are looked at at once: they may be due.
    let mut taken = secrets.subscribe();
    // The store could not be reached for the last rotation due (said once).
    let mut held_back = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
            changed = taken.changed() => if changed.is_err() { return },
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
        let event = match &deployment {
            None => "cookie secret rotated".to_owned(),
            Some(deployment) => match rotate_in_store(deployment, &held, &next).await {
                Ok(Some(revision)) => {
                    held_back = false;
                    format!(
                        "cookie secret rotated (for {} in the deployment, intent revision {revision})",
                        deployment.location
                    )
                }
                // Another control of this location rotated first (or the store holds
                // secrets the follower has not taken, or refused): the follower takes
                // the store's.
                Ok(None) => {
                    held_back = false;
                    tracing::debug!("cookie secret not rotated here: the store holds others");
                    continue;
                }
                Err(err) => {
                    if !held_back {
                        held_back = true;
                        tracing::warn!(%err, "cookie secret not rotated: the intent store cannot be reached; the current one stays");
                        let event = format!("cookie secret not rotated, the current one stays until the intent store can be reached: {err}");
                        state.lock().await.event("cookies", event);
                    }
                    continue;
                }
            },
        };
        if let Err(err) = install(&dir, &secrets, next) {
            tracing::error!(%err, "cookie secret not rotated: cannot save it");
            continue;
        }
        tracing::info!("cookie secret rotated; the previous one is still accepted until the next rotation");
        state.lock().await.event("cookies", event);
    }
}

/// The name of `location`'s cookie secrets in the store.
#[must_use]
pub fn store_name(location: &str) -> String {
    format!("{STORE_DIR}/{location}")
}

/// Under `PREFIX`, where each location's cookie secrets are.
pub const STORE_DIR: &str = "secret/cookies";

/// Writes `next` over `held` in the store by compare-and-swap: the store revision that
/// wrote it, or `None` when the store holds other secrets (another control of this
/// location rotated first).
async fn rotate_in_store(
    deployment: &crate::deployed::Deployment,
    held: &Secrets,
    next: &Secrets,
) -> Result<Option<u64>, qdns_intent::IntentError> {
    let mut store = qdns_intent::store::Store::connect(
        &deployment.source.url,
        &deployment.source.tls,
        crate::deployed::STORE_TIMEOUT,
    )
    .await?;
    let name = store_name(&deployment.location);
    let expected = match store.value(&name).await?.1 {
        Some(value) if Secrets::decode(&value.data).as_ref() == Ok(held) => Some(value.revision),
        Some(_) => return Ok(None),
        None => None,
    };
    Ok(match store.swap(&name, expected, next.encode()).await? {
        qdns_intent::records::Swapped::Written(revision) => Some(revision),
        qdns_intent::records::Swapped::Changed => None,
    })
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
