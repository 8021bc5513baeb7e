//! Compiling a [`Snapshot`] into an [`Engine`]: nodes (empty non-terminals included),
//! zone cuts, wildcards, precomputed record bytes and additional-section targets.
use qdns_zone::{name, RecordSet, Snapshot};

use super::{Engine, NameMap, Node, NodeId, Rrset, Target, ZoneData};
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
            version: snapshot.version,
            zones: Vec::with_capacity(snapshot.zones.len()),
            by_apex: NameMap::with_capacity_and_hasher(snapshot.zones.len(), foldhash::fast::RandomState::default()),
            max_udp_payload: DEFAULT_UDP_PAYLOAD,
            nsid: None,
            health: arc_swap::ArcSwap::from_pointee(snapshot.bitmap.clone()),
            compiled_at: std::time::SystemTime::now(),
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

fn compile_zone(zone: &qdns_zone::Zone) -> Result<ZoneData, EngineError> {
    let (apex, serial, negative_ttl, sets) = (
        zone.origin.as_slice(),
        zone.serial,
        zone.negative_ttl,
        zone.rrsets.as_slice(),
    );
    let zone_text = || name::to_text(apex);
    let bad = |set: &RecordSet, reason| EngineError::BadRecordSet {
        zone: zone_text(),
        owner: name::to_text(&set.name),
        rtype: set.rtype,
        reason,
    };
    // 1. Every owner and every ancestor up to the apex becomes a node.
    let mut by_name: NameMap<NodeId> = NameMap::default();
    let mut owners: Vec<Box<[u8]>> = Vec::new();
    let mut intern = |wire: &[u8], by_name: &mut NameMap<NodeId>| -> NodeId {
        if let Some(&id) = by_name.get(wire) {
            return id;
        }
        let id = owners.len() as NodeId;
        owners.push(wire.into());
        by_name.insert(wire.into(), id);
        id
    };
    intern(apex, &mut by_name);
    for set in sets {
        if !name::is_at_or_below(&set.name, apex) {
            return Err(bad(set, "owner outside the zone"));
        }
        if (set.rdata.is_empty() && set.policy.is_none()) || set.rdata.len() > usize::from(u16::MAX) {
            return Err(bad(set, "empty or oversized record set"));
        }
        for start in label_starts(&set.name) {
            let ancestor = set.name.get(start..).unwrap_or_default();
            intern(ancestor, &mut by_name);
            if ancestor == apex {
                break;
            }
        }
    }
    // 2. Record bytes per node.
    let mut per_node: Vec<Vec<&RecordSet>> = vec![Vec::new(); owners.len()];
    for set in sets {
        if let Some(&id) = by_name.get(set.name.as_slice()) {
            if let Some(list) = per_node.get_mut(id as usize) {
                list.push(set);
            }
        }
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(owners.len());
    for (list, owner) in per_node.iter_mut().zip(&owners) {
        list.sort_by_key(|set| set.rtype);
        let mut rrsets = Vec::with_capacity(list.len());
        for set in list.iter() {
            rrsets.push(compile_rrset(set).ok_or_else(|| bad(set, "RDATA longer than 65535 octets"))?);
        }
        nodes.push(Node {
            name: owner.clone(),
            rrsets: rrsets.into_boxed_slice(),
            cut: None,
            wildcard: None,
        });
    }
    // 3. Zone cuts (NS below the apex), wildcards, additional-section targets, policies.
    link_cuts_and_wildcards(apex, &owners, &by_name, &mut nodes);
    link_targets(&by_name, &mut nodes);
    for set in sets {
        let Some(policy) = &set.policy else { continue };
        let compiled = super::policy::compile(policy, set, zone.slot_base, &by_name)
            .ok_or_else(|| bad(set, "alias target missing or RDATA too long"))?;
        let node = by_name
            .get(set.name.as_slice())
            .and_then(|&id| nodes.get_mut(id as usize));
        if let Some(rrset) = node.and_then(|n| n.rrsets.iter_mut().find(|r| r.rtype == set.rtype)) {
            rrset.policy = Some(Box::new(compiled));
        }
    }
    let soa = sets
        .iter()
        .find(|set| set.rtype == rtype::SOA && set.name == apex)
        .and_then(|set| set.rdata.first())
        .ok_or_else(|| EngineError::NoSoa { zone: zone_text() })?;
    let negative_soa =
        record_bytes(rtype::SOA, negative_ttl, soa).ok_or_else(|| EngineError::NoSoa { zone: zone_text() })?;
    Ok(ZoneData {
        apex: apex.into(),
        serial,
        negative_soa: negative_soa.into_boxed_slice(),
        nodes,
        by_name,
    })
}

/// Marks each node with the topmost zone cut at or above it (below the apex), and each
/// parent of a `*` label with its wildcard child.
fn link_cuts_and_wildcards(apex: &[u8], owners: &[Box<[u8]>], by_name: &NameMap<NodeId>, nodes: &mut [Node]) {
    for (id, owner) in owners.iter().enumerate() {
        if owner.as_ref() != apex {
            let mut cut = None;
            for start in label_starts(owner) {
                let ancestor = owner.get(start..).unwrap_or_default();
                if ancestor == apex {
                    break;
                }
                let node = by_name.get(ancestor).copied();
                if node
                    .and_then(|n| nodes.get(n as usize))
                    .is_some_and(|n| n.rrset(rtype::NS).is_some())
                {
                    cut = node;
                }
            }
            if let Some(node) = nodes.get_mut(id) {
                node.cut = cut;
            }
        }
        if owner.first() == Some(&1) && owner.get(1) == Some(&b'*') {
            if let Some(parent) = name::parent(owner).and_then(|p| by_name.get(p)).copied() {
                if let Some(node) = nodes.get_mut(parent as usize) {
                    node.wildcard = Some(id as NodeId);
                }
            }
        }
    }
}

/// Resolves the additional-section targets of every NS, MX, SRV, SVCB and HTTPS set.
fn link_targets(by_name: &NameMap<NodeId>, nodes: &mut [Node]) {
    for id in 0..nodes.len() {
        let targets: Vec<Vec<Target>> = nodes
            .get(id)
            .map(|node| {
                node.rrsets
                    .iter()
                    .map(|set| find_targets(set, by_name, nodes))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(node) = nodes.get_mut(id) {
            for (set, found) in node.rrsets.iter_mut().zip(targets) {
                set.targets = found.into_boxed_slice();
            }
        }
    }
}

fn compile_rrset(set: &RecordSet) -> Option<Rrset> {
    let mut records = Vec::new();
    for rdata in &set.rdata {
        records.extend(record_bytes(set.rtype, set.ttl, rdata)?);
    }
    Some(Rrset {
        rtype: set.rtype,
        records: records.into_boxed_slice(),
        count: set.rdata.len() as u16,
        targets: Box::new([]),
        policy: None,
    })
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
    let rdlen = u16::try_from(rdata.len()).ok()?;
    let mut out = Vec::with_capacity(10 + rdata.len());
    out.extend(rr_type.to_be_bytes());
    out.extend(rtype::CLASS_IN.to_be_bytes());
    out.extend(ttl.to_be_bytes());
    out.extend(rdlen.to_be_bytes());
    out.extend(rdata);
    Some(out)
}

/// Names in NS, MX, SRV, SVCB and HTTPS RDATA (RFC 9460 §4.1: the `TargetName`) that
/// have A/AAAA records in this zone.
fn find_targets(set: &Rrset, by_name: &NameMap<NodeId>, nodes: &[Node]) -> Vec<Target> {
    let name_at = match set.rtype {
        rtype::NS => 0,
        rtype::MX | rtype::SVCB | rtype::HTTPS => 2,
        rtype::SRV => 6,
        _ => return Vec::new(),
    };
    let mut found = Vec::new();
    for (at, record) in set.each_record() {
        let Some(target) = record
            .get(10 + name_at..)
            .and_then(|rest| rest.get(..wire_name_len(rest)?))
        else {
            continue;
        };
        let Some(&node) = by_name.get(target) else {
            continue;
        };
        let has_address = nodes
            .get(node as usize)
            .is_some_and(|n| n.rrset(rtype::A).is_some() || n.rrset(rtype::AAAA).is_some());
        if has_address && !found.iter().any(|t: &Target| t.node == node) {
            found.push(Target {
                offset: (at + 10 + name_at) as u32,
                node,
            });
        }
    }
    found
}
