//! Query counters, shared by every worker (relaxed atomics on a cache-padded block each,
//! so workers never contend on a line).
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::wire::Rcode;

/// Query types counted apart; the rest count as `other`.
pub const QTYPES: [(u16, &str); 12] = [
    (1, "A"),
    (2, "NS"),
    (5, "CNAME"),
    (6, "SOA"),
    (12, "PTR"),
    (15, "MX"),
    (16, "TXT"),
    (28, "AAAA"),
    (33, "SRV"),
    (43, "DS"),
    (255, "ANY"),
    (257, "CAA"),
];

/// Index of `qtype` in [`QTYPES`], or `QTYPES.len()` for other types.
#[must_use]
pub fn qtype_index(qtype: u16) -> usize {
    QTYPES.iter().position(|&(t, _)| t == qtype).unwrap_or(QTYPES.len())
}

/// Counters of one worker.
#[repr(align(128))]
pub struct WorkerStats {
    /// Responses by RCODE ([`Rcode::index`]).
    pub rcode: [AtomicU64; Rcode::ALL.len()],
    /// Responses by QTYPE ([`qtype_index`]).
    pub qtype: [AtomicU64; QTYPES.len() + 1],
    /// Responses with TC set.
    pub truncated: AtomicU64,
    /// Datagrams dropped without an answer (shorter than a header, responses,
    /// oversized).
    pub dropped: AtomicU64,
    /// Responses the rate limiter held back: `[dropped, slipped]`.
    pub rrl: [AtomicU64; 2],
    /// TCP: idle connections closed to make room for a new one (the listener's pool
    /// count, mirrored here for the metrics).
    pub evicted: AtomicU64,
    /// UDP helpers: times this thread was called in because its crew's lead fell
    /// behind (see `server::udp`).
    pub helper_wakeups: AtomicU64,
    /// Answers per policy member, indexed as `crate::answers` assigns
    /// (`ANSWER_COUNTERS` of them: 256 KiB per worker).
    pub answers: Box<[AtomicU64]>,
}

impl Default for WorkerStats {
    fn default() -> WorkerStats {
        WorkerStats {
            rcode: Default::default(),
            qtype: Default::default(),
            truncated: AtomicU64::default(),
            dropped: AtomicU64::default(),
            rrl: Default::default(),
            evicted: AtomicU64::default(),
            helper_wakeups: AtomicU64::default(),
            answers: (0..qdns_abi::answer::ANSWER_COUNTERS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

impl WorkerStats {
    /// Counts one outcome.
    pub fn count(&self, outcome: Option<crate::Outcome>) {
        match outcome {
            Some(outcome) => {
                if let Some(slot) = self.rcode.get(outcome.rcode.index()) {
                    slot.fetch_add(1, Relaxed);
                }
                if let Some(slot) = self.qtype.get(qtype_index(outcome.qtype)) {
                    slot.fetch_add(1, Relaxed);
                }
                if outcome.truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
                if let Some(members) = outcome.members {
                    self.count_members(members);
                }
            }
            None => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Adds one to the counter of each member in `members`.
    fn count_members(&self, members: crate::answers::AnsweredMembers) {
        let mut mask = members.mask;
        while mask != 0 {
            let i = mask.trailing_zeros();
            mask &= mask - 1;
            if let Some(slot) = self.answers.get(members.counter.wrapping_add(i) as usize) {
                slot.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Answers counted at counter `index`, summed over `workers`.
pub fn answers<'a>(workers: impl Iterator<Item = &'a WorkerStats>, index: u32) -> u64 {
    workers
        .filter_map(|w| w.answers.get(index as usize))
        .map(|slot| slot.load(Relaxed))
        .sum()
}

/// Totals over all workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Responses by RCODE label.
    pub rcode: Vec<(&'static str, u64)>,
    /// Responses by QTYPE label.
    pub qtype: Vec<(&'static str, u64)>,
    /// Truncated responses.
    pub truncated: u64,
    /// Dropped datagrams.
    pub dropped: u64,
    /// Responses the rate limiter dropped.
    pub rrl_dropped: u64,
    /// Responses the rate limiter sent slipped.
    pub rrl_slipped: u64,
    /// UDP helpers called in.
    pub helper_wakeups: u64,
}

/// `label=count` pairs for a log line, the zero counts left out (`-` when all are).
#[must_use]
pub fn counts(pairs: &[(&str, u64)]) -> String {
    let text: Vec<String> = pairs
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(label, n)| format!("{label}={n}"))
        .collect();
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.join(" ")
    }
}

/// For the log line at stop: `responses NOERROR=… (A=…) truncated=… dropped=…`.
impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let others = [
            ("truncated", self.truncated),
            ("dropped", self.dropped),
            ("rrl_dropped", self.rrl_dropped),
            ("rrl_slipped", self.rrl_slipped),
            ("helper_wakeups", self.helper_wakeups),
        ];
        write!(
            f,
            "responses {} (by type {}) {}",
            counts(&self.rcode),
            counts(&self.qtype),
            counts(&others)
        )
    }
}

/// Sums `workers`.
pub fn totals<'a>(workers: impl Iterator<Item = &'a WorkerStats>) -> Totals {
    let mut rcode = [0u64; Rcode::ALL.len()];
    let mut qtype = [0u64; QTYPES.len() + 1];
    let mut totals = Totals::default();
    for worker in workers {
        for (sum, slot) in rcode.iter_mut().zip(&worker.rcode) {
            *sum += slot.load(Relaxed);
        }
        for (sum, slot) in qtype.iter_mut().zip(&worker.qtype) {
            *sum += slot.load(Relaxed);
        }
        totals.truncated += worker.truncated.load(Relaxed);
        totals.dropped += worker.dropped.load(Relaxed);
        totals.rrl_dropped += worker.rrl[0].load(Relaxed);
        totals.rrl_slipped += worker.rrl[1].load(Relaxed);
        totals.helper_wakeups += worker.helper_wakeups.load(Relaxed);
    }
    totals.rcode = Rcode::ALL.iter().zip(rcode).map(|(r, n)| (r.label(), n)).collect();
    totals.qtype = QTYPES
        .iter()
        .map(|&(_, label)| label)
        .chain(["other"])
        .zip(qtype)
        .collect();
    totals
}

#[cfg(test)]
mod tests {
    use super::{counts, Totals};

    #[test]
    fn totals_read_as_label_count_pairs_without_the_zeros() {
        let totals = Totals {
            rcode: vec![("NOERROR", 2), ("NXDOMAIN", 0), ("REFUSED", 1)],
            qtype: vec![("A", 3)],
            truncated: 1,
            ..Totals::default()
        };
        assert_eq!(
            totals.to_string(),
            "responses NOERROR=2 REFUSED=1 (by type A=3) truncated=1"
        );
        assert_eq!(counts(&[("seen", 0)]), "-");
        let tables = crate::xdp::table::TableStats {
            plain: 81,
            bytes: 35_776,
            ..Default::default()
        };
        assert_eq!(tables.to_string(), "plain=81 bytes=35776");
        // As the testkit reads them back from a log line.
        let line = format!(
            "INFO qdns_edge: detaching XDP counters={} interfaces=eth0",
            counts(&[("seen", 9), ("pass_tcp", 2), ("pass_other", 3)])
        );
        assert_eq!(qdns_testkit::fixtures::logged_count(&line, "seen"), 9);
        assert_eq!(qdns_testkit::fixtures::logged_count(&line, "pass_"), 5);
        assert_eq!(qdns_testkit::fixtures::logged_count(&line, "answered_"), 0);
    }
}
