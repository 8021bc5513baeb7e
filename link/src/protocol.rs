//! The control ↔ edge protocol: the messages, their framing, the forms of earlier
//! versions still read, and the persisted snapshot file. Shared by both daemons so they
//! cannot drift apart.
//!
//! On every (re)connect control sends the snapshot — whole, or to an edge that takes
//! deltas as a [`ToEdge::Delta`] from the zones its hello says it serves; after that,
//! health changes go as [`HealthDelta`]s (the changed bitmap words, numbered by `seq`
//! within a snapshot version) and new versions as deltas (`crate::delta`). An edge that
//! sees a gap (or another snapshot version) drops the connection and gets the snapshot
//! again on reconnect. Frames are a 4-octet big-endian length and a postcard body.
use std::{fs, io, path::Path};

use serde::{Deserialize, Serialize};

use qdns_zone::Snapshot;

/// Largest frame accepted (a snapshot of millions of records fits; a corrupt length
/// prefix cannot make a reader allocate more).
pub const MAX_FRAME: usize = 1 << 30;

/// Control → edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToEdge {
    /// A whole snapshot (zones and current health), replacing everything; `seq` is the
    /// last delta already folded into its bitmap (the next delta is `seq + 1`).
    Snapshot {
        /// The snapshot.
        snapshot: Box<Snapshot>,
        /// Deltas already included.
        seq: u64,
    },
    /// Changed health words of the current snapshot.
    Health(HealthDelta),
    /// Control is alive (its state answers): sent every keepalive interval to an edge
    /// whose hello asked for it ([`HelloExtension::keepalive_secs`]), never to others.
    Keepalive,
    /// The location's DNS cookie secrets (RFC 7873, RFC 9018): new server cookies are
    /// made with `current`, those made with `previous` are still accepted. Sent after
    /// the snapshot and at each rotation to an edge whose hello said it takes them
    /// ([`HelloExtension::cookies`]), never to others.
    Cookies {
        /// The secret new cookies are made with.
        current: [u8; 16],
        /// The one before the last rotation, still accepted.
        previous: Option<[u8; 16]>,
        /// The one the next rotation makes current, accepted already (RFC 9018 §5).
        next: Option<[u8; 16]>,
    },
    /// A new snapshot version as changes to the one the edge serves (its hello said it
    /// takes them, [`HelloExtension::deltas`]): after a reload, or on connecting to an
    /// edge that already serves some of the zones.
    Delta(Box<crate::delta::SnapshotDelta>),
    /// Health deltas `since + 1 ..= delta.seq` folded into one (each changed word's
    /// latest value): what control sends an edge that takes deltas when several are
    /// queued for it, so a storm of health changes costs a slow link one frame, not one
    /// per change.
    HealthSince {
        /// The last delta the edge must already hold.
        since: u64,
        /// The words, and the last delta folded in.
        delta: HealthDelta,
    },
}

/// A health update: bitmap words that changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthDelta {
    /// The snapshot version it applies to.
    pub snapshot: u64,
    /// 1 for the first delta after a snapshot, then +1 each.
    pub seq: u64,
    /// (word index, new value).
    pub words: Vec<(u32, u64)>,
}

/// Edge → control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToControl {
    /// First message of a connection.
    Hello {
        /// The edge's name (host name or `--edge-id`).
        edge: String,
        /// The snapshot version it serves now, if any.
        serving: Option<u64>,
    },
    /// The edge applied this snapshot version and delta.
    Applied {
        /// Snapshot version.
        snapshot: u64,
        /// Last delta applied (0 = the snapshot itself).
        seq: u64,
    },
    /// The edge's XDP fast path, every few seconds while it has one.
    Xdp(XdpReport),
    /// The edge is alive: sent every keepalive interval once control has sent its own
    /// first [`ToEdge::Keepalive`] (a control that predates it never reads one).
    Keepalive,
}

/// What an edge appends to its hello's frame, after the [`ToControl::Hello`]: a control
/// that predates it ignores it (it decodes the hello and stops), a newer one reads it.
/// Each version appends its fields after the last one's, so a control reads the fields
/// of the versions it knows and skips the rest.
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
}

/// The hello extension's version this build writes.
pub const HELLO_EXTENSION_VERSION: u16 = 3;

/// Intervals without a frame after which a peer that asked for keepalives is dropped.
pub const KEEPALIVE_MISSES: u32 = 3;

/// The hello frame: [`ToControl::Hello`], then `extension`.
pub fn encode_hello(edge: &str, serving: Option<u64>, extension: &HelloExtension) -> Result<Vec<u8>, ProtocolError> {
    let mut frame = encode(&ToControl::Hello {
        edge: edge.to_owned(),
        serving,
    })?;
    frame = postcard::to_extend(&(extension.version, extension.keepalive_secs), frame)?;
    if extension.version >= 2 {
        frame = postcard::to_extend(&extension.cookies, frame)?;
    }
    if extension.version >= 3 {
        frame = postcard::to_extend(&(extension.deltas, &extension.zones), frame)?;
    }
    with_length(frame)
}

/// Decodes an edge's first frame: the message, and the hello's extension when the
/// edge sent one (an older edge's hello has none; a later one's extra fields are
/// skipped).
pub fn decode_hello(body: &[u8]) -> Result<(ToControl, Option<HelloExtension>), ProtocolError> {
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
    let (deltas, zones) = if version >= 3 {
        postcard::take_from_bytes::<(bool, Vec<(Vec<u8>, u64)>)>(rest).ok()?.0
    } else {
        (false, Vec::new())
    };
    Some(HelloExtension {
        version,
        keepalive_secs,
        cookies,
        deltas,
        zones,
    })
}

/// What an edge's XDP program did so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpReport {
    /// Interfaces the program is attached to.
    pub interfaces: Vec<String>,
    /// Active table generation (0: none, everything goes to user space).
    pub generation: u32,
    /// Counter totals by label (`seen`, `answered_*`, `pass_*`).
    pub counters: Vec<(String, u64)>,
}

/// Why a frame or file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// I/O failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The length prefix is above the limit (at most [`MAX_FRAME`]).
    #[error("frame of {len} octets is over the limit of {max}")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body does not decode.
    #[error("undecodable frame: {0}")]
    Decode(#[from] postcard::Error),
    /// The persisted file is damaged.
    #[error("{0}")]
    Corrupt(String),
}

/// Encodes `msg` as one frame (length prefix included).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    with_length(postcard::to_extend(msg, vec![0u8; 4])?)
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

/// Encodes `ToEdge::Snapshot { snapshot, seq }` without the copy of the snapshot an
/// owned `ToEdge` would need: the same octets (postcard writes an enum as its variant
/// index, and `Snapshot` is variant 0 of both).
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

/// Decodes a frame body.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ProtocolError> {
    Ok(postcard::from_bytes(body)?)
}

const MAGIC: &[u8; 8] = b"QDNSSNP1";

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
    let mut file = Vec::with_capacity(body.len() + 20);
    file.extend_from_slice(MAGIC);
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

/// Reads a value written by [`persist`]; `Ok(None)` when there is no file.
pub fn load<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ProtocolError> {
    let Some(body) = load_body(path)? else {
        return Ok(None);
    };
    postcard::from_bytes(&body)
        .map(Some)
        .map_err(|e| ProtocolError::Corrupt(format!("{}: undecodable: {e}", path.display())))
}

/// Reads a [`Snapshot`] written by [`persist`] — by this version, by one before
/// client-aware sets (policies without [`qdns_zone::Policy::client`]) or by one before
/// DNSSEC (zones without [`qdns_zone::Zone::dnssec`]): an upgraded edge serves the snapshot
/// its predecessor persisted.
pub fn load_snapshot(path: &Path) -> Result<Option<Snapshot>, ProtocolError> {
    let Some(body) = load_body(path)? else {
        return Ok(None);
    };
    whole(&body)
        .or_else(|e| {
            whole::<legacy::SnapshotV3>(&body)
                .map(Snapshot::from)
                .or_else(|_| whole::<legacy::SnapshotV2>(&body).map(Snapshot::from))
                .or_else(|_| whole::<legacy::SnapshotV1>(&body).map(Snapshot::from))
                .map_err(|_| e)
        })
        .map(Some)
        .map_err(|e| ProtocolError::Corrupt(format!("{}: undecodable: {e}", path.display())))
}

/// Decodes a control → edge frame body, from this version's control or from an older
/// one (see [`load_snapshot`]; upgrade edges first: they read every form).
pub fn decode_to_edge(body: &[u8]) -> Result<ToEdge, ProtocolError> {
    whole(body)
        .or_else(|e| {
            whole::<legacy::ToEdgeV3>(body)
                .map(ToEdge::from)
                .or_else(|_| whole::<legacy::ToEdgeV2>(body).map(ToEdge::from))
                .or_else(|_| whole::<legacy::ToEdgeV1>(body).map(ToEdge::from))
                .map_err(|_| e)
        })
        .map_err(ProtocolError::from)
}

/// `body` decoded as a `T` that spans it exactly: an older form read as a newer one
/// (or the reverse) fails rather than leaving octets over.
fn whole<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, postcard::Error> {
    match postcard::take_from_bytes(body)? {
        (value, []) => Ok(value),
        _ => Err(postcard::Error::DeserializeBadEncoding),
    }
}

/// The body of a file written by [`persist`], checked; `Ok(None)` when there is none.
fn load_body(path: &Path) -> Result<Option<Vec<u8>>, ProtocolError> {
    let data = match fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let corrupt = |why: &str| ProtocolError::Corrupt(format!("{}: {why}", path.display()));
    if data.len() < 20 || &data[..8] != MAGIC {
        return Err(corrupt("not a qdns snapshot file (bad magic or too short)"));
    }
    let len = u64::from_be_bytes(data[8..16].try_into().map_err(|_| corrupt("short header"))?) as usize;
    let crc = u32::from_be_bytes(data[16..20].try_into().map_err(|_| corrupt("short header"))?);
    let body = data
        .get(20..)
        .filter(|b| b.len() == len)
        .ok_or_else(|| corrupt("truncated"))?;
    if crc32fast::hash(body) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some(body.to_vec()))
}

/// The wire forms of earlier versions, read for upgrades only: V3 before load shedding
/// (probes without `load`), V2 also before client-aware sets (policies without
/// `client`), V1 also before DNSSEC (zones without `dnssec`).
mod legacy {
    use serde::Deserialize;

    use qdns_zone::{
        snapshot::{Probe, ProbeKind},
        Member, Policy, PolicyKind, RecordSet, Slot, SlotRule, Snapshot, Zone,
    };

    #[derive(Deserialize)]
    pub(super) struct ProbeV3 {
        kind: ProbeKind,
        ip: std::net::IpAddr,
        port: u16,
        path: String,
        host: String,
        interval: u32,
        failure_threshold: u32,
        search_string: Option<String>,
        tls_verify: bool,
    }

    /// [`SlotRule`] with [`ProbeV3`]: the same variants in the same order.
    #[derive(Deserialize)]
    pub(super) enum SlotRuleV3 {
        Check {
            probe: Option<ProbeV3>,
            inverted: bool,
            disabled: bool,
        },
        Calculated {
            children: Vec<u32>,
            threshold: u32,
        },
        AliasTarget {
            members: Vec<u32>,
        },
        Az {
            rrset: Vec<u8>,
            rtype: u16,
            az: String,
            index: u32,
            targets: Vec<(u32, u32, u32)>,
            groups: u32,
            cross_zone: bool,
        },
        Latency {
            rrset: Vec<u8>,
            rtype: u16,
            member: u32,
            health: Vec<u32>,
        },
    }

    #[derive(Deserialize)]
    pub(super) struct SlotV3 {
        name: String,
        rule: SlotRuleV3,
    }

    impl From<SlotV3> for Slot {
        fn from(old: SlotV3) -> Slot {
            let rule = match old.rule {
                SlotRuleV3::Check {
                    probe,
                    inverted,
                    disabled,
                } => SlotRule::Check {
                    probe: probe.map(|p| Probe {
                        kind: p.kind,
                        ip: p.ip,
                        port: p.port,
                        path: p.path,
                        host: p.host,
                        interval: p.interval,
                        failure_threshold: p.failure_threshold,
                        search_string: p.search_string,
                        tls_verify: p.tls_verify,
                        load: None,
                    }),
                    inverted,
                    disabled,
                },
                SlotRuleV3::Calculated { children, threshold } => SlotRule::Calculated { children, threshold },
                SlotRuleV3::AliasTarget { members } => SlotRule::AliasTarget { members },
                SlotRuleV3::Az {
                    rrset,
                    rtype,
                    az,
                    index,
                    targets,
                    groups,
                    cross_zone,
                } => SlotRule::Az {
                    rrset,
                    rtype,
                    az,
                    index,
                    targets,
                    groups,
                    cross_zone,
                },
                SlotRuleV3::Latency {
                    rrset,
                    rtype,
                    member,
                    health,
                } => SlotRule::Latency {
                    rrset,
                    rtype,
                    member,
                    health,
                },
            };
            Slot { name: old.name, rule }
        }
    }

    #[derive(Deserialize)]
    pub(super) struct ZoneV3 {
        origin: Vec<u8>,
        source: String,
        serial: u32,
        negative_ttl: u32,
        rrsets: Vec<RecordSet>,
        slot_base: u32,
        slots: Vec<SlotV3>,
        dnssec: Option<Box<qdns_zone::dnssec::Signatures>>,
        geo: Option<Box<qdns_zone::client::GeoTable>>,
    }

    #[derive(Deserialize)]
    pub(super) struct SnapshotV3 {
        version: u64,
        zones: Vec<ZoneV3>,
        bitmap: Vec<u64>,
    }

    #[derive(Deserialize)]
    pub(super) enum ToEdgeV3 {
        Snapshot { snapshot: Box<SnapshotV3>, seq: u64 },
        Health(super::HealthDelta),
    }

    impl From<SnapshotV3> for Snapshot {
        fn from(old: SnapshotV3) -> Snapshot {
            Snapshot {
                version: old.version,
                zones: old
                    .zones
                    .into_iter()
                    .map(|z| Zone {
                        origin: z.origin,
                        source: z.source,
                        serial: z.serial,
                        negative_ttl: z.negative_ttl,
                        rrsets: z.rrsets,
                        slot_base: z.slot_base,
                        slots: z.slots.into_iter().map(Slot::from).collect(),
                        dnssec: z.dnssec,
                        geo: z.geo,
                        transfer: None,
                    })
                    .collect(),
                bitmap: old.bitmap,
            }
        }
    }

    impl From<ToEdgeV3> for super::ToEdge {
        fn from(old: ToEdgeV3) -> super::ToEdge {
            match old {
                ToEdgeV3::Snapshot { snapshot, seq } => super::ToEdge::Snapshot {
                    snapshot: Box::new(Snapshot::from(*snapshot)),
                    seq,
                },
                ToEdgeV3::Health(delta) => super::ToEdge::Health(delta),
            }
        }
    }

    #[derive(Deserialize)]
    pub(super) struct PolicyV2 {
        kind: PolicyKind,
        members: Vec<Member>,
        fail_open_below_permille: u32,
        degraded_ttl: Option<u32>,
    }

    #[derive(Deserialize)]
    pub(super) struct RecordSetV2 {
        name: Vec<u8>,
        rtype: u16,
        ttl: u32,
        rdata: Vec<Vec<u8>>,
        policy: Option<Box<PolicyV2>>,
    }

    impl From<RecordSetV2> for RecordSet {
        fn from(old: RecordSetV2) -> RecordSet {
            RecordSet {
                name: old.name,
                rtype: old.rtype,
                ttl: old.ttl,
                rdata: old.rdata,
                policy: old.policy.map(|p| {
                    Box::new(Policy {
                        kind: p.kind,
                        members: p.members,
                        fail_open_below_permille: p.fail_open_below_permille,
                        degraded_ttl: p.degraded_ttl,
                        client: None,
                    })
                }),
            }
        }
    }

    #[derive(Deserialize)]
    pub(super) struct ZoneV2 {
        origin: Vec<u8>,
        source: String,
        serial: u32,
        negative_ttl: u32,
        rrsets: Vec<RecordSetV2>,
        slot_base: u32,
        slots: Vec<SlotV3>,
        dnssec: Option<Box<qdns_zone::dnssec::Signatures>>,
    }

    #[derive(Deserialize)]
    pub(super) struct SnapshotV2 {
        version: u64,
        zones: Vec<ZoneV2>,
        bitmap: Vec<u64>,
    }

    #[derive(Deserialize)]
    pub(super) enum ToEdgeV2 {
        Snapshot { snapshot: Box<SnapshotV2>, seq: u64 },
        Health(super::HealthDelta),
    }

    impl From<SnapshotV2> for Snapshot {
        fn from(old: SnapshotV2) -> Snapshot {
            Snapshot {
                version: old.version,
                zones: old
                    .zones
                    .into_iter()
                    .map(|z| Zone {
                        origin: z.origin,
                        source: z.source,
                        serial: z.serial,
                        negative_ttl: z.negative_ttl,
                        rrsets: z.rrsets.into_iter().map(RecordSet::from).collect(),
                        slot_base: z.slot_base,
                        slots: z.slots.into_iter().map(Slot::from).collect(),
                        dnssec: z.dnssec,
                        geo: None,
                        transfer: None,
                    })
                    .collect(),
                bitmap: old.bitmap,
            }
        }
    }

    impl From<ToEdgeV2> for super::ToEdge {
        fn from(old: ToEdgeV2) -> super::ToEdge {
            match old {
                ToEdgeV2::Snapshot { snapshot, seq } => super::ToEdge::Snapshot {
                    snapshot: Box::new(Snapshot::from(*snapshot)),
                    seq,
                },
                ToEdgeV2::Health(delta) => super::ToEdge::Health(delta),
            }
        }
    }

    #[derive(Deserialize)]
    pub(super) struct ZoneV1 {
        origin: Vec<u8>,
        source: String,
        serial: u32,
        negative_ttl: u32,
        rrsets: Vec<RecordSetV2>,
        slot_base: u32,
        slots: Vec<SlotV3>,
    }

    #[derive(Deserialize)]
    pub(super) struct SnapshotV1 {
        version: u64,
        zones: Vec<ZoneV1>,
        bitmap: Vec<u64>,
    }

    #[derive(Deserialize)]
    pub(super) enum ToEdgeV1 {
        Snapshot { snapshot: Box<SnapshotV1>, seq: u64 },
        Health(super::HealthDelta),
    }

    impl From<SnapshotV1> for Snapshot {
        fn from(old: SnapshotV1) -> Snapshot {
            Snapshot::from(SnapshotV2::from(old))
        }
    }

    impl From<SnapshotV1> for SnapshotV2 {
        fn from(old: SnapshotV1) -> SnapshotV2 {
            SnapshotV2 {
                version: old.version,
                zones: old
                    .zones
                    .into_iter()
                    .map(|z| ZoneV2 {
                        origin: z.origin,
                        source: z.source,
                        serial: z.serial,
                        negative_ttl: z.negative_ttl,
                        rrsets: z.rrsets,
                        slot_base: z.slot_base,
                        slots: z.slots,
                        dnssec: None,
                    })
                    .collect(),
                bitmap: old.bitmap,
            }
        }
    }

    impl From<ToEdgeV1> for super::ToEdge {
        fn from(old: ToEdgeV1) -> super::ToEdge {
            super::ToEdge::from(match old {
                ToEdgeV1::Snapshot { snapshot, seq } => ToEdgeV2::Snapshot {
                    snapshot: Box::new(SnapshotV2::from(*snapshot)),
                    seq,
                },
                ToEdgeV1::Health(delta) => ToEdgeV2::Health(delta),
            })
        }
    }

    #[cfg(test)]
    pub(super) mod write {
        //! The old forms, written as the versions before them wrote them.
        use serde::Serialize;

        use qdns_zone::{snapshot::ProbeKind, Member, PolicyKind, RecordSet};

        #[derive(Serialize)]
        pub struct ProbeV3 {
            pub kind: ProbeKind,
            pub ip: std::net::IpAddr,
            pub port: u16,
            pub path: String,
            pub host: String,
            pub interval: u32,
            pub failure_threshold: u32,
            pub search_string: Option<String>,
            pub tls_verify: bool,
        }

        /// The first variant of `SlotRule` as V3 wrote it.
        #[derive(Serialize)]
        pub enum SlotRuleV3 {
            Check {
                probe: Option<ProbeV3>,
                inverted: bool,
                disabled: bool,
            },
        }

        #[derive(Serialize)]
        pub struct SlotV3 {
            pub name: String,
            pub rule: SlotRuleV3,
        }

        #[derive(Serialize)]
        pub struct ZoneV3 {
            pub origin: Vec<u8>,
            pub source: String,
            pub serial: u32,
            pub negative_ttl: u32,
            pub rrsets: Vec<RecordSet>,
            pub slot_base: u32,
            pub slots: Vec<SlotV3>,
            pub dnssec: Option<Box<qdns_zone::dnssec::Signatures>>,
            pub geo: Option<Box<qdns_zone::client::GeoTable>>,
        }

        #[derive(Serialize)]
        pub struct SnapshotV3 {
            pub version: u64,
            pub zones: Vec<ZoneV3>,
            pub bitmap: Vec<u64>,
        }

        /// The same variant index as `ToEdge::Snapshot`.
        #[derive(Serialize)]
        pub enum ToEdgeV3 {
            Snapshot { snapshot: Box<SnapshotV3>, seq: u64 },
        }

        #[derive(Serialize)]
        pub struct PolicyV2 {
            pub kind: PolicyKind,
            pub members: Vec<Member>,
            pub fail_open_below_permille: u32,
            pub degraded_ttl: Option<u32>,
        }

        #[derive(Serialize)]
        pub struct RecordSetV2 {
            pub name: Vec<u8>,
            pub rtype: u16,
            pub ttl: u32,
            pub rdata: Vec<Vec<u8>>,
            pub policy: Option<Box<PolicyV2>>,
        }

        #[derive(Serialize)]
        pub struct ZoneV2 {
            pub origin: Vec<u8>,
            pub source: String,
            pub serial: u32,
            pub negative_ttl: u32,
            pub rrsets: Vec<RecordSetV2>,
            pub slot_base: u32,
            pub slots: Vec<SlotV3>,
            pub dnssec: Option<Box<qdns_zone::dnssec::Signatures>>,
        }

        #[derive(Serialize)]
        pub struct SnapshotV2 {
            pub version: u64,
            pub zones: Vec<ZoneV2>,
            pub bitmap: Vec<u64>,
        }

        #[derive(Serialize)]
        pub struct ZoneV1 {
            pub origin: Vec<u8>,
            pub source: String,
            pub serial: u32,
            pub negative_ttl: u32,
            pub rrsets: Vec<RecordSetV2>,
            pub slot_base: u32,
            pub slots: Vec<SlotV3>,
        }

        #[derive(Serialize)]
        pub struct SnapshotV1 {
            pub version: u64,
            pub zones: Vec<ZoneV1>,
            pub bitmap: Vec<u64>,
        }

        #[derive(Serialize)]
        pub enum ToEdgeV1 {
            Snapshot { snapshot: Box<SnapshotV1>, seq: u64 },
        }

        /// The same variant index as `ToEdge::Snapshot`.
        #[derive(Serialize)]
        pub enum ToEdgeV2 {
            Snapshot { snapshot: Box<SnapshotV2>, seq: u64 },
        }
    }
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
            ToEdge::Snapshot { seq: 3, .. }
        ));
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            version: 7,
            zones: Vec::new(),
            bitmap: vec![0b101],
        }
    }

    #[test]
    fn a_hello_carries_its_extension_and_older_readers_skip_it() {
        let extension = HelloExtension {
            version: 1,
            keepalive_secs: 5,
            cookies: false,
            deltas: false,
            zones: Vec::new(),
        };
        let frame = encode_hello("e1", Some(9), &extension).unwrap();
        assert_eq!(frame_len(frame[..4].try_into().unwrap()).unwrap(), frame.len() - 4);
        let hello = ToControl::Hello {
            edge: "e1".into(),
            serving: Some(9),
        };
        assert_eq!(decode_hello(&frame[4..]).unwrap(), (hello.clone(), Some(extension)));
        // A control that predates the extension reads the hello alone.
        assert_eq!(decode::<ToControl>(&frame[4..]).unwrap(), hello);
        // An edge that predates it sends the hello alone.
        let bare = encode(&hello).unwrap();
        assert_eq!(decode_hello(&bare[4..]).unwrap(), (hello, None));
        // The keepalives are new variants at the end: the old ones keep their indices.
        assert_eq!(encode(&ToEdge::Keepalive).unwrap(), [0, 0, 0, 1, 2]);
        assert_eq!(encode(&ToControl::Keepalive).unwrap(), [0, 0, 0, 1, 3]);
        // And the cookie secrets after them.
        let cookies = encode(&ToEdge::Cookies {
            current: [1; 16],
            previous: None,
            next: None,
        })
        .unwrap();
        assert_eq!(cookies[4], 3);
        // And deltas after them.
        let delta = encode(&ToEdge::Delta(Box::new(crate::delta::SnapshotDelta {
            base: 1,
            version: 2,
            seq: 0,
            bitmap: Vec::new(),
            zones: Vec::new(),
        })))
        .unwrap();
        assert_eq!(delta[4], 4);
        assert!(matches!(decode_to_edge(&delta[4..]).unwrap(), ToEdge::Delta(_)));
        let folded = encode(&ToEdge::HealthSince {
            since: 2,
            delta: HealthDelta {
                snapshot: 7,
                seq: 9,
                words: vec![(0, 1)],
            },
        })
        .unwrap();
        assert_eq!(folded[4], 5);
    }

    #[test]
    fn each_hello_extension_version_reads_what_it_knows() {
        let hello = ToControl::Hello {
            edge: "e2".into(),
            serving: None,
        };
        let v3 = HelloExtension {
            version: 3,
            keepalive_secs: 7,
            cookies: true,
            deltas: true,
            zones: vec![(b"\x07example\x00".to_vec(), 42)],
        };
        let frame = encode_hello("e2", None, &v3).unwrap();
        assert_eq!(decode_hello(&frame[4..]).unwrap(), (hello.clone(), Some(v3.clone())));
        // A version 2 extension (an edge before deltas): no deltas, no zones.
        let v2 = HelloExtension {
            version: 2,
            ..v3.clone()
        };
        let frame = encode_hello("e2", None, &v2).unwrap();
        assert_eq!(
            decode_hello(&frame[4..]).unwrap().1,
            Some(HelloExtension {
                deltas: false,
                zones: Vec::new(),
                ..v2
            })
        );
        // A version 1 extension (an edge before cookies): no cookies.
        let v1 = HelloExtension {
            version: 1,
            keepalive_secs: 7,
            cookies: true,
            deltas: true,
            zones: Vec::new(),
        };
        let frame = encode_hello("e2", None, &v1).unwrap();
        assert_eq!(
            decode_hello(&frame[4..]).unwrap().1,
            Some(HelloExtension {
                cookies: false,
                deltas: false,
                ..v1
            })
        );
        // A later version's extra fields are skipped.
        let mut later = encode(&hello).unwrap()[4..].to_vec();
        later = postcard::to_extend(&(4u16, 7u16, true, (true, &v3.zones), 99u32), later).unwrap();
        assert_eq!(
            decode_hello(&later).unwrap().1,
            Some(HelloExtension { version: 4, ..v3 })
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
        assert!(frame_len(u32::MAX.to_be_bytes()).is_err());
        assert_eq!(frame_len_within(1024u32.to_be_bytes(), 1024).unwrap(), 1024);
        assert_eq!(
            frame_len_within(1025u32.to_be_bytes(), 1024).unwrap_err().to_string(),
            "frame of 1025 octets is over the limit of 1024"
        );
    }

    #[test]
    fn snapshots_and_frames_from_before_dnssec_still_read() {
        use super::legacy::write::{RecordSetV2, SnapshotV1, ToEdgeV1, ZoneV1};
        let old = SnapshotV1 {
            version: 9,
            zones: vec![ZoneV1 {
                origin: b"\x07example\x00".to_vec(),
                source: "example.toml".into(),
                serial: 3,
                negative_ttl: 60,
                rrsets: vec![RecordSetV2 {
                    name: b"\x07example\x00".to_vec(),
                    rtype: 1,
                    ttl: 60,
                    rdata: vec![vec![192, 0, 2, 1]],
                    policy: None,
                }],
                slot_base: 0,
                slots: Vec::new(),
            }],
            bitmap: vec![1],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.bin");
        persist(&path, &old).unwrap();
        // The generic reader refuses it; the snapshot reader converts it.
        assert!(load::<Snapshot>(&path).is_err());
        let read = load_snapshot(&path).unwrap().unwrap();
        assert_eq!((read.version, read.zones.len(), read.bitmap.clone()), (9, 1, vec![1]));
        assert!(read.zones[0].dnssec.is_none());
        assert_eq!(read.zones[0].rrsets[0].rdata, vec![vec![192, 0, 2, 1]]);
        let frame = encode(&ToEdgeV1::Snapshot {
            snapshot: Box::new(old),
            seq: 4,
        })
        .unwrap();
        match decode_to_edge(&frame[4..]).unwrap() {
            ToEdge::Snapshot { snapshot, seq } => assert_eq!((snapshot.version, seq), (9, 4)),
            other => panic!("{other:?}"),
        }
        // This version's own forms read as they are.
        persist(&path, &read).unwrap();
        assert_eq!(load_snapshot(&path).unwrap(), Some(read));
    }

    #[test]
    fn snapshots_and_frames_from_before_client_aware_sets_still_read() {
        use super::legacy::write::{PolicyV2, RecordSetV2, SnapshotV2, ToEdgeV2, ZoneV2};
        let member = |id: &str, rdata: u8| qdns_zone::Member {
            id: id.into(),
            weight: 1,
            slot: qdns_abi::health::ALWAYS_HEALTHY,
            check: None,
            answer: qdns_zone::Answer::Values(vec![vec![192, 0, 2, rdata]]),
        };
        let old = || SnapshotV2 {
            version: 11,
            zones: vec![ZoneV2 {
                origin: b"\x07example\x00".to_vec(),
                source: "example.toml".into(),
                serial: 3,
                negative_ttl: 60,
                rrsets: vec![RecordSetV2 {
                    name: b"\x03www\x07example\x00".to_vec(),
                    rtype: 1,
                    ttl: 60,
                    rdata: Vec::new(),
                    policy: Some(Box::new(PolicyV2 {
                        kind: qdns_zone::PolicyKind::Weighted,
                        members: vec![member("a", 1), member("b", 2)],
                        fail_open_below_permille: 250,
                        degraded_ttl: Some(5),
                    })),
                }],
                slot_base: 0,
                slots: Vec::new(),
                dnssec: None,
            }],
            bitmap: vec![1],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.bin");
        persist(&path, &old()).unwrap();
        let read = load_snapshot(&path).unwrap().unwrap();
        let policy = read.zones[0].rrsets[0].policy.as_deref().unwrap();
        assert_eq!(policy.members, vec![member("a", 1), member("b", 2)]);
        assert_eq!(
            (
                policy.fail_open_below_permille,
                policy.degraded_ttl,
                policy.client.is_none()
            ),
            (250, Some(5), true)
        );
        let frame = encode(&ToEdgeV2::Snapshot {
            snapshot: Box::new(old()),
            seq: 5,
        })
        .unwrap();
        match decode_to_edge(&frame[4..]).unwrap() {
            ToEdge::Snapshot { snapshot, seq } => assert_eq!((*snapshot, seq), (read, 5)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn snapshots_and_frames_from_before_load_shedding_still_read() {
        use super::legacy::write::{ProbeV3, SlotRuleV3, SlotV3, SnapshotV3, ToEdgeV3, ZoneV3};
        let old = || SnapshotV3 {
            version: 12,
            zones: vec![ZoneV3 {
                origin: b"\x07example\x00".to_vec(),
                source: "example.toml".into(),
                serial: 3,
                negative_ttl: 60,
                rrsets: Vec::new(),
                slot_base: 0,
                slots: vec![SlotV3 {
                    name: "web".into(),
                    rule: SlotRuleV3::Check {
                        probe: Some(ProbeV3 {
                            kind: qdns_zone::snapshot::ProbeKind::Http,
                            ip: "192.0.2.1".parse().unwrap(),
                            port: 8080,
                            path: "/up".into(),
                            host: "web".into(),
                            interval: 10,
                            failure_threshold: 2,
                            search_string: Some("ok".into()),
                            tls_verify: false,
                        }),
                        inverted: true,
                        disabled: false,
                    },
                }],
                dnssec: None,
                geo: None,
            }],
            bitmap: vec![1],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.bin");
        persist(&path, &old()).unwrap();
        let read = load_snapshot(&path).unwrap().unwrap();
        let qdns_zone::SlotRule::Check {
            probe: Some(probe),
            inverted: true,
            disabled: false,
        } = &read.zones[0].slots[0].rule
        else {
            panic!("{:?}", read.zones[0].slots[0].rule)
        };
        assert_eq!(
            (
                probe.port,
                probe.path.as_str(),
                probe.search_string.as_deref(),
                probe.load.is_none()
            ),
            (8080, "/up", Some("ok"), true)
        );
        let frame = encode(&ToEdgeV3::Snapshot {
            snapshot: Box::new(old()),
            seq: 6,
        })
        .unwrap();
        match decode_to_edge(&frame[4..]).unwrap() {
            ToEdge::Snapshot { snapshot, seq } => assert_eq!((*snapshot, seq), (read, 6)),
            other => panic!("{other:?}"),
        }
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
    }
}
