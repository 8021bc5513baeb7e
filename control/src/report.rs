//! Checker → location reports (SPEC §4): a batch of observations, authenticated with
//! HMAC-SHA256 under the checker's own key and protected against replay.
//!
//! A report carries the checker's id and region, a sequence number that only grows
//! (it starts at the checker's start time in milliseconds × 1000, so a restarted
//! checker keeps growing), and the time it was sent. A location accepts it only when
//! the id is known, the region matches the key file, the MAC verifies (constant time),
//! the send time is within ±30 s of its clock, and the sequence is above the last one
//! accepted from that checker. Anything else is dropped, counted and logged.
use std::collections::HashMap;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::checker::Observation;

/// Largest report frame a location reads.
pub const MAX_REPORT: usize = 16 << 20;
/// Allowed clock difference between checker and location.
pub const MAX_SKEW_SECS: u64 = 30;

/// The signed part of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Checker id.
    pub checker: String,
    /// Checker region.
    pub region: String,
    /// Grows with every report.
    pub seq: u64,
    /// Unix seconds when sent.
    pub sent_at: u64,
    /// The observations.
    pub observations: Vec<Observation>,
}

/// A report on the wire: the encoded body and its MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// postcard of [`Report`].
    pub body: Vec<u8>,
    /// HMAC-SHA256(key, body).
    pub mac: Vec<u8>,
}

/// Why a report was dropped (also the counter label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reject {
    /// Not decodable.
    Malformed,
    /// No key for this checker id.
    UnknownChecker,
    /// The MAC does not verify.
    BadSignature,
    /// Region differs from the key file's.
    WrongRegion,
    /// Sent too long ago or in the future.
    OutsideTimeWindow,
    /// Sequence not above the last accepted one.
    Replayed,
}

impl Reject {
    /// Counter label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Reject::Malformed => "malformed",
            Reject::UnknownChecker => "unknown_checker",
            Reject::BadSignature => "bad_signature",
            Reject::WrongRegion => "wrong_region",
            Reject::OutsideTimeWindow => "outside_time_window",
            Reject::Replayed => "replayed",
        }
    }
}

/// One checker's entry in `--checker-keys`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    id: String,
    region: String,
    key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    checker: Vec<KeyEntry>,
}

/// The keys a location accepts: id → (region, key).
#[derive(Debug, Clone, Default)]
pub struct Keys(HashMap<String, (String, Vec<u8>)>);

/// Decodes a base64 key; at least 16 bytes.
pub fn decode_key(text: &str) -> Result<Vec<u8>, String> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("key is not base64: {e}"))?;
    if key.len() < 16 {
        return Err("key is shorter than 16 bytes".to_owned());
    }
    Ok(key)
}

impl Keys {
    /// Reads a `--checker-keys` file: `[[checker]]` tables with `id`, `region`, `key`.
    pub fn load(path: &std::path::Path) -> Result<Keys, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: KeyFile = toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
        let mut keys = HashMap::new();
        for (i, entry) in file.checker.into_iter().enumerate() {
            let key = decode_key(&entry.key).map_err(|e| format!("{}: checker[{i}].key: {e}", path.display()))?;
            if keys.insert(entry.id.clone(), (entry.region, key)).is_some() {
                return Err(format!(
                    "{}: checker[{i}].id: duplicate id {:?}",
                    path.display(),
                    entry.id
                ));
            }
        }
        Ok(Keys(keys))
    }
}

/// Signs `report` with `key`.
pub fn sign(report: &Report, key: &[u8]) -> Result<Signed, String> {
    let body = postcard::to_stdvec(report).map_err(|e| e.to_string())?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(&body);
    Ok(Signed {
        body,
        mac: mac.finalize().into_bytes().to_vec(),
    })
}

/// Checks a report: identity, MAC, region, time window and sequence (`last_seq` is
/// the last accepted sequence of each checker; updated on success).
pub fn verify<S: std::hash::BuildHasher>(
    signed: &Signed,
    keys: &Keys,
    last_seq: &mut HashMap<String, u64, S>,
    now: u64,
) -> Result<Report, Reject> {
    let report: Report = postcard::from_bytes(&signed.body).map_err(|_| Reject::Malformed)?;
    let (region, key) = keys.0.get(&report.checker).ok_or(Reject::UnknownChecker)?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(|_| Reject::BadSignature)?;
    mac.update(&signed.body);
    mac.verify_slice(&signed.mac).map_err(|_| Reject::BadSignature)?;
    if &report.region != region {
        return Err(Reject::WrongRegion);
    }
    if report.sent_at.abs_diff(now) > MAX_SKEW_SECS {
        return Err(Reject::OutsideTimeWindow);
    }
    if last_seq.get(&report.checker).is_some_and(|&last| report.seq <= last) {
        return Err(Reject::Replayed);
    }
    last_seq.insert(report.checker.clone(), report.seq);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys(HashMap::from([("c1".to_owned(), ("eu".to_owned(), vec![7u8; 32]))]))
    }

    fn report(seq: u64, sent_at: u64) -> Report {
        Report {
            checker: "c1".to_owned(),
            region: "eu".to_owned(),
            seq,
            sent_at,
            observations: Vec::new(),
        }
    }

    #[test]
    fn accepts_then_rejects_replay_forgery_and_skew() {
        let mut last = HashMap::new();
        let signed = sign(&report(10, 1000), &[7u8; 32]).unwrap();
        assert!(verify(&signed, &keys(), &mut last, 1000).is_ok());
        assert_eq!(verify(&signed, &keys(), &mut last, 1000), Err(Reject::Replayed));
        let mut forged = sign(&report(11, 1000), &[7u8; 32]).unwrap();
        forged.mac[0] ^= 1;
        assert_eq!(verify(&forged, &keys(), &mut last, 1000), Err(Reject::BadSignature));
        let wrong_key = sign(&report(12, 1000), &[8u8; 32]).unwrap();
        assert_eq!(verify(&wrong_key, &keys(), &mut last, 1000), Err(Reject::BadSignature));
        let old = sign(&report(13, 900), &[7u8; 32]).unwrap();
        assert_eq!(verify(&old, &keys(), &mut last, 1000), Err(Reject::OutsideTimeWindow));
        let mut stranger = report(14, 1000);
        stranger.checker = "c9".to_owned();
        assert_eq!(
            verify(&sign(&stranger, &[7u8; 32]).unwrap(), &keys(), &mut last, 1000),
            Err(Reject::UnknownChecker)
        );
        let mut moved = report(15, 1000);
        moved.region = "us".to_owned();
        assert_eq!(
            verify(&sign(&moved, &[7u8; 32]).unwrap(), &keys(), &mut last, 1000),
            Err(Reject::WrongRegion)
        );
        assert_eq!(
            verify(
                &Signed {
                    body: vec![1, 2, 3],
                    mac: vec![]
                },
                &keys(),
                &mut last,
                1000
            ),
            Err(Reject::Malformed)
        );
        assert!(verify(&sign(&report(16, 1010), &[7u8; 32]).unwrap(), &keys(), &mut last, 1000).is_ok());
    }
}
