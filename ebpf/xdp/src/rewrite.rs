//! Turning the query frame into the response in place: the DNS header and sections, then
//! UDP (ports swapped, length, checksum), IP (addresses swapped, length, hop limit,
//! IPv4 header checksum) and Ethernet (addresses swapped; a VLAN tag stays).
//!
//! The UDP checksum is computed from scratch — pseudo-header, UDP header, the new DNS
//! header, the question as sent, the precomputed sums of the tail pieces — so it does
//! not depend on the query's checksum being complete (veth and offloading NICs hand XDP
//! partial ones). IPv4 gets a real checksum too: RFC 768 allows 0, but a zero checksum
//! hides corruption and costs the same to avoid here.
use aya_ebpf::{
    helpers::{
        bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len, bpf_xdp_load_bytes, bpf_xdp_store_bytes,
    },
    programs::XdpContext,
};
use qdns_abi::{
    answer::{checksum, fold, RESPONSE_MAX},
    name::add_word,
    Counter,
};

use crate::{
    answer::{Body, Question, Verdict},
    parse::{self, Offsets, Window, IPPROTO_UDP},
    sections::{shape, write_cookie, write_echo, write_opt, write_tail, OPT_LEN},
    subnet::ECHO_WORDS,
};

const HOP_LIMIT: u8 = 64;
/// RD and CD, copied from the query.
const RD_CD: u16 = 0x0110;

/// Rewrites the frame into the response for `body` ([`Verdict::Sent`]: the caller
/// counts the answer).
#[inline(always)]
pub fn respond(
    ctx: &XdpContext,
    at: &Offsets,
    q: &Question,
    body: &Body<'_>,
    moving: &mut [u8; MOVE_MAX],
    echoes: [&[u64; ECHO_WORDS]; 2],
) -> Verdict {
    let (flags, an, ns, ar, tail_len) = match shape(body, q.qlen) {
        Ok(shape) => shape,
        Err(reason) => return Verdict::Pass(reason),
    };
    let end = q.end + tail_len + if q.edns { OPT_LEN + q.ecs_len + q.cookie_len } else { 0 };
    let size = end - at.dns;
    // Over what XDP may send, or over what the links carry (XDP cannot fragment; the
    // table compiler allowed for questions up to 64 octets, longer ones meet it here).
    if size > RESPONSE_MAX || size > crate::maps::max_message() {
        return Verdict::Pass(Counter::PassLarge);
    }
    if size > q.limit {
        return Verdict::Pass(Counter::PassNeedsTc);
    }
    if !resize(ctx, q, end, moving) {
        return Verdict::Pass(Counter::PassNoRoom);
    }
    match finish(ctx, at, q, body, (flags, an, ns, ar, tail_len), end, echoes) {
        Some(()) => {
            if q.dnssec_ok != 0 {
                crate::maps::count(Counter::WithDo);
            }
            Verdict::Sent
        }
        None => Verdict::Abort,
    }
}

#[inline(always)]
fn finish(
    ctx: &XdpContext,
    at: &Offsets,
    q: &Question,
    body: &Body<'_>,
    (flags, an, ns, ar, tail_len): (u16, u16, u16, u16, usize),
    end: usize,
    [ecs, cookie]: [&[u64; ECHO_WORDS]; 2],
) -> Option<()> {
    let udp = at.l4;
    let mut sum = q.sum;
    sum += write_tail(ctx, body, q.end, udp, q.qlen)?;
    let mut arcount = ar;
    if q.edns {
        let options = q.end + tail_len + OPT_LEN;
        sum += write_opt(
            ctx,
            q.end + tail_len,
            udp,
            q.dnssec_ok,
            (q.ecs_len + q.cookie_len) as u16,
        )?;
        sum += write_echo(ctx, options, udp, ecs, q.ecs_len)?;
        sum += write_cookie(ctx, options + q.ecs_len, udp, cookie, q.cookie_len)?;
        arcount += 1;
    }

    let header = Window::<12>::at(ctx, at.dns).ok()?;
    let response_flags = flags | (header.get16(2) & RD_CD);
    header.set16(2, response_flags);
    header.set16(4, 1);
    header.set16(6, an);
    header.set16(8, ns);
    header.set16(10, arcount);
    sum += u64::from(header.get16(0));
    for word in [response_flags, 1, an, ns, arcount] {
        sum += u64::from(word);
    }

    let udp_len = (end - udp) as u16;
    let ports = Window::<8>::at(ctx, udp).ok()?;
    let source = ports.get16(0);
    let destination = ports.get16(2);
    ports.set16(0, destination);
    ports.set16(2, source);
    ports.set16(4, udp_len);
    sum += u64::from(source) + u64::from(destination) + u64::from(udp_len);
    // Pseudo-header: addresses (their sum does not change when swapped), protocol, length.
    sum += u64::from(IPPROTO_UDP) + u64::from(udp_len);
    let l3 = at.l3;
    if at.ipv6 {
        let ip = Window::<40>::at(ctx, l3).ok()?;
        let (a, b) = (ip.get64_le(8), ip.get64_le(16));
        let (c, d) = (ip.get64_le(24), ip.get64_le(32));
        ip.set64_le(8, c);
        ip.set64_le(16, d);
        ip.set64_le(24, a);
        ip.set64_le(32, b);
        sum += u64::from(le_sum(add_word(add_word(add_word(add_word(0, a), b), c), d)));
        ip.set16(4, udp_len);
        ip.set8(7, HOP_LIMIT);
    } else {
        let ip = Window::<20>::at(ctx, l3).ok()?;
        let (source, destination) = (ip.get32_le(12), ip.get32_le(16));
        ip.set32_le(12, destination);
        ip.set32_le(16, source);
        let addresses = u64::from(le_sum(add_word(0, u64::from(source) | u64::from(destination) << 32)));
        sum += addresses;
        let ihl = usize::from(ip.get8(0) & 0x0f) * 4;
        let total = (ihl + usize::from(udp_len)) as u16;
        ip.set16(2, total);
        ip.set8(8, HOP_LIMIT);
        // The header checksum from scratch, from the values in hand: version/IHL/TOS,
        // total length, identification, flags/fragment, TTL/protocol, the addresses.
        let mut ip_sum = u64::from(ip.get16(0))
            + u64::from(total)
            + u64::from(ip.get16(4))
            + u64::from(ip.get16(6))
            + u64::from(u16::from(HOP_LIMIT) << 8 | u16::from(IPPROTO_UDP))
            + addresses;
        ip_sum += options_sum(ctx, l3, ihl)?;
        ip.set16(10, !fold(ip_sum));
    }
    ports.set16(6, checksum(sum));
    let eth = Window::<12>::at(ctx, 0).ok()?;
    let (d4, d2) = (eth.get32_le(0), eth.get16(4));
    let (s4, s2) = (eth.get32_le(6), eth.get16(10));
    eth.set32_le(0, s4);
    eth.set16(4, s2);
    eth.set32_le(6, d4);
    eth.set16(10, d2);
    Some(())
}

/// Sets the UDP and IP lengths for a UDP payload of `udp_len` octets (header included)
/// and both checksums, from `dns_sum` (the one's-complement sum of the DNS message as
/// it now stands) and the headers as they are: addressed to the client already. The
/// rate-limit stage's; [`finish`] does the same inline with the values it swaps in
/// hand (sharing this cost the answer path 20 ns a query, reading them again).
#[inline(always)]
pub fn seal(ctx: &XdpContext, at: &Offsets, udp_len: u16, dns_sum: u64) -> Option<()> {
    let ports = Window::<8>::at(ctx, at.l4).ok()?;
    ports.set16(4, udp_len);
    // UDP header, and the pseudo-header: addresses, protocol, length.
    let mut sum = dns_sum + u64::from(ports.get16(0)) + u64::from(ports.get16(2)) + u64::from(udp_len);
    sum += u64::from(IPPROTO_UDP) + u64::from(udp_len);
    let l3 = at.l3;
    if at.ipv6 {
        let ip = Window::<40>::at(ctx, l3).ok()?;
        let (a, b) = (ip.get64_le(8), ip.get64_le(16));
        let (c, d) = (ip.get64_le(24), ip.get64_le(32));
        sum += u64::from(le_sum(add_word(add_word(add_word(add_word(0, a), b), c), d)));
        ip.set16(4, udp_len);
    } else {
        let ip = Window::<20>::at(ctx, l3).ok()?;
        let (source, destination) = (ip.get32_le(12), ip.get32_le(16));
        let addresses = u64::from(le_sum(add_word(0, u64::from(source) | u64::from(destination) << 32)));
        sum += addresses;
        let ihl = usize::from(ip.get8(0) & 0x0f) * 4;
        let total = (ihl + usize::from(udp_len)) as u16;
        ip.set16(2, total);
        // The header checksum from scratch: version/IHL/TOS, total length,
        // identification, flags/fragment, TTL/protocol, the addresses.
        let mut ip_sum = u64::from(ip.get16(0))
            + u64::from(total)
            + u64::from(ip.get16(4))
            + u64::from(ip.get16(6))
            + u64::from(ip.get16(8))
            + addresses;
        ip_sum += options_sum(ctx, l3, ihl)?;
        ip.set16(10, !fold(ip_sum));
    }
    ports.set16(6, checksum(sum));
    Some(())
}

/// The sum of an IPv4 header's options (rare), 4 octets at a time.
#[inline(always)]
fn options_sum(ctx: &XdpContext, l3: usize, ihl: usize) -> Option<u64> {
    let mut sum = 0;
    for i in 0..10 {
        if 20 + i * 4 >= ihl {
            break;
        }
        let word = Window::<4>::at(ctx, l3 + 20 + i * 4).ok()?;
        sum += u64::from(word.get16(0)) + u64::from(word.get16(2));
    }
    Some(sum)
}

/// A [`add_word`] sum of little-endian words as the sum of the same octets read as
/// big-endian 16-bit words (RFC 1071 §2(B): byte order only swaps the folded sum).
#[inline(always)]
fn le_sum(acc: u64) -> u16 {
    fold(acc).swap_bytes()
}

/// Most octets [`resize`] moves to grow a frame at the front: everything before the
/// answer (Ethernet, one tag, IPv4 with options, UDP, DNS header, a 255-octet question)
/// is at most 18 + 60 + 8 + 12 + 255 + 4 = 357.
pub const MOVE_MAX: usize = 512;

/// Octets the front of a frame grows by when its tail cannot take the whole growth:
/// what the XDP headroom (256 octets, `XDP_PACKET_HEADROOM`) leaves past the kernel's
/// `xdp_frame` (40 octets in 6.18), which `bpf_xdp_adjust_head` keeps free.
const FRONT_SPLIT: i64 = 208;

/// Grows or shrinks the frame so it ends at `end`, keeping its first `keep` octets.
///
/// Growing needs tailroom, which a frame in a tight buffer lacks: the kernel copies a
/// veth frame (native or generic XDP) into a buffer just big enough for it and the XDP
/// headroom (6.18 `skb_pp_cow_data`), and native XDP on veth runs on the sender's
/// socket buffer when its headroom suffices (a third of the IPv6 queries in our runs).
/// Then the frame grows at the front instead — there is always XDP headroom — and the
/// `keep` octets before the answer move there through `moving`; what follows them is
/// overwritten by the answer anyway. Growth beyond the headroom (a signed NXDOMAIN's
/// 450 octets) is split: the tail's room, then [`FRONT_SPLIT`] at the front. A failed
/// step is undone, so the frame passes intact.
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
    if grow_front(ctx, delta as i32, keep, moving) {
        return true;
    }
    let back = delta - FRONT_SPLIT;
    // SAFETY: as above.
    if back <= 0 || unsafe { bpf_xdp_adjust_tail(ctx.ctx, back as i32) } != 0 {
        return false;
    }
    if grow_front(ctx, FRONT_SPLIT as i32, keep, moving) {
        return true;
    }
    // SAFETY: gives back exactly the tailroom taken above.
    unsafe { bpf_xdp_adjust_tail(ctx.ctx, -(back as i32)) };
    false
}

/// Grows the frame by `grow` octets at the front and moves its first `keep` octets
/// (`1..=MOVE_MAX`) there; undone when either step fails.
#[inline(always)]
fn grow_front(ctx: &XdpContext, grow: i32, keep: usize, moving: &mut [u8; MOVE_MAX]) -> bool {
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
        crate::maps::count(Counter::MovedToFront);
    } else {
        // SAFETY: gives back exactly the headroom taken above.
        unsafe { bpf_xdp_adjust_head(ctx.ctx, grow) };
    }
    moved
}
