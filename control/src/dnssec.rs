//! DNSSEC in control: zone keys in the state dir, signing each snapshot before it goes
//! to edges, re-signing before signatures expire, and the operator's DS and rollover
//! steps (`qdnsctl dnssec ds|rollover`). Edges never see a private key.
//!
//! Keys live in `STATE_DIR/dnssec/ZONE.json` (directory 0700, file 0600), written
//! atomically. One CSK per zone; a rollover adds an incoming CSK that signs beside the
//! active one (double signature) until the operator, having put its DS at the parent
//! and waited the DS TTL, completes it.
use std::{
    os::unix::fs::DirBuilderExt as _,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use qdns_zone::{
    dnssec::{sign_zone_reusing, Algorithm, KeyState, Nonces, SignOptions, Signatures, ZoneKey},
    name, Snapshot, Zone,
};
use serde::{Deserialize, Serialize};

/// How long signatures last and when control makes new ones (`--dnssec-validity`,
/// `--dnssec-refresh`). With the defaults — 14 days, re-signed when less than 7 are
/// left — edges keep serving valid signatures through at least 7 days without control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// Seconds from signing to expiration.
    pub validity: u64,
    /// Signatures are made again when fewer seconds than this are left.
    pub refresh: u64,
}

impl Default for Lifetimes {
    fn default() -> Lifetimes {
        Lifetimes {
            validity: 14 * 86_400,
            refresh: 7 * 86_400,
        }
    }
}

impl Lifetimes {
    /// Checked lifetimes: a validity of at least two minutes (RRSIG times are 32-bit:
    /// at most ~68 years) and a refresh window of at least a minute — signing a large
    /// zone and pushing it takes seconds to tens of seconds — ending at least 10 s
    /// after signing, so fresh signatures are not due again at once. Without a
    /// refresh given: 7 days, or half the validity when that is less.
    ///
    /// # Errors
    /// The flag and the reason.
    pub fn new(validity: u64, refresh: Option<u64>) -> Result<Lifetimes, qdns_settings::Error> {
        if !(120..=u64::from(u32::MAX / 2)).contains(&validity) {
            return Err(qdns_settings::Error::invalid(
                "--dnssec-validity",
                format!("{validity} s is outside 120..={} s", u32::MAX / 2),
            ));
        }
        let refresh = refresh.unwrap_or((validity / 2).min(Lifetimes::default().refresh));
        if !(60..=validity - 10).contains(&refresh) {
            return Err(qdns_settings::Error::invalid(
                "--dnssec-refresh",
                format!(
                    "{refresh} s is outside 60..={} s (the validity, {validity} s, less 10 s)",
                    validity - 10
                ),
            ));
        }
        Ok(Lifetimes { validity, refresh })
    }

    /// The instant signatures made at `now` are dated from: `now` rounded down to a
    /// grid whose step is the time from signing to refresh (7 days by default).
    /// Signatures dated from a grid point come due ([`Lifetimes::due`]) at the next
    /// one, whenever they were made; so every control of a deployment signs again at
    /// the same grid points, and two that sign a zone within one step — at a revision,
    /// a restart — date it alike, into the same octets with deterministic signatures
    /// (issue 54 §2). A signature made at `now` ends at least the refresh after it.
    #[must_use]
    pub fn signing_instant(&self, now: u64) -> u64 {
        let step = self.validity.saturating_sub(self.refresh).max(1);
        now - now % step
    }

    /// True when a signed zone of `snapshot` has signatures that end within the refresh
    /// window at `now`.
    #[must_use]
    pub fn due(&self, snapshot: &Snapshot, now: u64) -> bool {
        earliest_expiry(snapshot).is_some_and(|at| at < now + self.refresh)
    }
}

/// Seconds since the epoch.
#[must_use]
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What is stored per zone.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyFile {
    keys: Vec<ZoneKey>,
}

/// The zone keys under a state dir.
#[derive(Debug, Clone)]
pub struct KeyStore {
    dir: PathBuf,
    /// How long the signatures made with these keys last.
    lifetimes: Lifetimes,
    /// How ECDSA nonces are made: deterministic in a deployment, whose controls must
    /// make the same signatures (issue 54 §2); at random (faster) on a single host.
    nonces: Nonces,
}

impl KeyStore {
    /// The store under `state_dir`, signing for `lifetimes` with random ECDSA nonces.
    #[must_use]
    pub fn new(state_dir: &Path, lifetimes: Lifetimes) -> KeyStore {
        KeyStore {
            dir: state_dir.join("dnssec"),
            lifetimes,
            nonces: Nonces::Random,
        }
    }

    /// The same, signing as the controls of a deployment do when `deployed`: every
    /// ECDSA signature derived from the key and the data (RFC 6979).
    #[must_use]
    pub fn deployed(mut self, deployed: bool) -> KeyStore {
        if deployed {
            self.nonces = Nonces::Deterministic;
        }
        self
    }

    /// How ECDSA nonces are made for signatures with these keys.
    #[must_use]
    pub fn nonces(&self) -> Nonces {
        self.nonces
    }

    fn path(&self, origin: &[u8]) -> PathBuf {
        let text = name::to_text(origin);
        let stem = text.trim_end_matches('.');
        let stem = if stem.is_empty() { "root" } else { stem };
        // Names may hold '/' or other octets a file name should not: escape them.
        let safe: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.json"))
    }

    /// The keys of `origin` (none yet: empty).
    pub fn load(&self, origin: &[u8]) -> Result<Vec<ZoneKey>, DnssecError> {
        let path = self.path(origin);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<KeyFile>(&bytes)
                .map(|f| f.keys)
                .map_err(|source| DnssecError::Damaged { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(DnssecError::Io { path, source }),
        }
    }

    /// Stores the keys of `origin` (0600, atomically).
    pub fn save(&self, origin: &[u8], keys: &[ZoneKey]) -> Result<(), DnssecError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| DnssecError::Io {
                path: self.dir.clone(),
                source,
            })?;
        let path = self.path(origin);
        let bytes =
            serde_json::to_vec(&KeyFile { keys: keys.to_vec() }).map_err(|e| DnssecError::Key(e.to_string()))?;
        qdns_link::pki::write_atomic(&path, &bytes, 0o600)
            .map_err(|e| DnssecError::Key(format!("{}: {e}", path.display())))
    }

    /// The key file of `origin` as kept here; `None` before its first key.
    pub fn file(&self, origin: &[u8]) -> Result<Option<Vec<u8>>, DnssecError> {
        let path = self.path(origin);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(DnssecError::Io { path, source }),
        }
    }

    /// Takes `file` (a key file, as [`KeyStore::file`] gives it: the deployment's, from
    /// its intent) as the keys of `origin`; true when they differ from those kept here.
    pub fn adopt(&self, origin: &[u8], file: &[u8]) -> Result<bool, DnssecError> {
        let keys = keys_of(origin, file)?;
        if self.load(origin)? == keys {
            return Ok(false);
        }
        self.save(origin, &keys)?;
        Ok(true)
    }

    /// A key file holding one new key of `algorithm`, for a zone that has none.
    pub fn fresh(algorithm: Algorithm) -> Result<Vec<u8>, DnssecError> {
        let key = ZoneKey::generate(algorithm, KeyState::Active, now()).map_err(|e| DnssecError::Key(e.to_string()))?;
        serde_json::to_vec(&KeyFile { keys: vec![key] }).map_err(|e| DnssecError::Key(e.to_string()))
    }

    /// The keys of `origin`, made (and stored) on first use.
    pub fn keys_for(&self, origin: &[u8], algorithm: Algorithm) -> Result<Vec<ZoneKey>, DnssecError> {
        let keys = self.load(origin)?;
        if !keys.is_empty() {
            return Ok(keys);
        }
        let key = ZoneKey::generate(algorithm, KeyState::Active, now()).map_err(|e| DnssecError::Key(e.to_string()))?;
        let keys = vec![key];
        self.save(origin, &keys)?;
        tracing::info!(zone = %name::to_text(origin), algorithm = algorithm.mnemonic(), "made a DNSSEC key");
        Ok(keys)
    }
}

/// Why keys could not be read, made or kept, or a zone not signed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnssecError {
    /// A key file or the key directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A key file does not hold keys.
    #[error("{path}: damaged key file: {source}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// A key could not be made or used, or the zone not signed with it.
    #[error("{0}")]
    Key(String),
    /// The zone does not sign (no `dnssec = true`).
    #[error("{0} is not signed: set `dnssec = true` in its [zone] and reload first (a DS for an unsigned zone would make every validating resolver fail it)")]
    NotSigned(String),
    /// A rollover step that does not follow the one before.
    #[error("{0}")]
    Rollover(String),
}

/// Signs every zone of `snapshot` that asks for it, with its stored keys (made on
/// first use), taking from `previous` (the snapshot this one replaces) each signature
/// the same key made for the same answer in the same window. An error names the zone.
pub fn sign_snapshot(
    store: &KeyStore,
    snapshot: &mut Snapshot,
    now: u64,
    previous: Option<&Snapshot>,
) -> Result<(), DnssecError> {
    for zone in &mut snapshot.zones {
        let before = previous
            .and_then(|p| p.zones.iter().find(|z| z.origin == zone.origin))
            .and_then(|z| z.dnssec.as_deref());
        sign_one(store, zone, now, before)?;
    }
    Ok(())
}

/// Signs `zone` (signed before or not), reusing what `previous` — else the zone's own
/// signatures before — holds for the same answer, key and window.
fn sign_one(store: &KeyStore, zone: &mut Zone, now: u64, previous: Option<&Signatures>) -> Result<(), DnssecError> {
    let Some(request) = zone.dnssec.as_deref_mut() else {
        return Ok(());
    };
    let algorithm = request.algorithm;
    let own = Signatures {
        sigs: std::mem::take(&mut request.sigs),
        ..*request
    };
    unsign(zone);
    let keys = store.keys_for(&zone.origin, algorithm)?;
    let options = SignOptions {
        validity: store.lifetimes.validity,
        nonces: store.nonces,
        ..SignOptions::at(store.lifetimes.signing_instant(now))
    };
    let previous = previous.or(own.is_signed().then_some(&own));
    sign_zone_reusing(zone, &keys, options, previous).map_err(|e| DnssecError::Key(e.to_string()))
}

/// Takes a signed zone back to its request (the DNSKEY and NSEC sets only come from
/// signing: zone files may not hold them).
fn unsign(zone: &mut Zone) {
    if let Some(sigs) = zone.dnssec.as_deref_mut() {
        if sigs.is_signed() {
            zone.rrsets
                .retain(|s| s.rtype != qdns_zone::dnssec::rtype::DNSKEY && s.rtype != qdns_zone::dnssec::rtype::NSEC);
            *sigs = qdns_zone::dnssec::Signatures::requested(sigs.algorithm);
        }
    }
}

/// The earliest signature expiry of the snapshot, if any zone is signed.
#[must_use]
pub fn earliest_expiry(snapshot: &Snapshot) -> Option<u64> {
    snapshot
        .zones
        .iter()
        .filter_map(|z| z.dnssec.as_deref())
        .filter(|s| s.is_signed())
        .map(|s| s.expiration)
        .min()
}

/// A copy of `snapshot` with every signed zone signed again now.
pub fn resign(store: &KeyStore, snapshot: &Snapshot, version: u64) -> Result<Snapshot, DnssecError> {
    sign_again(store, snapshot.clone(), version)
}

/// `snapshot` (a copy of the current one) with every signed zone signed again now, as
/// `version`.
pub fn sign_again(store: &KeyStore, mut snapshot: Snapshot, version: u64) -> Result<Snapshot, DnssecError> {
    snapshot.version = version;
    sign_snapshot(store, &mut snapshot, now(), None)?;
    Ok(snapshot)
}

/// One key as `qdnsctl dnssec ds` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// Key tag.
    pub tag: u16,
    /// Algorithm mnemonic.
    pub algorithm: String,
    /// `active` or `incoming`.
    pub state: String,
    /// The DS record (owner, class and type included) for the parent.
    pub ds: String,
    /// The DNSKEY record, for trust anchors.
    pub dnskey: String,
}

/// The keys of a signed zone with their DS records.
pub fn key_info(store: &KeyStore, zone: &Zone) -> Result<Vec<KeyInfo>, DnssecError> {
    let origin = name::to_text(&zone.origin);
    if zone.dnssec.is_none() {
        return Err(DnssecError::NotSigned(origin));
    }
    let keys = store.load(&zone.origin)?;
    keys.iter()
        .map(|key| {
            let signer = key.signer().map_err(|e| DnssecError::Key(e.to_string()))?;
            Ok(KeyInfo {
                tag: signer.tag,
                algorithm: key.algorithm.mnemonic().to_owned(),
                state: match key.state {
                    KeyState::Active => "active",
                    KeyState::Incoming => "incoming",
                }
                .to_owned(),
                ds: format!("{origin} IN DS {}", signer.ds_text(&zone.origin)),
                dnskey: format!("{origin} IN DNSKEY {}", signer.dnskey_text()),
            })
        })
        .collect()
}

/// A rollover step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloverStep {
    /// Add an incoming key that signs beside the active one; its DS goes to the parent.
    Start,
    /// The parent has the new DS (and the DS TTL has passed): retire the old key.
    Complete,
}

/// The keys a key file of `origin` holds (the deployment's, from its intent).
pub fn keys_of(origin: &[u8], file: &[u8]) -> Result<Vec<ZoneKey>, DnssecError> {
    serde_json::from_slice::<KeyFile>(file)
        .map(|f| f.keys)
        .map_err(|source| DnssecError::Damaged {
            path: PathBuf::from(format!("the deployment's keys of {}", name::to_text(origin))),
            source,
        })
}

/// The key file holding `keys`, as [`KeyStore::file`] gives it.
pub fn key_file(keys: &[ZoneKey]) -> Result<Vec<u8>, DnssecError> {
    serde_json::to_vec(&KeyFile { keys: keys.to_vec() }).map_err(|e| DnssecError::Key(e.to_string()))
}

/// Moves the zone's keys one rollover step; the caller re-signs and pushes.
pub fn rollover(store: &KeyStore, zone: &Zone, step: RolloverStep) -> Result<(), DnssecError> {
    let keys = rolled(zone, store.load(&zone.origin)?, step)?;
    store.save(&zone.origin, &keys)
}

/// `keys`, the zone's, moved one rollover step.
pub fn rolled(zone: &Zone, mut keys: Vec<ZoneKey>, step: RolloverStep) -> Result<Vec<ZoneKey>, DnssecError> {
    let origin = name::to_text(&zone.origin);
    let Some(request) = zone.dnssec.as_deref() else {
        return Err(DnssecError::NotSigned(origin));
    };
    let incoming = keys.iter().any(|k| k.state == KeyState::Incoming);
    match step {
        RolloverStep::Start => {
            if incoming {
                return Err(DnssecError::Rollover(format!(
                    "{origin}: a rollover is already under way; put the incoming key's DS at the parent, then \
                     `qdnsctl dnssec rollover {origin} --complete`"
                )));
            }
            let key = ZoneKey::generate(request.algorithm, KeyState::Incoming, now())
                .map_err(|e| DnssecError::Key(e.to_string()))?;
            keys.push(key);
        }
        RolloverStep::Complete => {
            if !incoming {
                return Err(DnssecError::Rollover(format!(
                    "{origin}: no rollover under way (start one with `qdnsctl dnssec rollover {origin}`)"
                )));
            }
            keys.retain(|k| k.state == KeyState::Incoming);
            for key in &mut keys {
                key.state = KeyState::Active;
            }
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_default_and_bounds() {
        let default = Lifetimes::new(14 * 86_400, None).unwrap();
        assert_eq!(default, Lifetimes::default());
        // A shorter validity alone: refreshed at half of it, not at the 7-day default.
        assert_eq!(Lifetimes::new(600, None).unwrap().refresh, 300);
        assert_eq!(Lifetimes::new(120, Some(110)).unwrap().refresh, 110);
        let short = Lifetimes::new(100, None).unwrap_err().to_string();
        assert!(short.starts_with("--dnssec-validity: 100 s"), "{short}");
        let late = Lifetimes::new(3600, Some(3595)).unwrap_err().to_string();
        assert!(
            late.starts_with("--dnssec-refresh: 3595 s is outside 60..=3590 s"),
            "{late}"
        );
        let early = Lifetimes::new(3600, Some(30)).unwrap_err().to_string();
        assert!(early.starts_with("--dnssec-refresh: 30 s"), "{early}");
    }

    /// Signatures are dated from a grid both controls share (issue 54 §2): a step of
    /// 7 days by default; signed anywhere in a step, they come due at the next grid
    /// point, so two controls that signed in different steps sign alike from then on.
    #[test]
    fn signatures_are_dated_from_a_grid_both_controls_share() {
        let default = Lifetimes::default();
        let step = 7 * 86_400;
        let t = 1_800_000_000 - 1_800_000_000 % step;
        assert_eq!(default.signing_instant(t + 3600), t);
        assert_eq!(default.signing_instant(t + step - 1), t);
        assert_eq!(default.signing_instant(t + step), t + step);
        // Due (`Lifetimes::due`: the expiry within the refresh) at the next grid point
        // after the step they were dated from — the same second for both controls.
        for signed_in in [t, t + step / 2, t + step - 1] {
            let expiration = default.signing_instant(signed_in) + default.validity;
            let due = (signed_in..t + 3 * step).find(|&now| expiration < now + default.refresh);
            assert_eq!(due, Some(t + step + 1), "signed at {signed_in}");
        }
        let short = Lifetimes::new(120, Some(110)).unwrap();
        for now in 1_800_000_000..1_800_000_030 {
            let at = short.signing_instant(now);
            assert!(at <= now && now - at < 10, "{now} → {at}");
            assert!(at + short.validity >= now + short.refresh, "{now} → {at}");
        }
    }
}
