//! Every answer a set can give, so control can sign each before health picks one.
//!
//! A plain set has one answer. Weighted and failover give one member's records; an
//! alias member gives whatever its target can. Multivalue gives up to
//! [`qdns_abi::select::MULTIVALUE_MAX`] members and zonal any non-empty set of AZs, so
//! their answers are the subsets: fine for the ≤ 8 AZs or members sets have, and
//! bounded by [`MAX_ANSWERS`] (a multivalue set of 12 members has 3,797 answers of 1 to
//! 8 members; one of 13 would need 6,475 signatures and is refused with a reason).
//! Signing the current answer in control and shipping it with each health change was
//! the alternative; it makes answers depend on control being up at every health
//! change, which static stability forbids (edges must keep answering signed when
//! control is gone).
use std::collections::HashMap;

use qdns_abi::select::MULTIVALUE_MAX;

use super::answer_key;
use crate::{Answer, PolicyKind, RecordSet};

/// Most answers signed for one set.
pub const MAX_ANSWERS: usize = 4096;
/// Longest alias chain followed (the loader rejects loops; the edge follows 8).
const MAX_DEPTH: u32 = 8;

/// One answer: its RDATA in the order the edge writes them.
pub type Rdatas<'z> = Vec<&'z [u8]>;

/// The zone's sets by (owner, type).
pub struct SetIndex<'z> {
    sets: HashMap<(&'z [u8], u16), &'z RecordSet>,
}

impl<'z> SetIndex<'z> {
    /// Indexes `rrsets`.
    #[must_use]
    pub fn new(rrsets: &'z [RecordSet]) -> SetIndex<'z> {
        SetIndex {
            sets: rrsets.iter().map(|s| ((s.name.as_slice(), s.rtype), s)).collect(),
        }
    }

    /// The set of `name` and `rtype`.
    #[must_use]
    pub fn get(&self, name: &[u8], rtype: u16) -> Option<&'z RecordSet> {
        self.sets.get(&(name, rtype)).copied()
    }
}

/// Every distinct answer `set` can give (distinct by [`answer_key`]).
pub fn possible<'z>(index: &SetIndex<'z>, set: &'z RecordSet) -> Result<Vec<Rdatas<'z>>, String> {
    let mut all = answers_of(index, set, 0)?;
    let mut seen = std::collections::HashSet::new();
    all.retain(|answer| seen.insert(answer_key(answer.iter().copied(), 0)));
    Ok(all)
}

fn answers_of<'z>(index: &SetIndex<'z>, set: &'z RecordSet, depth: u32) -> Result<Vec<Rdatas<'z>>, String> {
    let Some(policy) = set.policy.as_deref() else {
        return Ok(vec![set.rdata.iter().map(Vec::as_slice).collect()]);
    };
    // What each member can answer on its own.
    let mut per_member = Vec::with_capacity(policy.members.len());
    for member in &policy.members {
        let answers = match &member.answer {
            Answer::Values(values) => vec![values.iter().map(Vec::as_slice).collect()],
            Answer::Alias { target } if depth < MAX_DEPTH => match index.get(target, set.rtype) {
                Some(target) => answers_of(index, target, depth + 1)?,
                None => Vec::new(),
            },
            Answer::Alias { .. } => Vec::new(),
        };
        per_member.push(answers);
    }
    let most = match policy.kind {
        PolicyKind::Weighted | PolicyKind::Failover | PolicyKind::Ip | PolicyKind::Geo | PolicyKind::Latency => 1,
        PolicyKind::Multivalue => MULTIVALUE_MAX as usize,
        PolicyKind::Zonal => per_member.len(),
    };
    let mut out = Vec::new();
    if most == 1 {
        for answers in per_member {
            out.extend(answers);
            if out.len() > MAX_ANSWERS {
                return Err(too_many());
            }
        }
        return Ok(out);
    }
    let n = per_member.len();
    if n > 20 {
        return Err(too_many());
    }
    for mask in 1u32..(1u32 << n) {
        if mask.count_ones() as usize > most {
            continue;
        }
        // The product of the chosen members' alternatives, concatenated in member order.
        let mut partial: Vec<Rdatas<'z>> = vec![Vec::new()];
        for (i, answers) in per_member.iter().enumerate() {
            if mask >> i & 1 == 0 {
                continue;
            }
            let mut next = Vec::with_capacity(partial.len() * answers.len().max(1));
            for head in &partial {
                for tail in answers {
                    let mut joined = head.clone();
                    joined.extend_from_slice(tail);
                    next.push(joined);
                }
            }
            partial = next;
            if partial.len() > MAX_ANSWERS {
                return Err(too_many());
            }
        }
        out.extend(partial.into_iter().filter(|a| !a.is_empty()));
        if out.len() > MAX_ANSWERS {
            return Err(too_many());
        }
    }
    Ok(out)
}

/// The TTLs an answer of `set` can go out with: its own, its `degraded_ttl`, and those
/// of the sets its alias members answer from.
#[must_use]
pub fn ttls(index: &SetIndex<'_>, set: &RecordSet) -> Vec<u32> {
    let mut out = vec![set.ttl];
    let mut stack = vec![(set, 0u32)];
    while let Some((set, depth)) = stack.pop() {
        let Some(policy) = set.policy.as_deref() else {
            out.push(set.ttl);
            continue;
        };
        out.push(set.ttl);
        out.extend(policy.degraded_ttl);
        for member in &policy.members {
            if let (Answer::Alias { target }, true) = (&member.answer, depth < MAX_DEPTH) {
                if let Some(target) = index.get(target, set.rtype) {
                    stack.push((target, depth + 1));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn too_many() -> String {
    format!(
        "health can give more than {MAX_ANSWERS} different answers here (a multivalue set of 13 or more \
         members, or a zonal set of 13 or more AZs); each must be signed in advance"
    )
}
