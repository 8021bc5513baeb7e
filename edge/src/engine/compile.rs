//! Compiling a [`Snapshot`] into an [`Engine`]: nodes (empty non-terminals included),
//! zone cuts, wildcards, precomputed record bytes and additional-section targets, in
//! the flat arrays `ZoneData` keeps.
use qdns_zone::{name, RecordSet, Snapshot};

use super::{names::Names, Engine, NameMap, Node, NodeId, Rrset, SetRef, Target, ZoneData, NONE};
use crate::wire::{edns::DEFAULT_UDP_PAYLOAD, name::label_starts, rtype};

/// A snapshot the engine cannot use (the zone loader validates first; this guards the
/// edge against a bad snapshot from elsewhere).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A zone lacks its SOA record.
    #[error("zone {zone}: no SOA record at the apex")]
    NoSoa {
        /// The zone.
        zone: String,
    },
    /// Two zones share an apex.
    #[error("zone {zone} appears twice in the snapshot")]
    DuplicateZone {
        /// The zone.
        zone: String,
    },
    /// A zone asks to be signed but carries no (usable) signatures: only control signs.
    #[error("zone {zone}: `dnssec = true` but the snapshot has no usable signatures (zones are signed by qdns-control; a standalone edge cannot sign)")]
    Unsigned {
        /// The zone.
        zone: String,
    },
    /// A record set is unusable.
    #[error("zone {zone}: {owner} type {rtype}: {reason}")]
    BadRecordSet {
        /// The zone.
        zone: String,
        /// Owner name.
        owner: String,
        /// Type code.
        rtype: u16,
        /// What is wrong.
        reason: &'static str,
    },
}

impl Engine {
    /// Compiles `snapshot`.
    pub fn compile(snapshot: &Snapshot) -> Result<Engine, EngineError> {
        let mut engine = Engine {
            version: std::sync::atomic::AtomicU64::new(snapshot.version),
            zones: Vec::with_capacity(snapshot.zones.len()),
            by_apex: NameMap::with_capacity_and_hasher(snapshot.zones.len(), foldhash::fast::RandomState::default()),
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            cookies: None,
            health: arc_swap::ArcSwap::from_pointee(snapshot.bitmap.clone()),
            compiled_at: std::time::SystemTime::now(),
            health_layout: health_layout(snapshot),
            changes: None,
            ready: true,
        };
        for zone in &snapshot.zones {
            let text = || name::to_text(&zone.origin);
            let index = engine.zones.len() as u32;
            if engine
                .by_apex
                .insert(zone.origin.clone().into_boxed_slice(), index)
                .is_some()
            {
                return Err(EngineError::DuplicateZone { zone: text() });
            }
            engine.zones.push(compile_zone(zone)?);
        }
        Ok(engine)
    }
}

/// A digest of what each health bit of `snapshot` stands for: every zone's origin,
/// first slot and slot names, in order (control computes each slot's status; the name
/// says which check or member it is).
fn health_layout(snapshot: &Snapshot) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    for zone in &snapshot.zones {
        zone.origin.hash(&mut hasher);
        zone.slot_base.hash(&mut hasher);
        zone.slots.len().hash(&mut hasher);
        for slot in &zone.slots {
            slot.name.hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// A record set the engine cannot use, named for the operator.
fn bad(apex: &[u8], set: &RecordSet, reason: &'static str) -> EngineError {
    EngineError::BadRecordSet {
        zone: name::to_text(apex),
        owner: name::to_text(&set.name),
        rtype: set.rtype,
        reason,
    }
}

/// Past what the packed arrays address (2^32 names, sets or octets).
const TOO_LARGE: &str = "zone too large for the engine (2^32 names or octets)";

/// Each record set's (node, type, index in the zone's sets).
type Owned = Vec<(NodeId, u16, u32)>;

/// Step 1: every owner and every ancestor up to the apex becomes a node. Also each
/// set's (node, type, index), sorted so each node's sets sit together by type.
fn index_owners(apex: &[u8], sets: &[RecordSet]) -> Result<(Names, Owned), EngineError> {
    // Room up front (owners, so at most the sum of their lengths; ancestors are few in
    // a large zone): growing by doubling copied the table into fresh pages twice over.
    let octets = apex.len() + sets.iter().map(|set| set.name.len()).sum::<usize>();
    let mut names = Names::with_capacity(sets.len() + 1, octets);
    names.intern(apex);
    let mut owned: Owned = Vec::with_capacity(sets.len());
    for (index, set) in sets.iter().enumerate() {
        if !name::is_at_or_below(&set.name, apex) {
            return Err(bad(apex, set, "owner outside the zone"));
        }
        if (set.rdata.is_empty() && set.policy.is_none()) || set.rdata.len() > usize::from(u16::MAX) {
            return Err(bad(apex, set, "empty or oversized record set"));
        }
        let full = || bad(apex, set, TOO_LARGE);
        let id = names.intern(&set.name).ok_or_else(full)?;
        owned.push((id, set.rtype, u32::try_from(index).map_err(|_| full())?));
        for start in label_starts(&set.name).skip(1) {
            let ancestor = set.name.get(start..).unwrap_or_default();
            // Up to the apex only (interned first); a name already known had its own
            // ancestors added with it.
            if ancestor.len() <= apex.len() || names.get(ancestor).is_some() {
                break;
            }
            names.intern(ancestor).ok_or_else(full)?;
        }
    }
    owned.sort_unstable();
    Ok((names, owned))
}

fn compile_zone(zone: &qdns_zone::Zone) -> Result<ZoneData, EngineError> {
    let (apex, serial, negative_ttl, sets) = (
        zone.origin.as_slice(),
        zone.serial,
        zone.negative_ttl,
        zone.rrsets.as_slice(),
    );
    let zone_text = || name::to_text(apex);
    let bad = |set: &RecordSet, reason| bad(apex, set, reason);
    let full = |set: &RecordSet| bad(set, TOO_LARGE);
    let (names, owned) = index_owners(apex, sets)?;
    // 2. Nodes, and each node's sets with their record bytes.
    let node_count = names.len();
    let mut data = ZoneData {
        apex: apex.into(),
        serial,
        negative_soa: Box::new([]),
        names,
        nodes: vec![
            Node {
                sets: 0,
                set_count: 0,
                cut: NONE,
                wildcard: NONE,
            };
            node_count
        ],
        sets: Vec::with_capacity(owned.len()),
        records: Vec::with_capacity(
            sets.iter()
                .flat_map(|set| set.rdata.iter().map(|rdata| 10 + rdata.len()))
                .sum(),
        ),
        targets: Vec::new(),
        policies: Vec::new(),
        signed: None,
    };
    let mut policies: Vec<(usize, &RecordSet)> = Vec::new();
    for &(id, _, index) in &owned {
        let Some(set) = sets.get(index as usize) else { continue };
        let at = data.sets.len();
        let node = data.nodes.get_mut(id as usize).ok_or_else(|| full(set))?;
        if node.set_count == 0 {
            node.sets = u32::try_from(at).map_err(|_| full(set))?;
        }
        node.set_count = node
            .set_count
            .checked_add(1)
            .ok_or_else(|| bad(set, "too many types at one name"))?;
        let start = data.records.len();
        for rdata in &set.rdata {
            push_record(&mut data.records, set.rtype, set.ttl, rdata)
                .ok_or_else(|| bad(set, "RDATA longer than 65535 octets"))?;
        }
        let records = u32::try_from(start).map_err(|_| full(set))?;
        let records_len = u32::try_from(data.records.len() - start).map_err(|_| full(set))?;
        data.sets.push(Rrset {
            rtype: set.rtype,
            count: set.rdata.len() as u16,
            records,
            records_len,
            targets: 0,
            target_count: 0,
            policy: NONE,
        });
        if set.policy.is_some() {
            policies.push((at, set));
        }
    }
    drop(owned);
    // 3. Zone cuts (NS below the apex), wildcards, additional-section targets, policies.
    link_cuts_and_wildcards(&mut data);
    link_targets(&mut data);
    // One copy of the zone's geo classes, shared by its geo sets.
    let geo = zone.geo.as_deref().map(|table| {
        let mut table = table.clone();
        table.build_index();
        std::sync::Arc::new(table)
    });
    for (at, set) in policies {
        let Some(policy) = &set.policy else { continue };
        let compiled = super::policy::compile(policy, set, zone.slot_base, &data.names, geo.as_ref())
            .ok_or_else(|| bad(set, "alias target missing or RDATA too long"))?;
        let index = u32::try_from(data.policies.len()).map_err(|_| full(set))?;
        data.policies.push(compiled);
        if let Some(rrset) = data.sets.get_mut(at) {
            rrset.policy = index;
        }
    }
    let soa = sets
        .iter()
        .find(|set| set.rtype == rtype::SOA && set.name == apex)
        .and_then(|set| set.rdata.first())
        .ok_or_else(|| EngineError::NoSoa { zone: zone_text() })?;
    let negative_soa =
        record_bytes(rtype::SOA, negative_ttl, soa).ok_or_else(|| EngineError::NoSoa { zone: zone_text() })?;
    data.negative_soa = negative_soa.into_boxed_slice();
    data.signed = super::dnssec::compile(zone, &data)?.map(Box::new);
    data.names.shrink_to_fit();
    data.sets.shrink_to_fit();
    data.records.shrink_to_fit();
    data.targets.shrink_to_fit();
    data.policies.shrink_to_fit();
    Ok(data)
}

/// Marks each node with the topmost zone cut at or above it (below the apex), and each
/// parent of a `*` label with its wildcard child.
fn link_cuts_and_wildcards(zone: &mut ZoneData) {
    let has_ns = |zone: &ZoneData, id: NodeId| zone.node(id).is_some_and(|n| n.rrset(rtype::NS).is_some());
    for id in 0..zone.nodes.len() as NodeId {
        let owner = zone.names.name(id);
        let mut cut = NONE;
        if owner != zone.apex.as_ref() {
            for start in label_starts(owner) {
                let ancestor = owner.get(start..).unwrap_or_default();
                if ancestor == zone.apex.as_ref() {
                    break;
                }
                // The owner itself is node `id`: no look-up (at 10,000,000 names that
                // hash probe, two cache misses a node, was a sixth of the start-up).
                let node = if start == 0 { Some(id) } else { zone.names.get(ancestor) };
                if let Some(node) = node.filter(|&n| has_ns(zone, n)) {
                    cut = node;
                }
            }
        }
        let parent = (owner.first() == Some(&1) && owner.get(1) == Some(&b'*'))
            .then(|| name::parent(owner).and_then(|p| zone.names.get(p)))
            .flatten();
        if let Some(node) = zone.nodes.get_mut(id as usize) {
            node.cut = cut;
        }
        if let Some(node) = parent.and_then(|p| zone.nodes.get_mut(p as usize)) {
            node.wildcard = id;
        }
    }
}

/// Resolves the additional-section targets of every NS, MX, SRV, SVCB and HTTPS set.
fn link_targets(zone: &mut ZoneData) {
    let mut found = Vec::new();
    for at in 0..zone.sets.len() {
        let Some(&set) = zone.sets.get(at) else { continue };
        found.clear();
        find_targets(zone, zone.set(&set), &mut found);
        if found.is_empty() {
            continue;
        }
        let (Ok(start), Ok(count)) = (u32::try_from(zone.targets.len()), u16::try_from(found.len())) else {
            continue; // past 2^32 targets: the additional section goes without them
        };
        zone.targets.extend_from_slice(&found);
        if let Some(set) = zone.sets.get_mut(at) {
            set.targets = start;
            set.target_count = count;
        }
    }
}

/// Length of the uncompressed wire name at the start of `wire`.
fn wire_name_len(wire: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let len = usize::from(*wire.get(pos)?);
        pos += 1 + len;
        if len == 0 {
            return Some(pos);
        }
    }
}

/// TYPE CLASS TTL RDLENGTH RDATA of one record.
pub(super) fn record_bytes(rr_type: u16, ttl: u32, rdata: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(10 + rdata.len());
    push_record(&mut out, rr_type, ttl, rdata)?;
    Some(out)
}

/// Appends TYPE CLASS TTL RDLENGTH RDATA of one record to `out`.
pub(super) fn push_record(out: &mut Vec<u8>, rr_type: u16, ttl: u32, rdata: &[u8]) -> Option<()> {
    let rdlen = u16::try_from(rdata.len()).ok()?;
    out.extend(rr_type.to_be_bytes());
    out.extend(rtype::CLASS_IN.to_be_bytes());
    out.extend(ttl.to_be_bytes());
    out.extend(rdlen.to_be_bytes());
    out.extend(rdata);
    Some(())
}

/// Names in NS, MX, SRV, SVCB and HTTPS RDATA (RFC 9460 §4.1: the `TargetName`) that
/// have A/AAAA records in this zone, into `found`.
fn find_targets(zone: &ZoneData, set: SetRef<'_>, found: &mut Vec<Target>) {
    let name_at = match set.rtype {
        rtype::NS => 0,
        rtype::MX | rtype::SVCB | rtype::HTTPS => 2,
        rtype::SRV => 6,
        _ => return,
    };
    for (at, record) in set.each_record() {
        let Some(target) = record
            .get(10 + name_at..)
            .and_then(|rest| rest.get(..wire_name_len(rest)?))
        else {
            continue;
        };
        let Some(node) = zone.names.get(target) else {
            continue;
        };
        let has_address = zone
            .node(node)
            .is_some_and(|n| n.rrset(rtype::A).is_some() || n.rrset(rtype::AAAA).is_some());
        if has_address && !found.iter().any(|t: &Target| t.node == node) {
            found.push(Target {
                offset: (at + 10 + name_at) as u32,
                node,
            });
        }
    }
}
