//! A read-only view of the compiled engine for the XDP table compiler
//! (`crate::xdp::table`): every node that answers for its name (the most specific zone
//! owns it), what it is, and its record sets with their precomputed bytes.
use qdns_abi::select::WeightedMember;
use qdns_zone::PolicyKind;

use super::{
    lookup::Found,
    policy::MemberAnswer,
    respond::{stands_beside_cname, MAX_CNAME_CHAIN},
    Engine, NodeId, ZoneData,
};
use crate::wire::{name::label_starts, rtype};

/// Query types answered at a CNAME owner by following the chain (RFC 1034 §4.3.2 step
/// 3a) that the fast path precomputes: the types resolvers commonly ask for. Others at a
/// CNAME owner stay with user space.
pub const CHASED_TYPES: &[u16] = &[
    rtype::A,
    rtype::NS,
    rtype::SOA,
    rtype::PTR,
    rtype::MX,
    rtype::TXT,
    rtype::AAAA,
    rtype::SRV,
    rtype::NAPTR,
    rtype::SVCB,
    rtype::HTTPS,
    rtype::CAA,
];

/// One node as the fast path needs it.
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent facts about one node, read one by one by the table compiler"
)]
pub struct NodeView<'e> {
    /// Owner name (lowercase wire).
    pub name: &'e [u8],
    /// Wire length of the zone apex.
    pub apex_len: usize,
    /// The zone's SOA as it goes in a negative answer (TYPE..RDATA, no owner).
    pub negative_soa: &'e [u8],
    /// At or below a zone cut: user space answers (referrals, glue).
    pub below_cut: bool,
    /// In a DNSSEC-signed zone: user space answers (signatures are not in the tables).
    pub signed: bool,
    /// Has a `*` child: missing names below it are synthesised by user space.
    pub has_wildcard: bool,
    /// Has a CNAME: other types chase it in user space.
    pub has_cname: bool,
    /// Record set types of the node, with the policy of policy sets.
    pub sets: Vec<(u16, Option<PolicyView<'e>>)>,
    /// Of [`CHASED_TYPES`] not in `sets`, those whose answer here (the CNAME chain and
    /// where it ends) is the same whatever the health: no set it reaches has a policy.
    pub static_chases: Vec<u16>,
    /// The answer to ANY (RFC 8482 §4.1: the node's first set) is static: that set has
    /// no policy. `false` for a node without sets.
    pub static_any: bool,
}

/// A policy set as the fast path needs it.
pub struct PolicyView<'e> {
    /// The policy.
    pub kind: PolicyKind,
    /// Fail-open threshold, thousandths.
    pub fail_open_below_permille: u32,
    /// Has a degraded TTL.
    pub has_degraded_ttl: bool,
    /// Slot and weight per member.
    pub weighted: &'e [WeightedMember],
    /// Each member's records (TYPE..RDATA back to back) with the normal and degraded
    /// TTL; `None` for an alias member.
    pub members: Vec<Option<(&'e [u8], &'e [u8])>>,
    /// Index of member 0's answer counter (`NO_ANSWER_COUNTER`: none).
    pub counter: u32,
    /// Client-aware sets: the compiled rules.
    pub client: Option<&'e qdns_zone::client::ClientRules>,
    /// Geo sets: the zone's class table.
    pub geo: Option<&'e std::sync::Arc<qdns_zone::client::GeoTable>>,
}

impl Engine {
    /// Every node owned by its zone (not hidden by a more specific zone), in no order.
    pub(crate) fn export(&self) -> Vec<NodeView<'_>> {
        let mut out = Vec::new();
        for zone in &self.zones {
            for (id, node) in zone.each_node() {
                let hidden = label_starts(node.name)
                    .take_while(|&start| node.name.len() - start > zone.apex.len())
                    .any(|start| node.name.get(start..).is_some_and(|s| self.by_apex.contains_key(s)));
                if !hidden {
                    out.push(view(zone, id, node));
                }
            }
        }
        out
    }

    /// The nodes of `names` (lowercase wire) that exist, each as [`Engine::export`]
    /// gives it: from the most specific zone holding the name.
    pub(crate) fn export_names(&self, names: &[Box<[u8]>]) -> Vec<NodeView<'_>> {
        names
            .iter()
            .filter_map(|name| {
                let zone = self.zone_of(name)?;
                let id = zone.names.get(name)?;
                Some(view(zone, id, zone.node(id)?))
            })
            .collect()
    }

    /// The apex of the most specific zone holding `name` (lowercase wire).
    pub(crate) fn apex_of(&self, name: &[u8]) -> Option<&[u8]> {
        self.zone_of(name).map(|zone| &*zone.apex)
    }

    /// True when `name` (lowercase wire) exists in the most specific zone holding it.
    pub(crate) fn has_name(&self, name: &[u8]) -> bool {
        self.zone_of(name).is_some_and(|zone| zone.names.get(name).is_some())
    }

    fn zone_of(&self, name: &[u8]) -> Option<&ZoneData> {
        label_starts(name).find_map(|start| self.zones.get(*self.by_apex.get(name.get(start..)?)? as usize))
    }

    /// True when the zone at `apex` has a zone cut below its apex that it answers for
    /// (one a more specific hosted zone hides is not).
    pub(crate) fn has_cuts(&self, apex: &[u8]) -> bool {
        let Some(zone) = self.by_apex.get(apex).and_then(|&i| self.zones.get(i as usize)) else {
            return false;
        };
        zone.each_node()
            .any(|(id, node)| node.cut == Some(id) && self.zone_of(node.name).is_some_and(|z| z.apex == zone.apex))
    }

    /// The owners, in the zone at `apex`, of the sets whose answers read a name of
    /// `exact`, or at or below a name of `under`: a CNAME chain's next name, or a name
    /// whose addresses go in the additional section (NS, MX, SRV, SVCB, HTTPS). With `every_cname`,
    /// every owner of a plain CNAME set off any zone cut too (a chain ending in a NODATA
    /// or NXDOMAIN carries the zone's SOA; a policy CNAME's or a referral's entries do
    /// not).
    pub(crate) fn dependents(
        &self,
        apex: &[u8],
        (exact, under): (&NameSet, &NameSet),
        every_cname: bool,
    ) -> Vec<Box<[u8]>> {
        let Some(zone) = self.by_apex.get(apex).and_then(|&i| self.zones.get(i as usize)) else {
            return Vec::new();
        };
        let reads = |name: &[u8]| {
            exact.contains(name) || label_starts(name).any(|start| name.get(start..).is_some_and(|s| under.contains(s)))
        };
        let mut out = Vec::new();
        for (_, node) in zone.each_node() {
            let reader = node.each_set().any(|set| {
                let soa_read = every_cname && set.policy.is_none() && node.cut.is_none();
                let chain = set.rtype == rtype::CNAME
                    && (soa_read || cname_target(set.records).is_some_and(|t| reads(&t.to_ascii_lowercase())));
                chain
                    || set
                        .targets
                        .iter()
                        .any(|t| zone.node(t.node).is_some_and(|target| reads(target.name)))
            });
            if reader {
                out.push(node.name.into());
            }
        }
        out
    }
}

/// A set of names (lowercase wire).
pub(crate) type NameSet = std::collections::HashSet<Box<[u8]>>;

/// Node `id` of `zone` as the fast path needs it.
fn view<'e>(zone: &'e ZoneData, id: NodeId, node: super::NodeRef<'e>) -> NodeView<'e> {
    let static_chases = if node.rrset(rtype::CNAME).is_some() {
        CHASED_TYPES
            .iter()
            .copied()
            .filter(|&qtype| node.rrset(qtype).is_none() && zone.answer_is_static(id, qtype))
            .collect()
    } else {
        Vec::new()
    };
    NodeView {
        static_chases,
        static_any: node.first_set().is_some_and(|set| set.policy.is_none()),
        name: node.name,
        apex_len: zone.apex.len(),
        negative_soa: &zone.negative_soa,
        below_cut: node.cut.is_some(),
        signed: zone.signed.is_some(),
        has_wildcard: node.wildcard.is_some(),
        has_cname: node.rrset(rtype::CNAME).is_some(),
        sets: node
            .each_set()
            .map(|set| (set.rtype, set.policy.map(|p| p.view())))
            .collect(),
    }
}

impl super::policy::PolicySet {
    fn view(&self) -> PolicyView<'_> {
        PolicyView {
            kind: self.kind(),
            fail_open_below_permille: self.fail_open_below_permille(),
            has_degraded_ttl: self.has_degraded_ttl(),
            weighted: self.weighted(),
            members: (0..self.member_count())
                .map(|i| match self.member(i) {
                    Some(MemberAnswer::Records { normal, degraded }) => Some((&normal[..], &degraded[..])),
                    _ => None,
                })
                .collect(),
            counter: self.counter(),
            client: self.client_rules(),
            geo: self.geo_table(),
        }
    }
}

impl ZoneData {
    /// True when the answer to `qtype` at node `id` follows no policy set: the walk of
    /// `Engine::resolve` (a CNAME chain inside the zone, loops stopped where it stops
    /// them), checking every set it would write.
    fn answer_is_static(&self, id: NodeId, qtype: u16) -> bool {
        let mut id = id;
        let mut visited = [NodeId::MAX; MAX_CNAME_CHAIN + 1];
        for chain in 0..visited.len() {
            if visited.contains(&id) {
                return true;
            }
            if let Some(slot) = visited.get_mut(chain) {
                *slot = id;
            }
            let Some(node) = self.node(id) else { return true };
            if let Some(set) = node.rrset(qtype) {
                return set.policy.is_none();
            }
            let Some(cname) = node.rrset(rtype::CNAME).filter(|_| !stands_beside_cname(qtype)) else {
                return true;
            };
            if cname.policy.is_some() {
                return false;
            }
            let Some(target) = cname_target(cname.records) else {
                return true;
            };
            if !qdns_zone::name::is_at_or_below(target, &self.apex) {
                return true;
            }
            match self.find(target, qtype) {
                Found::Node(next) | Found::Wildcard(next) => id = next,
                Found::Referral(_) | Found::NxDomain => return true,
            }
        }
        true
    }
}

/// The RDATA of the first record of a CNAME set (TYPE CLASS TTL RDLENGTH RDATA).
fn cname_target(records: &[u8]) -> Option<&[u8]> {
    let rdlen = usize::from(u16::from_be_bytes([*records.get(8)?, *records.get(9)?]));
    records.get(10..10 + rdlen)
}
