//! The control ↔ edge protocol: the messages, their framing and the persisted snapshot
//! file. Shared by both daemons so they cannot drift apart; the forms of earlier
//! schemas are in [`crate::schema`].
//!
//! On every (re)connect control sends the snapshot — whole, or to an edge that takes
//! deltas as a [`ToEdge::Delta`] from the zones its hello says it serves; after that,
//! health changes go as [`HealthDelta`]s (the changed bitmap words, numbered by `seq`
//! within a snapshot version) and new versions as deltas (`crate::delta`). An edge that
//! sees a gap (or another snapshot version) drops the connection and gets the snapshot
//! again on reconnect.
//!
//! A frame is a 4-octet big-endian length, then the body: [`NUMBERED`], the link schema
//! number (u16, big-endian) and the message (postcard). Frames without the number are
//! schema [`schema::UNNUMBERED`] (a peer from before numbering), and the hello is always
//! written so: every control reads it. Control writes [`schema::SCHEMA`] and links only
//! edges whose hello says they read it; an edge writes in the schema its control's
//! frames come in. Upgrade edges first.
use std::{fs, io, path::Path};

use serde::{Deserialize, Serialize};

use qdns_zone::Snapshot;

pub use crate::message::{HealthDelta, ProtocolError, ToControl, ToEdge, XdpReport, MAX_FRAME};
use crate::schema;

/// First octet of a numbered frame's body. A body without a number starts with its
/// message's variant index (postcard: a varint below 128 for every message kind), so
/// the two cannot be confused.
pub const NUMBERED: u8 = 0xFF;

/// What an edge appends to its hello's frame, after the [`ToControl::Hello`]: a control
/// that predates it ignores it (it decodes the hello and stops), a newer one reads it.
/// Versions 1–3 appended their fields in order (frozen: a control of that time reads
/// them so); from version 4 the fields follow as TLV entries ([`crate::tlv`], ids in
/// [`hello_entry`]), so a field is added by giving it the next id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloExtension {
    /// The extension's version ([`HELLO_EXTENSION_VERSION`]).
    pub version: u16,
    /// Application-level keepalive: each end sends a frame at least this often (in
    /// seconds) and drops a peer silent for [`KEEPALIVE_MISSES`] intervals; 0 = off.
    /// (Version 1.)
    pub keepalive_secs: u16,
    /// The edge takes [`ToEdge::Cookies`]. (Version 2; false in a version 1 hello.)
    pub cookies: bool,
    /// The edge takes [`ToEdge::Delta`]. (Version 3; false before.)
    pub deltas: bool,
    /// The zones of the snapshot the edge serves, each with its
    /// [`crate::delta::zone_digest`]: control keeps those it still has. (Version 3.)
    pub zones: Vec<(Vec<u8>, u64)>,
    /// The newest link schema the edge reads ([`schema::SCHEMA`] of its build; 0 from
    /// an edge before numbering, which reads [`schema::UNNUMBERED`] only). (TLV
    /// [`hello_entry::SCHEMA`].)
    pub schema: u16,
}

/// The ids of the hello extension's TLV entries (version 4 on).
pub mod hello_entry {
    /// [`super::HelloExtension::schema`] (u16).
    pub const SCHEMA: u16 = 1;
}

/// The hello extension's version this build writes.
pub const HELLO_EXTENSION_VERSION: u16 = 4;

/// Intervals without a frame after which a peer that asked for keepalives is dropped.
pub const KEEPALIVE_MISSES: u32 = 3;

/// The hello frame: [`ToControl::Hello`] without a schema number (every control reads
/// it), then `extension`.
pub fn encode_hello(edge: &str, serving: Option<u64>, extension: &HelloExtension) -> Result<Vec<u8>, ProtocolError> {
    let mut frame = encode_in(
        schema::UNNUMBERED,
        &ToControl::Hello {
            edge: edge.to_owned(),
            serving,
        },
    )?;
    frame = postcard::to_extend(&(extension.version, extension.keepalive_secs), frame)?;
    if extension.version >= 2 {
        frame = postcard::to_extend(&extension.cookies, frame)?;
    }
    if extension.version >= 3 {
        frame = postcard::to_extend(&(extension.deltas, &extension.zones), frame)?;
    }
    if extension.version >= 4 {
        let mut entries = crate::tlv::Writer::default();
        entries
            .put(hello_entry::SCHEMA, &extension.schema)
            .map_err(|e| ProtocolError::Corrupt(e.to_string()))?;
        frame.extend(entries.finish());
    }
    with_length(frame)
}

/// Decodes an edge's first frame: the message, and the hello's extension when the
/// edge sent one (an older edge's hello has none; entries this build does not know are
/// skipped, malformed ones drop the extension).
pub fn decode_hello(body: &[u8]) -> Result<(ToControl, Option<HelloExtension>), ProtocolError> {
    // Written without a number; one numbered all the same is read too.
    let (_, body) = numbered(body)?;
    let (msg, rest): (ToControl, &[u8]) = postcard::take_from_bytes(body)?;
    let extension = match (&msg, rest) {
        (ToControl::Hello { .. }, [_, ..]) => read_extension(rest),
        _ => None,
    };
    Ok((msg, extension))
}

/// The hello extension's fields of each version this build knows.
fn read_extension(rest: &[u8]) -> Option<HelloExtension> {
    let ((version, keepalive_secs), rest) = postcard::take_from_bytes::<(u16, u16)>(rest).ok()?;
    let (cookies, rest) = if version >= 2 {
        postcard::take_from_bytes::<bool>(rest).ok()?
    } else {
        (false, rest)
    };
    let ((deltas, zones), rest) = if version >= 3 {
        postcard::take_from_bytes::<(bool, Vec<(Vec<u8>, u64)>)>(rest).ok()?
    } else {
        ((false, Vec::new()), rest)
    };
    let schema = if version >= 4 {
        let entries = crate::tlv::Entries::read(rest).ok()?;
        entries.get::<u16>(hello_entry::SCHEMA).ok()?.unwrap_or(0)
    } else {
        0
    };
    Some(HelloExtension {
        version,
        keepalive_secs,
        cookies,
        deltas,
        zones,
        schema,
    })
}

/// Encodes `msg` as one frame of [`schema::SCHEMA`] (length prefix and number included).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    encode_in(schema::SCHEMA, msg)
}

/// Encodes `msg` as a frame of `schema`: numbered, or without a number for a peer from
/// before numbering. Only for messages whose form is the same in `schema` and now (an
/// edge answering an older control: [`ToControl`] has not changed since numbering).
pub fn encode_in<T: Serialize>(schema: u16, msg: &T) -> Result<Vec<u8>, ProtocolError> {
    with_length(postcard::to_extend(msg, frame_head(schema))?)
}

/// A frame of `schema` holding `message` (its octets, encoded in that schema).
fn frame_of(schema: u16, message: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    let mut frame = frame_head(schema);
    frame.extend_from_slice(message);
    with_length(frame)
}

/// A frame's first octets before its message: room for the length, and the number
/// unless `schema` is from before numbering.
fn frame_head(schema: u16) -> Vec<u8> {
    let mut head = vec![0u8; 4];
    if schema > schema::UNNUMBERED {
        head.push(NUMBERED);
        head.extend_from_slice(&schema.to_be_bytes());
    }
    head
}

/// `frame` (written by [`encode`], in [`schema::SCHEMA`]) as an edge that reads schemas
/// up to `schema` reads it: the same octets for a current edge, else the message in the
/// newest schema that edge reads ([`schema::rewrite`]).
///
/// # Errors
/// When `frame` is not a frame of this build, or `schema` is one it does not write.
pub fn in_schema(frame: &[u8], schema: u16) -> Result<std::borrow::Cow<'_, [u8]>, ProtocolError> {
    let schema = schema::check(schema.min(schema::SCHEMA))?;
    let body = frame.get(4..).ok_or(ProtocolError::Trailing { octets: frame.len() })?;
    match numbered(body)? {
        (number, _) if number == schema => Ok(std::borrow::Cow::Borrowed(frame)),
        (schema::SCHEMA, message) => {
            let rewritten = schema::rewrite(schema, message)?;
            Ok(std::borrow::Cow::Owned(frame_of(
                schema,
                rewritten.as_deref().unwrap_or(message),
            )?))
        }
        (number, _) => Err(schema::refused(number)),
    }
}

/// A frame body's schema and message: the number and what follows it, or
/// [`schema::UNNUMBERED`] and the whole body.
///
/// # Errors
/// A number cut short, or one this build does not read.
pub fn numbered(body: &[u8]) -> Result<(u16, &[u8]), ProtocolError> {
    match body {
        [NUMBERED, hi, lo, message @ ..] => Ok((schema::check(u16::from_be_bytes([*hi, *lo]))?, message)),
        [NUMBERED, ..] => Err(schema::refused(0)),
        _ => Ok((schema::UNNUMBERED, body)),
    }
}

/// `frame` (4 octets, then the body) with the body's length written into the 4.
fn with_length(mut frame: Vec<u8>) -> Result<Vec<u8>, ProtocolError> {
    let len = u32::try_from(frame.len() - 4).map_err(|_| ProtocolError::TooLarge {
        len: frame.len(),
        max: MAX_FRAME,
    })?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Encodes `ToEdge::Snapshot { snapshot, seq }` (in [`schema::SCHEMA`]) without the
/// copy of the snapshot an owned `ToEdge` would need: the same octets (postcard writes
/// an enum as its variant index, and `Snapshot` is variant 0 of both).
pub fn encode_snapshot(snapshot: &Snapshot, seq: u64) -> Result<Vec<u8>, ProtocolError> {
    #[derive(Serialize)]
    enum Borrowed<'a> {
        Snapshot { snapshot: &'a Snapshot, seq: u64 },
    }
    encode(&Borrowed::Snapshot { snapshot, seq })
}

/// Length of the frame body announced by a 4-octet prefix.
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, ProtocolError> {
    frame_len_within(prefix, MAX_FRAME)
}

/// Length of the frame body announced by a 4-octet prefix, refused over `max` octets
/// (checked before a byte of the body is read or allocated).
pub fn frame_len_within(prefix: [u8; 4], max: usize) -> Result<usize, ProtocolError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > max {
        return Err(ProtocolError::TooLarge { len, max });
    }
    Ok(len)
}

/// Decodes a frame body of [`schema::SCHEMA`] (or of any schema whose form of `T` is
/// today's), numbered or not.
pub fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    let (_, message) = numbered(body)?;
    schema::whole(message)
}

/// A persisted file's first octets, then its schema (u16, big-endian), the body's
/// length (u64) and CRC-32 (u32), then the body.
const MAGIC: &[u8; 8] = b"QDNSSNP2";

/// The first octets of a file from before numbering (schema [`schema::UNNUMBERED`]),
/// then the length and CRC-32 as now.
const MAGIC_UNNUMBERED: &[u8; 8] = b"QDNSSNP1";

/// Health of a persisted snapshot, saved apart so a delta does not rewrite the zones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedHealth {
    /// The snapshot version it belongs to.
    pub snapshot: u64,
    /// The last delta applied.
    pub seq: u64,
    /// The bitmap.
    pub bitmap: Vec<u64>,
}

/// The zones of a persisted snapshot with their digests ([`crate::delta::zone_digest`]),
/// saved beside it (`zones.bin`) so a restarted edge can tell control what it serves
/// without reading the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedZones {
    /// The snapshot version.
    pub version: u64,
    /// Each zone's origin and digest, in the snapshot's order.
    pub zones: Vec<(Vec<u8>, u64)>,
}

/// Writes `value` to `path` atomically (temp file, fsync, rename) with a CRC-32 of
/// the body, so a crash mid-write leaves the previous file.
pub fn persist<T: Serialize>(path: &Path, value: &T) -> Result<(), ProtocolError> {
    let body = postcard::to_stdvec(value)?;
    let mut file = Vec::with_capacity(body.len() + 22);
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&schema::SCHEMA.to_be_bytes());
    file.extend_from_slice(&(body.len() as u64).to_be_bytes());
    file.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    file.extend_from_slice(&body);
    // Owner-only: a snapshot holds every zone, the cookie file the location's secret.
    write_private(path, &file)?;
    if let Some(dir) = path.parent() {
        if let Ok(dir) = fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Writes `bytes` as `path`, readable by its owner only, through `path.tmp`, fsync and
/// rename: a crash mid-write leaves the previous file. A failed write removes the
/// temporary file (never read, but it takes room a full disk lacks).
///
/// # Errors
/// When the file cannot be written or renamed.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        use io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Reads a value written by [`persist`] (in a schema whose form of `T` is today's);
/// `Ok(None)` when there is no file.
pub fn load<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ProtocolError> {
    let Some((_, body)) = load_body(path)? else {
        return Ok(None);
    };
    schema::whole(&body)
        .map(Some)
        .map_err(|e| ProtocolError::Corrupt(format!("{}: undecodable: {e}", path.display())))
}

/// Reads a [`Snapshot`] written by [`persist`], in its schema: an upgraded edge serves
/// the snapshot its predecessor persisted.
pub fn load_snapshot(path: &Path) -> Result<Option<Snapshot>, ProtocolError> {
    let Some((number, body)) = load_body(path)? else {
        return Ok(None);
    };
    schema::snapshot(number, &body)
        .map(Some)
        .map_err(|e| ProtocolError::Corrupt(format!("{}: undecodable: {e}", path.display())))
}

/// Decodes a control → edge frame body in its schema (upgrade edges first: they read
/// the schemas before theirs); the schema is what the edge answers in.
pub fn decode_to_edge(body: &[u8]) -> Result<(u16, ToEdge), ProtocolError> {
    let (number, message) = numbered(body)?;
    Ok((number, schema::to_edge(number, message)?))
}

/// Decodes an edge → control frame body in its schema.
pub fn decode_to_control(body: &[u8]) -> Result<ToControl, ProtocolError> {
    let (number, message) = numbered(body)?;
    schema::to_control(number, message)
}

/// The schema and body of a file written by [`persist`], checked; `Ok(None)` when
/// there is none.
fn load_body(path: &Path) -> Result<Option<(u16, Vec<u8>)>, ProtocolError> {
    let data = match fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let corrupt = |why: &str| ProtocolError::Corrupt(format!("{}: {why}", path.display()));
    let (number, rest) = match data.split_at_checked(8) {
        Some((magic, rest)) if magic == MAGIC_UNNUMBERED => (schema::UNNUMBERED, rest),
        Some((magic, [hi, lo, rest @ ..])) if magic == MAGIC => (u16::from_be_bytes([*hi, *lo]), rest),
        _ => return Err(corrupt("not a qdns snapshot file (bad magic or too short)")),
    };
    let number = schema::check(number).map_err(|e| corrupt(&e.to_string()))?;
    let (Some(len), Some(crc), Some(body)) = (rest.get(..8), rest.get(8..12), rest.get(12..)) else {
        return Err(corrupt("short header"));
    };
    let len = u64::from_be_bytes(len.try_into().map_err(|_| corrupt("short header"))?) as usize;
    let crc = u32::from_be_bytes(crc.try_into().map_err(|_| corrupt("short header"))?);
    if body.len() != len {
        return Err(corrupt("truncated"));
    }
    if crc32fast::hash(body) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some((number, body.to_vec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_snapshot_encodes_as_the_owned_message() {
        let snapshot = snapshot();
        let owned = encode(&ToEdge::Snapshot {
            snapshot: Box::new(snapshot.clone()),
            seq: 3,
        })
        .unwrap();
        assert_eq!(encode_snapshot(&snapshot, 3).unwrap(), owned);
        assert!(matches!(
            decode_to_edge(&owned[4..]).unwrap(),
            (schema::SCHEMA, ToEdge::Snapshot { seq: 3, .. })
        ));
    }

    fn snapshot() -> Snapshot {
        Snapshot::new(7, Vec::new(), vec![0b101])
    }

    #[test]
    fn frames_carry_their_schema_and_unnumbered_ones_are_the_oldest() {
        let number = schema::SCHEMA.to_be_bytes();
        // Length, the mark, the number, then the variant index: kinds keep their indices.
        assert_eq!(
            encode(&ToEdge::Keepalive).unwrap(),
            [0, 0, 0, 4, NUMBERED, number[0], number[1], 2]
        );
        assert_eq!(
            encode(&ToControl::Keepalive).unwrap(),
            [0, 0, 0, 4, NUMBERED, number[0], number[1], 3]
        );
        // For a control from before numbering: the message alone.
        let applied = ToControl::Applied { snapshot: 7, seq: 1 };
        let bare = encode_in(schema::UNNUMBERED, &applied).unwrap();
        assert_eq!(bare, [0, 0, 0, 3, 1, 7, 1]);
        assert_eq!(decode_to_control(&bare[4..]).unwrap(), applied);
        assert_eq!(decode_to_control(&encode(&applied).unwrap()[4..]).unwrap(), applied);
        assert_eq!(decode_to_edge(&[2]).unwrap(), (schema::UNNUMBERED, ToEdge::Keepalive));
        // A number this build does not read, or one cut short, is refused as such.
        let newer = (schema::SCHEMA + 1).to_be_bytes();
        let err = decode_to_edge(&[NUMBERED, newer[0], newer[1], 2]).unwrap_err();
        assert!(matches!(err, ProtocolError::Schema { .. }), "{err}");
        assert!(err.to_string().contains("this build reads"), "{err}");
        assert!(decode_to_edge(&[NUMBERED, 0, 3, 2]).is_err());
        assert!(matches!(
            decode_to_edge(&[NUMBERED, 0]),
            Err(ProtocolError::Schema { schema: 0, .. })
        ));
        // Octets after a message make the frame undecodable.
        let mut long = encode(&ToEdge::Keepalive).unwrap()[4..].to_vec();
        long.push(0);
        assert!(matches!(
            decode_to_edge(&long),
            Err(ProtocolError::Trailing { octets: 1 })
        ));
    }

    #[test]
    fn a_hello_carries_its_extension_and_older_readers_skip_it() {
        let extension = HelloExtension {
            version: HELLO_EXTENSION_VERSION,
            keepalive_secs: 5,
            cookies: true,
            deltas: true,
            zones: vec![(b"\x07example\x00".to_vec(), 42)],
            schema: schema::SCHEMA,
        };
        let frame = encode_hello("e1", Some(9), &extension).unwrap();
        assert_eq!(frame_len(frame[..4].try_into().unwrap()).unwrap(), frame.len() - 4);
        let hello = ToControl::Hello {
            edge: "e1".into(),
            serving: Some(9),
        };
        // The hello is never numbered: a control of any schema reads it.
        assert_eq!(frame[4], 0);
        assert_eq!(
            decode_hello(&frame[4..]).unwrap(),
            (hello.clone(), Some(extension.clone()))
        );
        // A control that predates the extension reads the hello alone.
        assert_eq!(postcard::take_from_bytes::<ToControl>(&frame[4..]).unwrap().0, hello);
        // One before TLV entries reads versions 1-3's fields and stops.
        let mut rest = postcard::take_from_bytes::<ToControl>(&frame[4..]).unwrap().1;
        let (v1, after): ((u16, u16), _) = postcard::take_from_bytes(rest).unwrap();
        assert_eq!(v1, (4, 5));
        rest = postcard::take_from_bytes::<(bool, (bool, Vec<(Vec<u8>, u64)>))>(after)
            .unwrap()
            .1;
        assert_eq!(
            crate::tlv::Entries::read(rest)
                .unwrap()
                .get::<u16>(hello_entry::SCHEMA)
                .unwrap(),
            Some(schema::SCHEMA)
        );
        // An edge that predates it sends the hello alone.
        let bare = encode_in(schema::UNNUMBERED, &hello).unwrap();
        assert_eq!(decode_hello(&bare[4..]).unwrap(), (hello.clone(), None));
        // Entries from a later edge are skipped; a malformed list drops the extension.
        let mut later = frame[4..].to_vec();
        let mut entries = crate::tlv::Writer::default();
        entries.put(77, &"later").unwrap();
        later.extend(entries.finish());
        assert_eq!(decode_hello(&later).unwrap().1, Some(extension));
        later.push(1);
        assert_eq!(decode_hello(&later).unwrap().1, None);
    }

    #[test]
    fn each_hello_extension_version_reads_what_it_knows() {
        let v4 = HelloExtension {
            version: 4,
            keepalive_secs: 7,
            cookies: true,
            deltas: true,
            zones: vec![(b"\x07example\x00".to_vec(), 42)],
            schema: 9,
        };
        let read = |extension: &HelloExtension| {
            let frame = encode_hello("e2", None, extension).unwrap();
            decode_hello(&frame[4..]).unwrap().1.unwrap()
        };
        assert_eq!(read(&v4), v4);
        // Version 3 (an edge before numbering): no schema.
        let v3 = HelloExtension {
            version: 3,
            ..v4.clone()
        };
        assert_eq!(
            read(&v3),
            HelloExtension {
                schema: 0,
                ..v3.clone()
            }
        );
        // Version 2 (an edge before deltas): no deltas, no zones.
        let v2 = HelloExtension {
            version: 2,
            ..v4.clone()
        };
        let expected = HelloExtension {
            deltas: false,
            zones: Vec::new(),
            schema: 0,
            ..v2.clone()
        };
        assert_eq!(read(&v2), expected);
        // Version 1 (an edge before cookies): no cookies.
        let v1 = HelloExtension { version: 1, ..v4 };
        assert_eq!(
            read(&v1),
            HelloExtension {
                cookies: false,
                version: 1,
                ..expected
            }
        );
    }

    #[test]
    fn frames_round_trip() {
        let msg = ToEdge::Health(HealthDelta {
            snapshot: 7,
            seq: 2,
            words: vec![(0, 5)],
        });
        let frame = encode(&msg).unwrap();
        let len = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(len, frame.len() - 4);
        assert_eq!(decode::<ToEdge>(&frame[4..]).unwrap(), msg);
        assert_eq!(decode_to_edge(&frame[4..]).unwrap(), (schema::SCHEMA, msg));
        assert!(frame_len(u32::MAX.to_be_bytes()).is_err());
        assert_eq!(frame_len_within(1024u32.to_be_bytes(), 1024).unwrap(), 1024);
        assert_eq!(
            frame_len_within(1025u32.to_be_bytes(), 1024).unwrap_err().to_string(),
            "frame of 1025 octets is over the limit of 1024"
        );
    }

    #[test]
    fn persisted_snapshot_round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.bin");
        assert!(load::<Snapshot>(&path).unwrap().is_none());
        persist(&path, &snapshot()).unwrap();
        assert_eq!(load(&path).unwrap(), Some(snapshot()));
        let mut data = fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        fs::write(&path, &data).unwrap();
        assert!(load::<Snapshot>(&path)
            .unwrap_err()
            .to_string()
            .contains("checksum mismatch"));
        fs::write(&path, b"garbage").unwrap();
        assert!(load::<Snapshot>(&path)
            .unwrap_err()
            .to_string()
            .contains("not a qdns snapshot"));
        // A file of a schema this build does not read says so.
        persist(&path, &snapshot()).unwrap();
        let mut data = fs::read(&path).unwrap();
        data[8..10].copy_from_slice(&(schema::SCHEMA + 1).to_be_bytes());
        fs::write(&path, &data).unwrap();
        let err = load_snapshot(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("link schema {}", schema::SCHEMA + 1)), "{err}");
    }
}
