//! Answers per policy set and member (SPEC §8, `qdns_edge_answers_total{rrset,member,
//! path}`), counted in both paths at the same index.
//!
//! Each policy set (`owner TYPE`) gets, the first time an engine holding it is
//! compiled, a block of consecutive counters — one per member, at least
//! `POLICY_MEMBERS` (a multiple of it) — that it keeps for the edge's lifetime, across
//! snapshots, reloads and XDP table generations, so a counter never changes meaning and
//! never goes back. (A set that later outgrows its block gets a new one: its counters
//! start again from zero, which Prometheus reads as a reset.) Member `i` of the set
//! counts at block base + `i`. The user-space workers count in arrays of their own
//! ([`WorkerStats`]'s `answers`, relaxed atomics, no sharing); the XDP program, which
//! answers sets of up to `POLICY_MEMBERS` members, in its per-CPU `QDNS_ANSWERS_V1`
//! map. Once [`ANSWER_COUNTERS`] are given out, further sets are not counted per member
//! (their answers still count in the totals); [`AnswerSets::overflowed`] says how many.
//!
//! [`WorkerStats`]: crate::stats::WorkerStats
use std::{collections::HashMap, sync::Mutex};

use qdns_abi::answer::{ANSWER_COUNTERS, NO_ANSWER_COUNTER, POLICY_MEMBERS};

/// The counter blocks given out so far.
#[derive(Debug, Default)]
pub struct AnswerSets {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// `owner TYPE` → (first counter, counters).
    blocks: HashMap<String, (u32, u32)>,
    /// The first counter not given out.
    next: u32,
    /// Sets refused a block (warned about once each).
    overflowed: std::collections::HashSet<String>,
}

impl PartialEq for AnswerSets {
    /// The same registry (options compare equal only when they share it).
    fn eq(&self, other: &AnswerSets) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for AnswerSets {}

impl AnswerSets {
    /// The index of member 0's counter for set `label` of `members` members, giving it
    /// a block if it has none (or a smaller one); [`NO_ANSWER_COUNTER`] once the
    /// counters run out.
    pub fn counter(&self, label: &str, members: usize) -> u32 {
        let Ok(mut inner) = self.inner.lock() else {
            return NO_ANSWER_COUNTER;
        };
        let members = u32::try_from(members).unwrap_or(u32::MAX);
        if let Some(&(base, len)) = inner.blocks.get(label) {
            if members <= len {
                return base;
            }
        }
        let len = members.max(1).div_ceil(POLICY_MEMBERS as u32) * POLICY_MEMBERS as u32;
        let base = inner.next;
        if base.saturating_add(len) > ANSWER_COUNTERS {
            if inner.overflowed.insert(label.to_owned()) {
                tracing::warn!(
                    set = label,
                    limit = ANSWER_COUNTERS,
                    "answers of this policy set are not counted per member: the answer counters are all given out"
                );
            }
            return NO_ANSWER_COUNTER;
        }
        inner.next = base + len;
        inner.blocks.insert(label.to_owned(), (base, len));
        base
    }

    /// Policy sets refused a block.
    #[must_use]
    pub fn overflowed(&self) -> usize {
        self.inner.lock().map_or(0, |inner| inner.overflowed.len())
    }
}

/// The members one answer came from: counter base and the members' bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnsweredMembers {
    /// Index of member 0's counter.
    pub counter: u32,
    /// Bit `i`: member `i` answered.
    pub mask: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_stable_and_bounded() {
        let eight = POLICY_MEMBERS as u32;
        let sets = AnswerSets::default();
        assert_eq!(sets.counter("www.shop.example. A", 3), 0);
        assert_eq!(sets.counter("api.shop.example. A", 2), eight);
        assert_eq!(sets.counter("www.shop.example. A", 8), 0, "a set keeps its block");
        assert_eq!(sets.counter("big.shop.example. A", 20), 2 * eight, "24 counters");
        assert_eq!(
            sets.counter("www.shop.example. A", 9),
            5 * eight,
            "outgrown: a new block of 16"
        );
        let mut i = 0;
        while sets.counter(&format!("s{i}. A"), 1) != NO_ANSWER_COUNTER {
            i += 1;
        }
        assert_eq!(i, ANSWER_COUNTERS / eight - 7, "every counter given out");
        assert_eq!(sets.counter("one.too.many. A", 1), NO_ANSWER_COUNTER);
        assert_eq!(sets.overflowed(), 2);
        assert_eq!(sets.counter("api.shop.example. A", 2), eight, "old sets keep theirs");
    }
}
