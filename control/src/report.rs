//! Checker → location reports (SPEC §4): a batch of observations, authenticated with
//! HMAC-SHA256 under the checker's own key and protected against replay.
//!
//! A report carries the checker's id and region, a sequence number that only grows
//! (it starts at the checker's start time in milliseconds × 1000, so a restarted
//! checker keeps growing), and the time it was sent. A location accepts it only when
//! the id is known, the region matches the key file, the MAC verifies (constant time),
//! the report names this location (its `--location`: a report to one location cannot
//! be replayed to another), the send time is within ±30 s of its clock, and the
//! sequence is above the last one accepted from that checker — kept across restarts in
//! the state directory, so a report cannot be replayed to a restarted location either.
//! Anything else is dropped, counted and logged.
//!
//! On the wire (after a 4-octet big-endian length of the rest): the checker id's length
//! (one octet, at most [`MAX_ID`]) and the id in clear, the 32-octet HMAC-SHA256 of the
//! body, then the body (postcard of [`Report`]). The id comes first so a location finds
//! the key — or refuses the stranger — before it reads the body, and checks the MAC
//! before it parses a byte of it (see `crate::report_listener`).
use std::collections::HashMap;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::checker::Observation;

/// Largest report frame a location reads (a batch of 5,000 observations is well under
/// 1 MiB).
pub const MAX_REPORT: usize = 4 << 20;
/// Longest checker id.
pub const MAX_ID: usize = 64;
/// Octets of the MAC.
pub const MAC_LEN: usize = 32;
/// Allowed clock difference between checker and location.
pub const MAX_SKEW_SECS: u64 = 30;

/// The signed part of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Checker id.
    pub checker: String,
    /// Checker region.
    pub region: String,
    /// The location it is for (that location's `--location`).
    pub location: String,
    /// Grows with every report.
    pub seq: u64,
    /// Unix seconds when sent.
    pub sent_at: u64,
    /// The observations.
    pub observations: Vec<Observation>,
}

/// A report on the wire: the checker id in clear, the encoded body and its MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The checker id (the key to check the MAC with).
    pub checker: String,
    /// postcard of [`Report`].
    pub body: Vec<u8>,
    /// HMAC-SHA256(key, body).
    pub mac: Vec<u8>,
}

impl Signed {
    /// The frame: length, id length, id, MAC, body (see the module's comment).
    pub fn frame(&self) -> Result<Vec<u8>, ReportError> {
        if self.checker.is_empty() || self.checker.len() > MAX_ID {
            return Err(ReportError::IdLength);
        }
        if self.mac.len() != MAC_LEN {
            return Err(ReportError::MacLength);
        }
        let rest = 1 + self.checker.len() + MAC_LEN + self.body.len();
        if rest > MAX_REPORT {
            return Err(ReportError::TooLarge { octets: rest });
        }
        let mut frame = Vec::with_capacity(4 + rest);
        frame.extend_from_slice(&(rest as u32).to_be_bytes());
        frame.push(self.checker.len() as u8);
        frame.extend_from_slice(self.checker.as_bytes());
        frame.extend_from_slice(&self.mac);
        frame.extend_from_slice(&self.body);
        Ok(frame)
    }
}

/// Why checker keys could not be read, or a report could not be signed or framed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The `--checker-keys` file cannot be read, or is not private (it names itself).
    #[error("{source}")]
    KeysRead {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: qdns_link::secret::SecretFileError,
    },
    /// The `--checker-keys` file is not valid TOML of `[[checker]]` tables.
    #[error("{}: {}", .path.display(), .source.message())]
    KeysParse {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong in it.
        #[source]
        source: toml::de::Error,
    },
    /// A checker's key in the `--checker-keys` file is unusable.
    #[error("{}: checker[{index}].key: {source}", .path.display())]
    KeysEntry {
        /// The file.
        path: std::path::PathBuf,
        /// The entry's index.
        index: usize,
        /// What is wrong with the key.
        #[source]
        source: Box<ReportError>,
    },
    /// Two entries of the `--checker-keys` file have the same id.
    #[error("{}: checker[{index}].id: duplicate id {id:?}", .path.display())]
    DuplicateId {
        /// The file.
        path: std::path::PathBuf,
        /// The second entry's index.
        index: usize,
        /// The id.
        id: String,
    },
    /// A key is not base64.
    #[error("key is not base64: {0}")]
    KeyNotBase64(#[source] base64::DecodeError),
    /// A key is shorter than 16 bytes.
    #[error("key is shorter than 16 bytes")]
    KeyTooShort,
    /// A report could not be encoded.
    #[error("cannot encode the report: {0}")]
    Encode(#[source] postcard::Error),
    /// The key cannot key an HMAC.
    #[error("the key is unusable for HMAC-SHA256 (invalid length)")]
    HmacKey,
    /// A checker id that is empty or longer than [`MAX_ID`].
    #[error("checker id must be 1 to {} octets", MAX_ID)]
    IdLength,
    /// A MAC that is not [`MAC_LEN`] octets.
    #[error("MAC must be {} octets", MAC_LEN)]
    MacLength,
    /// A frame over [`MAX_REPORT`].
    #[error("report of {octets} octets is over the {}-octet limit", MAX_REPORT)]
    TooLarge {
        /// The octets after the length.
        octets: usize,
    },
}

/// Why a report was dropped (also the counter label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reject {
    /// Not decodable, or a frame shorter than its fixed part.
    Malformed,
    /// A frame over [`MAX_REPORT`] (refused before anything is read into memory).
    TooLarge,
    /// A frame that did not arrive whole within the listener's read timeout.
    Timeout,
    /// A connection over the listener's per-source or total cap (closed at once).
    ConnectionLimit,
    /// A connection that had not yet sent an authentic report, closed to make room
    /// for a new one when every place was taken.
    Evicted,
    /// No key for this checker id.
    UnknownChecker,
    /// The MAC does not verify.
    BadSignature,
    /// Region differs from the key file's.
    WrongRegion,
    /// For another location (a report replayed from one location to another).
    WrongLocation,
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
            Reject::TooLarge => "too_large",
            Reject::Timeout => "timeout",
            Reject::ConnectionLimit => "connection_limit",
            Reject::Evicted => "evicted",
            Reject::UnknownChecker => "unknown_checker",
            Reject::BadSignature => "bad_signature",
            Reject::WrongRegion => "wrong_region",
            Reject::WrongLocation => "wrong_location",
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
pub fn decode_key(text: &str) -> Result<Vec<u8>, ReportError> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(ReportError::KeyNotBase64)?;
    if key.len() < 16 {
        return Err(ReportError::KeyTooShort);
    }
    Ok(key)
}

impl Keys {
    /// How many checkers it lists.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// It lists none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Reads a `--checker-keys` file: `[[checker]]` tables with `id`, `region`, `key`.
    pub fn load(path: &std::path::Path) -> Result<Keys, ReportError> {
        let text = qdns_link::secret::read_to_string(path).map_err(|source| ReportError::KeysRead {
            path: path.to_path_buf(),
            source,
        })?;
        Keys::parse(&text, path)
    }

    /// Reads the text of a `--checker-keys` file (`path` names it in errors).
    pub fn parse(text: &str, path: &std::path::Path) -> Result<Keys, ReportError> {
        let file: KeyFile = toml::from_str(text).map_err(|source| ReportError::KeysParse {
            path: path.to_path_buf(),
            source,
        })?;
        let mut keys = HashMap::new();
        for (index, entry) in file.checker.into_iter().enumerate() {
            let key = decode_key(&entry.key).map_err(|source| ReportError::KeysEntry {
                path: path.to_path_buf(),
                index,
                source: Box::new(source),
            })?;
            if keys.insert(entry.id.clone(), (entry.region, key)).is_some() {
                return Err(ReportError::DuplicateId {
                    path: path.to_path_buf(),
                    index,
                    id: entry.id,
                });
            }
        }
        Ok(Keys(keys))
    }
}

/// What a report carries after its [`Report`] (issue 30): fields a location that
/// predates them skips (postcard decoding ignores what follows a value), and that a
/// location reading a report without them does not require. Versions 1 and 2 appended
/// their fields in order (frozen: locations of that time read them so); from version 3
/// later fields follow the [`Loads`] as TLV entries (`qdns_link::tlv`, ids in
/// [`entry`]), and a location skips the ids it does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Extension {
    /// [`EXTENSION_VERSION`] of the checker that wrote it.
    version: u16,
    /// Each observation's probe timing, in the observations' order.
    timings: Vec<Option<crate::checker::probe::Timing>>,
}

/// What version 2 appends after the [`Extension`] (load shedding): each observation's
/// load figure, in thousandths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Loads {
    loads: Vec<Option<u32>>,
}

/// The [`Extension`] this build writes.
const EXTENSION_VERSION: u16 = 3;

/// The ids of the report extension's TLV entries (version 3 on): none yet; the next
/// field a report carries is entry 1.
pub mod entry {}

/// Signs `report` with `key`: the body is the report, then its extension (the
/// probes' timings) and, from version 2, their load figures.
pub fn sign(report: &Report, key: &[u8]) -> Result<Signed, ReportError> {
    let mut body = postcard::to_stdvec(report).map_err(ReportError::Encode)?;
    let extension = Extension {
        version: EXTENSION_VERSION,
        timings: report.observations.iter().map(|o| o.timing).collect(),
    };
    body.extend(postcard::to_stdvec(&extension).map_err(ReportError::Encode)?);
    let loads = Loads {
        loads: report.observations.iter().map(|o| o.load_milli).collect(),
    };
    body.extend(postcard::to_stdvec(&loads).map_err(ReportError::Encode)?);
    body.extend(qdns_link::tlv::Writer::default().finish());
    seal(&report.checker, body, key)
}

/// A report's body: the [`Report`], with its [`Extension`] applied when it has one.
fn decode(body: &[u8]) -> Result<Report, Reject> {
    let (mut report, rest): (Report, &[u8]) = postcard::take_from_bytes(body).map_err(|_| Reject::Malformed)?;
    if rest.is_empty() {
        return Ok(report);
    }
    let (extension, rest): (Extension, &[u8]) = postcard::take_from_bytes(rest).map_err(|_| Reject::Malformed)?;
    if extension.timings.len() != report.observations.len() {
        return Err(Reject::Malformed);
    }
    for (observation, timing) in report.observations.iter_mut().zip(extension.timings) {
        observation.timing = timing;
    }
    if extension.version < 2 || rest.is_empty() {
        return Ok(report);
    }
    let (loads, later): (Loads, &[u8]) = postcard::take_from_bytes(rest).map_err(|_| Reject::Malformed)?;
    // Version 3 on: TLV entries, none of which this build reads yet (a later checker's
    // are skipped), all of which must be well formed.
    if extension.version >= 3 {
        qdns_link::tlv::Entries::read(later).map_err(|_| Reject::Malformed)?;
    }
    if loads.loads.len() != report.observations.len() {
        return Err(Reject::Malformed);
    }
    for (observation, load) in report.observations.iter_mut().zip(loads.loads) {
        observation.load_milli = load;
    }
    Ok(report)
}

/// Signs an encoded body as `checker`'s with `key` (whatever the body holds: tests and
/// the fuzzer reach the parser behind the MAC this way).
pub fn seal(checker: &str, body: Vec<u8>, key: &[u8]) -> Result<Signed, ReportError> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(|_| ReportError::HmacKey)?;
    mac.update(&body);
    Ok(Signed {
        checker: checker.to_owned(),
        body,
        mac: mac.finalize().into_bytes().to_vec(),
    })
}

impl Keys {
    /// True when `checker` has a key here.
    #[must_use]
    pub fn knows(&self, checker: &str) -> bool {
        self.0.contains_key(checker)
    }
}

/// Checks a report for `location`: identity, then the MAC (constant time) before a
/// byte of the body is parsed, then the body's own id, region, location, time window
/// and sequence (`last_seq` is the last accepted sequence of each checker; updated on
/// success).
pub fn verify<S: std::hash::BuildHasher>(
    signed: &Signed,
    keys: &Keys,
    location: &str,
    last_seq: &mut HashMap<String, u64, S>,
    now: u64,
) -> Result<Report, Reject> {
    let (region, key) = keys.0.get(&signed.checker).ok_or(Reject::UnknownChecker)?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(|_| Reject::BadSignature)?;
    mac.update(&signed.body);
    mac.verify_slice(&signed.mac).map_err(|_| Reject::BadSignature)?;
    let report = decode(&signed.body)?;
    if report.checker != signed.checker {
        return Err(Reject::BadSignature);
    }
    if &report.region != region {
        return Err(Reject::WrongRegion);
    }
    if report.location != location {
        return Err(Reject::WrongLocation);
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

/// Reports accepted from remote checkers, and frames or connections dropped, by reason
/// (`qdns_checker_reports_total{result}`, `status`).
#[derive(Debug, Default)]
pub struct ReportStats {
    accepted: u64,
    bytes: u64,
    rejected: std::collections::BTreeMap<&'static str, u64>,
}

impl ReportStats {
    /// A report of `octets` (frame, prefix included) was accepted.
    pub fn accept(&mut self, octets: u64) {
        self.accepted += 1;
        self.bytes += octets;
    }

    /// A frame or connection was dropped for `reason` ([`Reject::label`]).
    pub fn reject(&mut self, reason: &'static str) {
        *self.rejected.entry(reason).or_default() += 1;
    }

    /// Reports accepted.
    #[must_use]
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Octets of accepted reports.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Drops by reason.
    pub fn rejected(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.rejected.iter().map(|(reason, n)| (*reason, *n))
    }
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
            location: "fra".to_owned(),
            seq,
            sent_at,
            observations: Vec::new(),
        }
    }

    fn observation(timing: Option<crate::checker::probe::Timing>) -> crate::checker::Observation {
        crate::checker::Observation {
            check: "z./c".to_owned(),
            healthy: true,
            success: timing.is_some(),
            reason: "ok".to_owned(),
            at: 1000,
            checker: "c1".to_owned(),
            region: "eu".to_owned(),
            timing,
            load_milli: timing.map(|t| t.connect_us / 10),
        }
    }

    #[test]
    fn timings_travel_in_the_extension_and_old_and_new_bodies_both_read() {
        let timing = crate::checker::probe::Timing {
            connect_us: 3_100,
            first_byte_us: Some(20_400),
        };
        let mut sent = report(30, 1000);
        sent.observations = vec![observation(Some(timing)), observation(None)];
        let signed = sign(&sent, &[7u8; 32]).unwrap();
        let got = verify(&signed, &keys(), "fra", &mut HashMap::new(), 1000).unwrap();
        assert_eq!(got, sent, "timings and loads come back through the extension");
        assert_eq!(got.observations[0].load_milli, Some(310));
        // A location that predates the extension decodes the report as before (postcard
        // ignores what follows), without the timings.
        let old: Report = postcard::from_bytes(&signed.body).unwrap();
        assert_eq!(old.observations[0].timing, None);
        assert_eq!(old.observations.len(), 2);
        // A checker that predates it sends the report alone: read, no timings.
        let bare = seal("c1", postcard::to_stdvec(&sent).unwrap(), &[7u8; 32]).unwrap();
        let got = verify(&bare, &keys(), "fra", &mut HashMap::new(), 1000).unwrap();
        assert!(got.observations.iter().all(|o| o.timing.is_none()));
        // One of version 1 (timings, no loads): timings read, no loads.
        let mut body = postcard::to_stdvec(&sent).unwrap();
        body.extend(
            postcard::to_stdvec(&Extension {
                version: 1,
                timings: vec![Some(timing), None],
            })
            .unwrap(),
        );
        let v1 = verify(
            &seal("c1", body, &[7u8; 32]).unwrap(),
            &keys(),
            "fra",
            &mut HashMap::new(),
            1000,
        )
        .unwrap();
        assert_eq!(
            (v1.observations[0].timing, v1.observations[0].load_milli),
            (Some(timing), None)
        );
        // An extension that does not match the observations is refused.
        let mut body = postcard::to_stdvec(&sent).unwrap();
        body.extend(
            postcard::to_stdvec(&Extension {
                version: 1,
                timings: vec![None],
            })
            .unwrap(),
        );
        let lying = seal("c1", body, &[7u8; 32]).unwrap();
        assert_eq!(
            verify(&lying, &keys(), "fra", &mut HashMap::new(), 1000),
            Err(Reject::Malformed)
        );
    }

    #[test]
    fn entries_of_a_later_checker_are_skipped_and_malformed_ones_refused() {
        let sent = report(31, 1000);
        let with_entries = |entries: &[u8]| {
            let mut body = sign(&sent, &[7u8; 32]).unwrap().body;
            body.extend_from_slice(entries);
            verify(
                &seal("c1", body, &[7u8; 32]).unwrap(),
                &keys(),
                "fra",
                &mut HashMap::new(),
                1000,
            )
        };
        let mut later = qdns_link::tlv::Writer::default();
        later.put(40, &"a field from a later checker").unwrap();
        assert_eq!(with_entries(&later.finish()), Ok(sent.clone()));
        // An entry that runs past the end of the report.
        assert_eq!(with_entries(&[0, 40, 0, 0, 0, 9, 1]), Err(Reject::Malformed));
    }

    #[test]
    fn accepts_then_rejects_replay_forgery_and_skew() {
        let mut last = HashMap::new();
        let signed = sign(&report(10, 1000), &[7u8; 32]).unwrap();
        assert!(verify(&signed, &keys(), "fra", &mut last, 1000).is_ok());
        assert_eq!(verify(&signed, &keys(), "fra", &mut last, 1000), Err(Reject::Replayed));
        let mut forged = sign(&report(11, 1000), &[7u8; 32]).unwrap();
        forged.mac[0] ^= 1;
        assert_eq!(
            verify(&forged, &keys(), "fra", &mut last, 1000),
            Err(Reject::BadSignature)
        );
        let wrong_key = sign(&report(12, 1000), &[8u8; 32]).unwrap();
        assert_eq!(
            verify(&wrong_key, &keys(), "fra", &mut last, 1000),
            Err(Reject::BadSignature)
        );
        let old = sign(&report(13, 900), &[7u8; 32]).unwrap();
        assert_eq!(
            verify(&old, &keys(), "fra", &mut last, 1000),
            Err(Reject::OutsideTimeWindow)
        );
        let mut stranger = report(14, 1000);
        stranger.checker = "c9".to_owned();
        assert_eq!(
            verify(&sign(&stranger, &[7u8; 32]).unwrap(), &keys(), "fra", &mut last, 1000),
            Err(Reject::UnknownChecker)
        );
        let mut moved = report(15, 1000);
        moved.region = "us".to_owned();
        assert_eq!(
            verify(&sign(&moved, &[7u8; 32]).unwrap(), &keys(), "fra", &mut last, 1000),
            Err(Reject::WrongRegion)
        );
        // A genuine report for another location: refused here.
        assert_eq!(
            verify(
                &sign(&report(17, 1000), &[7u8; 32]).unwrap(),
                &keys(),
                "ams",
                &mut last,
                1000
            ),
            Err(Reject::WrongLocation)
        );
        assert_eq!(
            verify(
                &Signed {
                    checker: "c1".to_owned(),
                    body: vec![1, 2, 3],
                    mac: vec![]
                },
                &keys(),
                "fra",
                &mut last,
                1000
            ),
            Err(Reject::BadSignature)
        );
        // A valid MAC over a body that is not a report: malformed, parsed only after.
        let mut garbage = sign(&report(20, 1000), &[7u8; 32]).unwrap();
        garbage.body = vec![1, 2, 3];
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&[7u8; 32]).unwrap();
        mac.update(&garbage.body);
        garbage.mac = mac.finalize().into_bytes().to_vec();
        assert_eq!(
            verify(&garbage, &keys(), "fra", &mut last, 1000),
            Err(Reject::Malformed)
        );
        // The clear id must be the body's.
        let mut relabelled = sign(&report(21, 1000), &[7u8; 32]).unwrap();
        relabelled.checker = "c2".to_owned();
        assert_eq!(
            verify(&relabelled, &keys(), "fra", &mut last, 1000),
            Err(Reject::UnknownChecker)
        );
        assert!(verify(
            &sign(&report(16, 1010), &[7u8; 32]).unwrap(),
            &keys(),
            "fra",
            &mut last,
            1000
        )
        .is_ok());
    }

    #[test]
    fn frames_put_the_id_and_mac_before_the_body() {
        let signed = sign(&report(1, 1000), &[7u8; 32]).unwrap();
        let frame = signed.frame().unwrap();
        let rest = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(rest, frame.len() - 4);
        assert_eq!(frame[4], 2);
        assert_eq!(&frame[5..7], b"c1");
        assert_eq!(&frame[7..7 + MAC_LEN], signed.mac.as_slice());
        assert_eq!(&frame[7 + MAC_LEN..], signed.body.as_slice());
        let mut long = signed.clone();
        long.checker = "x".repeat(MAX_ID + 1);
        assert!(long.frame().is_err());
    }
}
