//! The snapshot model: what an edge needs to answer, and nothing it must parse.
//!
//! Names are absolute, lowercase, uncompressed wire format; RDATA is wire format with
//! uncompressed names (RFC 3597 §4 style), so the edge copies it into answers as is.
use serde::{Deserialize, Serialize};

/// A whole, validated, versioned set of zones. Edges swap it in atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Monotonic version; a newer snapshot has a larger one.
    pub version: u64,
    /// The zones, each validated on its own.
    pub zones: Vec<Zone>,
}

/// One authoritative zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    /// Apex name (wire format, lowercase).
    pub origin: Vec<u8>,
    /// The file the zone came from (for status and errors).
    pub source: String,
    /// SOA serial, for status output.
    pub serial: u32,
    /// Negative-caching TTL (RFC 2308 §5): min(SOA TTL, SOA MINIMUM).
    pub negative_ttl: u32,
    /// Every record set of the zone, the apex SOA and NS included.
    pub rrsets: Vec<RecordSet>,
}

/// One `RRset`: all records of one owner name and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSet {
    /// Owner name (wire format, lowercase).
    pub name: Vec<u8>,
    /// RR type code.
    pub rtype: u16,
    /// TTL of every record of the set (RFC 2181 §5.2).
    pub ttl: u32,
    /// RDATA of each record, wire format, names uncompressed. Never empty.
    pub rdata: Vec<Vec<u8>>,
}

impl Zone {
    /// The record set of `name` and `rtype`, if any.
    #[must_use]
    pub fn rrset(&self, name: &[u8], rtype: u16) -> Option<&RecordSet> {
        self.rrsets.iter().find(|set| set.name == name && set.rtype == rtype)
    }
}
