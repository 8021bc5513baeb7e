//! The messages of the control ↔ edge link, and why a frame or file could not be read:
//! the types every schema's code shares (`crate::schema` decodes them, `crate::protocol`
//! frames them).
use std::io;

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
    /// whose hello asked for it ([`crate::protocol::HelloExtension::keepalive_secs`]), never to others.
    Keepalive,
    /// The location's DNS cookie secrets (RFC 7873, RFC 9018): new server cookies are
    /// made with `current`, those made with `previous` are still accepted. Sent after
    /// the snapshot and at each rotation to an edge whose hello said it takes them
    /// ([`crate::protocol::HelloExtension::cookies`]), never to others.
    Cookies {
        /// The secret new cookies are made with.
        current: [u8; 16],
        /// The one before the last rotation, still accepted.
        previous: Option<[u8; 16]>,
        /// The one the next rotation makes current, accepted already (RFC 9018 §5).
        next: Option<[u8; 16]>,
    },
    /// A new snapshot version as changes to the one the edge serves (its hello said it
    /// takes them, [`crate::protocol::HelloExtension::deltas`]): after a reload, or on connecting to an
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
    /// The body decodes with octets left over.
    #[error("undecodable frame: {octets} octets after the message")]
    Trailing {
        /// Octets left.
        octets: usize,
    },
    /// Written in a link schema this build does not read.
    #[error("link schema {schema}: this build reads {oldest}..={newest}")]
    Schema {
        /// The schema the body says it is written in (0: a number cut short).
        schema: u16,
        /// The oldest this build reads.
        oldest: u16,
        /// The newest (the one it writes).
        newest: u16,
    },
    /// The persisted file is damaged.
    #[error("{0}")]
    Corrupt(String),
}
