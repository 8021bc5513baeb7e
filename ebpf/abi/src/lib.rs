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
pub const STATS_MAP: &str = "QDNS_STATS_V2";
/// Name of the service-port set: UDP destination port (host order, `u16`) → 1 (`u8`).
pub const PORTS_MAP: &str = "QDNS_PORTS_V1";
/// Most service ports.
pub const MAX_PORTS: u32 = 8;

/// Longest name in wire format (RFC 1035 §2.3.4); bounds the qname loop.
pub const MAX_QNAME_LEN: usize = 255;
/// Most labels of a name (the root label included).
pub const MAX_LABELS: usize = 128;

/// Per-CPU counters of the XDP program. The variant names double as metric labels.
/// Every packet counts in `Seen` and in exactly one outcome counter: a pass reason.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Packets the program saw.
    Seen = 0,
    /// Passed: not IPv4/IPv6 (after at most one VLAN tag).
    PassNotIp = 1,
    /// Passed: not UDP (TCP queries go to user space), or IPv6 extension headers.
    PassNotUdp = 2,
    /// Passed: UDP, but not to the DNS service port.
    PassOtherPort = 3,
    /// Passed: an IP fragment.
    PassFragment = 4,
    /// Passed: headers or the question end before they should (user space decides).
    PassTruncated = 5,
    /// Passed: a DNS response, not a query.
    PassResponse = 6,
    /// Passed: not a plain QUERY with one question and no answer/authority records.
    PassNotSimpleQuery = 7,
    /// Passed: the question name is not plain labels within 255 octets.
    PassBadQname = 8,
    /// Passed: a well-formed query; the XDP answer path is not built yet.
    PassToUserSpace = 9,
}

impl Counter {
    /// Number of counters; the size of [`STATS_MAP`].
    pub const COUNT: u32 = 10;
    /// Every counter, in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Seen,
        Counter::PassNotIp,
        Counter::PassNotUdp,
        Counter::PassOtherPort,
        Counter::PassFragment,
        Counter::PassTruncated,
        Counter::PassResponse,
        Counter::PassNotSimpleQuery,
        Counter::PassBadQname,
        Counter::PassToUserSpace,
    ];

    /// The metric label of this counter.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Counter::Seen => "seen",
            Counter::PassNotIp => "pass_not_ip",
            Counter::PassNotUdp => "pass_not_udp",
            Counter::PassOtherPort => "pass_other_port",
            Counter::PassFragment => "pass_fragment",
            Counter::PassTruncated => "pass_truncated",
            Counter::PassResponse => "pass_response",
            Counter::PassNotSimpleQuery => "pass_not_simple_query",
            Counter::PassBadQname => "pass_bad_qname",
            Counter::PassToUserSpace => "pass_to_user_space",
        }
    }
}
