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

pub mod answer;
pub mod client;
pub mod cookie;
pub mod denial;
pub mod health;
pub mod name;
pub mod rrl;
pub mod select;
pub mod slots;

/// Name of the per-CPU statistics array (one `u64` per [`Counter`]).
pub const STATS_MAP: &str = "QDNS_STATS_V18";
/// Name of the port bitmaps: three runs of [`PORT_WORDS`] `u64`; in each, port `p`
/// (host order) is set when bit `p % 64` of word `p / 64` is. The first run holds the
/// DNS service ports; the runs at [`PORTS_ANY_V4`] and [`PORTS_ANY_V6`] the ports the
/// edge listens on at every address of a family (`0.0.0.0:p`, `[::]:p`). Array lookups
/// the JIT inlines, where a hash set cost a hash and a compare per packet.
pub const PORTS_MAP: &str = "QDNS_PORTS_V3";
/// Words of one port bitmap: one bit per UDP port.
pub const PORT_WORDS: u32 = 65_536 / 64;
/// First word of the bitmap of ports listened on at every IPv4 address.
pub const PORTS_ANY_V4: u32 = PORT_WORDS;
/// First word of the bitmap of ports listened on at every IPv6 address.
pub const PORTS_ANY_V6: u32 = 2 * PORT_WORDS;
/// Entries of [`PORTS_MAP`].
pub const PORTS_ENTRIES: u32 = 3 * PORT_WORDS;
/// Name of the listen-address table: an array of [`LISTEN_SLOTS`] [`ListenKey`]s, open
/// addressing from [`ListenKey::slot`] over at most [`LISTEN_PROBES`] slots, an empty
/// slot (version 0) ending the search. Written at load. The program answers a query
/// only when its destination address and port are there, or its port is in the
/// family's wildcard bitmap: the operator's `--listen` addresses, not every address of
/// the interface. An array, not a hash map: the lookups are inlined (the hash map's
/// cost 20 ns a query, measured).
pub const LISTEN_MAP: &str = "QDNS_LISTEN_V2";
/// Slots of [`LISTEN_MAP`] (a power of two).
pub const LISTEN_SLOTS: u32 = 256;
/// Slots a lookup visits at most.
pub const LISTEN_PROBES: u32 = 8;
/// Most addresses (not wildcards) the table takes.
pub const LISTEN_MAX: usize = 64;

/// A listen address as the program looks it up: the destination address's octets as
/// little-endian words (IPv4 in the first word, the rest zero), the UDP port (host
/// order) and the IP version (0: an empty slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ListenKey {
    /// The address octets, four per word, first octet lowest.
    pub addr: [u32; 4],
    /// The port.
    pub port: u16,
    /// 4 or 6; 0 in an empty slot.
    pub version: u16,
}

const _: () = assert!(core::mem::size_of::<ListenKey>() == 20);

impl ListenKey {
    /// The first slot of this key's search in [`LISTEN_MAP`] under `seed` (the loader
    /// picks a seed that places every address within [`LISTEN_PROBES`] slots).
    #[must_use]
    #[inline(always)]
    pub const fn slot(&self, seed: u32) -> u32 {
        const MIX: u32 = 0x9e37_79b1;
        let mut h = seed ^ ((self.port as u32) << 16 | self.version as u32);
        h = (h ^ self.addr[0]).wrapping_mul(MIX);
        h = (h ^ self.addr[1]).wrapping_mul(MIX);
        h = (h ^ self.addr[2]).wrapping_mul(MIX);
        h = (h ^ self.addr[3]).wrapping_mul(MIX);
        (h ^ h >> 16) & (LISTEN_SLOTS - 1)
    }

    /// True for `0.0.0.0` and `::`.
    #[must_use]
    pub const fn is_wildcard(&self) -> bool {
        self.addr[0] | self.addr[1] | self.addr[2] | self.addr[3] == 0
    }

    /// The key of an IPv4 address (`[0; 4]` octets: the wildcard).
    #[must_use]
    pub const fn v4(octets: [u8; 4], port: u16) -> ListenKey {
        ListenKey {
            addr: [u32::from_le_bytes(octets), 0, 0, 0],
            port,
            version: 4,
        }
    }

    /// The key of an IPv6 address (all zero: the wildcard).
    #[must_use]
    pub const fn v6(octets: [u8; 16], port: u16) -> ListenKey {
        let o = octets;
        ListenKey {
            addr: [
                u32::from_le_bytes([o[0], o[1], o[2], o[3]]),
                u32::from_le_bytes([o[4], o[5], o[6], o[7]]),
                u32::from_le_bytes([o[8], o[9], o[10], o[11]]),
                u32::from_le_bytes([o[12], o[13], o[14], o[15]]),
            ],
            port,
            version: 6,
        }
    }
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident = $index:literal, $label:literal;)*) => {
        /// Per-CPU counters of the XDP program. Every packet counts in `Seen` and in
        /// exactly one outcome counter: an `Answered*` kind or a `Pass*` reason. Answers
        /// whose frame had to grow at the front also count in `MovedToFront`, answers to
        /// DO=1 queries in `WithDo`, queries for names over 64 octets in `LongName`.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter {
            $($(#[doc = $doc])* $name = $index,)*
        }

        impl Counter {
            /// Every counter, in index order.
            pub const ALL: &'static [Counter] = &[$(Counter::$name,)*];
            /// Number of counters; the size of [`STATS_MAP`].
            pub const COUNT: u32 = Self::ALL.len() as u32;

            /// The metric label of this counter.
            #[must_use]
            pub const fn label(self) -> &'static str {
                match self {
                    $(Counter::$name => $label,)*
                }
            }
        }
    };
}

counters! {
    /// Packets the program saw.
    Seen = 0, "seen";
    /// Passed: not IPv4/IPv6 (after at most one VLAN tag).
    PassNotIp = 1, "pass_not_ip";
    /// Passed: not UDP (TCP queries go to user space), or IPv6 extension headers.
    PassNotUdp = 2, "pass_not_udp";
    /// Passed: UDP, but not to the DNS service port.
    PassOtherPort = 3, "pass_other_port";
    /// Passed: an IP fragment.
    PassFragment = 4, "pass_fragment";
    /// Passed (malformed): headers or the question end before they should.
    PassTruncated = 5, "pass_truncated";
    /// Passed: a DNS response, not a query.
    PassResponse = 6, "pass_response";
    /// Passed: not a plain QUERY with one question and no answer/authority records.
    PassNotSimpleQuery = 7, "pass_not_simple_query";
    /// Passed (malformed): the question name is not plain labels (a compression pointer
    /// or a label over 63 octets) within its first 64 octets.
    PassBadQname = 8, "pass_bad_qname";
    /// Passed: no answer table loaded yet.
    PassNotLoaded = 9, "pass_not_loaded";
    /// Passed: the name is over 64 octets and the long-name stage is not installed (or
    /// the name is not plain labels within 255 octets).
    PassLongName = 10, "pass_long_name";
    /// Passed: class not IN, or a meta/special QTYPE (0, OPT, 128–254; ANY is answered).
    PassSpecialQuery = 11, "pass_special_query";
    /// Passed: EDNS the fast path does not answer (version > 0, a record other than
    /// OPT, more than 16 options, malformed options). DO=1 and options are answered.
    PassEdns = 12, "pass_edns";
    /// Passed (malformed): IP/UDP lengths disagree or octets follow the message.
    PassBadLength = 13, "pass_bad_length";
    /// Passed: user space answers this name (a CNAME chain through a policy set, a
    /// policy set at a wildcard, an alias, a wildcard answer whose bytes depend on the
    /// question, a deep miss, names whose hashes collide).
    PassNotCached = 14, "pass_not_cached";
    /// Passed: the name is in no zone of ours (user space refuses it).
    PassOutsideZones = 15, "pass_outside_zones";
    /// Passed: the frame could not grow to hold the answer.
    PassNoRoom = 16, "pass_no_room";
    /// Answered: a plain record set.
    AnsweredPlain = 17, "answered_plain";
    /// Answered: a weighted set.
    AnsweredWeighted = 18, "answered_weighted";
    /// Answered: a failover set.
    AnsweredFailover = 19, "answered_failover";
    /// Answered: a multivalue set.
    AnsweredMultivalue = 20, "answered_multivalue";
    /// Answered: a zonal set.
    AnsweredZonal = 21, "answered_zonal";
    /// Answered: NODATA.
    AnsweredNodata = 22, "answered_nodata";
    /// Answered: NXDOMAIN.
    AnsweredNxdomain = 23, "answered_nxdomain";
    /// Not an outcome: an answer whose frame had no tailroom and grew at the front.
    MovedToFront = 24, "moved_to_front";
    /// Not an outcome: an answer to a query with DO=1 (what validating resolvers send;
    /// also counted in its `Answered*` kind, so the label avoids that prefix).
    WithDo = 25, "with_do";
    /// Answered: synthesised from a wildcard (RFC 4592), records or NODATA.
    AnsweredWildcard = 26, "answered_wildcard";
    /// Passed: the answer is larger than this client takes — 512 octets without EDNS,
    /// else its EDNS size capped by ours; user space sets TC or leaves optional records
    /// out (RFC 2181 §9, RFC 6891 §7).
    PassNeedsTc = 27, "pass_needs_tc";
    /// Passed: a name at or below a zone cut (the referral's bytes depend on the question).
    PassReferral = 28, "pass_referral";
    /// Passed: the answer is over 1,232 octets (XDP does not fragment; user space and
    /// the kernel send it when `max_udp_payload` allows) or truncated even at our limit.
    PassLarge = 29, "pass_large";
    /// Passed: an NSID request while the edge has an NSID set (user space adds it).
    PassNsid = 30, "pass_nsid";
    /// Answered: a referral (RFC 1034 §4.3.2 step 3b: the cut's NS, then glue).
    AnsweredReferral = 31, "answered_referral";
    /// A response over the rate limit, not sent (`rrl`).
    RrlDropped = 32, "rrl_dropped";
    /// A response over the rate limit, sent slipped (TC=1, no records).
    RrlSlipped = 33, "rrl_slipped";
    /// Not an outcome: a query whose name is over 64 octets, handed to the long-name
    /// stage (its outcome is counted there).
    LongName = 34, "long_name";
    /// Passed: a DO=1 query for a name of a DNSSEC-signed zone whose answer has no
    /// signed variant in the tables (policy sets over the outcome bound, sets with
    /// aliases, answers too large): user space answers it with its RRSIGs. Wildcards
    /// and NXDOMAIN without a gap answer are counted apart.
    PassSigned = 35, "pass_signed";
    /// Answered: a DO=1 query of a signed zone from the entry's signed variant (the
    /// answer with its RRSIGs).
    AnsweredSigned = 36, "answered_signed";
    /// Passed: UDP to a service port but to an address the edge does not listen on
    /// (another address of the interface): the kernel's sockets and firewall decide.
    PassOtherAddress = 37, "pass_other_address";
    /// Passed: the query's EDNS Client Subnet option (RFC 7871) is malformed or
    /// repeated: user space answers FORMERR (well-formed ones are echoed here).
    PassClientSubnet = 38, "pass_client_subnet";
    /// Passed: the name's answer depends on the client's address (`ip`, `geo` sets):
    /// user space decides it (SPEC §10).
    PassClientAware = 39, "pass_client_aware";
    /// Answered: a client-aware set (`ip`, `geo`), decided by the client's address.
    AnsweredClient = 40, "answered_client";
    /// Answered: a latency set, the member control chose (SPEC §10).
    AnsweredLatency = 41, "answered_latency";
    /// Passed (malformed): a COOKIE option of a length RFC 7873 §5.2.2 forbids (not 8,
    /// not 16 to 40 octets): user space answers FORMERR.
    PassCookie = 42, "pass_cookie";
    /// Not an outcome: an answer to a query whose server cookie was valid (the rate
    /// limiter lets it through; also counted in its `Answered*` kind).
    ValidCookie = 43, "valid_cookie";
    /// Passed: a DO=1 query a wildcard of a signed zone answers whose synthesis the
    /// tables do not hold (NODATA from the wildcard, records naming other owners).
    PassSignedWildcard = 44, "pass_signed_wildcard";
    /// Passed: a signed NXDOMAIN the gap tables do not answer (`qdns_abi::denial`): the
    /// label below the encloser has a child's key (its first 16 octets), the gap's
    /// answer did not fit, or the name is over 64 octets.
    PassSignedGap = 45, "pass_signed_gap";
}

impl Counter {
    /// True for the `Answered*` counters.
    #[must_use]
    pub const fn is_answer(self) -> bool {
        matches!(
            self,
            Counter::AnsweredPlain
                | Counter::AnsweredWeighted
                | Counter::AnsweredFailover
                | Counter::AnsweredMultivalue
                | Counter::AnsweredZonal
                | Counter::AnsweredNodata
                | Counter::AnsweredNxdomain
                | Counter::AnsweredWildcard
                | Counter::AnsweredReferral
                | Counter::AnsweredSigned
                | Counter::AnsweredClient
                | Counter::AnsweredLatency
        )
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (each line): the type is `#[repr(C)]`, `Copy`, has no padding (asserted by
    // the size checks beside it) and every bit pattern is a valid value.
    // SAFETY: as said above, for `AnswerKey`.
    unsafe impl aya::Pod for crate::answer::AnswerKey {}
    // SAFETY: as said above, for `AnswerValue`.
    unsafe impl aya::Pod for crate::answer::AnswerValue {}
    // SAFETY: as said above, for `PolicyKey`.
    unsafe impl aya::Pod for crate::answer::PolicyKey {}
    // SAFETY: as said above, for `PolicyValue`.
    unsafe impl aya::Pod for crate::answer::PolicyValue {}
    // SAFETY: as said above, for `LargeTail`.
    unsafe impl aya::Pod for crate::answer::LargeTail {}
    // SAFETY: as said above, for `MediumTail`.
    unsafe impl aya::Pod for crate::answer::MediumTail {}
    // SAFETY: as said above, for `SmallTail`.
    unsafe impl aya::Pod for crate::answer::SmallTail {}
    // SAFETY: as said above, for `LongName`.
    unsafe impl aya::Pod for crate::answer::LongName {}
    // SAFETY: as above.
    unsafe impl aya::Pod for crate::denial::Gap {}
    // SAFETY: as above.
    unsafe impl aya::Pod for crate::denial::Piece {}
    // SAFETY: as said above, for `ClientSet`.
    unsafe impl aya::Pod for crate::client::ClientSet {}
    // SAFETY: as said above, for `ClientBlock`.
    unsafe impl aya::Pod for crate::client::ClientBlock {}
    // SAFETY: as said above, for `Bucket`.
    unsafe impl aya::Pod for crate::slots::Bucket {}
    // SAFETY: as said above, for `RrlBucket`.
    unsafe impl aya::Pod for crate::rrl::RrlBucket {}
    // SAFETY: as said above, for `ListenKey` (20 octets, asserted).
    unsafe impl aya::Pod for crate::ListenKey {}
    // SAFETY: as said above, for `CookieSecrets` (40 octets, asserted).
    unsafe impl aya::Pod for crate::cookie::CookieSecrets {}
}
