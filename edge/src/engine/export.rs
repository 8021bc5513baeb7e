//! A read-only view of the compiled engine for the XDP table compiler
//! (`crate::xdp::table`): every node that answers for its name (the most specific zone
//! owns it), what it is, and its record sets with their precomputed bytes.
use qdns_abi::select::WeightedMember;
use qdns_zone::PolicyKind;

use super::{policy::MemberAnswer, Engine};
use crate::wire::{name::label_starts, rtype};

/// One node as the fast path needs it.
pub struct NodeView<'e> {
    /// Owner name (lowercase wire).
    pub name: &'e [u8],
    /// Wire length of the zone apex.
    pub apex_len: usize,
    /// The zone's SOA as it goes in a negative answer (TYPE..RDATA, no owner).
    pub negative_soa: &'e [u8],
    /// At or below a zone cut: user space answers (referrals, glue).
    pub below_cut: bool,
    /// Has a `*` child: missing names below it are synthesised by user space.
    pub has_wildcard: bool,
    /// Has a CNAME: other types chase it in user space.
    pub has_cname: bool,
    /// Record set types of the node, with the policy of policy sets.
    pub sets: Vec<(u16, Option<PolicyView<'e>>)>,
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
}

impl Engine {
    /// Every node owned by its zone (not hidden by a more specific zone), in no order.
    pub(crate) fn export(&self) -> Vec<NodeView<'_>> {
        let mut out = Vec::new();
        for zone in &self.zones {
            for node in &zone.nodes {
                let hidden = label_starts(&node.name)
                    .take_while(|&start| node.name.len() - start > zone.apex.len())
                    .any(|start| node.name.get(start..).is_some_and(|s| self.by_apex.contains_key(s)));
                if hidden {
                    continue;
                }
                out.push(NodeView {
                    name: &node.name,
                    apex_len: zone.apex.len(),
                    negative_soa: &zone.negative_soa,
                    below_cut: node.cut.is_some(),
                    has_wildcard: node.wildcard.is_some(),
                    has_cname: node.rrset(rtype::CNAME).is_some(),
                    sets: node
                        .rrsets
                        .iter()
                        .map(|set| (set.rtype, set.policy.as_deref().map(|p| p.view())))
                        .collect(),
                });
            }
        }
        out
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
        }
    }
}
