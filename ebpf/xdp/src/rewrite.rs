//! Turning the query frame into the response in place: the DNS header and sections, then
//! UDP (ports swapped, length, checksum), IP (addresses swapped, length, hop limit,
//! IPv4 header checksum) and Ethernet (addresses swapped; a VLAN tag stays).
//!
//! The UDP checksum is computed from scratch — pseudo-header, UDP header, the new DNS
//! header, the question as sent, the precomputed sums of the tail pieces — so it does
//! not depend on the query's checksum being complete (veth and offloading NICs hand XDP
//! partial ones). IPv4 gets a real checksum too: RFC 768 allows 0, but a zero checksum
//! hides corruption and costs the same to avoid here.
use aya_ebpf::programs::XdpContext;
use qdns_abi::{
    answer::{checksum, fold, RESPONSE_MAX},
    Counter,
};

use crate::{
    answer::{shape, write_opt, write_tail, Body, Question, Verdict, OPT_LEN},
    parse::{ptr_at, u16_at, u8_at, Offsets, IPPROTO_UDP},
};

const HOP_LIMIT: u8 = 64;
/// RD and CD, copied from the query.
const RD_CD: u16 = 0x0110;

/// Rewrites the frame into the response for `body`.
#[inline(always)]
pub fn respond(ctx: &XdpContext, at: &Offsets, q: &Question, body: &Body<'_>, counter: Counter) -> Verdict {
    let (flags, an, ns, ar, tail_len) = match shape(body, q.qlen) {
        Ok(shape) => shape,
        Err(reason) => return Verdict::Pass(reason),
    };
    let end = q.end + tail_len + if q.edns { OPT_LEN } else { 0 };
    if end - at.dns > RESPONSE_MAX {
        return Verdict::Pass(Counter::PassNotCached);
    }
    if !crate::answer::resize(ctx, end) {
        return Verdict::Pass(Counter::PassNoRoom);
    }
    match finish(ctx, at, q, body, (flags, an, ns, ar, tail_len), end) {
        Some(()) => Verdict::Tx(counter),
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
) -> Option<()> {
    let udp = at.l4;
    let mut sum = q.sum;
    sum += write_tail(ctx, body, q.end, udp, q.qlen)?;
    let mut arcount = ar;
    if q.edns {
        sum += write_opt(ctx, q.end + tail_len, udp)?;
        arcount += 1;
    }

    let dns = at.dns;
    let id = u16_at(ctx, dns).ok()?;
    let response_flags = flags | (u16_at(ctx, dns + 2).ok()? & RD_CD);
    put_u16(ctx, dns + 2, response_flags)?;
    put_u16(ctx, dns + 4, 1)?;
    put_u16(ctx, dns + 6, an)?;
    put_u16(ctx, dns + 8, ns)?;
    put_u16(ctx, dns + 10, arcount)?;
    for word in [id, response_flags, 1, an, ns, arcount] {
        sum += u64::from(word);
    }

    let udp_len = (end - udp) as u16;
    let source = u16_at(ctx, udp).ok()?;
    let destination = u16_at(ctx, udp + 2).ok()?;
    put_u16(ctx, udp, destination)?;
    put_u16(ctx, udp + 2, source)?;
    put_u16(ctx, udp + 4, udp_len)?;
    sum += u64::from(source) + u64::from(destination) + u64::from(udp_len);
    // Pseudo-header: addresses (their sum does not change when swapped), protocol, length.
    sum += u64::from(IPPROTO_UDP) + u64::from(udp_len);
    let l3 = at.l3;
    if at.ipv6 {
        sum += swap::<16>(ctx, l3 + 8)?;
        put_u16(ctx, l3 + 4, udp_len)?;
        put_u8(ctx, l3 + 7, HOP_LIMIT)?;
    } else {
        sum += swap::<4>(ctx, l3 + 12)?;
        let ihl = usize::from(u8_at(ctx, l3).ok()? & 0x0f) * 4;
        put_u16(ctx, l3 + 2, (ihl + usize::from(udp_len)) as u16)?;
        put_u8(ctx, l3 + 8, HOP_LIMIT)?;
        put_u16(ctx, l3 + 10, 0)?;
        let mut ip_sum = 0u64;
        for i in 0..30 {
            if i * 2 >= ihl {
                break;
            }
            ip_sum += u64::from(u16_at(ctx, l3 + i * 2).ok()?);
        }
        put_u16(ctx, l3 + 10, !fold(ip_sum))?;
    }
    put_u16(ctx, udp + 6, checksum(sum))?;
    swap::<6>(ctx, 0)?;
    Some(())
}

/// Swaps the `N`-octet source and destination addresses at `offset` (source first, the
/// destination right after it) and returns the sum of both.
#[inline(always)]
fn swap<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<u64> {
    let first = ptr_at::<[u8; N]>(ctx, offset).ok()?.cast_mut();
    let second = ptr_at::<[u8; N]>(ctx, offset + N).ok()?.cast_mut();
    // SAFETY: both ranges were checked to lie inside the frame; unaligned accesses
    // because frame data has no alignment.
    let (a, b) = unsafe { (first.read_unaligned(), second.read_unaligned()) };
    // SAFETY: as above.
    unsafe {
        first.write_unaligned(b);
        second.write_unaligned(a);
    }
    let mut sum = 0u64;
    let mut i = 0;
    while i + 1 < N {
        sum += u64::from(u16::from_be_bytes([a[i], a[i + 1]])) + u64::from(u16::from_be_bytes([b[i], b[i + 1]]));
        i += 2;
    }
    Some(sum)
}

#[inline(always)]
fn put_u16(ctx: &XdpContext, offset: usize, value: u16) -> Option<()> {
    let p = ptr_at::<[u8; 2]>(ctx, offset).ok()?.cast_mut();
    // SAFETY: checked inside the frame; an array of octets has no alignment.
    unsafe { p.write(value.to_be_bytes()) };
    Some(())
}

#[inline(always)]
fn put_u8(ctx: &XdpContext, offset: usize, value: u8) -> Option<()> {
    let p = ptr_at::<u8>(ctx, offset).ok()?.cast_mut();
    // SAFETY: checked inside the frame.
    unsafe { p.write(value) };
    Some(())
}
