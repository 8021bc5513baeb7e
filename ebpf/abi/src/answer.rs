//! The answer tables of the XDP fast path: key and value layouts shared by the program
//! and the loader in `qdns-edge`, and the checksum arithmetic both sides use.
//!
//! ```text
//!  CONFIG[0] = generation (low 32 bits) | health buffer (bit 32) | bank (bit 33)
//!              ← one aligned u64 store
//!  CONFIG[3 + bank] = bucket mask of the bank's slot table
//!  SLOTS[bank]    (slot hash of name and qtype) → record index   (crate::slots)
//!  RECORDS[bank]  index → name + Plain | Policy | Node | Referral | Pass
//!  POLICIES[bank] id → members with precomputed record bytes
//!  SMALL[bank]    id → tails of TAIL_MAX + 1 to SMALL_TAIL_MAX octets, and node
//!                 entries' negative SOA (one per zone: identical tails are shared)
//!  MEDIUM[bank]   id → tails up to MEDIUM_TAIL_MAX octets, nothing to relocate
//!  LARGE[bank]    id → tails over SMALL_TAIL_MAX octets (up to LARGE_TAIL_MAX)
//!  LONG_NAMES[bank] id → the octets in front of a long name's 64-octet window
//!  HEALTH[0|1] = bitmap buffers; the inactive one is written, then CONFIG flips
//! ```
//!
//! Each generation's tables are arrays sized to its snapshot, created by the loader and
//! placed in map-of-maps under the generation's bank (two banks: the one queries read
//! and the one being written). The program reads the active word once per packet and
//! reads only that generation's bank: a query sees one snapshot whole, never a mix (the
//! loader fills a new bank beside the old one, flips CONFIG, waits an RCU grace period
//! so no run still reads the old bank, then swaps its tables for empty ones). The slot holds a
//! 64-bit hash of the lowercase name and type and the record the name itself, which the
//! program compares with the query's word for word — a hash never decides alone.

/// Name of the slot tables (array of maps: one [`crate::slots::Bucket`] array per bank).
pub const SLOTS_MAP: &str = "QDNS_SLOTS_V1";
/// Name of the record tables (array of maps: one [`AnswerValue`] array per bank).
pub const RECORDS_MAP: &str = "QDNS_RECORDS_V3";
/// Name of the small-tail tables (array of maps: one [`SmallTail`] array per bank;
/// see [`AnswerValue::tail_id`]).
pub const SMALL_MAP: &str = "QDNS_SMALL_V1";
/// Name of the large-tail tables (array of maps: one [`LargeTail`] array per bank; see
/// [`PLAIN_LARGE`]).
pub const LARGE_MAP: &str = "QDNS_LARGE_V3";
/// Name of the medium-tail tables (array of maps: one [`MediumTail`] array per bank;
/// see [`PLAIN_MEDIUM`]).
pub const MEDIUM_MAP: &str = "QDNS_MEDIUM_V1";
/// Name of the policy tables (array of maps: one [`PolicyValue`] array per bank).
pub const POLICIES_MAP: &str = "QDNS_POLICIES_V4";
/// Name of the long-name tables (array of maps: one [`LongName`] array per bank; entry
/// 0 is all zeros, the front of every name of at most [`NAME_MAX`] octets).
pub const LONG_NAMES_MAP: &str = "QDNS_LONG_NAMES_V1";
/// Per-CPU answers per policy member, indexed by [`PolicyValue::counter`] + member.
pub const ANSWERS_MAP: &str = "QDNS_ANSWERS_V1";
/// Banks of the map-of-maps tables.
pub const BANKS: u32 = 2;
/// Name of the double-buffered health bitmap (two entries of [`HealthWords`]).
pub const HEALTH_MAP: &str = "QDNS_HEALTH_V1";
/// Name of the configuration array (`u64` entries, see [`CONFIG_ACTIVE`]).
pub const CONFIG_MAP: &str = "QDNS_CONFIG_V7";

/// CONFIG index of the active word: generation in the low 32 bits (0 = no table: pass
/// everything), health buffer index in bit 32.
pub const CONFIG_ACTIVE: u32 = 0;
/// CONFIG index of the UDP payload size our OPT record advertises.
pub const CONFIG_UDP_PAYLOAD: u32 = 1;
/// CONFIG index of the NSID switch: 1 when the edge answers NSID requests (RFC 5001),
/// so queries carrying an NSID option go to user space, which adds it.
pub const CONFIG_NSID: u32 = 2;
/// CONFIG index of bank 0's bucket mask (bank 1's follows): the slot table of a bank
/// has `mask + 1` buckets.
pub const CONFIG_MASK: u32 = 3;
/// CONFIG index of the rate limiter's nanoseconds per response (0 = off; see
/// [`crate::rrl::RrlSettings`]); its slip, IPv4 mask, IPv6 mask and hash seed follow.
pub const CONFIG_RRL: u32 = 5;
/// CONFIG index of the largest DNS message (with our OPT) the attached links carry in
/// one frame: their smallest MTU less 68 octets of IPv4 (with options) and UDP headers,
/// at most [`RESPONSE_MAX`] (0 = [`RESPONSE_MAX`]). Larger answers pass (`pass_large`):
/// XDP cannot fragment.
pub const CONFIG_MAX_MESSAGE: u32 = 10;
/// CONFIG entry: the seed of the listen-address table (`crate::ListenKey::slot`).
pub const CONFIG_LISTEN_SEED: u32 = 11;
/// CONFIG entry: the cookie clock, the location's time in seconds that server cookies
/// are stamped with and checked against (`crate::cookie`); user space writes the second
/// it stamps with, so both paths make the same cookie.
pub const CONFIG_COOKIE_CLOCK: u32 = 12;
/// CONFIG entry: which entry of `crate::cookie::COOKIE_MAP` holds the secrets in use
/// (0 or 1; the other is written, then this flips).
pub const CONFIG_COOKIE_SLOT: u32 = 13;
/// Entries of CONFIG.
pub const CONFIG_ENTRIES: u32 = 14;
/// The bank bit of the active word.
pub const ACTIVE_BANK_SHIFT: u32 = 33;

/// Longest question name (wire octets) the answer path handles, and the window of a
/// name a record holds. Eight words: the program handles the name in a fixed number of
/// steps. Longer names (up to 255 octets, RFC 1035 §3.1) go to the long-name stage, a
/// program of their own with 32-word names (so the common path pays nothing for them).
pub const NAME_MAX: usize = 64;
/// Words of a long name: 255 octets right-aligned in 256.
pub const LONG_NAME_MAX: usize = 256;
/// Longest wire name (RFC 1035 §3.1).
pub const WIRE_NAME_MAX: usize = 255;
/// Largest answer tail (the sections after the question) kept in the record itself:
/// 32 octets hold an A or AAAA answer, two A records, a short CNAME — most answers of a
/// large zone — and keep a record at 128 octets, two cache lines (it was 216 with 128
/// inline: a million names took 540 MiB of arrays). Longer tails are in the small table
/// (up to [`SMALL_TAIL_MAX`]), the medium or the large one; a node entry's negative SOA
/// is always in the small table, one entry per zone (a longer SOA: that zone's NODATA
/// and NXDOMAIN go to user space).
pub const TAIL_MAX: usize = 32;
/// Largest tail of a [`SMALL_MAP`] entry.
pub const SMALL_TAIL_MAX: usize = 128;
/// Most small tails of one generation (identical ones are shared: a zone's node entries
/// have one).
pub const SMALL_MAX: u32 = RECORDS_MAX;
/// Largest tail of a [`LARGE_MAP`] entry: every tail of a [`RESPONSE_MAX`] response
/// fits (a power of two, as the program's bounded copy needs).
pub const LARGE_TAIL_MAX: usize = 2048;
/// Most large tails of one generation.
pub const LARGE_MAX: u32 = 1 << 20;
/// Largest tail of a [`MEDIUM_MAP`] entry: the answers just over [`SMALL_TAIL_MAX`] — above
/// all a signed zone's (an AAAA and its ECDSA RRSIG is ~140 octets, a NODATA with its
/// SOA, NSEC and their RRSIGs ~300) — take a quarter of a large entry.
pub const MEDIUM_TAIL_MAX: usize = 512;
/// Most medium tails of one generation: the table compiler makes every tail over
/// [`SMALL_TAIL_MAX`] as a large one first, so medium and large together are at most
/// [`LARGE_MAX`].
pub const MEDIUM_MAX: u32 = LARGE_MAX;
/// Most members of a policy set the fast path answers.
pub const POLICY_MEMBERS: usize = 8;
/// Largest record bytes of one policy member.
pub const MEMBER_BLOB: usize = 64;
/// Words of one health buffer: slots 0..65,536.
pub const HEALTH_WORDS: usize = 1024;
/// Most records of one generation (record tables are arrays, sized to the snapshot).
pub const RECORDS_MAX: u32 = 1 << 28;
/// Most policy sets of one generation.
pub const POLICIES_MAX: u32 = 1 << 16;
/// Policy sets whose answers are counted per member (`qdns_edge_answers_total`): each
/// has [`POLICY_MEMBERS`] consecutive counters in [`ANSWERS_MAP`], at the base user
/// space assigned it once for the edge's lifetime (both paths count at the same index).
/// 4,096 sets × 8 members × 8 octets = 256 KiB per CPU.
pub const ANSWER_SETS: u32 = 1 << 12;
/// Entries of [`ANSWERS_MAP`].
pub const ANSWER_COUNTERS: u32 = ANSWER_SETS * POLICY_MEMBERS as u32;
/// [`PolicyValue::counter`] of a set past [`ANSWER_SETS`]: not counted per member.
pub const NO_ANSWER_COUNTER: u32 = u32::MAX;
/// Largest response the fast path sends (header to OPT): 1,232 octets, which crosses
/// any IPv6 path unfragmented (1,280-octet minimum MTU less 48 octets of headers; the
/// 2020 DNS flag day size). XDP cannot fragment, so anything larger — an operator may
/// raise `max_udp_payload` to 4,096 — goes to user space and the kernel. Each answer
/// is also held to the client's own limit — 512 octets without EDNS (RFC 1035
/// §2.3.4), else its EDNS size capped by ours (RFC 6891 §6.2.5) — and passes to user
/// space (which truncates or trims it) when over: the fast path never sets TC.
pub const RESPONSE_MAX: usize = 1232;

/// One health buffer.
pub type HealthWords = [u64; HEALTH_WORDS];

/// `qtype` of a node entry: what the name is when no entry matches its type.
pub const QTYPE_NODE: u16 = 0;
/// ANY (RFC 8482): looked up like a type; every node with sets has its entry.
pub const QTYPE_ANY: u16 = 255;

/// What the loader's compiler keys an entry by: the type and the name's hash (the slot
/// table holds [`crate::slots::slot_hash`] of the two; the name itself, 64 octets, is in
/// the record and checked there).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnswerKey {
    /// Snapshot generation.
    pub generation: u32,
    /// Query type, or [`QTYPE_NODE`].
    pub qtype: u16,
    /// Always 0.
    pub pad: u16,
    /// [`crate::name::name_hash`] of the name's words.
    pub hash: u64,
}
const _: () = assert!(core::mem::size_of::<AnswerKey>() == 16);

/// [`AnswerValue::kind`]: user space answers this name and type.
pub const KIND_PASS: u8 = 0;
/// A fixed answer: header fields and the tail.
pub const KIND_PLAIN: u8 = 1;
/// A policy set: see [`AnswerValue::policy`].
pub const KIND_POLICY: u8 = 2;
/// A node entry: NODATA for this name, NXDOMAIN for names below it (per `node_flags`).
pub const KIND_NODE: u8 = 3;
/// A node at or below a zone cut: every query for it or a missing name below it gets
/// the referral, whose tail (always in [`LARGE_MAP`]) was written for a question of
/// `apex_len` octets (the cut's name) and is relocated by the question's extra length
/// at the [`LargeTail::fixups`].
pub const KIND_REFERRAL: u8 = 4;
/// A client-aware set: `policy` is its id in [`crate::client::CLIENT_SETS_MAP`].
pub const KIND_CLIENT: u8 = 5;
/// Most compression pointers a relocatable tail holds.
pub const FIXUPS_MAX: usize = 32;

/// `node_flags`: a query for this name and a type it lacks gets NODATA.
pub const NODE_NODATA: u8 = 1;
/// `node_flags`: a name below this one that does not exist gets NXDOMAIN (no wildcard,
/// no zone cut here).
pub const NODE_NXDOMAIN: u8 = 2;
/// `node_flags`: this node has a `*` child, and a missing name below it is answered
/// from the entries of `*.` + this name (RFC 4592): those marked [`PLAIN_ANY_QNAME`],
/// or the wildcard's node entry for NODATA.
pub const NODE_WILDCARD: u8 = 4;
/// A node entry of a signed zone whose NXDOMAIN answers below it are in the gap tables
/// ([`crate::denial`]): `policy` is its first gap's index.
pub const NODE_DENIAL: u8 = 128;
/// `node_flags` of a plain entry: every record of the tail is owned by the question
/// name (pointer 0xc00c) and nothing in it points elsewhere, so the same tail answers a
/// question of any length — what a wildcard's synthesised answer needs.
pub const PLAIN_ANY_QNAME: u8 = 8;
/// `node_flags` of a plain entry: the tail (`tail_len` octets, over [`SMALL_TAIL_MAX`]) is the
/// [`LARGE_MAP`] entry (generation, `policy`); `tail_sum` is its sum.
pub const PLAIN_LARGE: u8 = 16;
/// `node_flags` of a plain entry that is also its name's node entry (the name's node key
/// finds it; it carries [`NODE_NODATA`] and [`NODE_NXDOMAIN`] and the negative SOA as a
/// node entry does): the name has this one set, of a type whose ANY answer is the set's
/// (RFC 8482 §4.1), so an ANY query that finds no entry of its own takes it. Unsigned
/// zones only (on a node entry the bit is [`NODE_DENIAL`], which only signed zones
/// set). One record and two slots per such name instead of two records and three.
pub const PLAIN_ANSWERS_ANY: u8 = 128;
/// `node_flags` of a plain entry: the tail (`tail_len` octets, over [`SMALL_TAIL_MAX`], at
/// most [`MEDIUM_TAIL_MAX`], no pointers to relocate) is the [`MEDIUM_MAP`] entry
/// (generation, `policy`); `tail_sum` is its sum.
pub const PLAIN_MEDIUM: u8 = 64;

/// [`AnswerValue::reason`] of a pass entry: why user space answers the name.
pub const REASON_OTHER: u8 = 0;
/// At or below a zone cut: a referral (its owner and glue depend on the question).
pub const REASON_REFERRAL: u8 = 1;
/// The answer is over [`RESPONSE_MAX`] octets, or truncated even at our own limit.
pub const REASON_LARGE: u8 = 2;
/// A client-aware set (`policy = "ip"` or `"geo"`): the answer depends on the client's address.
pub const REASON_CLIENT_AWARE: u8 = 3;
/// `node_flags` of every entry of a DNSSEC-signed zone: a DO=1 query for the name and
/// type takes the entry's signed variant — the key with [`DO_SALT`] mixed into its hash,
/// a plain answer with RRSIGs — and passes (`pass_signed`) when there is none. NXDOMAIN
/// and wildcard synthesis take their proofs from the gap tables ([`crate::denial`]),
/// referrals from the node's DO=1 entry. A policy set's signed variant is a policy entry (the
/// same set): the program chooses as for DO=0, then takes the plain answer signed for
/// that outcome, keyed with [`outcome_salt`] mixed in as well.
pub const SIGNED: u8 = 32;
/// What a name's hash is XOR-ed with for the key of its signed (DO=1) variant.
pub const DO_SALT: u64 = 0x9e6c_63d0_676a_9a99;
/// What the key of a signed wildcard's synthesised answer for a type has XOR-ed into
/// its hash besides [`DO_SALT`] (the name and type being the wildcard's): a plain entry
/// whose `policy` is the answer section's piece (`crate::denial`) and `ancount` its
/// records. The authority — the NSEC covering the question — is the encloser's gap's.
pub const WILDCARD_SALT: u64 = 0x5bd1_e995_27d4_eb2f;

/// What the key of a signed policy set's DO=1 answer for one outcome — the chosen
/// members `mask` (≤ 8 bits) with `ttl` (0 normal, 1 degraded) — has XOR-ed into its
/// hash besides [`DO_SALT`]. Distinct for distinct outcomes (an odd multiplier is a
/// bijection of u64) and never 0, so no outcome's key is the set's own.
#[inline(always)]
#[must_use]
pub const fn outcome_salt(mask: u64, ttl: usize) -> u64 {
    ((mask & 0xff) | ((ttl as u64 & 1) << 8) | 1 << 9).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// [`outcome_salt`] for a client-aware set (`KIND_CLIENT`): its DO=1 answers are keyed by
/// the set's member that answers (its index in the set) and `ttl` — the same answer
/// whichever chain chose the member. Distinct from every [`outcome_salt`] (the member's
/// bits are above bit 9) and from each other.
#[inline(always)]
#[must_use]
pub const fn member_outcome_salt(member: u32, ttl: usize) -> u64 {
    (((ttl as u64 & 1) << 8) | 1 << 9 | (member as u64 + 1) << 10).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// A record of [`RECORDS_MAP`]. Identical records are stored once (the slots of a name's
/// ANY and of its one set's type share it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnswerValue {
    /// The entry's name as [`crate::name`] words: the lowercase wire name right-aligned
    /// in [`NAME_MAX`] octets, zero-filled in front (a name starts with a non-zero length
    /// octet, so the fill is unambiguous; a suffix is the same array with the labels in
    /// front zeroed), each word the little-endian reading of 8 octets; a longer name's
    /// last 64 octets (see `long_name`). The program compares it with the query's words:
    /// the key's hash never decides alone.
    pub name: [u64; crate::name::NAME_WORDS],
    /// `KIND_*`.
    pub kind: u8,
    /// `NODE_*` bits of a node entry; `PLAIN_*` bits of a plain entry (with [`NODE_NODATA`]
    /// and [`NODE_NXDOMAIN`] when it is its name's node entry too, [`PLAIN_ANSWERS_ANY`]).
    pub node_flags: u8,
    /// Wire length of the zone apex (node entries, and plain ones that are node entries
    /// too: where the SOA owner points); a relocated tail's question length.
    pub apex_len: u8,
    /// `REASON_*` of a pass entry (or of a node entry without flags); else 0.
    pub reason: u8,
    /// Response header flags without RD/CD (QR, AA, RCODE), for plain entries; node
    /// entries: QR|AA (the RCODE is added).
    pub flags: u16,
    /// ANCOUNT.
    pub ancount: u16,
    /// NSCOUNT.
    pub nscount: u16,
    /// ARCOUNT (without our OPT record).
    pub arcount: u16,
    /// Octets of `tail` in use.
    pub tail_len: u16,
    /// One's-complement sum of the tail's `tail_len` octets as 16-bit words from an even
    /// offset (a node entry's negative SOA has its own, `negative_sum`).
    pub tail_sum: u16,
    /// Id in [`POLICIES_MAP`] of a policy entry.
    pub policy: u32,
    /// Names over [`NAME_MAX`] octets: the id in [`LONG_NAMES_MAP`] of the octets in
    /// front of `name`, which then holds the name's last 64 octets. 0 for every shorter
    /// name (the answer path never matches a record whose id is not 0).
    pub long_name: u32,
    /// The id in [`SMALL_MAP`] of the tail: a plain entry's of more than [`TAIL_MAX`]
    /// octets (and without `PLAIN_LARGE` or [`PLAIN_MEDIUM`]); a node entry's (or a
    /// plain entry's that is its name's node entry too, see [`PLAIN_ANSWERS_ANY`])
    /// negative SOA, its first two octets the owner pointer the program fills in.
    pub tail_id: u32,
    /// Octets of the negative SOA of a node entry (or a plain one that is its name's
    /// node entry too).
    pub negative_len: u16,
    /// Its one's-complement sum, with the owner pointer zeroed.
    pub negative_sum: u16,
    /// The sections after the question, up to [`TAIL_MAX`] octets: owner names point at
    /// the question (offset 12) or inside the tail.
    pub tail: [u8; TAIL_MAX],
}
const _: () = assert!(core::mem::size_of::<AnswerValue>() == NAME_MAX + 32 + TAIL_MAX);
const _: () = assert!(core::mem::size_of::<AnswerValue>() == 128);

/// An element of [`SMALL_MAP`] (at the entry's `tail_id`); its length and sum are in
/// the [`AnswerValue`] that points here. Identical ones are stored once.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SmallTail {
    /// The tail.
    pub tail: [u8; SMALL_TAIL_MAX],
}
const _: () = assert!(core::mem::size_of::<SmallTail>() == SMALL_TAIL_MAX);

/// An element of [`LONG_NAMES_MAP`]: the first 24 words of a name of 65 to 255 octets
/// right-aligned in [`LONG_NAME_MAX`] octets (its last eight are the record's `name`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongName {
    /// Words 0..24 of the name's [`crate::name::LONG_WORDS`] words.
    pub front: [u64; crate::name::FRONT_WORDS],
}
const _: () = assert!(core::mem::size_of::<LongName>() == LONG_NAME_MAX - NAME_MAX);

/// The compiler's id of a policy set or large tail (the index in its bank's array).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyKey {
    /// Snapshot generation.
    pub generation: u32,
    /// Policy id within the generation.
    pub id: u32,
}
const _: () = assert!(core::mem::size_of::<PolicyKey>() == 8);

/// [`PolicyValue::kind`].
pub const POLICY_WEIGHTED: u8 = 0;
/// Failover.
pub const POLICY_FAILOVER: u8 = 1;
/// Multivalue.
pub const POLICY_MULTIVALUE: u8 = 2;
/// Load-balancer zonal.
pub const POLICY_ZONAL: u8 = 3;

/// Client-aware (`ip`, `geo`): one chain of a set ([`crate::client`]): the first
/// healthy member in the chain's order, fail-open over its first.
pub const POLICY_CLIENT: u8 = 4;

/// Latency (SPEC §10): the member whose slot control set (its choice), else the first
/// (fail-open).
pub const POLICY_LATENCY: u8 = 5;

/// Health combinations of a policy set: one bit per member.
pub const HEALTH_COMBINATIONS: usize = 1 << POLICY_MEMBERS;

/// `decision` bits above the member mask: use the degraded TTL.
pub const DECISION_DEGRADED: u16 = 1 << 8;
/// `decision` bit: weighted draw by weight (else uniformly).
pub const DECISION_BY_WEIGHT: u16 = 1 << 9;

/// An element of [`POLICIES_MAP`]: a policy set with up to [`POLICY_MEMBERS`] members.
///
/// With at most 8 members every outcome that does not depend on the draw is a function
/// of 8 health bits, so the loader evaluates the `qdns-abi` selection functions for all
/// 256 combinations and the program only reads `decision[health]` — no loops with
/// data-dependent branches for the verifier to walk. Weighted sets keep the draw in
/// the program: [`crate::select::weighted_pick`] over the eligible members.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyValue {
    /// `POLICY_*`.
    pub kind: u8,
    /// Number of members.
    pub members: u8,
    /// Members without a health check (always healthy): their bits are set.
    pub always: u8,
    /// Always 0.
    pub pad: u8,
    /// Index of member 0's counter in [`ANSWERS_MAP`] ([`NO_ANSWER_COUNTER`]: none).
    pub counter: u32,
    /// Each member's index in its set: `i` for the other policies; for a chain of a
    /// client-aware set (which holds only the chain's members, in order) the set's
    /// member it is, counted at `counter` + this.
    pub origin: [u16; POLICY_MEMBERS],
    /// Health slot of each member (0 for `always` members).
    pub slots: [u32; POLICY_MEMBERS],
    /// Slot (unused here) and weight of each member, for the weighted draw.
    pub weighted: [crate::select::WeightedMember; POLICY_MEMBERS],
    /// Records of each member.
    pub counts: [u16; POLICY_MEMBERS],
    /// Octets of each member's records: `[normal, degraded]`.
    pub lens: [[u16; 2]; POLICY_MEMBERS],
    /// Even-offset sums of each member's records: `[normal, degraded]`.
    pub sums: [[u16; 2]; POLICY_MEMBERS],
    /// Per health combination: the answering members (weighted: the eligible ones) in
    /// the low 8 bits, plus `DECISION_*` bits.
    pub decision: [u16; HEALTH_COMBINATIONS],
    /// Per health combination, weighted sets: the span of the draw.
    pub span: [u16; HEALTH_COMBINATIONS],
    /// Each member's records (owner pointer to offset 12, then TYPE..RDATA), normal TTL
    /// then degraded TTL.
    pub blobs: [[[u8; MEMBER_BLOB]; 2]; POLICY_MEMBERS],
}
const _: () = assert!(core::mem::size_of::<PolicyValue>() == 4 + 4 + 16 + 32 + 64 + 16 + 32 + 32 + 512 + 512 + 1024);

/// An element of [`LARGE_MAP`] (at the entry's id). Identical ones are stored once.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LargeTail {
    /// The tail; its length and sum are in the [`AnswerValue`] that points here.
    pub tail: [u8; LARGE_TAIL_MAX],
    /// Referrals: where in the tail each compression pointer starts (the program adds
    /// the question's extra length to each); `fixups_len` of them are used.
    pub fixups: [u16; FIXUPS_MAX],
    /// Pointers in use.
    pub fixups_len: u16,
    /// Of those, the ones at an odd offset from the tail's start (for the checksum).
    pub fixups_odd: u16,
    /// Always 0.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<LargeTail>() == LARGE_TAIL_MAX + 2 * FIXUPS_MAX + 8);

/// An element of [`MEDIUM_MAP`] (at the entry's id); its length and sum are in the
/// [`AnswerValue`] that points here.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MediumTail {
    /// The tail.
    pub tail: [u8; MEDIUM_TAIL_MAX],
}
const _: () = assert!(core::mem::size_of::<MediumTail>() == MEDIUM_TAIL_MAX);

/// Adds the big-endian 16-bit words of `bytes` (from an even offset) to `acc`.
#[inline(always)]
#[must_use]
pub fn sum_words(bytes: &[u8], mut acc: u64) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        let hi = u64::from(bytes[i]);
        let lo = if i + 1 < bytes.len() {
            u64::from(bytes[i + 1])
        } else {
            0
        };
        acc += (hi << 8) | lo;
        i += 2;
    }
    acc
}

/// Folds a sum of 16-bit words to 16 bits (one's-complement addition).
#[inline(always)]
#[must_use]
pub const fn fold(mut acc: u64) -> u16 {
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// A sum taken from an even offset, placed at `offset`: one's-complement sums are
/// byte-order independent, so an odd placement swaps the bytes (RFC 1071 §2(B)).
#[inline(always)]
#[must_use]
pub const fn placed(sum: u16, offset: usize) -> u64 {
    if offset & 1 == 1 {
        sum.swap_bytes() as u64
    } else {
        sum as u64
    }
}

/// The checksum field value for a datagram whose words sum to `acc`: the complement,
/// with 0 sent as 0xffff (RFC 768: 0 means "no checksum").
#[inline(always)]
#[must_use]
pub const fn checksum(acc: u64) -> u16 {
    let c = !fold(acc);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_placement_swaps() {
        // [0, a, b, c] summed whole equals a at odd offset plus [b, c] at even.
        let bytes = [0u8, 0x12, 0x34, 0x56];
        let whole = fold(sum_words(&bytes, 0));
        let tail = fold(sum_words(&bytes[1..], 0));
        assert_eq!(fold(placed(tail, 1)), whole);
        assert_eq!(fold(placed(tail, 2)), fold(sum_words(&[0x12, 0x34, 0x56, 0], 0)));
    }

    #[test]
    fn outcome_salts_are_distinct_and_never_zero_with_or_without_a_member() {
        let mut seen = std::collections::HashSet::new();
        for mask in 0..256 {
            for ttl in 0..2 {
                let salt = outcome_salt(mask, ttl);
                assert_ne!(salt, 0);
                assert!(seen.insert(salt), "{mask} {ttl}");
            }
        }
        for member in [0, 1, 7, 255, 65_535] {
            for ttl in 0..2 {
                let salt = member_outcome_salt(member, ttl);
                assert_ne!(salt, 0);
                assert!(seen.insert(salt), "{member} {ttl}");
            }
        }
    }

    #[test]
    fn checksum_never_zero() {
        assert_eq!(checksum(0xffff), 0xffff);
        assert_eq!(checksum(0x1234), !0x1234);
    }
}
