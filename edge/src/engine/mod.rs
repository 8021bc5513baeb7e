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
//!
//! A zone is stored in a few flat arrays rather than one heap block per name and set
//! (the edge must hold 10,000,000 records): one name table ([`names::Names`]), the nodes
//! (16 octets each), every node's record sets side by side (24 octets each), and the
//! record bytes of all sets back to back. [`NodeRef`] and [`SetRef`] are the views the
//! responder reads them through.
mod compile;
mod dnssec;
pub(crate) mod export;
mod lookup;
mod names;
mod policy;
mod respond;

use std::collections::HashMap;

pub use compile::EngineError;
pub use respond::{Asked, Outcome, Transport, MAX_MESSAGE};

use crate::wire::edns::DEFAULT_UDP_PAYLOAD;

/// Seconds before signatures expire that the edge starts warning, at most (control
/// refreshes them 7 days ahead of their 14-day expiry by default, so this means control
/// has been away for more than 4 days). Shorter signature lifetimes
/// (`--dnssec-validity`) warn at a quarter of theirs instead.
pub const DNSSEC_WARN_BEFORE: i64 = 3 * 86_400;

/// The hour control backdates signatures by (`SignOptions::at`): not part of the
/// lifetime an operator chose.
const DNSSEC_BACKDATE: u64 = 3600;

/// Index of a node in its zone.
type NodeId = u32;

/// Maps keyed by lowercase wire names, looked up once or more per query. `foldhash` with
/// a per-process random seed: faster than `SipHash` on short keys, still seeded, so
/// crafted names cannot aim at collisions.
type NameMap<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

/// A compiled, immutable snapshot; swapped whole on every zone update. Health changes
/// swap only the bitmap ([`Engine::set_health`]).
pub struct Engine {
    /// The snapshot version served (atomic: see [`Engine::relabel`]).
    version: std::sync::atomic::AtomicU64,
    zones: Vec<ZoneData>,
    by_apex: NameMap<u32>,
    max_udp_payload: u16,
    /// This server's identifier for NSID requests (RFC 5001), when configured.
    nsid: Option<std::sync::Arc<[u8]>>,
    /// The cookie secrets and clock (RFC 7873); `None`: COOKIE options are ignored.
    cookies: Option<std::sync::Arc<crate::cookies::CookieJar>>,
    /// Health of every slot (bit set = healthy), read at query time.
    health: arc_swap::ArcSwap<Vec<u64>>,
    /// When this engine was compiled (its snapshot applied).
    compiled_at: std::time::SystemTime,
    /// What each health bit stands for: a digest of every zone's origin, first slot and
    /// slot names. Two engines with the same layout read a bitmap alike.
    health_layout: u64,
    /// The names a snapshot delta changed, when this engine was compiled from one: what
    /// the XDP tables of the engine before it need patched (`crate::xdp::patch`).
    changes: Option<std::sync::Arc<Changes>>,
    /// Compiled from a snapshot: `false` only for [`Engine::default`], the engine of an
    /// edge that has none yet, which answers SERVFAIL with EDE 14 (Not Ready).
    ready: bool,
}

/// The owner names whose record sets a snapshot delta changed (added, removed or
/// replaced), and the version it applied to; nothing else differs but the SOA serial
/// and negative TTL (the delta kept every zone, its signatures and its geo table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The snapshot version the delta applied to.
    pub base: u64,
    /// Owner names (lowercase wire), each once, with the origin of the zone whose sets
    /// changed (a parent's delegation and glue are at or below a hosted child's apex).
    pub names: Vec<ChangedName>,
}

/// A changed owner name: (the origin of the zone whose sets changed, the owner).
pub type ChangedName = (Box<[u8]>, Box<[u8]>);

impl Changes {
    /// The changes of a delta over version `base` that changed `names` (origin, owner),
    /// as `qdns_link::delta::changed_names` gives them.
    #[must_use]
    pub fn new(base: u64, names: Vec<(Vec<u8>, Vec<u8>)>) -> Changes {
        Changes {
            base,
            names: names
                .into_iter()
                .map(|(origin, name)| (origin.into_boxed_slice(), name.into_boxed_slice()))
                .collect(),
        }
    }
}

/// One zone, compiled.
struct ZoneData {
    apex: Box<[u8]>,
    serial: u32,
    /// The SOA record as it goes in the authority section of a negative answer
    /// (TYPE..RDATA with TTL = min(SOA TTL, MINIMUM), RFC 2308 §3).
    negative_soa: Box<[u8]>,
    /// Owner names; a node's id is its name's id.
    names: names::Names,
    nodes: Vec<Node>,
    /// Every node's record sets, node after node, each node's sorted by type.
    sets: Vec<Rrset>,
    /// The records of every plain set, back to back.
    records: Vec<u8>,
    /// Every set's additional-section targets, set after set.
    targets: Vec<Target>,
    /// The routing policies of the zone's policy sets.
    policies: Vec<policy::PolicySet>,
    /// Signatures and the NSEC chain, for a zone control signed.
    signed: Option<Box<dnssec::Signed>>,
}

/// No node / no policy, in the packed fields below.
const NONE: u32 = u32::MAX;

/// A name of the zone that exists: with data, or an empty non-terminal.
#[derive(Clone, Copy)]
struct Node {
    /// Index of the node's first set in [`ZoneData::sets`].
    sets: u32,
    /// Number of sets (0: an empty non-terminal).
    set_count: u16,
    /// The zone cut at or above this node (the node holding the delegation NS set), or
    /// [`NONE`].
    cut: NodeId,
    /// This node's `*` child, for wildcard synthesis (RFC 4592), or [`NONE`].
    wildcard: NodeId,
}

/// One `RRset` in answer-ready form (its bytes in [`ZoneData::records`]).
#[derive(Clone, Copy)]
struct Rrset {
    rtype: u16,
    /// Number of records.
    count: u16,
    /// Where the records (TYPE CLASS TTL RDLENGTH RDATA, back to back, after the owner)
    /// start in [`ZoneData::records`], and their length.
    records: u32,
    records_len: u32,
    /// Where the set's targets start in [`ZoneData::targets`], and how many.
    targets: u32,
    target_count: u16,
    /// Index of the set's routing policy in [`ZoneData::policies`] (then it has no
    /// records), or [`NONE`].
    policy: u32,
}

// What a name and its sets cost is what 10,000,000 records cost: keep these packed.
const _: () = assert!(std::mem::size_of::<Node>() == 16);
const _: () = assert!(std::mem::size_of::<Rrset>() == 24);

/// A name inside a record's RDATA whose A/AAAA go in the additional section (RFC 1035
/// §3.3.9/§3.3.11 additional section processing, RFC 2782 for SRV).
#[derive(Clone, Copy)]
struct Target {
    /// Offset of the name within the set's records.
    offset: u32,
    /// The node holding its addresses.
    node: NodeId,
}

/// A node as the responder reads it.
#[derive(Clone, Copy)]
struct NodeRef<'z> {
    /// Owner name (wire, lowercase).
    name: &'z [u8],
    sets: &'z [Rrset],
    cut: Option<NodeId>,
    wildcard: Option<NodeId>,
    zone: &'z ZoneData,
}

/// A record set as the responder reads it.
#[derive(Clone, Copy)]
struct SetRef<'z> {
    rtype: u16,
    /// Number of records.
    count: u16,
    /// TYPE CLASS TTL RDLENGTH RDATA of each record, back to back.
    records: &'z [u8],
    targets: &'z [Target],
    /// The routing policy of a policy set (then `records` is empty).
    policy: Option<&'z policy::PolicySet>,
}

impl ZoneData {
    /// Node `id`.
    #[inline]
    fn node(&self, id: NodeId) -> Option<NodeRef<'_>> {
        let node = self.nodes.get(id as usize)?;
        let first = node.sets as usize;
        Some(NodeRef {
            name: self.names.name(id),
            sets: self
                .sets
                .get(first..first + usize::from(node.set_count))
                .unwrap_or_default(),
            cut: some(node.cut),
            wildcard: some(node.wildcard),
            zone: self,
        })
    }

    /// The view of `set`, one of this zone's.
    #[inline]
    fn set<'z>(&'z self, set: &Rrset) -> SetRef<'z> {
        let records = set.records as usize;
        let targets = set.targets as usize;
        SetRef {
            rtype: set.rtype,
            count: set.count,
            records: self
                .records
                .get(records..records + set.records_len as usize)
                .unwrap_or_default(),
            targets: self
                .targets
                .get(targets..targets + usize::from(set.target_count))
                .unwrap_or_default(),
            policy: self.policies.get(set.policy as usize),
        }
    }

    /// Every node, with its id.
    fn each_node(&self) -> impl Iterator<Item = (NodeId, NodeRef<'_>)> + '_ {
        (0..self.nodes.len() as NodeId).filter_map(|id| Some((id, self.node(id)?)))
    }
}

/// `Some(id)` unless `id` is [`NONE`].
fn some(id: u32) -> Option<u32> {
    (id != NONE).then_some(id)
}

impl<'z> NodeRef<'z> {
    /// The node's set of type `rtype`.
    #[inline]
    fn rrset(&self, rtype: u16) -> Option<SetRef<'z>> {
        self.sets
            .iter()
            .find(|set| set.rtype == rtype)
            .map(|set| self.zone.set(set))
    }

    /// The node's first set (lowest type).
    fn first_set(&self) -> Option<SetRef<'z>> {
        self.sets.first().map(|set| self.zone.set(set))
    }

    /// Every set of the node, by type.
    fn each_set(&self) -> impl Iterator<Item = SetRef<'z>> + '_ {
        self.sets.iter().map(|set| self.zone.set(set))
    }
}

impl Engine {
    /// This engine, noted as compiled from a delta that changed `changes`.
    #[must_use]
    pub fn with_changes(mut self, changes: Changes) -> Engine {
        self.changes = Some(std::sync::Arc::new(changes));
        self
    }

    /// What the delta this engine was compiled from changed, if it was.
    #[must_use]
    pub fn changes(&self) -> Option<&Changes> {
        self.changes.as_deref()
    }

    /// The snapshot version this engine serves: the one it was compiled from, or a
    /// later one a delta said has the same zones ([`Engine::relabel`]).
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Serves snapshot `version` from now on: a new version with exactly these zones
    /// (an edge resuming after control restarted, or a reload that changed nothing),
    /// which needs no compilation.
    pub fn relabel(&self, version: u64) {
        self.version.store(version, std::sync::atomic::Ordering::Relaxed);
    }

    /// True when `name` (lowercase wire) is in a zone control signed.
    #[must_use]
    pub fn signs(&self, name: &[u8]) -> bool {
        crate::wire::name::label_starts(name)
            .find_map(|start| self.by_apex.get(name.get(start..)?))
            .and_then(|&index| self.zones.get(index as usize))
            .is_some_and(|zone| zone.signed.is_some())
    }

    /// When the first DNSSEC signature of the served zones expires (seconds since the
    /// epoch); `None` when no zone is signed.
    #[must_use]
    pub fn dnssec_expiration(&self) -> Option<u64> {
        self.zones
            .iter()
            .filter_map(|z| z.signed.as_ref())
            .map(|s| s.expiration)
            .min()
    }

    /// DO=1 answers of signed zones written without an RRSIG since this engine was
    /// compiled (an answer control did not sign: validators fail it). Should stay 0.
    #[must_use]
    pub fn dnssec_unsigned_answers(&self) -> u64 {
        self.zones
            .iter()
            .filter_map(|z| z.signed.as_ref())
            .map(|s| s.unsigned.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Seconds until [`Engine::dnssec_expiration`] (negative once past), and logs a
    /// warning when fewer than [`DNSSEC_WARN_BEFORE`] are left: control must re-sign
    /// before then, or validating resolvers fail every signed name.
    pub fn check_dnssec_expiry(&self) -> Option<i64> {
        let expires = self.dnssec_expiration()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let left = i64::try_from(expires).unwrap_or(i64::MAX) - i64::try_from(now).unwrap_or(0);
        if left < self.dnssec_warn_before() {
            tracing::warn!(
                seconds_left = left,
                version = self.version(),
                "DNSSEC signatures of the served snapshot expire soon (control re-signs well before; is it down?): validating resolvers will fail signed names after that"
            );
        }
        Some(left)
    }

    /// When to start warning: [`DNSSEC_WARN_BEFORE`], or a quarter of the shortest
    /// signature lifetime served when that is less.
    fn dnssec_warn_before(&self) -> i64 {
        self.zones
            .iter()
            .filter_map(|z| z.signed.as_ref())
            .map(|s| {
                let lifetime = s.expiration.saturating_sub(s.inception + DNSSEC_BACKDATE);
                i64::try_from(lifetime / 4).unwrap_or(i64::MAX).min(DNSSEC_WARN_BEFORE)
            })
            .min()
            .unwrap_or(DNSSEC_WARN_BEFORE)
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

    /// What each health bit stands for (a digest): engines with equal layouts can take
    /// each other's bitmaps — the XDP tables of one keep following health while the
    /// next one's are built.
    #[must_use]
    pub fn health_layout(&self) -> u64 {
        self.health_layout
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
        self.cookies.clone_from(&options.cookies);
        if let Some(sets) = &options.answer_sets {
            for zone in &mut self.zones {
                let mut labels = Vec::with_capacity(zone.policies.len());
                for (id, node) in zone.nodes.iter().enumerate() {
                    let first = node.sets as usize;
                    for set in zone
                        .sets
                        .get(first..first + usize::from(node.set_count))
                        .unwrap_or_default()
                    {
                        if set.policy != NONE {
                            labels.push((set.policy as usize, set_label(zone.names.name(id as NodeId), set.rtype)));
                        }
                    }
                }
                for (index, label) in labels {
                    if let Some(policy) = zone.policies.get_mut(index) {
                        policy.set_counter(sets.counter(&label, policy.member_count()));
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
            for (_, node) in zone.each_node() {
                for set in node.each_set() {
                    if let Some(policy) = set
                        .policy
                        .filter(|p| p.counter() != qdns_abi::answer::NO_ANSWER_COUNTER)
                    {
                        out.push((
                            set_label(node.name, set.rtype),
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
    /// The cookie secrets and clock (one for the server's lifetime); `None`: COOKIE
    /// options are ignored like unknown ones.
    pub cookies: Option<std::sync::Arc<crate::cookies::CookieJar>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            answer_sets: None,
            cookies: None,
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            version: std::sync::atomic::AtomicU64::new(0),
            zones: Vec::new(),
            by_apex: NameMap::default(),
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            cookies: None,
            health: arc_swap::ArcSwap::from_pointee(Vec::new()),
            compiled_at: std::time::SystemTime::now(),
            health_layout: 0,
            changes: None,
            ready: false,
        }
    }
}

impl<'z> SetRef<'z> {
    /// Iterates (offset within `records`, record bytes) of each record of a plain set.
    fn each_record(&self) -> impl Iterator<Item = (usize, &'z [u8])> + 'z {
        policy::records(self.records)
    }
}

#[cfg(test)]
mod tests;
