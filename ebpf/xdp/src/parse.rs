//! Parsing a frame down to the DNS question: Ethernet (+ one 802.1Q/802.1ad tag), IPv4
//! (any IHL, not fragmented) or IPv6 (no extension headers), UDP to the service port,
//! the DNS header (RFC 1035 §4.1.1) and the question name (§4.1.2). Every read goes
//! through [`ptr_at`], checked against the end of the packet; loops run to constants.
use aya_ebpf::programs::XdpContext;
use qdns_abi::{Counter, MAX_QNAME_LEN};

use crate::maps;

const ETH_LEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
const UDP_LEN: usize = 8;
const DNS_HEADER_LEN: usize = 12;

/// Where the parts of a query are in the packet.
#[derive(Clone, Copy)]
pub struct Offsets {
    /// Start of the IP header.
    pub l3: usize,
    /// True for IPv6.
    pub ipv6: bool,
    /// Start of the UDP header.
    pub l4: usize,
    /// Start of the DNS message.
    pub dns: usize,
    /// Length of the question name in wire format.
    pub qname_len: usize,
}

/// A pointer to a `T` at `offset`, if the packet holds it whole.
#[inline(always)]
pub fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Result<*const T, Counter> {
    // Read back through a volatile load so LLVM forgets that `data` is a zero-extended
    // u32: knowing it, LLVM rewrites `p + 1 > end` as `p >= end`, a form after which the
    // verifier grants the load no range ("invalid access to packet").
    let data = ctx.data();
    // SAFETY: a read of a local.
    let start = unsafe { core::ptr::read_volatile(&data) };
    let end = ctx.data_end();
    if start + offset + core::mem::size_of::<T>() > end {
        return Err(Counter::PassTruncated);
    }
    Ok((start + offset) as *const T)
}

#[inline(always)]
pub fn u8_at(ctx: &XdpContext, offset: usize) -> Result<u8, Counter> {
    // SAFETY: ptr_at checked that the byte is inside the packet.
    Ok(unsafe { *ptr_at::<u8>(ctx, offset)? })
}

#[inline(always)]
pub fn u16_at(ctx: &XdpContext, offset: usize) -> Result<u16, Counter> {
    // SAFETY: ptr_at checked that both bytes are inside the packet; read_unaligned
    // because packet data has no alignment guarantee.
    Ok(u16::from_be(unsafe {
        core::ptr::read_unaligned(ptr_at::<u16>(ctx, offset)?)
    }))
}

/// Parses the frame as a DNS query to the service port.
#[inline(always)]
pub fn query(ctx: &XdpContext) -> Result<Offsets, Counter> {
    let mut l3 = ETH_LEN;
    let mut ethertype = u16_at(ctx, 12)?;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        ethertype = u16_at(ctx, 16)?;
        l3 += 4;
    }
    let (l4, ipv6) = match ethertype {
        ETH_P_IP => {
            let version_ihl = u8_at(ctx, l3)?;
            let ihl = usize::from(version_ihl & 0x0f) * 4;
            if version_ihl >> 4 != 4 || ihl < 20 {
                return Err(Counter::PassNotIp);
            }
            // More-fragments flag or a fragment offset: not the first/whole datagram.
            if u16_at(ctx, l3 + 6)? & 0x3fff != 0 {
                return Err(Counter::PassFragment);
            }
            if u8_at(ctx, l3 + 9)? != IPPROTO_UDP {
                return Err(Counter::PassNotUdp);
            }
            (l3 + ihl, false)
        }
        ETH_P_IPV6 => {
            if u8_at(ctx, l3)? >> 4 != 6 {
                return Err(Counter::PassNotIp);
            }
            if u8_at(ctx, l3 + 6)? != IPPROTO_UDP {
                return Err(Counter::PassNotUdp);
            }
            (l3 + 40, true)
        }
        _ => return Err(Counter::PassNotIp),
    };
    if !maps::is_service_port(u16_at(ctx, l4 + 2)?) {
        return Err(Counter::PassOtherPort);
    }
    let dns = l4 + UDP_LEN;
    let flags = u16_at(ctx, dns + 2)?;
    if flags & 0x8000 != 0 {
        return Err(Counter::PassResponse);
    }
    let simple = flags & 0x7800 == 0
        && u16_at(ctx, dns + 4)? == 1
        && u16_at(ctx, dns + 6)? == 0
        && u16_at(ctx, dns + 8)? == 0
        && u16_at(ctx, dns + 10)? <= 1;
    if !simple {
        return Err(Counter::PassNotSimpleQuery);
    }
    let qname_len = qname(ctx, dns + DNS_HEADER_LEN)?;
    Ok(Offsets {
        l3,
        ipv6,
        l4,
        dns,
        qname_len,
    })
}

/// Walks the question name at `start`: plain labels (no compression), 255 octets at
/// most, ending with the root label. Returns its wire length.
#[inline(always)]
fn qname(ctx: &XdpContext, start: usize) -> Result<usize, Counter> {
    let mut at = 0usize;
    // One step per octet position: a label's length byte is visited, its body skipped.
    let mut next_label = 0usize;
    for i in 0..MAX_QNAME_LEN {
        if i != next_label {
            continue;
        }
        let len = usize::from(u8_at(ctx, start + (i & 0xff))?);
        if len == 0 {
            at = i + 1;
            break;
        }
        if len > 63 {
            return Err(Counter::PassBadQname);
        }
        next_label = i + 1 + len;
        if next_label >= MAX_QNAME_LEN {
            return Err(Counter::PassBadQname);
        }
    }
    if at == 0 {
        return Err(Counter::PassBadQname);
    }
    // QTYPE and QCLASS must follow.
    u16_at(ctx, start + at + 2)?;
    Ok(at)
}
