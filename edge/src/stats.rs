//! Query counters, shared by every worker (relaxed atomics on a cache-padded block each,
//! so workers never contend on a line).
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::wire::Rcode;

/// Counters of one worker.
#[derive(Default)]
#[repr(align(128))]
pub struct WorkerStats {
    /// Responses by RCODE ([`Rcode::index`]).
    pub rcode: [AtomicU64; Rcode::ALL.len()],
    /// Responses with TC set.
    pub truncated: AtomicU64,
    /// Datagrams dropped without an answer (shorter than a header, responses,
    /// oversized).
    pub dropped: AtomicU64,
}

impl WorkerStats {
    /// Counts one outcome.
    pub fn count(&self, outcome: Option<crate::Outcome>) {
        match outcome {
            Some(outcome) => {
                if let Some(slot) = self.rcode.get(outcome.rcode.index()) {
                    slot.fetch_add(1, Relaxed);
                }
                if outcome.truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
            }
            None => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Totals over all workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Responses by RCODE label.
    pub rcode: Vec<(&'static str, u64)>,
    /// Truncated responses.
    pub truncated: u64,
    /// Dropped datagrams.
    pub dropped: u64,
}

/// Sums `workers`.
pub fn totals<'a>(workers: impl Iterator<Item = &'a WorkerStats>) -> Totals {
    let mut rcode = [0u64; Rcode::ALL.len()];
    let mut totals = Totals::default();
    for worker in workers {
        for (sum, slot) in rcode.iter_mut().zip(&worker.rcode) {
            *sum += slot.load(Relaxed);
        }
        totals.truncated += worker.truncated.load(Relaxed);
        totals.dropped += worker.dropped.load(Relaxed);
    }
    totals.rcode = Rcode::ALL.iter().zip(rcode).map(|(r, n)| (r.label(), n)).collect();
    totals
}
