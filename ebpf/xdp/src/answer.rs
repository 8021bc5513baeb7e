//! The answer path: check that the query is one the tables answer, look the name up
//! (exact type, then the node, then the closest encloser), choose policy members with
//! the `qdns-abi` selection functions, and rewrite the frame into the response in place.
//!
//! Everything that can fail is checked before the frame is touched; once it grows, only
//! writes the earlier checks guarantee remain.
use aya_ebpf::{
    helpers::{
        bpf_get_prandom_u32, bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len, bpf_xdp_load_bytes,
        bpf_xdp_store_bytes,
    },
    programs::XdpContext,
};
use qdns_abi::{
    answer::{
        fold, placed, AnswerKey, AnswerValue, LargeTail, PolicyKey, PolicyValue, DECISION_BY_WEIGHT, DECISION_DEGRADED,
        FIXUPS_MAX, HEALTH_COMBINATIONS, HEALTH_WORDS, KIND_NODE, KIND_PLAIN, KIND_POLICY, KIND_REFERRAL,
        LARGE_TAIL_MAX, MEMBER_BLOB, NAME_MAX, NODE_NODATA, NODE_NXDOMAIN, NODE_WILDCARD, PLAIN_ANY_QNAME, PLAIN_LARGE,
        POLICY_FAILOVER, POLICY_MEMBERS, POLICY_MULTIVALUE, POLICY_WEIGHTED, POLICY_ZONAL, QTYPE_ANY, QTYPE_NODE,
        REASON_LARGE, REASON_REFERRAL, RESPONSE_MAX, TAIL_MAX,
    },
    name::{add_word, keep_last, lowercase_word, name_hash, name_sum, word_end, NAME_WORDS},
    select::{weighted_pick, WeightedPool},
    Counter,
};

use crate::{
    maps::{self, ANSWERS, HEALTH, LARGE, POLICIES},
    parse::{self, u16_at, u64_le_at, u8_at, Offsets, Window},
    rewrite,
};

const CLASS_IN: u16 = 1;
const TYPE_OPT: u16 = 41;
/// The DO bit in the OPT record's flags (RFC 3225 §3).
const DO_BIT: u16 = 0x8000;
/// OPT record without options.
pub const OPT_LEN: usize = 11;
/// Most EDNS options walked in a query's OPT record.
const MAX_OPTIONS: usize = 16;
/// Largest query the fast path reads (bounds every packet offset for the verifier).
const QUERY_MAX: usize = 1500;
const RCODE_NXDOMAIN: u16 = 3;
/// Largest UDP response to a client without EDNS (RFC 1035 §2.3.4), and the least an
/// EDNS size means (RFC 6891 §6.2.5).
const CLASSIC_UDP: usize = 512;
/// Most ancestors tried when looking for a missing name's closest encloser; deeper
/// misses go to user space.
const WALK_MAX: usize = 8;

/// What the program does with the packet.
pub enum Verdict {
    /// Send the rewritten frame back out (`XDP_TX`).
    Tx(Counter),
    /// Hand the untouched frame to the kernel stack.
    Pass(Counter),
    /// The frame was changed and then could not be finished (`XDP_ABORTED`; the checks
    /// before the change make this unreachable).
    Abort,
}

/// The sections after the question.
pub enum Body<'a> {
    /// A precomputed answer; its tail is in the value, or (over `TAIL_MAX` octets) in
    /// the large table. One variant for both, so the verifier walks the rewrite once.
    Plain(&'a AnswerValue, Option<&'a LargeTail>),
    /// NODATA or NXDOMAIN with the zone's SOA; the owner pointer is filled in.
    Negative(&'a AnswerValue, u16),
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
}

/// Per-CPU scratch: the lookup key and name, the parse offsets passed through map
/// memory, and room for moving the frame's front.
#[repr(C)]
pub struct Scratch {
    /// The key being looked up.
    key: AnswerKey,
    /// The query name's words (see `qdns_abi::name`), cleared label by label in the
    /// NXDOMAIN walk.
    name: [u64; NAME_WORDS],
    /// `[l3, l4, dns, qname_len]` as parsed.
    offsets: [u64; 4],
    /// Where the closest encloser starts in `name` when it has a wildcard child: passed
    /// through map memory so the walk's iterations meet in one state (see [`launder`]).
    encloser: u64,
    /// The client's response limit, passed through map memory for the same reason.
    limit: u64,
    /// The front of the frame while it moves (see [`resize`]).
    pub moving: [u8; MOVE_MAX],
}

/// Most octets [`resize`] moves to grow a frame at the front: everything before the
/// answer (Ethernet, one tag, IPv4 with options, UDP, DNS header, a 64-octet question)
/// is at most 18 + 60 + 8 + 12 + 64 + 4 = 166.
pub const MOVE_MAX: usize = 256;

/// Every parse path (VLAN or not, IPv4 IHL, IPv6, each name length) ends with exact
/// offsets, and the verifier would walk the rest of the program once per combination.
/// Read back from map memory they are plain bounded values: one walk covers them all.
#[inline(always)]
fn launder(scratch: &mut Scratch, at: &Offsets) -> Result<Offsets, Counter> {
    scratch.offsets = [at.l3 as u64, at.l4 as u64, at.dns as u64, at.qname_len as u64];
    // SAFETY: reads of this CPU's scratch, just written.
    let [l3, l4, dns, qlen] = unsafe { core::ptr::read_volatile(&scratch.offsets) };
    if l3 > 18 || l4 > 18 + 60 || dns != l4 + 8 || qlen > NAME_MAX as u64 {
        return Err(Counter::PassLongName);
    }
    Ok(Offsets {
        l3: l3 as usize,
        ipv6: at.ipv6,
        l4: l4 as usize,
        dns: dns as usize,
        qname_len: qlen as usize,
    })
}

/// Answers the query at `at` from the tables, or says why not.
#[inline(always)]
pub fn answer(ctx: &XdpContext, at: &Offsets) -> Verdict {
    let Some(scratch) = maps::SCRATCH.get_ptr_mut(0) else {
        return Verdict::Pass(Counter::PassNotLoaded);
    };
    // SAFETY: this CPU's element, used by this program run only (XDP runs are not
    // preempted on a CPU).
    let scratch = unsafe { &mut *scratch };
    let at = match launder(scratch, at) {
        Ok(at) => at,
        Err(reason) => return Verdict::Pass(reason),
    };
    let at = &at;
    match plan(ctx, at, scratch) {
        Ok((question, body, counter)) => rewrite::respond(ctx, at, &question, &body, counter, &mut scratch.moving),
        Err(reason) => Verdict::Pass(reason),
    }
}

#[inline(always)]
fn plan<'a>(ctx: &XdpContext, at: &Offsets, scratch: &mut Scratch) -> Result<(Question, Body<'a>, Counter), Counter> {
    let Scratch {
        key,
        name: words,
        encloser,
        limit: limit_slot,
        ..
    } = scratch;
    let active = maps::active();
    let generation = active as u32;
    if generation == 0 {
        return Err(Counter::PassNotLoaded);
    }
    let qlen = at.qname_len;
    if qlen > NAME_MAX || qlen == 0 {
        return Err(Counter::PassLongName);
    }
    let qname_at = at.dns + 12;
    let qtype = u16_at(ctx, qname_at + qlen)?;
    let qclass = u16_at(ctx, qname_at + qlen + 2)?;
    if qclass != CLASS_IN || qtype == 0 || qtype == TYPE_OPT || (128..QTYPE_ANY).contains(&qtype) {
        return Err(Counter::PassSpecialQuery);
    }
    let end = qname_at + qlen + 4;
    let msg_end = message_end(ctx, at)?;
    special_addresses(ctx, at)?;
    let opt = edns(ctx, at.dns, end, msg_end)?;
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
        *slot = match word_end(j, qlen) {
            Some(end) => {
                // `qname_at + end - 8`, written without a subtraction the verifier
                // could not bound: qname_at = dns + 12.
                let word = keep_last(u64_le_at(ctx, at.dns + 4 + end)?, end);
                acc = add_word(acc, word);
                lowercase_word(word)
            }
            None => 0,
        };
    }
    // The question is echoed as sent (0x20 case): its sum uses the original octets.
    let mut sum = u64::from(name_sum(acc, qlen));
    sum += placed(qtype, qlen) + placed(qclass, qlen);
    let question = Question {
        qlen,
        message_end: msg_end,
        end,
        sum,
        edns: opt.present,
        dnssec_ok: opt.dnssec_ok,
        limit,
    };
    let (body, counter) = lookup(key, words, encloser, qlen, (active >> 32) as u32 & 1)?;
    Ok((question, large(generation, body)?, counter))
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
}

/// The additional section: nothing, or exactly one OPT record (root owner, version 0,
/// well-formed options) ending the message — what user space answers the same way.
/// DO is echoed and every option is ignored, as user space does (COOKIE, ECS, NSID,
/// padding and unknown codes alike; docs/OPERATIONS.md says what a client gets).
/// Anything else goes to user space.
#[inline(always)]
fn edns(ctx: &XdpContext, dns: usize, end: usize, msg_end: usize) -> Result<Opt, Counter> {
    if u16_at(ctx, dns + 10)? == 0 {
        return if msg_end == end {
            Ok(Opt {
                present: false,
                dnssec_ok: 0,
                udp_size: 0,
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
    };
    let opt_end = end + OPT_LEN + usize::from(opt.get16(9));
    if opt_end != msg_end {
        return Err(Counter::PassBadLength);
    }
    let mut pos = end + OPT_LEN;
    // 1 once an option is NSID (code 3), computed without a branch: (code ^ 3) is below
    // 2^16, so subtracting one borrows into bit 63 only when it is 0.
    let mut nsid = 0u64;
    for _ in 0..MAX_OPTIONS {
        if pos == opt_end {
            return answerable(found, nsid);
        }
        if pos + 4 > opt_end || pos > QUERY_MAX {
            return Err(Counter::PassEdns);
        }
        nsid |= (u64::from(u16_at(ctx, pos)? ^ 3).wrapping_sub(1)) >> 63;
        pos += 4 + usize::from(u16_at(ctx, pos + 2)?);
        if pos > opt_end {
            return Err(Counter::PassEdns);
        }
    }
    if pos == opt_end {
        answerable(found, nsid)
    } else {
        Err(Counter::PassEdns)
    }
}

/// The OPT as read, unless it asks for an NSID the edge has (user space adds it).
#[inline(always)]
fn answerable(found: Opt, nsid: u64) -> Result<Opt, Counter> {
    if nsid & maps::nsid_passes() != 0 {
        Err(Counter::PassNsid)
    } else {
        Ok(found)
    }
}

/// The entry of `key` (whose hash is `name`'s), if its name is `name`. An entry under
/// the same hash for another name means the query only shares the hash: user space
/// answers it.
#[inline(always)]
fn find<'a>(key: &AnswerKey, name: &[u64; NAME_WORDS]) -> Result<Option<&'a AnswerValue>, Counter> {
    // SAFETY: the value stays valid for this program run (RCU); the loader never changes
    // an entry in place, it writes new generations beside it.
    let Some(value) = (unsafe { ANSWERS.get(key) }) else {
        return Ok(None);
    };
    let mut differ = 0;
    for (a, b) in value.name.iter().zip(name) {
        differ |= a ^ b;
    }
    if differ == 0 {
        Ok(Some(value))
    } else {
        Err(Counter::PassNotCached)
    }
}

/// Exact (name, type), then the name's node entry (NODATA), then the closest existing
/// ancestor (NXDOMAIN when it has no wildcard child and no cut).
#[inline(always)]
fn lookup<'a>(
    key: &mut AnswerKey,
    name: &mut [u64; NAME_WORDS],
    encloser: &mut u64,
    qlen: usize,
    health: u32,
) -> Result<(Body<'a>, Counter), Counter> {
    let qtype = key.qtype;
    *encloser = 0;
    // One hash for the exact and the node lookup: same name, another type.
    key.hash = name_hash(name);
    if let Some(value) = find(key, name)? {
        return match value.kind {
            KIND_PLAIN => Ok((Body::Plain(value, None), Counter::AnsweredPlain)),
            KIND_POLICY => policy(key.generation, value, health),
            _ => Err(pass_reason(value)),
        };
    }
    key.qtype = QTYPE_NODE;
    if let Some(node) = find(key, name)? {
        return if node.kind == KIND_NODE && node.node_flags & NODE_NODATA != 0 {
            Ok((Body::Negative(node, 0), Counter::AnsweredNodata))
        } else if node.kind == KIND_REFERRAL {
            Ok((Body::Plain(node, None), Counter::AnsweredReferral))
        } else {
            Err(pass_reason(node))
        };
    }
    // Each step clears the leftmost label: the name then holds the next suffix.
    let mut at = NAME_MAX - qlen;
    for _ in 0..WALK_MAX {
        // Octet `at` of the right-aligned name (little-endian words).
        let len = ((name[(at / 8) & (NAME_WORDS - 1)] >> (8 * (at & 7))) & 0xff) as usize;
        if len == 0 {
            // The root was looked up already (or is the name itself).
            return Err(Counter::PassOutsideZones);
        }
        at += len + 1;
        if at >= NAME_MAX {
            return Err(Counter::PassOutsideZones);
        }
        clear_before(name, at);
        key.hash = name_hash(name);
        if let Some(node) = find(key, name)? {
            if node.kind == KIND_REFERRAL {
                return Ok((Body::Plain(node, None), Counter::AnsweredReferral));
            }
            if node.kind != KIND_NODE || node.node_flags == 0 {
                return Err(pass_reason(node));
            }
            if node.node_flags & NODE_NXDOMAIN != 0 {
                return Ok((Body::Negative(node, RCODE_NXDOMAIN), Counter::AnsweredNxdomain));
            }
            if node.node_flags & NODE_WILDCARD != 0 {
                *encloser = at as u64;
                break;
            }
            return Err(Counter::PassNotCached);
        }
    }
    if *encloser != 0 {
        // SAFETY: a read of this CPU's scratch, just written.
        let at = unsafe { core::ptr::read_volatile(encloser) } as usize;
        return wildcard(key, name, at, qtype);
    }
    // Deeper below its closest encloser than the walk goes: user space decides.
    Err(Counter::PassNotCached)
}

/// The answer synthesised from the wildcard below the closest encloser, which starts at
/// octet `at` of `name` (RFC 4592 §3.3.1): `*.` is written in front of it, and the
/// wildcard's entry for the query type answers when its tail fits any question name.
/// Without an entry, the wildcard's node entry answers NODATA (the SOA owner points at
/// the apex inside the question, as for any negative answer). Policy sets at a wildcard
/// stay with user space: a second inlined policy path exceeds the verifier's budget.
#[inline(always)]
fn wildcard<'a>(
    key: &mut AnswerKey,
    name: &mut [u64; NAME_WORDS],
    at: usize,
    qtype: u16,
) -> Result<(Body<'a>, Counter), Counter> {
    // The walk cleared at least one label in front of `at`: two octets are free.
    if !(2..NAME_MAX).contains(&at) {
        return Err(Counter::PassNotCached);
    }
    let star = at - 1;
    let length = at - 2;
    name[(star / 8) & (NAME_WORDS - 1)] |= u64::from(b'*') << (8 * (star & 7));
    name[(length / 8) & (NAME_WORDS - 1)] |= 1 << (8 * (length & 7));
    key.hash = name_hash(name);
    key.qtype = qtype;
    if let Some(value) = find(key, name)? {
        return match value.kind {
            KIND_PLAIN if value.node_flags & PLAIN_ANY_QNAME != 0 => {
                Ok((Body::Plain(value, None), Counter::AnsweredWildcard))
            }
            _ => Err(Counter::PassNotCached),
        };
    }
    key.qtype = QTYPE_NODE;
    match find(key, name)? {
        Some(node) if node.kind == KIND_NODE && node.node_flags & NODE_NODATA != 0 => {
            Ok((Body::Negative(node, 0), Counter::AnsweredWildcard))
        }
        _ => Err(Counter::PassNotCached),
    }
}

/// The counter of an entry that sends its queries to user space.
#[inline(always)]
fn pass_reason(entry: &AnswerValue) -> Counter {
    match entry.reason {
        REASON_REFERRAL => Counter::PassReferral,
        REASON_LARGE => Counter::PassLarge,
        _ => Counter::PassNotCached,
    }
}

/// A plain answer whose tail is in the large table gets it (looked up before the frame
/// is touched, like everything that can fail).
#[inline(always)]
fn large<'a>(generation: u32, body: Body<'a>) -> Result<Body<'a>, Counter> {
    let Body::Plain(value, _) = body else {
        return Ok(body);
    };
    if value.node_flags & PLAIN_LARGE == 0 {
        return Ok(body);
    }
    let key = PolicyKey {
        generation,
        id: value.policy,
    };
    // SAFETY: as in `find`: the value stays valid for this run, never changed in place.
    match unsafe { LARGE.get(&key) } {
        Some(tail) => Ok(Body::Plain(value, Some(tail))),
        None => Err(Counter::PassNotCached),
    }
}

/// Zeroes the name's octets before `at`, a word at a time (little-endian: octet k of a
/// word is bits 8k..8k+8).
#[inline(always)]
fn clear_before(name: &mut [u64; NAME_WORDS], at: usize) {
    for (w, word) in name.iter_mut().enumerate() {
        let first = w * 8;
        if first + 8 <= at {
            *word = 0;
        } else if first < at {
            *word &= u64::MAX << (8 * ((at - first) & 7));
        }
    }
}

/// Chooses the members of a policy set over the active health buffer: the members'
/// health bits index the precomputed decision; weighted sets then draw.
#[inline(always)]
fn policy<'a>(generation: u32, value: &AnswerValue, health: u32) -> Result<(Body<'a>, Counter), Counter> {
    let key = PolicyKey {
        generation,
        id: value.policy,
    };
    let Some(policy) = (unsafe { POLICIES.get(&key) }) else {
        return Err(Counter::PassNotCached);
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
        _ => return Err(Counter::PassNotCached),
    };
    Ok((Body::Policy { policy, mask, ttl }, counter))
}

/// The header fields and tail length of `body`: (flags, ANCOUNT, NSCOUNT, ARCOUNT,
/// tail octets), or why it cannot be sent.
#[inline(always)]
pub fn shape(body: &Body<'_>, qlen: usize) -> Result<(u16, u16, u16, u16, usize), Counter> {
    match *body {
        Body::Plain(v, _) => {
            let len = usize::from(v.tail_len);
            // A referral's tail was written for a question of `apex_len` octets (the
            // cut's name); the question is the cut or below it.
            if len > LARGE_TAIL_MAX || usize::from(v.apex_len) > qlen {
                return Err(Counter::PassNotCached);
            }
            Ok((v.flags, v.ancount, v.nscount, v.arcount, len))
        }
        Body::Negative(v, rcode) => {
            let len = usize::from(v.tail_len);
            if len < 2 || len > TAIL_MAX || usize::from(v.apex_len) > qlen {
                return Err(Counter::PassNotCached);
            }
            Ok((v.flags | rcode, 0, 1, 0, len))
        }
        Body::Policy { policy, mask, ttl } => {
            let (mut len, mut count) = (0usize, 0u16);
            for i in 0..POLICY_MEMBERS {
                if mask >> i & 1 == 1 {
                    let member = usize::from(policy.lens[i][ttl & 1]);
                    if member > MEMBER_BLOB {
                        return Err(Counter::PassNotCached);
                    }
                    len += member;
                    count += policy.counts[i];
                }
            }
            Ok((0x8400, count, 0, 0, len))
        }
    }
}

/// Writes the tail of `body` at `offset` (from the frame start; `udp` is the UDP header
/// offset) and returns the sum of what it wrote.
#[inline(always)]
pub fn write_tail(ctx: &XdpContext, body: &Body<'_>, offset: usize, udp: usize, qlen: usize) -> Option<u64> {
    match *body {
        Body::Plain(v, large) => {
            let len = usize::from(v.tail_len);
            match large {
                Some(t) if len > 0 && len <= LARGE_TAIL_MAX => {
                    store::<LARGE_TAIL_MAX>(ctx, offset, t.tail.as_ptr(), len)?;
                    let delta = qlen.wrapping_sub(usize::from(v.apex_len)) & 0xff;
                    return Some(placed(v.tail_sum, offset - udp) + relocate(ctx, t, offset, udp, delta)?);
                }
                // The loader puts every tail over TAIL_MAX in the large table.
                None if len > TAIL_MAX => return None,
                None if len > 0 => store::<TAIL_MAX>(ctx, offset, v.tail.as_ptr(), len)?,
                _ => {}
            }
            Some(placed(v.tail_sum, offset - udp))
        }
        Body::Negative(v, _) => {
            let len = usize::from(v.tail_len);
            if !(2..=TAIL_MAX).contains(&len) {
                return None;
            }
            store::<TAIL_MAX>(ctx, offset, v.tail.as_ptr(), len)?;
            let pointer = 0xc000 | (12 + qlen - usize::from(v.apex_len)) as u16;
            let bytes = pointer.to_be_bytes();
            store::<2>(ctx, offset, bytes.as_ptr(), 2)?;
            Some(placed(v.tail_sum, offset - udp) + placed(pointer, offset - udp))
        }
        Body::Policy { policy, mask, ttl } => {
            let mut at = offset;
            let mut sum = 0u64;
            for i in 0..POLICY_MEMBERS {
                if mask >> i & 1 == 1 {
                    let len = usize::from(policy.lens[i][ttl & 1]);
                    if len > 0 && len <= MEMBER_BLOB {
                        store::<MEMBER_BLOB>(ctx, at, policy.blobs[i][ttl & 1].as_ptr(), len)?;
                        sum += placed(policy.sums[i][ttl & 1], at - udp);
                        at += len;
                    }
                }
            }
            Some(sum)
        }
    }
}

/// Adds `delta` (the question's length beyond the one the tail was written for) to each
/// compression pointer of a relocatable tail written at `offset`; returns the change
/// to the checksum sum. A pointer stays below 0x4000 (the loader checked the room), so
/// its word grows by `delta` exactly and, in one's-complement arithmetic, a word at an
/// odd offset by `delta` with its octets swapped (RFC 1071 §2(B)).
#[inline(always)]
fn relocate(ctx: &XdpContext, t: &LargeTail, offset: usize, udp: usize, delta: usize) -> Option<u64> {
    let n = usize::from(t.fixups_len);
    for (i, &fixup) in t.fixups.iter().enumerate() {
        if i >= n {
            break;
        }
        let at = offset + (usize::from(fixup) & (LARGE_TAIL_MAX - 1));
        let pointer = Window::<2>::at(ctx, at).ok()?;
        pointer.set16(0, pointer.get16(0).wrapping_add(delta as u16));
    }
    let odd = u64::from(t.fixups_odd).min(FIXUPS_MAX as u64);
    let even = (n.min(FIXUPS_MAX) as u64).saturating_sub(odd);
    Some(even * placed(delta as u16, offset - udp) + odd * placed(delta as u16, offset - udp + 1))
}

/// Writes our OPT record at `offset` (DO echoed from the query) and returns its sum.
#[inline(always)]
pub fn write_opt(ctx: &XdpContext, offset: usize, udp: usize, dnssec_ok: u16) -> Option<u64> {
    let payload = maps::udp_payload();
    let flags = dnssec_ok & DO_BIT;
    // Root owner, TYPE 41, CLASS = payload size, TTL = no extended RCODE, version 0 and
    // the flags, RDLENGTH 0.
    let opt = Window::<OPT_LEN>::at(ctx, offset).ok()?;
    opt.set8(0, 0);
    opt.set16(1, TYPE_OPT);
    opt.set16(3, payload);
    opt.set16(5, 0);
    opt.set16(7, flags);
    opt.set16(9, 0);
    // From an even offset the octets 00 | 00 29 | pp pp | 00 00 | ff ff | 00 00 sum to
    // 0x2900 plus the payload size and the flags, each with its octets swapped.
    Some(placed(
        fold(0x2900 + u64::from(payload.swap_bytes()) + u64::from(flags.swap_bytes())),
        offset - udp,
    ))
}

/// Grows or shrinks the frame so it ends at `end`, keeping its first `keep` octets.
///
/// Growing needs tailroom, which a frame in a tight buffer lacks (native XDP on veth
/// runs on the sender's socket buffer when its headroom suffices; a third of the IPv6
/// queries in our runs). Then the frame grows at the front instead — there is always
/// XDP headroom — and the `keep` octets before the answer move there through `moving`;
/// what follows them is overwritten by the answer anyway. A failed move is undone, so
/// the frame passes intact.
#[inline(always)]
pub fn resize(ctx: &XdpContext, q: &Question, end: usize, moving: &mut [u8; MOVE_MAX]) -> bool {
    if end > RESPONSE_MAX + 128 {
        return false;
    }
    let keep = q.end;
    // The frame length: the message end when nothing follows the message (no padding;
    // `message_end` checked it is inside the frame), else from the helper — the verifier
    // forbids arithmetic on `data_end`.
    let len = if parse::frame_ends_by(ctx, q.message_end) {
        q.message_end as u64
    } else {
        // SAFETY: reads the context only.
        unsafe { bpf_xdp_get_buff_len(ctx.ctx) }
    };
    if len > 0xffff {
        return false;
    }
    let delta = end as i64 - len as i64;
    // SAFETY: the helper checks the new size against the frame's room itself.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta as i32) } == 0 {
        return true;
    }
    if delta <= 0 || keep == 0 || keep > MOVE_MAX {
        return false;
    }
    let grow = delta as i32;
    // SAFETY: the helper checks the headroom itself.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -grow) } != 0 {
        return false;
    }
    let buffer = moving.as_mut_ptr();
    // The length, bounded for the verifier the same way `store` does it.
    // SAFETY: a read of a local.
    let n = unsafe { core::ptr::read_volatile(&keep) };
    let n = ((n.wrapping_sub(1) & (MOVE_MAX - 1)) + 1) as u32;
    // SAFETY: `buffer` holds MOVE_MAX octets and `n <= MOVE_MAX`; both helpers check the
    // frame range and fail without touching it.
    let moved = unsafe {
        bpf_xdp_load_bytes(ctx.ctx, grow as u32, buffer.cast(), n) == 0
            && bpf_xdp_store_bytes(ctx.ctx, 0, buffer.cast(), n) == 0
    };
    if moved {
        maps::count(Counter::MovedToFront);
    } else {
        // SAFETY: gives back exactly the headroom taken above.
        unsafe { bpf_xdp_adjust_head(ctx.ctx, grow) };
    }
    moved
}

/// `bpf_xdp_store_bytes`: copies `len` octets into the frame; callers check
/// `1 <= len <= MAX` and `MAX` (a power of two) is the size of the source.
#[inline(always)]
fn store<const MAX: usize>(ctx: &XdpContext, offset: usize, src: *const u8, len: usize) -> Option<()> {
    // The same value for 1..=MAX, written so the verifier sees the bound in the
    // register passed (LLVM reuses the unbounded register after a range check).
    // The volatile read hides the callers' check from LLVM, which would otherwise fold
    // the mask away.
    // SAFETY: a read of a local.
    let len = unsafe { core::ptr::read_volatile(&len) };
    let len = (len.wrapping_sub(1) & (MAX - 1)) + 1;
    // SAFETY: `src` points at `MAX` readable octets and `len <= MAX`; the helper checks
    // the frame range and fails rather than write outside it.
    let rc = unsafe { bpf_xdp_store_bytes(ctx.ctx, offset as u32, src as *mut _, len as u32) };
    (rc == 0).then_some(())
}
