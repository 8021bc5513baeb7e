//! Finding a name in the compiled zones (RFC 1034 §4.3.2 steps 2–3, RFC 4592 wildcards).
use super::{Engine, NodeId, ZoneData};
use crate::wire::{name::label_starts, rtype, NameBuf};

/// Where a name led.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// The name exists (with data or as an empty non-terminal).
    Node(NodeId),
    /// The name does not exist, but this wildcard node covers it.
    Wildcard(NodeId),
    /// The name is at or below this zone cut: a referral.
    Referral(NodeId),
    /// The name does not exist.
    NxDomain,
}

impl Engine {
    /// The zone that answers `qtype` at `qname`: the most specific zone containing it,
    /// except that a DS query for a zone's own apex goes to the parent zone when this
    /// server holds that too and it delegates there (RFC 4035 §3.1.4.1: the DS lives on
    /// the parent side; a child answering would deny the DS its parent signed).
    pub(super) fn zone_for_type(&self, qname: &NameBuf, qtype: u16) -> Option<&ZoneData> {
        let zone = self.zone_for(qname)?;
        if qtype != rtype::DS || *zone.apex != *qname.as_wire() {
            return Some(zone);
        }
        Some(self.parent_delegating(qname.as_wire()).unwrap_or(zone))
    }

    /// True when this server holds the zone delegating to the hosted zone `apex`: its DS
    /// queries are the parent's to answer.
    pub(crate) fn has_parent_delegation(&self, apex: &[u8]) -> bool {
        self.parent_delegating(apex).is_some()
    }

    /// The zone holding the delegation to the hosted zone `apex`, if this server holds
    /// it too.
    fn parent_delegating(&self, apex: &[u8]) -> Option<&ZoneData> {
        label_starts(apex).skip(1).find_map(|start| {
            let parent = self.zones.get(*self.by_apex.get(apex.get(start..)?)? as usize)?;
            let id = parent.names.get(apex)?;
            (parent.node(id)?.cut == Some(id)).then_some(parent)
        })
    }

    /// The most specific zone containing `qname`.
    pub(super) fn zone_for(&self, qname: &NameBuf) -> Option<&ZoneData> {
        let wire = qname.as_wire();
        (0..qname.label_count()).find_map(|i| {
            let suffix = wire.get(qname.label_start(i)..)?;
            let &index = self.by_apex.get(suffix)?;
            self.zones.get(index as usize)
        })
    }
}

impl ZoneData {
    /// Looks `name` (lowercase wire, at or below the apex) up for `qtype`.
    pub(super) fn find(&self, name: &[u8], qtype: u16) -> Found {
        if let Some(id) = self.names.get(name) {
            return match self.node(id).and_then(|node| node.cut) {
                // DS lives on the parent side of the cut (RFC 4035 §3.1.4.1).
                Some(cut) if !(cut == id && qtype == rtype::DS) => Found::Referral(cut),
                _ => Found::Node(id),
            };
        }
        for start in label_starts(name).skip(1) {
            let Some(ancestor) = name.get(start..) else {
                break;
            };
            let Some(id) = self.names.get(ancestor) else {
                continue;
            };
            // The closest encloser decides (RFC 4592 §3.3.1).
            let Some(node) = self.node(id) else { break };
            if let Some(cut) = node.cut {
                return Found::Referral(cut);
            }
            if let Some(wildcard) = node.wildcard {
                return Found::Wildcard(wildcard);
            }
            return Found::NxDomain;
        }
        Found::NxDomain
    }
}
