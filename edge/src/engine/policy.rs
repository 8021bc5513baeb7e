//! Policy record sets at query time (SPEC §3): pick members with the `qdns-abi`
//! selection functions over the health bitmap, then write their precomputed records.
//!
//! Each member's records are stored twice, with the set's TTL and with its
//! `degraded_ttl`, so choosing the TTL costs nothing at query time.
use std::{net::IpAddr, sync::Arc};

use qdns_abi::{
    health::slot_healthy,
    select::{
        select_chain, select_failover, select_latency, select_multivalue, select_weighted, select_zonal,
        WeightedMember, MAX_MEMBERS,
    },
};
use qdns_zone::{
    client::{ClientRules, GeoTable},
    evaluate::global,
    Answer, Policy, PolicyKind, RecordSet,
};

use super::{compile::record_bytes, NodeId};

/// A compiled policy.
pub(super) struct PolicySet {
    kind: PolicyKind,
    fail_open_below_permille: u32,
    has_degraded_ttl: bool,
    /// Global health slot of each member.
    slots: Box<[u32]>,
    /// Slots and weights, for weighted sets.
    weighted: Box<[WeightedMember]>,
    members: Box<[MemberAnswer]>,
    /// Member ids (labels of the answer counters).
    ids: Box<[Box<str>]>,
    /// Index of member 0's answer counter (`qdns_abi::answer::NO_ANSWER_COUNTER`: not
    /// counted), assigned by [`super::Engine::with_options`].
    counter: u32,
    /// Client-aware sets: the prefix table (geo sets: their chain per class).
    client: Option<Box<ClientRules>>,
    /// Geo sets: the zone's class table.
    geo: Option<Arc<GeoTable>>,
}

/// What a chosen member writes.
pub(super) enum MemberAnswer {
    /// Records (TYPE..RDATA back to back) with the normal and the degraded TTL.
    Records { normal: Box<[u8]>, degraded: Box<[u8]> },
    /// The answer of another set of the zone (same type), at this node.
    Alias(NodeId),
}

/// The outcome of a selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Picked {
    /// Bit `i` = member `i` answers.
    pub mask: u64,
    /// Use the degraded TTL.
    pub degraded: bool,
    /// Chosen by fail-open.
    pub fail_open: bool,
    /// Client-aware sets: the prefix length around the client over which this choice
    /// holds (the ECS scope); 0 for the others.
    pub scope: u8,
}

/// Compiles `policy` of `set`; `None` when an alias target is missing or RDATA is too
/// long (the zone loader rules both out).
pub(super) fn compile(
    policy: &Policy,
    set: &RecordSet,
    base: u32,
    names: &super::names::Names,
    geo: Option<&Arc<GeoTable>>,
) -> Option<PolicySet> {
    let mut members = Vec::with_capacity(policy.members.len());
    for member in policy.members.iter().take(MAX_MEMBERS) {
        members.push(match &member.answer {
            Answer::Values(values) => {
                let mut normal = Vec::new();
                let mut degraded = Vec::new();
                for rdata in values {
                    normal.extend(record_bytes(set.rtype, set.ttl, rdata)?);
                    degraded.extend(record_bytes(set.rtype, policy.degraded_ttl.unwrap_or(set.ttl), rdata)?);
                }
                MemberAnswer::Records {
                    normal: normal.into(),
                    degraded: degraded.into(),
                }
            }
            Answer::Alias { target } => MemberAnswer::Alias(names.get(target.as_slice())?),
        });
    }
    let slots: Box<[u32]> = policy
        .members
        .iter()
        .take(MAX_MEMBERS)
        .map(|m| global(base, m.slot))
        .collect();
    let weighted = policy
        .members
        .iter()
        .zip(slots.iter())
        .map(|(m, &slot)| WeightedMember { slot, weight: m.weight })
        .collect();
    Some(PolicySet {
        kind: policy.kind,
        fail_open_below_permille: policy.fail_open_below_permille,
        has_degraded_ttl: policy.degraded_ttl.is_some(),
        slots,
        weighted,
        members: members.into(),
        ids: policy
            .members
            .iter()
            .take(MAX_MEMBERS)
            .map(|m| m.id.as_str().into())
            .collect(),
        counter: qdns_abi::answer::NO_ANSWER_COUNTER,
        client: policy.client.clone().map(|mut rules| {
            rules.build_index();
            rules
        }),
        geo: (policy.kind == PolicyKind::Geo).then(|| geo.cloned()).flatten(),
    })
}

impl PolicySet {
    /// Chooses the answering members for `bitmap`, the draw `rand` and the `client`
    /// address (client-aware sets; `None`: the `*` answer).
    pub(super) fn pick(&self, bitmap: &[u64], rand: u32, client: Option<IpAddr>) -> Picked {
        if self.kind.is_client_aware() {
            return self.pick_for_client(bitmap, client);
        }
        let (mask, fail_open) = match self.kind {
            PolicyKind::Weighted => {
                match select_weighted(&self.weighted, bitmap, self.fail_open_below_permille, rand) {
                    Some(choice) => (1u64 << choice.index, choice.fail_open),
                    None => (0, true),
                }
            }
            PolicyKind::Failover => {
                let choice = select_failover(
                    self.slots.first().copied().unwrap_or(u32::MAX),
                    self.slots.get(1).copied(),
                    bitmap,
                );
                (1u64 << choice.index, choice.fail_open)
            }
            PolicyKind::Multivalue => {
                let c = select_multivalue(&self.slots, bitmap, self.fail_open_below_permille, rand);
                (c.mask, c.fail_open)
            }
            PolicyKind::Zonal => {
                let c = select_zonal(&self.slots, bitmap);
                (c.mask, c.fail_open)
            }
            PolicyKind::Ip | PolicyKind::Geo => (0, true),
            // The member whose slot control set (its choice), else the first: its
            // slots say which is chosen, not who is healthy (degraded only failing open).
            PolicyKind::Latency => {
                return match select_latency(&self.slots, bitmap) {
                    Some(choice) => Picked {
                        mask: 1u64 << (choice.index & 63),
                        degraded: self.has_degraded_ttl && choice.fail_open,
                        fail_open: choice.fail_open,
                        scope: 0,
                    },
                    None => Picked {
                        mask: 0,
                        degraded: false,
                        fail_open: true,
                        scope: 0,
                    },
                };
            }
        };
        let any_unhealthy = self.slots.iter().any(|&slot| !slot_healthy(bitmap, slot));
        Picked {
            mask,
            degraded: self.has_degraded_ttl && (any_unhealthy || fail_open),
            fail_open,
            scope: 0,
        }
    }

    /// SPEC §10: the client's chain of matches, its first healthy member (fail-open:
    /// the most specific); degraded while any member of the chain is unhealthy.
    fn pick_for_client(&self, bitmap: &[u64], client: Option<IpAddr>) -> Picked {
        let Some(rules) = self.client.as_deref() else {
            return Picked {
                mask: 0,
                degraded: false,
                fail_open: true,
                scope: 0,
            };
        };
        let decision = client.map_or_else(
            || rules.default_decision(),
            |addr| rules.decide_in_zone(self.geo.as_deref(), addr),
        );
        let (mask, fail_open) = match select_chain(decision.chain, &self.slots, bitmap) {
            Some(choice) => (1u64 << (choice.index & 63), choice.fail_open),
            None => (0, true),
        };
        let any_unhealthy = decision.chain.iter().any(|&m| {
            self.slots
                .get(usize::from(m))
                .is_some_and(|&slot| !slot_healthy(bitmap, slot))
        });
        Picked {
            mask,
            degraded: self.has_degraded_ttl && (any_unhealthy || fail_open),
            fail_open,
            scope: decision.scope,
        }
    }

    /// Client-aware sets: the compiled rules.
    pub(super) fn client_rules(&self) -> Option<&ClientRules> {
        self.client.as_deref()
    }

    /// Geo sets: the zone's class table.
    pub(super) fn geo_table(&self) -> Option<&Arc<GeoTable>> {
        self.geo.as_ref()
    }

    /// Member `index`.
    pub(super) fn member(&self, index: usize) -> Option<&MemberAnswer> {
        self.members.get(index)
    }

    /// Number of members.
    pub(super) fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The policy.
    pub(super) fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// Fail-open threshold, thousandths.
    pub(super) fn fail_open_below_permille(&self) -> u32 {
        self.fail_open_below_permille
    }

    /// Has a degraded TTL.
    pub(super) fn has_degraded_ttl(&self) -> bool {
        self.has_degraded_ttl
    }

    /// Slot and weight per member.
    pub(super) fn weighted(&self) -> &[WeightedMember] {
        &self.weighted
    }

    /// Member ids, in member order.
    pub(super) fn ids(&self) -> &[Box<str>] {
        &self.ids
    }

    /// Index of member 0's answer counter.
    pub(super) fn counter(&self) -> u32 {
        self.counter
    }

    /// Sets the index of member 0's answer counter.
    pub(super) fn set_counter(&mut self, counter: u32) {
        self.counter = counter;
    }
}

/// (offset, record) of each record in a blob of TYPE..RDATA records.
pub(super) fn records(blob: &[u8]) -> impl Iterator<Item = (usize, &[u8])> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let fixed = blob.get(pos..pos + 10)?;
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let at = pos;
        let record = blob.get(pos..pos + 10 + rdlen)?;
        pos += 10 + rdlen;
        Some((at, record))
    })
}
