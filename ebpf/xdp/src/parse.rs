//! Parsing a frame down to the DNS question: Ethernet (+ one 802.1Q/802.1ad tag), IPv4
//! (any IHL, not fragmented) or IPv6 (no extension headers), UDP to the service port,
//! the DNS header (RFC 1035 §4.1.1) and the question name (§4.1.2). Every read goes
//! through [`ptr_at`], checked against the end of the packet; loops run to constants.
use aya_ebpf::programs::XdpContext;
use qdns_abi::{Counter, ListenKey};

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

/// The eight octets at `offset` as a little-endian word (first octet lowest).
#[inline(always)]
pub fn u64_le_at(ctx: &XdpContext, offset: usize) -> Result<u64, Counter> {
    Ok(Window::<8>::at(ctx, offset)?.get64_le(0))
}

/// True when nothing of the frame follows `offset` (callers have checked that `offset`
/// is inside it).
#[inline(always)]
pub fn frame_ends_by(ctx: &XdpContext, offset: usize) -> bool {
    // The same volatile read of `data` as in `ptr_at`, for the same reason.
    let data = ctx.data();
    // SAFETY: a read of a local.
    let start = unsafe { core::ptr::read_volatile(&data) };
    start + offset >= ctx.data_end()
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

/// `N` octets of the frame at an offset checked once: the reads and writes inside need
/// no further check (the verifier keeps the checked range with the pointer), where one
/// [`ptr_at`] per field cost a check and a reload of `data` each. Field offsets are
/// constants at every call site; multi-octet fields are big-endian (network order)
/// unless named `_le`.
#[derive(Clone, Copy)]
pub struct Window<const N: usize>(*mut u8);

impl<const N: usize> Window<N> {
    /// The `N` octets at `offset`, if the frame holds them.
    #[inline(always)]
    pub fn at(ctx: &XdpContext, offset: usize) -> Result<Self, Counter> {
        Ok(Self(ptr_at::<[u8; N]>(ctx, offset)?.cast_mut().cast()))
    }

    #[inline(always)]
    fn field<T>(self, i: usize) -> *mut T {
        debug_assert!(i + core::mem::size_of::<T>() <= N);
        // SAFETY: `i + size_of::<T>() <= N` at every (constant) call site, inside the
        // checked window.
        unsafe { self.0.add(i).cast() }
    }

    /// The octet at `i`.
    #[inline(always)]
    pub fn get8(self, i: usize) -> u8 {
        // SAFETY: inside the window (see `field`).
        unsafe { self.field::<u8>(i).read() }
    }

    /// The big-endian 16-bit field at `i`.
    #[inline(always)]
    pub fn get16(self, i: usize) -> u16 {
        // SAFETY: inside the window; unaligned because frame data has no alignment.
        u16::from_be(unsafe { self.field::<u16>(i).read_unaligned() })
    }

    /// The eight octets at `i` as a little-endian word (first octet lowest).
    #[inline(always)]
    pub fn get64_le(self, i: usize) -> u64 {
        // SAFETY: as `get16`.
        u64::from_le(unsafe { self.field::<u64>(i).read_unaligned() })
    }

    /// The four octets at `i` as a little-endian word.
    #[inline(always)]
    pub fn get32_le(self, i: usize) -> u32 {
        // SAFETY: as `get16`.
        u32::from_le(unsafe { self.field::<u32>(i).read_unaligned() })
    }

    /// Writes the octet at `i`.
    #[inline(always)]
    pub fn set8(self, i: usize, value: u8) {
        // SAFETY: inside the window.
        unsafe { self.field::<u8>(i).write(value) }
    }

    /// Writes the big-endian 16-bit field at `i`.
    #[inline(always)]
    pub fn set16(self, i: usize, value: u16) {
        // SAFETY: as `get16`.
        unsafe { self.field::<u16>(i).write_unaligned(value.to_be()) }
    }

    /// Writes a little-endian word at `i` (the inverse of [`Self::get32_le`]).
    #[inline(always)]
    pub fn set32_le(self, i: usize, value: u32) {
        // SAFETY: as `get16`.
        unsafe { self.field::<u32>(i).write_unaligned(value.to_le()) }
    }

    /// Writes a little-endian word at `i` (the inverse of [`Self::get64_le`]).
    #[inline(always)]
    pub fn set64_le(self, i: usize, value: u64) {
        // SAFETY: as `get16`.
        unsafe { self.field::<u64>(i).write_unaligned(value.to_le()) }
    }
}

/// Parses the frame as a DNS query to the service port whose name is at most `MAX`
/// octets (longer: `PassLongName`).
#[inline(always)]
pub fn query<const MAX: usize>(ctx: &XdpContext) -> Result<Offsets, Counter> {
    let eth = Window::<ETH_LEN>::at(ctx, 0)?;
    let mut l3 = ETH_LEN;
    let mut ethertype = eth.get16(12);
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        ethertype = u16_at(ctx, 16)?;
        l3 += 4;
    }
    let (l4, ipv6, destination) = match ethertype {
        ETH_P_IP => {
            let ip = Window::<20>::at(ctx, l3)?;
            let version_ihl = ip.get8(0);
            let ihl = usize::from(version_ihl & 0x0f) * 4;
            if version_ihl >> 4 != 4 || ihl < 20 {
                return Err(Counter::PassNotIp);
            }
            // More-fragments flag or a fragment offset: not the first/whole datagram.
            if ip.get16(6) & 0x3fff != 0 {
                return Err(Counter::PassFragment);
            }
            if ip.get8(9) != IPPROTO_UDP {
                return Err(Counter::PassNotUdp);
            }
            (l3 + ihl, false, [ip.get32_le(16), 0, 0, 0])
        }
        ETH_P_IPV6 => {
            let ip = Window::<40>::at(ctx, l3)?;
            if ip.get8(0) >> 4 != 6 {
                return Err(Counter::PassNotIp);
            }
            if ip.get8(6) != IPPROTO_UDP {
                return Err(Counter::PassNotUdp);
            }
            let destination = [ip.get32_le(24), ip.get32_le(28), ip.get32_le(32), ip.get32_le(36)];
            (l3 + 40, true, destination)
        }
        _ => return Err(Counter::PassNotIp),
    };
    let udp = Window::<UDP_LEN>::at(ctx, l4)?;
    let port = udp.get16(2);
    if !maps::is_service_port(port) {
        return Err(Counter::PassOtherPort);
    }
    let listen = ListenKey {
        addr: destination,
        port,
        version: if ipv6 { 6 } else { 4 },
    };
    if !maps::is_listen_address(&listen) {
        return Err(Counter::PassOtherAddress);
    }
    let dns = l4 + UDP_LEN;
    let header = Window::<DNS_HEADER_LEN>::at(ctx, dns)?;
    let flags = header.get16(2);
    if flags & 0x8000 != 0 {
        return Err(Counter::PassResponse);
    }
    let simple = flags & 0x7800 == 0
        && header.get16(4) == 1
        && header.get16(6) == 0
        && header.get16(8) == 0
        && header.get16(10) <= 1;
    if !simple {
        return Err(Counter::PassNotSimpleQuery);
    }
    let qname_len = qname::<MAX>(ctx, dns + DNS_HEADER_LEN)?;
    Ok(Offsets {
        l3,
        ipv6,
        l4,
        dns,
        qname_len,
    })
}

/// Walks the question name at `start` label by label: plain labels (no compression)
/// ending with the root label within `MAX` octets (64 on the answer path, 255 on the
/// long-name stage). Longer names are not read further (`PassLongName`: the answer path
/// hands them to the long-name stage, which reads them again; user space checks the
/// rest). Returns the wire length.
#[inline(always)]
fn qname<const MAX: usize>(ctx: &XdpContext, start: usize) -> Result<usize, Counter> {
    let mut at = 0usize;
    // Every label but the root takes at least two octets.
    for _ in 0..=MAX / 2 {
        let len = usize::from(u8_at(ctx, start + at)?);
        if len == 0 {
            // QTYPE and QCLASS must follow.
            u16_at(ctx, start + at + 3)?;
            return Ok(at + 1);
        }
        if len > 63 {
            return Err(Counter::PassBadQname);
        }
        at += len + 1;
        if at >= MAX {
            return Err(Counter::PassLongName);
        }
    }
    Err(Counter::PassLongName)
}
