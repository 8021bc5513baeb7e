//! Policy sets in the tables: each member's record bytes and a decision per health
//! combination (computed with the `qdns-abi` selection functions), the DO=1 answers of a
//! signed zone's set per outcome, and why a set gets no entry.
use std::{collections::HashSet, net::IpAddr};

use qdns_abi::{
    answer::{
        fold, member_outcome_salt, outcome_salt, sum_words, AnswerKey, AnswerValue, PolicyValue, DECISION_BY_WEIGHT,
        DECISION_DEGRADED, DO_SALT, HEALTH_COMBINATIONS, HEALTH_WORDS, KIND_CLIENT, KIND_PLAIN, KIND_POLICY,
        MEMBER_BLOB, POLICY_CLIENT, POLICY_FAILOVER, POLICY_LATENCY, POLICY_MEMBERS, POLICY_MULTIVALUE,
        POLICY_WEIGHTED, POLICY_ZONAL, REASON_CLIENT_AWARE, REASON_OTHER, RESPONSE_MAX,
    },
    health::{slot_healthy, ALWAYS_HEALTHY, WORD_BITS},
    select::{
        select_chain, select_failover, select_latency, select_multivalue, select_zonal, weighted_pick, weighted_pool,
        WeightedMember, WeightedPool,
    },
};
use qdns_zone::PolicyKind;

use super::{key, pass, Compiler, Under, Variant, HEADER_LEN};
use crate::{engine::export::PolicyView, wire::edns::OPT_LEN};

/// Why a policy set has no table entry: client-aware sets are decided per client in
/// user space (`pass_client_aware`); the others did not fit (`pass_not_cached`).
pub(super) fn unfit_reason(kind: PolicyKind) -> u8 {
    if kind.is_client_aware() {
        REASON_CLIENT_AWARE
    } else {
        REASON_OTHER
    }
}

/// Most outcomes (chosen members and TTL) of one signed policy set the tables hold DO=1
/// answers for: every one of a weighted or failover set (≤ 16), of a zonal set over a
/// few zones, of a multivalue set of up to seven members. A set with more passes its
/// DO=1 queries (`pass_signed`): each outcome is an answer of its own, most of them
/// medium tails (over 128 octets with the RRSIG).
pub(super) const SIGNED_OUTCOMES_MAX: usize = 128;

/// Most outcomes of one signed client-aware set: each is a member with one of two TTLs,
/// whichever chains choose it.
const CLIENT_SIGNED_OUTCOMES_MAX: usize = 1024;

/// A signed zone's policy set, as [`Compiler::signed_policy`] compiles it.
pub(super) struct SignedSet<'a> {
    pub(super) name: &'a [u8],
    pub(super) rtype: u16,
    /// Its policy entry (decisions, members).
    pub(super) value: &'a PolicyValue,
    /// The entry's id.
    pub(super) id: u32,
}

impl Compiler<'_> {
    /// A signed zone's policy set for DO=1 queries: the set's entry under the DO=1 key (the
    /// program chooses as for DO=0) and, for each outcome its decisions can give — members
    /// and TTL — the engine's DO=1 answer under a health (and weighted draw) that gives
    /// it, keyed with the outcome's salt. Empty, leaving the large table as it was, when
    /// there are too many outcomes or one does not fit the tables: then the set's DO=1
    /// queries pass (`pass_signed`).
    pub(super) fn signed_policy(&mut self, set: &SignedSet<'_>) -> Vec<(AnswerKey, AnswerValue)> {
        let Some((key, _)) = key(self.generation, set.rtype, set.name) else {
            return Vec::new();
        };
        let base = AnswerKey {
            hash: key.hash ^ DO_SALT,
            ..key
        };
        let mut entry = pass(KIND_POLICY);
        entry.policy = set.id;
        let mut entries = vec![(base, entry)];
        let large_before = self.large.len();
        let outcome = Outcomes {
            name: set.name,
            rtype: set.rtype,
            client: None,
            base,
        };
        let mut seen = Seen {
            salts: HashSet::new(),
            budget: SIGNED_OUTCOMES_MAX,
        };
        if self
            .signed_outcomes(&outcome, set.value, &mut seen, outcome_salt, &mut entries)
            .is_none()
        {
            self.large.truncate(large_before);
            return Vec::new();
        }
        entries
    }

    /// [`Compiler::signed_policy`] for a client-aware set (`id` in `CLIENT_SETS`): its
    /// `KIND_CLIENT` entry under the DO=1 key and, for each member and TTL some chain
    /// can answer with (a chain given as its policy entry and a client whose block
    /// chooses it; a chain no client reaches has none), the engine's DO=1 answer keyed
    /// with the member's outcome salt — the same answer whichever chain chose it.
    pub(super) fn signed_client(
        &mut self,
        name: &[u8],
        rtype: u16,
        id: u32,
        chains: &[(&PolicyValue, Option<IpAddr>)],
    ) -> Vec<(AnswerKey, AnswerValue)> {
        let Some((key, _)) = key(self.generation, rtype, name) else {
            return Vec::new();
        };
        let base = AnswerKey {
            hash: key.hash ^ DO_SALT,
            ..key
        };
        let mut entry = pass(KIND_CLIENT);
        entry.policy = id;
        let mut entries = vec![(base, entry)];
        let large_before = self.large.len();
        let mut seen = Seen {
            salts: HashSet::new(),
            budget: CLIENT_SIGNED_OUTCOMES_MAX,
        };
        for (value, client) in chains {
            let Some(client) = *client else { continue };
            let outcome = Outcomes {
                name,
                rtype,
                client: Some(client),
                base,
            };
            // A chain's entry chooses one of its members: the set's `origin`.
            let salt = |mask: u64, ttl| {
                let i = mask.trailing_zeros() as usize % POLICY_MEMBERS;
                member_outcome_salt(u32::from(value.origin[i]), ttl)
            };
            if self
                .signed_outcomes(&outcome, value, &mut seen, salt, &mut entries)
                .is_none()
            {
                self.large.truncate(large_before);
                return Vec::new();
            }
        }
        entries
    }

    /// Appends to `entries` the DO=1 answer of each outcome (members and TTL) of the
    /// policy entry `value` not `seen` yet, keyed with `salt(mask, ttl)`; `None` when
    /// one does not fit the tables or they are more than `seen`'s budget.
    fn signed_outcomes(
        &mut self,
        outcome: &Outcomes<'_>,
        value: &PolicyValue,
        seen: &mut Seen,
        salt: impl Fn(u64, usize) -> u64,
        entries: &mut Vec<(AnswerKey, AnswerValue)>,
    ) -> Option<()> {
        let n = usize::from(value.members).min(POLICY_MEMBERS);
        let highest = value.slots.iter().take(n).map(|&s| s as usize / 64).max().unwrap_or(0);
        let mut bitmap = vec![0u64; highest + 1];
        for combination in 0..1usize << n {
            // Members sharing a health check are up or down together: a combination that
            // splits them never happens, and its bitmap could not give it (one slot, two
            // bits), so it must not stand for an outcome.
            let split = (0..n).any(|i| {
                (i + 1..n).any(|j| {
                    value.always >> i & 1 == 0
                        && value.always >> j & 1 == 0
                        && value.slots[i] == value.slots[j]
                        && (combination >> i & 1) != (combination >> j & 1)
                })
            });
            if split {
                continue;
            }
            // The health that gives the combination: member i's slot up when bit i is set
            // (members without a check are up whatever the bit says).
            for (i, &slot) in value.slots.iter().enumerate().take(n) {
                if value.always >> i & 1 == 0 {
                    let (word, bit) = (slot as usize / 64, slot % 64);
                    bitmap[word] = bitmap[word] & !(1 << bit) | ((combination as u64 >> i) & 1) << bit;
                }
            }
            let decision = value.decision[combination];
            let ttl = usize::from(decision & DECISION_DEGRADED != 0);
            let chosen = u64::from(decision & 0xff);
            let outcomes: Vec<(u64, u32)> = if value.kind == POLICY_WEIGHTED {
                (0..n)
                    .filter(|&i| chosen >> i & 1 == 1)
                    .filter_map(|i| draw_for(value, combination, i).map(|draw| (1 << i, draw)))
                    .collect()
            } else {
                vec![(chosen, 0)]
            };
            for (mask, draw) in outcomes {
                let salt = salt(mask, ttl);
                if !seen.salts.insert(salt) {
                    continue;
                }
                seen.budget = seen.budget.checked_sub(1)?;
                let under = Under {
                    bitmap: &bitmap,
                    draw,
                    client: outcome.client,
                };
                let answer = self.plain_with(outcome.name, outcome.rtype, Variant::Signed(Some(under)));
                if answer.kind != KIND_PLAIN {
                    return None;
                }
                let salted = AnswerKey {
                    hash: outcome.base.hash ^ salt,
                    ..outcome.base
                };
                entries.push((salted, answer));
            }
        }
        Some(())
    }
}

/// The outcomes (by salt) a set's signed answers are compiled for so far, and how many
/// more it may take.
struct Seen {
    salts: HashSet<u64>,
    budget: usize,
}

/// The question a set's signed outcomes answer, and the client that gives them.
struct Outcomes<'a> {
    name: &'a [u8],
    rtype: u16,
    client: Option<IpAddr>,
    /// The set's DO=1 key.
    base: AnswerKey,
}

/// The least draw that lands a weighted set's choice on member `i` under
/// `combination`, if one can (a member of weight 0 beside positive ones cannot).
pub(super) fn draw_for(value: &PolicyValue, combination: usize, i: usize) -> Option<u32> {
    let decision = value.decision[combination];
    let pool = WeightedPool {
        eligible: u64::from(decision & 0xff),
        span: u32::from(value.span[combination]),
        by_weight: decision & DECISION_BY_WEIGHT != 0,
        fail_open: false,
    };
    let members = value.weighted.get(..usize::from(value.members))?;
    // The draw is scaled onto 0..span (`select::scale`); member i takes the targets
    // from the eligible members' shares before it.
    let before: u32 = (0..i)
        .filter(|&j| pool.eligible >> j & 1 == 1)
        .map(|j| if pool.by_weight { members[j].weight } else { 1 })
        .sum();
    if pool.span == 0 {
        return None;
    }
    let draw = u32::try_from((u64::from(before) << 32).div_ceil(u64::from(pool.span))).ok()?;
    let choice = weighted_pick(members, &pool, draw)?;
    (choice.index as usize == i).then_some(draw)
}

/// Each record of a member blob (TYPE..RDATA back to back) with an owner pointer to the
/// question in front: what user space writes for it.
pub(super) fn member_blob(records: &[u8]) -> Option<(Vec<u8>, u16)> {
    let mut out = Vec::new();
    let mut count = 0u16;
    let mut pos = 0;
    while pos < records.len() {
        let rdlen = usize::from(u16::from_be_bytes([*records.get(pos + 8)?, *records.get(pos + 9)?]));
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(records.get(pos..pos + 10 + rdlen)?);
        pos += 10 + rdlen;
        count += 1;
    }
    (out.len() <= MEMBER_BLOB).then_some((out, count))
}

/// The policy entry, when the set fits the table: ≤ 8 members, no aliases, members of
/// ≤ 64 octets, every outcome ≤ 512 octets, slots inside the health buffer.
pub(super) fn policy_value(policy: &PolicyView<'_>, qlen: usize) -> Option<PolicyValue> {
    let kind = match policy.kind {
        PolicyKind::Weighted => POLICY_WEIGHTED,
        PolicyKind::Failover => POLICY_FAILOVER,
        PolicyKind::Multivalue => POLICY_MULTIVALUE,
        PolicyKind::Zonal => POLICY_ZONAL,
        PolicyKind::Latency => POLICY_LATENCY,
        PolicyKind::Ip | PolicyKind::Geo => return None,
    };
    let Members {
        mut value,
        synthetic,
        largest,
        total,
    } = members(policy, kind)?;
    let n = synthetic.len();
    let answer = match policy.kind {
        PolicyKind::Weighted | PolicyKind::Failover | PolicyKind::Latency => largest,
        PolicyKind::Multivalue | PolicyKind::Zonal => total,
        PolicyKind::Ip | PolicyKind::Geo => return None,
    };
    if HEADER_LEN + qlen + 4 + answer + OPT_LEN > RESPONSE_MAX {
        return None;
    }
    let synthetic = &synthetic[..n];
    let slots: Vec<u32> = synthetic.iter().map(|m| m.slot).collect();
    for combination in 0..HEALTH_COMBINATIONS {
        let bitmap = [combination as u64];
        let (mask, fail_open, span, by_weight) = match policy.kind {
            PolicyKind::Weighted => {
                let pool = weighted_pool(synthetic, &bitmap, policy.fail_open_below_permille)?;
                (pool.eligible, pool.fail_open, pool.span, pool.by_weight)
            }
            PolicyKind::Failover => {
                let choice = select_failover(slots[0], slots.get(1).copied(), &bitmap);
                (1u64 << choice.index, choice.fail_open, 0, false)
            }
            PolicyKind::Multivalue => {
                let choices = select_multivalue(&slots, &bitmap, policy.fail_open_below_permille, 0);
                // With ≤ 8 members the subset never depends on the draw; make sure.
                let other = select_multivalue(&slots, &bitmap, policy.fail_open_below_permille, u32::MAX);
                if other != choices {
                    return None;
                }
                (choices.mask, choices.fail_open, 0, false)
            }
            PolicyKind::Zonal => {
                let choices = select_zonal(&slots, &bitmap);
                (choices.mask, choices.fail_open, 0, false)
            }
            PolicyKind::Latency => {
                let choice = select_latency(&slots, &bitmap)?;
                (1u64 << choice.index, choice.fail_open, 0, false)
            }
            PolicyKind::Ip | PolicyKind::Geo => return None,
        };
        // A latency set's slots say which member is chosen, not who is healthy.
        let any_unhealthy =
            policy.kind != PolicyKind::Latency && slots.iter().any(|&slot| !slot_healthy(&bitmap, slot));
        let degraded = policy.has_degraded_ttl && (any_unhealthy || fail_open);
        value.decision[combination] = (mask & 0xff) as u16
            | if degraded { DECISION_DEGRADED } else { 0 }
            | if by_weight { DECISION_BY_WEIGHT } else { 0 };
        value.span[combination] = u16::try_from(span).ok()?;
    }
    Some(value)
}

/// One chain of a client-aware set (`qdns_abi::client`) as a policy entry: the chain's
/// members in order (≤ 8, however many the set has; `origin` names each in the set),
/// and per health combination the first healthy one (none: the first, fail-open),
/// degraded while one of them is down — the choice `PolicySet::pick_for_client` makes.
/// An empty chain (no `*` member) gets an entry without members, which the program
/// passes (`pass_not_cached`).
pub(super) fn chain_value(policy: &PolicyView<'_>, qlen: usize, chain: &[u8]) -> Option<PolicyValue> {
    let at: Vec<usize> = chain.iter().map(|&m| usize::from(m)).collect();
    let Members {
        value,
        synthetic,
        largest,
        ..
    } = members_at(policy, POLICY_CLIENT, &at)?;
    if HEADER_LEN + qlen + 4 + largest + OPT_LEN > RESPONSE_MAX {
        return None;
    }
    chain_decisions(value, &synthetic, policy.has_degraded_ttl)
}

/// A chain's entry with its decisions: entry member `i` is the chain's `i`th.
fn chain_decisions(
    mut value: PolicyValue,
    synthetic: &[WeightedMember],
    has_degraded_ttl: bool,
) -> Option<PolicyValue> {
    let slots: Vec<u32> = synthetic.iter().map(|m| m.slot).collect();
    let order: Vec<u8> = (0..slots.len() as u8).collect();
    if order.is_empty() {
        return Some(value);
    }
    for combination in 0..HEALTH_COMBINATIONS {
        let bitmap = [combination as u64];
        let choice = select_chain(&order, &slots, &bitmap)?;
        if choice.index as usize >= slots.len() {
            return None;
        }
        let any_unhealthy = slots.iter().any(|&slot| !slot_healthy(&bitmap, slot));
        let degraded = has_degraded_ttl && (any_unhealthy || choice.fail_open);
        value.decision[combination] = 1 << choice.index | if degraded { DECISION_DEGRADED } else { 0 };
    }
    Some(value)
}

/// A set's members as a policy entry (decisions still empty), and what the decisions
/// are computed over.
struct Members {
    value: PolicyValue,
    /// Member `i` as the decision sees it: slot `i`, or always healthy.
    synthetic: Vec<WeightedMember>,
    /// The largest member's records, octets.
    largest: usize,
    /// All members' records, octets.
    total: usize,
}

/// The members of `policy` in an entry of `kind`, when they fit: ≤ 8, no aliases,
/// ≤ 64 octets each, slots inside the health buffer.
fn members(policy: &PolicyView<'_>, kind: u8) -> Option<Members> {
    let n = policy.members.len();
    if n == 0 {
        return None;
    }
    let all: Vec<usize> = (0..n).collect();
    members_at(policy, kind, &all)
}

/// [`members`] for the set's members at `at` (entry member `i` is the set's `at[i]`).
fn members_at(policy: &PolicyView<'_>, kind: u8, at: &[usize]) -> Option<Members> {
    let n = at.len();
    if n > POLICY_MEMBERS || policy.weighted.len() != policy.members.len() {
        return None;
    }
    let mut origin = [0u16; POLICY_MEMBERS];
    for (slot, &index) in origin.iter_mut().zip(at) {
        *slot = u16::try_from(index).ok()?;
    }
    let mut value = PolicyValue {
        kind,
        members: n as u8,
        always: 0,
        pad: 0,
        counter: policy.counter,
        origin,
        slots: [0; POLICY_MEMBERS],
        weighted: [WeightedMember { slot: 0, weight: 0 }; POLICY_MEMBERS],
        counts: [0; POLICY_MEMBERS],
        lens: [[0; 2]; POLICY_MEMBERS],
        sums: [[0; 2]; POLICY_MEMBERS],
        decision: [0; HEALTH_COMBINATIONS],
        span: [0; HEALTH_COMBINATIONS],
        blobs: [[[0; MEMBER_BLOB]; 2]; POLICY_MEMBERS],
    };
    // Members as they appear to the decision: member i is bit i of the combination.
    let mut synthetic = [WeightedMember { slot: 0, weight: 0 }; POLICY_MEMBERS];
    let (mut largest, mut total) = (0usize, 0usize);
    for (i, &index) in at.iter().enumerate() {
        let (member, weighted) = (policy.members.get(index)?, policy.weighted.get(index)?);
        let (normal, degraded) = (*member)?;
        let (normal, count) = member_blob(normal)?;
        let (degraded, _) = member_blob(degraded)?;
        for (ttl, blob) in [normal, degraded].iter().enumerate() {
            value.blobs[i][ttl][..blob.len()].copy_from_slice(blob);
            value.lens[i][ttl] = blob.len() as u16;
            value.sums[i][ttl] = fold(sum_words(blob, 0));
        }
        let size = usize::from(value.lens[i][0].max(value.lens[i][1]));
        largest = largest.max(size);
        total += size;
        value.counts[i] = count;
        value.weighted[i].weight = weighted.weight;
        synthetic[i] = WeightedMember {
            slot: i as u32,
            weight: weighted.weight,
        };
        if weighted.slot == ALWAYS_HEALTHY {
            value.always |= 1 << i;
            synthetic[i].slot = ALWAYS_HEALTHY;
        } else if weighted.slot >= (HEALTH_WORDS as u32) * WORD_BITS {
            return None;
        } else {
            value.slots[i] = weighted.slot;
            value.weighted[i].slot = weighted.slot;
        }
    }
    Some(Members {
        value,
        synthetic: synthetic[..n].to_vec(),
        largest,
        total,
    })
}
