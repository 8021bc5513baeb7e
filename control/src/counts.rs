//! Counters by outcome for the metrics: one atomic for each variant of an outcome enum
//! (zone transfers' and dynamic updates').
use std::{
    marker::PhantomData,
    sync::atomic::{AtomicU64, Ordering},
};

/// An enum whose variants are counted: every one, in metric order.
pub trait Outcome: Copy + PartialEq + 'static {
    /// Every variant.
    const ALL: &'static [Self];
}

/// A count for each of `N` outcomes (`N` = `O::ALL.len()`).
#[derive(Debug)]
pub struct Counts<O, const N: usize> {
    counts: [AtomicU64; N],
    outcome: PhantomData<O>,
}

impl<O, const N: usize> Default for Counts<O, N> {
    fn default() -> Self {
        Counts {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            outcome: PhantomData,
        }
    }
}

impl<O: Outcome, const N: usize> Counts<O, N> {
    /// Counts one `outcome`.
    pub fn count(&self, outcome: O) {
        if let Some(i) = O::ALL.iter().position(|&o| o == outcome) {
            if let Some(count) = self.counts.get(i) {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every outcome and its count.
    pub fn counts(&self) -> Vec<(O, u64)> {
        O::ALL
            .iter()
            .zip(&self.counts)
            .map(|(&o, c)| (o, c.load(Ordering::Relaxed)))
            .collect()
    }
}
