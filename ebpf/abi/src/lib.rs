//! qdns-abi: everything the XDP program and user space must agree on.
//!
//! One source of truth, compiled for `bpfel-unknown-none` (by the XDP crate) and for the
//! host (by `qdns-edge` and `qdns-control`): map names, map key/value layouts, per-CPU
//! counter indices, and the pure answer-selection and derived-health functions of SPEC
//! §3 ([`select`], [`health`]), so both data paths choose identically. Every type here
//! is `#[repr(C)]`, `Copy`, and free of implicit padding; a `const` size assertion sits
//! beside each one. An incompatible layout change bumps the `_V<n>` suffix of the map
//! name, so a stale object fails with "map not found" instead of being misread.
#![no_std]
#![warn(missing_docs)]
#![expect(
    clippy::inline_always,
    reason = "the XDP program calls these on the packet path; inlining keeps each within the verifier's view and off the BPF call stack"
)]

#[cfg(test)]
extern crate std;

pub mod health;
pub mod select;

/// Name of the per-CPU statistics array (one `u64` per [`Counter`]).
pub const STATS_MAP: &str = "QDNS_STATS_V1";

/// Per-CPU counters of the XDP program. The variant names double as metric labels.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Packets the program saw.
    Seen = 0,
    /// Packets handed to the kernel stack (and so to the user-space responder).
    Pass = 1,
}

impl Counter {
    /// Number of counters; the size of [`STATS_MAP`].
    pub const COUNT: u32 = 2;
    /// Every counter, in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [Counter::Seen, Counter::Pass];

    /// The metric label of this counter.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Counter::Seen => "seen",
            Counter::Pass => "pass",
        }
    }
}
