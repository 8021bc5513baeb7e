//! The answer engine: a snapshot compiled for lookups, and the responder over it.
//!
//! ```text
//!  Snapshot ──compile──► Engine { zones by apex, nodes by name, precomputed RR bytes }
//!  query bytes ──parse──► Query ──lookup──► Outcome ──respond──► response bytes
//! ```
//!
//! Everything that can be precomputed is: each `RRset` is stored as the wire bytes of its
//! records after the owner name (TYPE, CLASS, TTL, RDLENGTH, RDATA), so an answer is a
//! compression pointer plus a copy. Answering allocates nothing.
mod compile;
pub(crate) mod export;
mod lookup;
mod policy;
mod respond;

use std::collections::HashMap;

pub use compile::EngineError;
pub use respond::{Outcome, Transport, MAX_MESSAGE};

use crate::wire::edns::DEFAULT_UDP_PAYLOAD;

/// Index of a node in its zone.
type NodeId = u32;

/// Maps keyed by lowercase wire names, looked up once or more per query. `foldhash` with
/// a per-process random seed: faster than `SipHash` on short keys, still seeded, so
/// crafted names cannot aim at collisions.
type NameMap<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

/// A compiled, immutable snapshot; swapped whole on every zone update. Health changes
/// swap only the bitmap ([`Engine::set_health`]).
pub struct Engine {
    version: u64,
    zones: Vec<ZoneData>,
    by_apex: NameMap<u32>,
    max_udp_payload: u16,
    /// This server's identifier for NSID requests (RFC 5001), when configured.
    nsid: Option<std::sync::Arc<[u8]>>,
    /// Health of every slot (bit set = healthy), read at query time.
    health: arc_swap::ArcSwap<Vec<u64>>,
    /// When this engine was compiled (its snapshot applied).
    compiled_at: std::time::SystemTime,
}

/// One zone, compiled.
struct ZoneData {
    apex: Box<[u8]>,
    serial: u32,
    /// The SOA record as it goes in the authority section of a negative answer
    /// (TYPE..RDATA with TTL = min(SOA TTL, MINIMUM), RFC 2308 §3).
    negative_soa: Box<[u8]>,
    nodes: Vec<Node>,
    by_name: NameMap<NodeId>,
}

/// A name of the zone that exists: with data, or an empty non-terminal.
struct Node {
    /// Owner name (wire, lowercase).
    name: Box<[u8]>,
    /// Sorted by type.
    rrsets: Box<[Rrset]>,
    /// The zone cut at or above this node (the node holding the delegation NS set).
    cut: Option<NodeId>,
    /// This node's `*` child, for wildcard synthesis (RFC 4592).
    wildcard: Option<NodeId>,
}

/// One `RRset` in answer-ready form.
struct Rrset {
    rtype: u16,
    /// Records after the owner: TYPE CLASS TTL RDLENGTH RDATA, back to back.
    records: Box<[u8]>,
    /// Number of records.
    count: u16,
    /// In-zone names in the RDATA that have address records (RFC 1035 §3.3.9/§3.3.11
    /// additional section processing, RFC 2782 for SRV).
    targets: Box<[Target]>,
    /// The routing policy of a policy set (then `records` is empty).
    policy: Option<Box<policy::PolicySet>>,
}

/// A name inside a record's RDATA whose A/AAAA go in the additional section.
#[derive(Clone, Copy)]
struct Target {
    /// Offset of the name within `Rrset::records`.
    offset: u32,
    /// The node holding its addresses.
    node: NodeId,
}

impl Engine {
    /// The snapshot version this engine was compiled from.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// When this engine's snapshot was applied.
    #[must_use]
    pub fn compiled_at(&self) -> std::time::SystemTime {
        self.compiled_at
    }

    /// Number of zones.
    #[must_use]
    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }

    /// (apex in presentation form, serial) of every zone.
    pub fn zones(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        self.zones.iter().map(|z| (qdns_zone::name::to_text(&z.apex), z.serial))
    }

    /// Replaces the health bitmap (a control-plane update); queries see the old or the
    /// new bitmap whole.
    pub fn set_health(&self, bitmap: Vec<u64>) {
        self.health.store(std::sync::Arc::new(bitmap));
    }

    /// The current health bitmap.
    #[must_use]
    pub fn health(&self) -> std::sync::Arc<Vec<u64>> {
        self.health.load_full()
    }

    /// The UDP payload size this engine advertises.
    #[must_use]
    pub fn max_udp_payload(&self) -> u16 {
        self.max_udp_payload
    }

    /// Sets the largest UDP response this server sends (default 1232).
    #[must_use]
    pub fn with_max_udp_payload(mut self, size: u16) -> Engine {
        self.max_udp_payload = size.max(512);
        self
    }

    /// Applies the server-wide response settings.
    #[must_use]
    pub fn with_options(mut self, options: &ServeOptions) -> Engine {
        self.max_udp_payload = options.max_udp_payload.max(512);
        self.nsid.clone_from(&options.nsid);
        if let Some(sets) = &options.answer_sets {
            for zone in &mut self.zones {
                for node in &mut zone.nodes {
                    for set in &mut node.rrsets {
                        let rtype = set.rtype;
                        if let Some(policy) = &mut set.policy {
                            policy.set_counter(sets.counter(&set_label(&node.name, rtype), policy.member_count()));
                        }
                    }
                }
            }
        }
        self
    }

    /// Every policy set with answer counters: (`owner TYPE`, index of member 0's
    /// counter, member ids).
    #[must_use]
    pub fn counted_sets(&self) -> Vec<(String, u32, Vec<&str>)> {
        let mut out = Vec::new();
        for zone in &self.zones {
            for node in &zone.nodes {
                for set in &node.rrsets {
                    if let Some(policy) = set
                        .policy
                        .as_ref()
                        .filter(|p| p.counter() != qdns_abi::answer::NO_ANSWER_COUNTER)
                    {
                        out.push((
                            set_label(&node.name, set.rtype),
                            policy.counter(),
                            policy.ids().iter().map(AsRef::as_ref).collect(),
                        ));
                    }
                }
            }
        }
        out
    }

    /// The NSID this engine answers with, if any.
    #[must_use]
    pub fn nsid(&self) -> Option<&[u8]> {
        self.nsid.as_deref()
    }
}

/// `owner TYPE` of a set, as control labels it (`qdnsctl explain`, its metrics).
fn set_label(owner: &[u8], rtype: u16) -> String {
    format!(
        "{} {}",
        qdns_zone::name::to_text(owner),
        qdns_zone::master::type_name(rtype)
    )
}

/// Response settings of the whole server, the same for every zone and snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Largest UDP response to EDNS clients (and the size our OPT advertises).
    pub max_udp_payload: u16,
    /// Identifier returned to NSID requests (RFC 5001), at most 128 octets; `None`:
    /// NSID options are ignored like any other.
    pub nsid: Option<std::sync::Arc<[u8]>>,
    /// The answer counters' blocks (one registry for the server's lifetime); `None`:
    /// answers are not counted per member.
    pub answer_sets: Option<std::sync::Arc<crate::answers::AnswerSets>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            answer_sets: None,
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            version: 0,
            zones: Vec::new(),
            by_apex: NameMap::default(),
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            health: arc_swap::ArcSwap::from_pointee(Vec::new()),
            compiled_at: std::time::SystemTime::now(),
        }
    }
}

impl Rrset {
    /// Iterates (offset within `records`, record bytes) of each record of a plain set.
    fn each_record(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        policy::records(&self.records)
    }
}

impl Node {
    fn rrset(&self, rtype: u16) -> Option<&Rrset> {
        self.rrsets.iter().find(|set| set.rtype == rtype)
    }
}

#[cfg(test)]
mod tests;
