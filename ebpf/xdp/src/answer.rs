//! Deciding the answer: check that the query is one the tables answer, look the name up
//! (exact type, then the node, then the closest encloser; the lookups are in
//! [`crate::tables`]), choose policy members with the `qdns-abi` selection functions,
//! and hand the result to [`crate::rewrite`], which turns the frame into the response.
//!
//! Everything that can fail is checked before the frame is touched; once it grows, only
//! writes the earlier checks guarantee remain.
use aya_ebpf::{helpers::bpf_get_prandom_u32, programs::XdpContext};
use qdns_abi::{
    answer::{
        member_outcome_salt, outcome_salt, placed, AnswerKey, AnswerValue, LargeTail, MediumTail, PolicyValue,
        SmallTail, ACTIVE_BANK_SHIFT, DECISION_BY_WEIGHT, DECISION_DEGRADED, DO_SALT, HEALTH_COMBINATIONS,
        HEALTH_WORDS, KIND_CLIENT, KIND_NODE, KIND_PLAIN, KIND_POLICY, KIND_REFERRAL, NODE_DENIAL, NODE_NODATA,
        NODE_NXDOMAIN, NODE_WILDCARD, NO_ANSWER_COUNTER, PLAIN_ANSWERS_ANY, PLAIN_ANY_QNAME, PLAIN_LARGE, PLAIN_MEDIUM,
        POLICY_CLIENT, POLICY_FAILOVER, POLICY_LATENCY, POLICY_MEMBERS, POLICY_MULTIVALUE, POLICY_WEIGHTED,
        POLICY_ZONAL, QTYPE_ANY, QTYPE_NODE, REASON_CLIENT_AWARE, REASON_LARGE, REASON_REFERRAL, SIGNED, TAIL_MAX,
        WILDCARD_SALT,
    },
    client::{bucket, locate, window, CLIENT_V4_LONG, CLIENT_V6_LONG, ECS_CAP_V4, ECS_CAP_V6, NO_INDEX},
    denial::{key_at, key_less, Gap, Piece, GAP_PIECES, GAP_STEPS, NO_PIECE},
    name::{add_word, keep_last, lowercase_word, name_hash, name_sum, word_end, LONG_WORDS, NAME_WORDS},
    select::{weighted_pick, WeightedPool},
    Counter,
};

use crate::{
    maps::{self, CLASS_CHAINS, CLIENT_BLOCKS, CLIENT_INDEX, CLIENT_SETS, HEALTH, RECORDS, SLOTS},
    parse::{u16_at, u64_le_at, u8_at, Offsets, Window},
    rewrite::{self, MOVE_MAX},
    sections::OPT_LEN,
    subnet::{self, ECHO_WORDS},
    tables::{find, named, slot, Tables},
};

const CLASS_IN: u16 = 1;
pub const TYPE_OPT: u16 = 41;
/// RRSIG: passed to user space, which answers with the signatures at the name.
const TYPE_RRSIG: u16 = 46;
/// The DO bit in the OPT record's flags (RFC 3225 §3).
pub const DO_BIT: u16 = 0x8000;
/// Most EDNS options walked in a query's OPT record.
const MAX_OPTIONS: usize = 16;
/// Largest query the fast path reads (bounds every packet offset for the verifier).
const QUERY_MAX: usize = 1500;
const RCODE_NXDOMAIN: u16 = 3;
/// Largest UDP response to a client without EDNS (RFC 1035 §2.3.4), and the least an
/// EDNS size means (RFC 6891 §6.2.5).
const CLASSIC_UDP: usize = 512;
/// Most ancestors tried when looking for a missing name's closest encloser; deeper
/// misses go to user space. The long-name stage walks further: long names are mostly
/// reverse names (`ip6.arpa`, 34 labels), whose encloser can be far up.
const fn walk_max(words: usize) -> usize {
    if words > 8 {
        24
    } else {
        8
    }
}

/// Longest name of a `W`-word path: 64 octets, or 255 (RFC 1035 §3.1).
const fn qlen_max(words: usize) -> usize {
    let octets = 8 * words;
    if octets > 255 {
        255
    } else {
        octets
    }
}

/// What the program does with the packet.
pub enum Verdict {
    /// Send the rewritten frame back out (`XDP_TX`), counted already.
    Tx,
    /// The frame is rewritten; the answer's counter is still to be added.
    Sent,
    /// The frame is an answer, counted, and rate limiting is on: the rate-limit stage
    /// may still hold it back.
    Answered,
    /// Hand the untouched frame to the kernel stack.
    Pass(Counter),
    /// The frame was changed and then could not be finished (`XDP_ABORTED`; the checks
    /// before the change make this unreachable).
    Abort,
}

/// The sections after the question.
pub enum Body<'a> {
    /// A precomputed answer; its tail is in the value (up to `TAIL_MAX` octets), or in
    /// the large table (with pointers to relocate, or over `MEDIUM_TAIL_MAX` octets).
    /// One variant for both, so the verifier walks the rewrite once.
    Plain(&'a AnswerValue, Option<&'a LargeTail>),
    /// A precomputed answer whose tail (over `SMALL_TAIL_MAX` octets, at most
    /// `MEDIUM_TAIL_MAX`, nothing to relocate) is in the medium table.
    Medium(&'a AnswerValue, &'a MediumTail),
    /// A tail from the small table: a precomputed answer's (`None`), or (`Some(rcode)`)
    /// NODATA or NXDOMAIN with the zone's SOA, whose owner pointer is filled in.
    Small(&'a AnswerValue, &'a SmallTail, Option<u16>),
    /// NODATA or NXDOMAIN (the RCODE) from a node entry, before its SOA is looked up
    /// (see [`tails`]: it becomes [`Body::Small`]).
    Negative(&'a AnswerValue, u16),
    /// A signed zone's NXDOMAIN from pre-signed pieces (`qdns_abi::denial`): the SOA's,
    /// the covering NSEC's and (when `used` is 3) the wildcard's NSEC's, each relocated
    /// to the question; or a signed wildcard's synthesised answer: its answer section's
    /// piece and the covering NSEC's.
    Denial {
        /// The entry giving the header flags and ANCOUNT: the closest encloser's node
        /// entry (NXDOMAIN), the wildcard's answer entry (synthesis).
        value: &'a AnswerValue,
        /// The RCODE added to its flags.
        rcode: u16,
        /// NSCOUNT.
        nscount: u16,
        /// The pieces (the third is the second again when `used` is 2).
        pieces: [&'a Piece; GAP_PIECES],
        /// How many of `pieces` the answer has.
        used: usize,
    },
    /// Policy members: `mask` chose them, `ttl` picks normal (0) or degraded (1) bytes.
    Policy {
        /// The set.
        policy: &'a PolicyValue,
        /// Chosen members.
        mask: u64,
        /// 0 = normal TTL, 1 = degraded.
        ttl: usize,
    },
}

/// A query the tables can answer, fully checked.
pub struct Question {
    /// Wire length of the name.
    pub qlen: usize,
    /// End of the query's DNS message (the frame may have padding after it).
    pub message_end: usize,
    /// Offset just past the question.
    pub end: usize,
    /// One's-complement sum of the question octets (name, type, class) from an even
    /// offset.
    pub sum: u64,
    /// The query had an OPT record (version 0).
    pub edns: bool,
    /// Its DO bit in place (`0x8000` or 0; RFC 3225 §3: echoed in our OPT record).
    pub dnssec_ok: u16,
    /// Largest response this client takes (DNS message octets): 512 without EDNS, else
    /// its EDNS size capped by ours, at least 512.
    pub limit: usize,
    /// Octets of the Client Subnet option echoed after our OPT record (0: none).
    pub ecs_len: usize,
    /// Octets of the COOKIE option after it (0: none; see [`crate::cookie`]).
    pub cookie_len: usize,
    /// The query's server cookie was valid: the rate limiter lets the answer through.
    pub cookie_valid: bool,
}

/// Per-CPU scratch: the lookup key and name, the parse offsets passed through map
/// memory, and room for moving the frame's front.
#[repr(C)]
pub struct Scratch {
    /// The key being looked up.
    key: AnswerKey,
    /// The query name's words (see `qdns_abi::name`), cleared label by label in the
    /// NXDOMAIN walk: the first eight on the answer path, all on the long-name stage.
    name: [u64; LONG_WORDS],
    /// `[l3, l4, dns, qname_len]` as parsed.
    offsets: [u64; 4],
    /// Where the closest encloser starts in `name`: passed through map memory so the
    /// walk's iterations meet in one state (see [`launder`]).
    encloser: u64,
    /// The client's response limit, passed through map memory for the same reason.
    limit: u64,
    /// The end of the query message and (bit 16) whether it had EDNS, likewise.
    message_end: u64,
    /// A slot lookup's result, passed through map memory (see [`Tables::through`]).
    found: u64,
    /// The answer's counter while the frame is rewritten: one rewrite walk for the
    /// verifier whatever kind of answer it is.
    outcome: u64,
    /// A policy answer's member counters while the frame is rewritten: the set's base
    /// in the low 32 bits, the chosen members above ([`NO_MEMBERS`]: not a policy
    /// answer); counted once the answer is sent.
    members: u64,
    /// The query's Client Subnet option as the response echoes it (see
    /// [`crate::subnet`]; zeros without one); read by the rate-limit stage too.
    pub ecs: [u64; ECHO_WORDS],
    /// The COOKIE option the response carries (see [`crate::cookie`]); read by the
    /// rate-limit stage too.
    pub cookie: [u64; ECHO_WORDS],
    /// What the rate-limit stage needs of a sent answer (`crate::limit`): question
    /// end, question sum, and bits (EDNS in bit 0, the DO bit in place at 15, IPv6 in
    /// bit 32, the Client Subnet echo's length from bit 40, the COOKIE option's from
    /// bit 48); with `offsets`.
    pub stage: [u64; 3],
    /// The front of the frame while it moves (see [`resize`]).
    pub moving: [u8; MOVE_MAX],
}

impl Scratch {
    /// `[l3, l4, dns]` as the answer left them.
    #[inline(always)]
    pub fn offsets(&self) -> [u64; 3] {
        // SAFETY: a read of this CPU's scratch.
        let [l3_family, l4, dns, _] = unsafe { core::ptr::read_volatile(&self.offsets) };
        // Bit 8 beside l3 is the address family (see `launder`).
        [l3_family & 0xff, l4, dns]
    }
}

/// `Scratch::members` of an answer that is not a policy set's.
const NO_MEMBERS: u64 = u64::MAX;

/// Every parse path (VLAN or not, IPv4 IHL, IPv6, each name length) ends with exact
/// offsets, and the verifier would walk the rest of the program once per combination.
/// Read back from map memory they are plain bounded values: one walk covers them all.
#[inline(always)]
fn launder<const W: usize>(scratch: &mut Scratch, at: &Offsets) -> Result<Offsets, Counter> {
    // The address family too (bit 8 beside l3): a constant per parse path, it would
    // otherwise keep the IPv4 and IPv6 walks apart through the whole lookup.
    scratch.offsets = [
        at.l3 as u64 | u64::from(at.ipv6) << 8,
        at.l4 as u64,
        at.dns as u64,
        at.qname_len as u64,
    ];
    // SAFETY: reads of this CPU's scratch, just written.
    let [l3_family, l4, dns, qlen] = unsafe { core::ptr::read_volatile(&scratch.offsets) };
    let l3 = l3_family & 0xff;
    if l3 > 18 || l4 > 18 + 60 || dns != l4 + 8 || qlen > qlen_max(W) as u64 {
        return Err(Counter::PassLongName);
    }
    Ok(Offsets {
        l3: l3 as usize,
        ipv6: l3_family >> 8 & 1 == 1,
        l4: l4 as usize,
        // `l4 + 8` (checked equal): a bounded register for the verifier, where `dns`
        // read back is not.
        dns: (l4 + 8) as usize,
        qname_len: qlen as usize,
    })
}

/// Answers the query at `at` from the tables with `W`-word names (8 on the answer
/// path, [`LONG_WORDS`] on the long-name stage), or says why not.
#[inline(always)]
pub fn answer<const W: usize>(ctx: &XdpContext, at: &Offsets) -> Verdict {
    let Some(scratch) = maps::SCRATCH.get_ptr_mut(0) else {
        return Verdict::Pass(Counter::PassNotLoaded);
    };
    // SAFETY: this CPU's element, used by this program run only (XDP runs are not
    // preempted on a CPU).
    let scratch = unsafe { &mut *scratch };
    let at = match launder::<W>(scratch, at) {
        Ok(at) => at,
        Err(reason) => return Verdict::Pass(reason),
    };
    let at = &at;
    match plan::<W>(ctx, at, scratch) {
        Ok((question, body, counter)) => {
            // SAFETY: a write of this CPU's scratch.
            unsafe { core::ptr::write_volatile(&mut scratch.outcome, counter as u64) };
            let echoes = [&scratch.ecs, &scratch.cookie];
            match rewrite::respond(ctx, at, &question, &body, &mut scratch.moving, echoes) {
                Verdict::Sent => {
                    // SAFETY: a read of this CPU's scratch, written above.
                    let counter = unsafe { core::ptr::read_volatile(&scratch.outcome) };
                    maps::count_index(counter as u32);
                    // SAFETY: a read of this CPU's scratch, written by `plan`.
                    let members = unsafe { core::ptr::read_volatile(&scratch.members) };
                    if members != NO_MEMBERS {
                        maps::count_answers(members as u32, members >> 32);
                    }
                    if question.cookie_valid {
                        // A client that proved its address: not rate limited.
                        maps::count(Counter::ValidCookie);
                        return Verdict::Tx;
                    }
                    if !maps::rrl_on() {
                        return Verdict::Tx;
                    }
                    let bits = u64::from(question.edns)
                        | u64::from(question.dnssec_ok)
                        | u64::from(at.ipv6) << 32
                        | (question.ecs_len as u64) << 40
                        | (question.cookie_len as u64) << 48;
                    // SAFETY: a write of this CPU's scratch, read by the rate-limit stage.
                    unsafe {
                        core::ptr::write_volatile(&mut scratch.stage, [question.end as u64, question.sum, bits]);
                    };
                    Verdict::Answered
                }
                other => other,
            }
        }
        Err(reason) => Verdict::Pass(reason),
    }
}

/// The first `W` of the scratch name words.
#[inline(always)]
fn words_mut<const W: usize>(all: &mut [u64; LONG_WORDS]) -> &mut [u64; W] {
    const { assert!(W <= LONG_WORDS) };
    // SAFETY: W ≤ LONG_WORDS (checked at compile time), so the first W words are inside
    // the array, with its alignment.
    unsafe { &mut *all.as_mut_ptr().cast::<[u64; W]>() }
}

#[inline(always)]
fn plan<'a, const W: usize>(
    ctx: &XdpContext,
    at: &Offsets,
    scratch: &mut Scratch,
) -> Result<(Question, Body<'a>, Counter), Counter> {
    let Scratch {
        key,
        name: all_words,
        encloser,
        limit: limit_slot,
        message_end: message_end_slot,
        found,
        offsets,
        members,
        ecs,
        cookie,
        ..
    } = scratch;
    let active = maps::active();
    let generation = active as u32;
    if generation == 0 {
        return Err(Counter::PassNotLoaded);
    }
    let words = words_mut::<W>(all_words);
    let qlen = at.qname_len;
    if qlen > qlen_max(W) || qlen == 0 {
        return Err(Counter::PassLongName);
    }
    let qname_at = at.dns + 12;
    let qtype = u16_at(ctx, qname_at + qlen)?;
    let qclass = u16_at(ctx, qname_at + qlen + 2)?;
    // RRSIG queries too: user space answers them with the signatures at the name.
    if qclass != CLASS_IN || qtype == 0 || qtype == TYPE_OPT || qtype == TYPE_RRSIG || (128..QTYPE_ANY).contains(&qtype)
    {
        return Err(Counter::PassSpecialQuery);
    }
    let end = qname_at + qlen + 4;
    let msg_end = message_end(ctx, at)?;
    special_addresses(ctx, at)?;
    let opt = edns(ctx, at.dns, end, msg_end)?;
    let ecs_len = subnet::read(ctx, usize::from(opt.ecs_at), ecs)?;
    let (cookie_len, cookie_valid) = crate::cookie::read(ctx, at, usize::from(opt.cookie_at), cookie)?;
    // Each way out of the options walk leaves `msg_end` in another range (it equals the
    // walk's position there), and whether the query had EDNS (or Client Subnet) is a
    // constant per path: the verifier would walk the lookup and the rewrite once for
    // each. Read back from map memory they are one state (the walk was four times longer
    // without this).
    *message_end_slot = msg_end as u64
        | u64::from(opt.present) << 16
        | (ecs_len as u64) << 24
        | (cookie_len as u64) << 32
        | u64::from(cookie_valid) << 40;
    // SAFETY: a read of this CPU's scratch, just written.
    let read = unsafe { core::ptr::read_volatile(message_end_slot) };
    let (msg_end, edns_present) = ((read as usize) & 0x7ff, read >> 16 & 1 == 1);
    let ecs_len = (read >> 24) as usize & 0x1f;
    let (cookie_len, cookie_valid) = ((read >> 32) as usize & 0x1f, read >> 40 & 1 == 1);
    if msg_end > QUERY_MAX || msg_end < end {
        return Err(Counter::PassBadLength);
    }
    // 512 without EDNS (udp_size is 0 then), else the client's size capped by ours; read
    // back from map memory so its branches do not split the verifier's walk.
    *limit_slot = usize::from(opt.udp_size.min(maps::udp_payload())).max(CLASSIC_UDP) as u64;
    // SAFETY: a read of this CPU's scratch, just written.
    let limit = (unsafe { core::ptr::read_volatile(limit_slot) } as usize) & 0xffff;

    key.generation = generation;
    key.qtype = qtype;
    key.pad = 0;
    // The name by words (see `qdns_abi::name`): word `j` is read from the eight octets
    // ending `end` octets into the name; the octets before the name are the DNS header's.
    let mut acc = 0u64;
    for (j, slot) in words.iter_mut().enumerate() {
        *slot = match word_end::<W>(j, qlen) {
            Some(end) => {
                // With 32 words LLVM rewrites `dns + 4 + (qlen - back)` as
                // `(dns + 4 + qlen) - back`, a packet offset of up to -260 the verifier
                // refuses; an opaque `end` keeps the sum as written. (Folded away on the
                // eight-word path, where the original form passes.)
                let end = if W > 8 { core::hint::black_box(end) & 0xff } else { end };
                // `qname_at + end - 8`, written without a subtraction the verifier
                // could not bound: qname_at = dns + 12.
                let word = keep_last(u64_le_at(ctx, at.dns + 4 + end)?, end);
                acc = add_word(acc, word);
                lowercase_word(word)
            }
            None => 0,
        };
    }
    // With 32 words each word's test splits `qlen` into another range (33 of them), and
    // the verifier would walk the rest once per range: read back from map memory it is
    // one state again (`launder` wrote it). The eight-word path keeps its nine.
    let qlen = if W > 8 {
        // SAFETY: a read of this CPU's scratch.
        (unsafe { core::ptr::read_volatile(&offsets[3]) } as usize) & 0xff
    } else {
        qlen
    };
    // The question is echoed as sent (0x20 case): its sum uses the original octets.
    let mut sum = u64::from(name_sum(acc, qlen));
    sum += placed(qtype, qlen) + placed(qclass, qlen);
    let question = Question {
        qlen,
        message_end: msg_end,
        end,
        sum,
        edns: edns_present,
        dnssec_ok: opt.dnssec_ok,
        limit,
        ecs_len,
        cookie_len,
        cookie_valid,
    };
    let bank = (active >> ACTIVE_BANK_SHIFT) as u32 & 1;
    let tables = Tables {
        bank,
        mask: maps::bucket_mask(bank),
        slots: SLOTS.get(bank).ok_or(Counter::PassNotLoaded)?,
        records: RECORDS.get(bank).ok_or(Counter::PassNotLoaded)?,
        word: found,
    };
    let mut who = who(ctx, at, ecs, ecs_len)?;
    let (body, counter, chosen) = lookup(
        &tables,
        key,
        words,
        encloser,
        qlen,
        (active >> 32) as u32 & 1,
        opt.dnssec_ok,
        &mut who,
    )?;
    subnet::set_scope(ecs, echoed_scope(ecs, who.scope));
    *members = match &body {
        Body::Policy { policy, mask, .. } => counted(policy, *mask),
        _ => chosen,
    };
    Ok((question, tails(&tables, body)?, counter))
}

/// The end of the DNS message from the UDP length, checked against the IP length and
/// the frame (Ethernet padding may follow; it is cut off in the response).
#[inline(always)]
fn message_end(ctx: &XdpContext, at: &Offsets) -> Result<usize, Counter> {
    let udp_len = usize::from(u16_at(ctx, at.l4 + 4)?);
    let end = at.l4 + udp_len;
    if udp_len < 8 + 12 || end > ctx.data_end() - ctx.data() || end > QUERY_MAX {
        return Err(Counter::PassBadLength);
    }
    let consistent = if at.ipv6 {
        usize::from(u16_at(ctx, at.l3 + 4)?) == udp_len
    } else {
        usize::from(u16_at(ctx, at.l3 + 2)?) == at.l4 - at.l3 + udp_len
    };
    if !consistent {
        return Err(Counter::PassBadLength);
    }
    Ok(end)
}

/// A source port of 0, or a multicast or broadcast destination: not ours to answer.
#[inline(always)]
fn special_addresses(ctx: &XdpContext, at: &Offsets) -> Result<(), Counter> {
    if u16_at(ctx, at.l4)? == 0 {
        return Err(Counter::PassSpecialQuery);
    }
    // A multicast or broadcast destination is not ours to answer from.
    let multicast = if at.ipv6 {
        u8_at(ctx, at.l3 + 24)? == 0xff
    } else {
        u8_at(ctx, at.l3 + 16)? >= 224
    };
    if multicast {
        return Err(Counter::PassSpecialQuery);
    }
    Ok(())
}

/// What the query's additional section holds.
#[derive(Clone, Copy)]
struct Opt {
    /// There is an OPT record.
    present: bool,
    /// Its DO bit, in place (`DO_BIT` or 0): kept as read, not branched on, so the
    /// verifier walks one path for DO=0 and DO=1.
    dnssec_ok: u16,
    /// The requestor's UDP payload size (RFC 6891 §6.1.2: the CLASS field).
    udp_size: u16,
    /// Where its Client Subnet option starts (0: none).
    ecs_at: u16,
    /// Where its first COOKIE option starts (0: none).
    cookie_at: u16,
}

/// The additional section: nothing, or exactly one OPT record (root owner, version 0,
/// well-formed options) ending the message — what user space answers the same way.
/// DO is echoed and every option is ignored, as user space does (padding and unknown
/// codes alike; docs/OPERATIONS.md says what a client gets), but for Client Subnet
/// (checked and echoed, [`crate::subnet`]), COOKIE (answered, [`crate::cookie`]) and
/// an NSID request the edge answers (user space adds it). Anything else goes to user
/// space.
#[inline(always)]
fn edns(ctx: &XdpContext, dns: usize, end: usize, msg_end: usize) -> Result<Opt, Counter> {
    if u16_at(ctx, dns + 10)? == 0 {
        return if msg_end == end {
            Ok(Opt {
                present: false,
                dnssec_ok: 0,
                udp_size: 0,
                ecs_at: 0,
                cookie_at: 0,
            })
        } else {
            Err(Counter::PassBadLength)
        };
    }
    let opt = Window::<OPT_LEN>::at(ctx, end).map_err(|_| Counter::PassEdns)?;
    if opt.get8(0) != 0 || opt.get16(1) != TYPE_OPT || opt.get8(6) != 0 {
        return Err(Counter::PassEdns);
    }
    let found = Opt {
        present: true,
        dnssec_ok: opt.get16(7) & DO_BIT,
        udp_size: opt.get16(3),
        ecs_at: 0,
        cookie_at: 0,
    };
    let opt_end = end + OPT_LEN + usize::from(opt.get16(9));
    if opt_end != msg_end {
        return Err(Counter::PassBadLength);
    }
    let mut pos = end + OPT_LEN;
    // 1 once an option is NSID (code 3), the number of Client Subnet options (code 8)
    // and where the last one starts, computed without a branch: (code ^ 3) is below
    // 2^16, so subtracting one borrows into bit 63 only when it is 0.
    let (mut nsid, mut ecs, mut ecs_at, mut cookie_at) = (0u64, 0u64, 0u64, 0u64);
    for _ in 0..MAX_OPTIONS {
        if pos == opt_end {
            return answerable(found, nsid, ecs, [ecs_at, cookie_at]);
        }
        if pos + 4 > opt_end || pos > QUERY_MAX {
            return Err(Counter::PassEdns);
        }
        let code = u64::from(u16_at(ctx, pos)?);
        nsid |= (code ^ 3).wrapping_sub(1) >> 63;
        let is_ecs = (code ^ 8).wrapping_sub(1) >> 63;
        ecs += is_ecs;
        ecs_at |= pos as u64 & is_ecs.wrapping_neg();
        // The first COOKIE option (code 10): taken while none is (`cookie_at - 1`
        // borrows into bit 63 only while it is 0).
        let first_cookie = (code ^ 10).wrapping_sub(1) >> 63 & cookie_at.wrapping_sub(1) >> 63;
        cookie_at |= pos as u64 & first_cookie.wrapping_neg();
        pos += 4 + usize::from(u16_at(ctx, pos + 2)?);
        if pos > opt_end {
            return Err(Counter::PassEdns);
        }
    }
    if pos == opt_end {
        answerable(found, nsid, ecs, [ecs_at, cookie_at])
    } else {
        Err(Counter::PassEdns)
    }
}

/// The OPT as read (with where its Client Subnet and COOKIE options start), unless it asks for an
/// NSID the edge has (user space adds it) or carries Client Subnet twice (user space
/// answers FORMERR).
#[inline(always)]
fn answerable(found: Opt, nsid: u64, ecs: u64, [ecs_at, cookie_at]: [u64; 2]) -> Result<Opt, Counter> {
    if ecs > 1 {
        Err(Counter::PassClientSubnet)
    } else if nsid & maps::nsid_passes() != 0 {
        Err(Counter::PassNsid)
    } else {
        Ok(Opt {
            ecs_at: ecs_at as u16 & 0x7ff,
            cookie_at: cookie_at as u16 & 0x7ff,
            ..found
        })
    }
}

/// Exact (name, type), then the name's node entry (NODATA), then the closest existing
/// ancestor (NXDOMAIN when it has no wildcard child and no cut).
#[inline(always)]
fn lookup<'a, const W: usize>(
    t: &Tables<'a>,
    key: &mut AnswerKey,
    name: &mut [u64; W],
    encloser: &mut u64,
    qlen: usize,
    health: u32,
    dnssec_ok: u16,
    who: &mut Who,
) -> Result<(Body<'a>, Counter, u64), Counter> {
    let qtype = key.qtype;
    // One hash for the exact and the node lookup: same name, another type.
    key.hash = name_hash(name);
    if let Some(value) = find(t, key, name)? {
        if value.node_flags & SIGNED != 0 && dnssec_ok != 0 {
            return signed(t, key, name, health, who);
        }
        return match value.kind {
            KIND_PLAIN => Ok((Body::Plain(value, None), Counter::AnsweredPlain, NO_MEMBERS)),
            KIND_POLICY => with_no_members(policy(t, value.policy, health)),
            KIND_CLIENT => with_no_members(client_set(t, value, health, who)),
            _ => Err(pass_reason(value)),
        };
    }
    key.qtype = QTYPE_NODE;
    if let Some(node) = find(t, key, name)? {
        if node.node_flags & SIGNED != 0 && dnssec_ok != 0 {
            // NODATA in a signed zone: the node's signed variant (the SOA, the name's
            // NSEC, their RRSIGs) is the answer for every type the name lacks.
            if node.kind == KIND_NODE && node.node_flags & NODE_NODATA != 0 {
                return signed(t, key, name, health, who);
            }
            if node.kind == KIND_REFERRAL {
                return signed_referral(t, key, name);
            }
            return Err(Counter::PassSigned);
        }
        // A name's one set whose record is its node entry too answers ANY.
        if qtype == QTYPE_ANY && node.kind == KIND_PLAIN && node.node_flags & PLAIN_ANSWERS_ANY != 0 {
            return Ok((Body::Plain(node, None), Counter::AnsweredPlain, NO_MEMBERS));
        }
        return if node_bits(node) & NODE_NODATA != 0 {
            Ok((Body::Negative(node, 0), Counter::AnsweredNodata, NO_MEMBERS))
        } else if node.kind == KIND_REFERRAL {
            Ok((Body::Plain(node, None), Counter::AnsweredReferral, NO_MEMBERS))
        } else {
            Err(pass_reason(node))
        };
    }
    // Each step clears the leftmost label: the name then holds the next suffix. The
    // loop only finds the closest encloser's record; what it is decides once, after it
    // (one verifier walk of the answer paths, not one per depth).
    // A signed zone's NXDOMAIN is chosen by the label just below the closest encloser
    // (`qdns_abi::denial`), which the walk clears: the answer path keeps a copy.
    let mut original = [0u64; NAME_WORDS];
    if W == NAME_WORDS && dnssec_ok != 0 {
        for (j, word) in original.iter_mut().enumerate() {
            *word = name[j & (W - 1)];
        }
    }
    let name_max = 8 * W;
    let mut at = name_max - qlen;
    let mut label = at;
    let mut found = 0u32;
    for _ in 0..walk_max(W) {
        // Octet `at` of the right-aligned name (little-endian words).
        let len = ((name[(at / 8) & (W - 1)] >> (8 * (at & 7))) & 0xff) as usize;
        if len == 0 {
            // The root was looked up already (or is the name itself).
            return Err(Counter::PassOutsideZones);
        }
        label = at;
        at += len + 1;
        if at >= name_max {
            return Err(Counter::PassOutsideZones);
        }
        clear_before(name, at);
        // The clearing's branches split `at` into ranges; through map memory they meet
        // in one state again before the lookup.
        at = t.through(at as u64) as usize & (name_max - 1);
        key.hash = name_hash(name);
        found = slot(t, key)?;
        if found != 0 {
            break;
        }
    }
    // Deeper below its closest encloser than the walk goes: user space decides.
    if found == 0 {
        return Err(Counter::PassNotCached);
    }
    *encloser = at as u64 | (label as u64) << 32;
    // SAFETY: a read of this CPU's scratch, just written.
    let both = unsafe { core::ptr::read_volatile(encloser) };
    let (at, label) = ((both & 0xffff_ffff) as usize, (both >> 32) as usize & (name_max - 1));
    let node = named(t, t.through(u64::from(found)) as u32, name)?;
    if node.node_flags & SIGNED != 0 && dnssec_ok != 0 {
        // NXDOMAIN in a signed zone: the gap of the label below the encloser; a
        // referral: the cut's signed one. Wildcards: proofs for this question, from user
        // space.
        let denial = NODE_NXDOMAIN | NODE_DENIAL;
        if W == NAME_WORDS && node.kind == KIND_NODE && node.node_flags & denial == denial {
            return denial_of(t, node, key_at(&original, label));
        }
        if node.kind == KIND_REFERRAL {
            return signed_referral(t, key, name);
        }
        let wildcard = NODE_WILDCARD | NODE_DENIAL;
        if W == NAME_WORDS && node.kind == KIND_NODE && node.node_flags & wildcard == wildcard {
            let gap = gap_of(t, node.policy, key_at(&original, label))?;
            return signed_wildcard(t, key, name, (at, qtype), gap);
        }
        if node.kind == KIND_NODE && node.node_flags & NODE_WILDCARD != 0 {
            return Err(Counter::PassSignedWildcard);
        }
        if node.kind == KIND_NODE && node.node_flags & NODE_NXDOMAIN != 0 {
            return Err(Counter::PassSignedGap);
        }
        return Err(Counter::PassSigned);
    }
    if node.kind == KIND_REFERRAL {
        return Ok((Body::Plain(node, None), Counter::AnsweredReferral, NO_MEMBERS));
    }
    let bits = node_bits(node);
    if bits == 0 {
        return Err(pass_reason(node));
    }
    if bits & NODE_NXDOMAIN != 0 {
        return Ok((
            Body::Negative(node, RCODE_NXDOMAIN),
            Counter::AnsweredNxdomain,
            NO_MEMBERS,
        ));
    }
    if bits & NODE_WILDCARD != 0 {
        return with_no_members(wildcard(t, key, name, at, qtype, health));
    }
    Err(Counter::PassNotCached)
}

/// The `NODE_*` bits `entry` answers by as a node entry: a node entry's, or those of a
/// plain entry that is its name's node entry too ([`PLAIN_ANSWERS_ANY`]); 0 for any
/// other entry.
#[inline(always)]
fn node_bits(entry: &AnswerValue) -> u8 {
    match entry.kind {
        KIND_NODE => entry.node_flags,
        KIND_PLAIN if entry.node_flags & PLAIN_ANSWERS_ANY != 0 => entry.node_flags & (NODE_NODATA | NODE_NXDOMAIN),
        _ => 0,
    }
}

/// A signed zone's referral for a name at or below a cut (`key` is the node key of the
/// name found): the DO=1 one the tables hold under the key's DO=1 hash (the NS, the DS
/// and its RRSIG or the NSEC proving none, glue), relocated like the unsigned one.
#[inline(always)]
fn signed_referral<'a, const W: usize>(
    t: &Tables<'a>,
    key: &mut AnswerKey,
    name: &[u64; W],
) -> Result<(Body<'a>, Counter, u64), Counter> {
    key.hash ^= DO_SALT;
    match find(t, key, name)? {
        Some(value) if value.kind == KIND_REFERRAL => {
            Ok((Body::Plain(value, None), Counter::AnsweredReferral, NO_MEMBERS))
        }
        _ => Err(Counter::PassSigned),
    }
}

/// The gap of the encloser whose gaps start at `base` holding the label with the key
/// `want`: a binary search of their keys (`qdns_abi::denial`). A label with a child's
/// key, or a gap without an answer, passes.
#[inline(always)]
fn gap_of<'a>(t: &Tables<'a>, base: u32, want: [u64; 2]) -> Result<&'a Gap, Counter> {
    let gaps = t.gaps().ok_or(Counter::PassNotLoaded)?;
    let span = gaps.get(base).ok_or(Counter::PassNotLoaded)?.span;
    // The first gap whose key is not below `want` (the last one's is all ones).
    let (mut low, mut high) = (0u32, span.saturating_sub(1));
    for _ in 0..GAP_STEPS {
        if low >= high {
            break;
        }
        let mid = low + (high - low) / 2;
        let gap = gaps.get(base.wrapping_add(mid)).ok_or(Counter::PassNotLoaded)?;
        if key_less(gap.key, want) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    if low < high {
        return Err(Counter::PassSignedGap);
    }
    let gap = gaps.get(base.wrapping_add(low)).ok_or(Counter::PassNotLoaded)?;
    if gap.key == want || gap.pieces[0] == NO_PIECE {
        return Err(Counter::PassSignedGap);
    }
    Ok(gap)
}

/// The NXDOMAIN of a signed zone for a name whose label below the closest encloser
/// (`node`) has the key `want`: the gap holding it, and its pieces.
#[inline(always)]
fn denial_of<'a>(t: &Tables<'a>, node: &'a AnswerValue, want: [u64; 2]) -> Result<(Body<'a>, Counter, u64), Counter> {
    let gap = gap_of(t, node.policy, want)?;
    let pieces = t.pieces().ok_or(Counter::PassNotLoaded)?;
    let soa = pieces.get(gap.pieces[0]).ok_or(Counter::PassNotLoaded)?;
    let nsec = pieces.get(gap.pieces[1]).ok_or(Counter::PassNotLoaded)?;
    let (star, used) = match gap.pieces[2] {
        NO_PIECE => (nsec, 2),
        id => (pieces.get(id).ok_or(Counter::PassNotLoaded)?, 3),
    };
    Ok((
        Body::Denial {
            value: node,
            rcode: RCODE_NXDOMAIN,
            nscount: gap.nscount,
            pieces: [soa, nsec, star],
            used,
        },
        Counter::AnsweredNxdomain,
        NO_MEMBERS,
    ))
}

/// A signed zone's answer synthesised from the wildcard below the closest encloser,
/// which starts at octet `at` of `name`, for `qtype`: the wildcard's answer section for
/// the type (its entry keyed with [`WILDCARD_SALT`]: owned by the question, the same for
/// every name it covers) and the NSEC covering the question from the encloser's `gap`.
/// Types the wildcard lacks (NODATA) pass.
#[inline(always)]
fn signed_wildcard<'a, const W: usize>(
    t: &Tables<'a>,
    key: &mut AnswerKey,
    name: &mut [u64; W],
    (at, qtype): (usize, u16),
    gap: &'a Gap,
) -> Result<(Body<'a>, Counter, u64), Counter> {
    star_in_front(name, at).ok_or(Counter::PassSignedWildcard)?;
    key.hash = name_hash(name) ^ DO_SALT ^ WILDCARD_SALT;
    key.qtype = qtype;
    let value = match find(t, key, name)? {
        Some(value) if value.kind == KIND_PLAIN => value,
        _ => return Err(Counter::PassSignedWildcard),
    };
    let pieces = t.pieces().ok_or(Counter::PassNotLoaded)?;
    let answer = pieces.get(value.policy).ok_or(Counter::PassNotLoaded)?;
    let nsec = pieces.get(gap.pieces[0]).ok_or(Counter::PassNotLoaded)?;
    Ok((
        Body::Denial {
            value,
            rcode: 0,
            nscount: gap.nscount,
            pieces: [answer, nsec, nsec],
            used: 2,
        },
        Counter::AnsweredWildcard,
        NO_MEMBERS,
    ))
}

/// Writes `*.` in front of the encloser starting at octet `at` of `name`, making it its
/// wildcard's name; `None` when there is no room (the walk cleared at least one label in
/// front of `at`, so two octets are free).
#[inline(always)]
fn star_in_front<const W: usize>(name: &mut [u64; W], at: usize) -> Option<()> {
    if !(2..8 * W).contains(&at) {
        return None;
    }
    let star = at - 1;
    let length = at - 2;
    name[(star / 8) & (W - 1)] |= u64::from(b'*') << (8 * (star & 7));
    name[(length / 8) & (W - 1)] |= 1 << (8 * (length & 7));
    Some(())
}

/// The answer synthesised from the wildcard below the closest encloser, which starts at
/// octet `at` of `name` (RFC 4592 §3.3.1): `*.` is written in front of it, and the
/// wildcard's entry for the query type answers when its tail fits any question name.
/// Without an entry, the wildcard's node entry answers NODATA (the SOA owner points at
/// the apex inside the question, as for any negative answer). A policy set at the
/// wildcard is chosen as anywhere else (its members' records are owned by the question
/// and name nothing else); the answer counts in its policy's counter.
#[inline(always)]
fn wildcard<'a, const W: usize>(
    t: &Tables<'a>,
    key: &mut AnswerKey,
    name: &mut [u64; W],
    at: usize,
    qtype: u16,
    health: u32,
) -> Result<(Body<'a>, Counter), Counter> {
    star_in_front(name, at).ok_or(Counter::PassNotCached)?;
    key.hash = name_hash(name);
    key.qtype = qtype;
    if let Some(value) = find(t, key, name)? {
        return match value.kind {
            KIND_PLAIN if value.node_flags & PLAIN_ANY_QNAME != 0 => {
                Ok((Body::Plain(value, None), Counter::AnsweredWildcard))
            }
            KIND_POLICY => policy(t, value.policy, health),
            _ => Err(Counter::PassNotCached),
        };
    }
    key.qtype = QTYPE_NODE;
    match find(t, key, name)? {
        Some(node) if node_bits(node) & NODE_NODATA != 0 => Ok((Body::Negative(node, 0), Counter::AnsweredWildcard)),
        _ => Err(Counter::PassNotCached),
    }
}

/// A DO=1 query for a name of a signed zone: the entry's signed variant (the answer with
/// its RRSIGs, keyed by the name's hash with [`DO_SALT`]), when the tables have one. A
/// policy set's variant is the set: the members are chosen as for DO=0, and the answer
/// signed for that outcome is the entry keyed with its [`outcome_salt`] as well (a
/// client-aware set's: [`member_outcome_salt`] of the set's member the client's chain
/// chose); its members are counted like the unsigned answer's (the third value).
#[inline(always)]
fn signed<'a, const W: usize>(
    t: &Tables<'a>,
    key: &mut AnswerKey,
    name: &[u64; W],
    health: u32,
    who: &mut Who,
) -> Result<(Body<'a>, Counter, u64), Counter> {
    key.hash ^= DO_SALT;
    let (chosen, client) = match find(t, key, name)? {
        Some(value) if value.kind == KIND_PLAIN => {
            return Ok((Body::Plain(value, None), Counter::AnsweredSigned, NO_MEMBERS))
        }
        Some(value) if value.kind == KIND_POLICY => (policy(t, value.policy, health)?, false),
        Some(value) if value.kind == KIND_CLIENT => (client_set(t, value, health, who)?, true),
        _ => return Err(Counter::PassSigned),
    };
    let (Body::Policy { policy, mask, ttl }, _) = chosen else {
        return Err(Counter::PassSigned);
    };
    key.hash ^= if client {
        member_outcome_salt(
            u32::from(policy.origin[mask.trailing_zeros() as usize & (POLICY_MEMBERS - 1)]),
            ttl,
        )
    } else {
        outcome_salt(mask, ttl)
    };
    match find(t, key, name)? {
        Some(value) if value.kind == KIND_PLAIN => {
            Ok((Body::Plain(value, None), Counter::AnsweredSigned, counted(policy, mask)))
        }
        _ => Err(Counter::PassSigned),
    }
}

/// The answer counters of `mask`'s members of `policy`: the first counter in the low 32
/// bits, the members from it above. A client-aware chain's one member is the set's
/// member `origin`, counted alone at the set's counter plus that.
#[inline(always)]
fn counted(policy: &PolicyValue, mask: u64) -> u64 {
    if policy.kind != POLICY_CLIENT || policy.counter == NO_ANSWER_COUNTER {
        return u64::from(policy.counter) | mask << 32;
    }
    let i = mask.trailing_zeros() as usize & (POLICY_MEMBERS - 1);
    u64::from(policy.counter.wrapping_add(u32::from(policy.origin[i]))) | 1 << 32
}

/// An answer whose members (if a policy chose them) the caller takes from its body.
#[inline(always)]
fn with_no_members<'a>(answer: Result<(Body<'a>, Counter), Counter>) -> Result<(Body<'a>, Counter, u64), Counter> {
    answer.map(|(body, counter)| (body, counter, NO_MEMBERS))
}

/// The counter of an entry that sends its queries to user space.
#[inline(always)]
fn pass_reason(entry: &AnswerValue) -> Counter {
    match entry.reason {
        REASON_REFERRAL => Counter::PassReferral,
        REASON_LARGE => Counter::PassLarge,
        REASON_CLIENT_AWARE => Counter::PassClientAware,
        _ => Counter::PassNotCached,
    }
}

/// An answer whose tail is in the small, medium or large table gets it (looked up
/// before the frame is touched, like everything that can fail): a negative answer's SOA,
/// a plain answer's tail over `TAIL_MAX` octets.
#[inline(always)]
fn tails<'a>(t: &Tables<'a>, body: Body<'a>) -> Result<Body<'a>, Counter> {
    let value = match body {
        Body::Plain(value, _) => value,
        Body::Negative(node, rcode) => {
            return match t.small_tail(node.tail_id) {
                Some(tail) => Ok(Body::Small(node, tail, Some(rcode))),
                _ => Err(Counter::PassNotLoaded),
            }
        }
        _ => return Ok(body),
    };
    if value.node_flags & PLAIN_MEDIUM != 0 {
        return match t.medium_tail(value.policy) {
            Some(tail) => Ok(Body::Medium(value, tail)),
            _ => Err(Counter::PassNotLoaded),
        };
    }
    if value.node_flags & PLAIN_LARGE == 0 {
        if usize::from(value.tail_len) <= TAIL_MAX {
            return Ok(body);
        }
        return match t.small_tail(value.tail_id) {
            Some(tail) => Ok(Body::Small(value, tail, None)),
            _ => Err(Counter::PassNotLoaded),
        };
    }
    match t.large_tail(value.policy) {
        Some(tail) => Ok(Body::Plain(value, Some(tail))),
        _ => Err(Counter::PassNotLoaded),
    }
}

/// Zeroes the name's octets before `at`, a word at a time (little-endian: octet k of a
/// word is bits 8k..8k+8).
#[inline(always)]
fn clear_before<const W: usize>(name: &mut [u64; W], at: usize) {
    if W > 8 {
        // 32 words: without a branch, so the verifier walks one path per word (with
        // two branches a word, its walk of the stage's 24 steps went past 1,000,000).
        for (w, word) in name.iter_mut().enumerate() {
            // Octets of this word before `at`, clamped to 0..=8: all ones in `negative`
            // when none, in `whole` when all. Opaque, so LLVM does not turn the sign
            // masks back into compares.
            let before = at as i64 - (w * 8) as i64;
            let negative = core::hint::black_box(before >> 63);
            let before = before & !negative;
            let whole = core::hint::black_box((7 - before) >> 63) as u64;
            *word &= (u64::MAX << ((8 * before) as u64 & 63)) & !whole;
        }
        return;
    }
    for (w, word) in name.iter_mut().enumerate() {
        let first = w * 8;
        if first + 8 <= at {
            *word = 0;
        } else if first < at {
            *word &= u64::MAX << (8 * ((at - first) & 7));
        }
    }
}

/// The address a client-aware set decides by (top-aligned, see `qdns_abi::client`),
/// and the scope of the decision once made.
pub struct Who {
    /// The address.
    addr: u64,
    /// An IPv6 address (else IPv4).
    v6: bool,
    /// The decision's scope (0 until a client-aware set decides).
    scope: u8,
}

/// The client a query is decided by (`qdns_zone::client::client_prefix`): the ECS
/// prefix when the query has one with SOURCE > 0 (capped at /24 and /56, bits past the
/// cap cleared), else the packet's source (an IPv4-mapped IPv6 source is that IPv4
/// client, as user space reads a dual-stack socket's).
#[inline(always)]
fn who(ctx: &XdpContext, at: &Offsets, echo: &[u64; ECHO_WORDS], ecs_len: usize) -> Result<Who, Counter> {
    let (family, source) = subnet::family_source(echo);
    if ecs_len != 0 && source != 0 {
        let (high, _) = subnet::address(echo);
        let v6 = family == 2;
        let cap = if v6 { ECS_CAP_V6 } else { ECS_CAP_V4 };
        return Ok(Who {
            addr: high & !subnet::mask_past(source.min(cap)),
            v6,
            scope: 0,
        });
    }
    if at.ipv6 {
        let ip = Window::<16>::at(ctx, at.l3 + 8)?;
        let (high, low) = (ip.get64_le(0).swap_bytes(), ip.get64_le(8).swap_bytes());
        if high == 0 && low >> 32 == 0xffff {
            return Ok(Who {
                addr: low << 32,
                v6: false,
                scope: 0,
            });
        }
        return Ok(Who {
            addr: high,
            v6: true,
            scope: 0,
        });
    }
    let ip = Window::<4>::at(ctx, at.l3 + 12)?;
    Ok(Who {
        addr: u64::from(ip.get32_le(0).swap_bytes()) << 32,
        v6: false,
        scope: 0,
    })
}

/// The SCOPE PREFIX-LENGTH echoed for a decision over `scope` (RFC 7871 §7.2.1): 0 for
/// SOURCE 0 (§7.1.2), at most the cap when SOURCE was over it (the decision used the
/// capped prefix).
#[inline(always)]
fn echoed_scope(echo: &[u64; ECHO_WORDS], scope: u8) -> u8 {
    let (family, source) = subnet::family_source(echo);
    let cap = if family == 2 { ECS_CAP_V6 } else { ECS_CAP_V4 };
    if source == 0 {
        0
    } else if source > cap {
        scope.min(cap)
    } else {
        scope
    }
}

/// A client-aware set (SPEC §10): the client's block in the set's table (or the gap
/// around it), its chain (through the zone's class for geo sets), then the chain's
/// first healthy member as a policy entry of its own. Records the decision's scope in
/// `who`.
#[inline(always)]
fn client_set<'a>(
    t: &Tables<'a>,
    value: &AnswerValue,
    health: u32,
    who: &mut Who,
) -> Result<(Body<'a>, Counter), Counter> {
    let set = CLIENT_SETS
        .get(t.bank)
        .and_then(|sets| sets.get(value.policy))
        .ok_or(Counter::PassNotLoaded)?;
    let blocks = CLIENT_BLOCKS.get(t.bank).ok_or(Counter::PassNotLoaded)?;
    let (first, count, width, long, index) = if who.v6 {
        (
            set.v6_first,
            set.v6_count,
            128,
            set.flags & CLIENT_V6_LONG,
            set.v6_index,
        )
    } else {
        (set.v4_first, set.v4_count, 32, set.flags & CLIENT_V4_LONG, set.v4_index)
    };
    if long != 0 {
        return Err(Counter::PassClientAware);
    }
    // A large family: only the blocks of the address's bucket (two index reads).
    let search = if index == NO_INDEX {
        (0, count)
    } else {
        let indexes = CLIENT_INDEX.get(t.bank).ok_or(Counter::PassNotLoaded)?;
        let at = index.wrapping_add(bucket(who.addr));
        let entry = |i: u32| indexes.get(i).copied().ok_or(Counter::PassNotLoaded);
        window(entry(at)?, entry(at.wrapping_add(1))?, count)
    };
    let found =
        locate(|i| blocks.get(i).copied(), (first, count), search, who.addr, width).ok_or(Counter::PassNotLoaded)?;
    let chain = match found.value {
        Some(class) if set.classes != 0 => {
            if class >= set.classes {
                return Err(Counter::PassNotLoaded);
            }
            *CLASS_CHAINS
                .get(t.bank)
                .and_then(|chains| chains.get(set.classes_first + class))
                .ok_or(Counter::PassNotLoaded)?
        }
        Some(chain) => chain,
        None => 0,
    };
    if chain >= set.chains {
        return Err(Counter::PassNotLoaded);
    }
    who.scope = found.scope;
    policy(t, set.chain_first + chain, health)
}

/// Chooses the members of policy set `id` over the active health buffer: the members'
/// health bits index the precomputed decision; weighted sets then draw.
#[inline(always)]
fn policy<'a>(t: &Tables<'a>, id: u32, health: u32) -> Result<(Body<'a>, Counter), Counter> {
    let Some(policy) = t.policy_set(id) else {
        return Err(Counter::PassNotLoaded);
    };
    let Some(bitmap) = HEALTH.get(health) else {
        return Err(Counter::PassNotLoaded);
    };
    let n = usize::from(policy.members);
    if n == 0 || n > POLICY_MEMBERS {
        return Err(Counter::PassNotCached);
    }
    // Branch-free: every member's bit is read (unused ones are masked off after).
    let mut healthy = u32::from(policy.always);
    for (i, &slot) in policy.slots.iter().enumerate() {
        let word = bitmap[(slot as usize / 64) & (HEALTH_WORDS - 1)];
        healthy |= (((word >> (slot & 63)) & 1) as u32) << i;
    }
    let healthy = (healthy & ((1u32 << n) - 1)) as usize & (HEALTH_COMBINATIONS - 1);
    let decision = policy.decision[healthy];
    let chosen = u64::from(decision & 0xff);
    let ttl = usize::from(decision & DECISION_DEGRADED != 0);
    let (mask, counter) = match policy.kind {
        POLICY_WEIGHTED => {
            let pool = WeightedPool {
                eligible: chosen,
                span: u32::from(policy.span[healthy]),
                by_weight: decision & DECISION_BY_WEIGHT != 0,
                fail_open: false,
            };
            // SAFETY: a helper without arguments or side effects on program state.
            let draw = unsafe { bpf_get_prandom_u32() };
            let members = policy.weighted.get(..n).ok_or(Counter::PassNotCached)?;
            match weighted_pick(members, &pool, draw) {
                Some(choice) => (1u64 << (choice.index & 7), Counter::AnsweredWeighted),
                None => return Err(Counter::PassNotCached),
            }
        }
        POLICY_FAILOVER => (chosen, Counter::AnsweredFailover),
        POLICY_MULTIVALUE => (chosen, Counter::AnsweredMultivalue),
        POLICY_ZONAL => (chosen, Counter::AnsweredZonal),
        POLICY_CLIENT => (chosen, Counter::AnsweredClient),
        POLICY_LATENCY => (chosen, Counter::AnsweredLatency),
        _ => return Err(Counter::PassNotCached),
    };
    Ok((Body::Policy { policy, mask, ttl }, counter))
}
