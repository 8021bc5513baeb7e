//! EDNS Client Subnet (RFC 7871) in the program: the query's option checked as user
//! space checks it (`qdns_edge::wire::edns::ClientSubnet::parse`: FAMILY 1 or 2, SOURCE
//! within it, SCOPE 0, exactly the SOURCE's octets, no address bits past SOURCE — else
//! user space answers FORMERR), copied into scratch before the frame is rewritten, and
//! echoed after our OPT record with the SCOPE of the decision (0 for answers that do not
//! depend on the client).
use aya_ebpf::{helpers::bpf_xdp_load_bytes, programs::XdpContext};
use qdns_abi::{answer::fold, Counter};

use crate::parse::Window;

/// Octets of the echo buffer: an option of at most 8 + 16 octets, padded to a power of
/// two for `bpf_xdp_store_bytes`'s bound.
pub const ECHO_WORDS: usize = 4;

/// Largest query offset an option may start at (the answer path reads no further).
const OPTION_AT_MAX: usize = 1500;

/// Copies the Client Subnet option at `at` (0: the query has none) into `echo` as it
/// is echoed (SCOPE 0 for now) and returns the octets it takes in a response (0 without
/// one): code, length, FAMILY, SOURCE, SCOPE, then the address's SOURCE octets.
#[inline(always)]
pub fn read(ctx: &XdpContext, at: usize, echo: &mut [u64; ECHO_WORDS]) -> Result<usize, Counter> {
    *echo = [0; ECHO_WORDS];
    if at == 0 {
        return Ok(0);
    }
    if at > OPTION_AT_MAX {
        return Err(Counter::PassClientSubnet);
    }
    let head = Window::<8>::at(ctx, at).map_err(|_| Counter::PassClientSubnet)?;
    let (len, family, source, scope) = (head.get16(2), head.get16(4), head.get8(6), head.get8(7));
    let bits = match family {
        1 => 32,
        2 => 128,
        _ => return Err(Counter::PassClientSubnet),
    };
    let octets = usize::from(source).div_ceil(8);
    if source > bits || scope != 0 || usize::from(len) != 4 + octets {
        return Err(Counter::PassClientSubnet);
    }
    echo[0] = head.get64_le(0);
    if octets > 0 {
        // The length, bounded for the verifier as `sections::store` does it.
        // SAFETY: a read of a local.
        let n = unsafe { core::ptr::read_volatile(&octets) };
        let n = ((n.wrapping_sub(1) & 15) + 1) as u32;
        // SAFETY: `echo[1..3]` holds 16 octets and `n <= 16`; the helper checks the
        // frame range and fails without writing outside it.
        let rc = unsafe { bpf_xdp_load_bytes(ctx.ctx, (at + 8) as u32, echo[1..].as_mut_ptr().cast(), n) };
        if rc != 0 {
            return Err(Counter::PassClientSubnet);
        }
    }
    // No address bit past SOURCE (the octets after the sent ones are zero here).
    let (high, low) = address(echo);
    let past = if source >= 64 {
        low & mask_past(source - 64)
    } else {
        high & mask_past(source) | low
    };
    if past != 0 {
        return Err(Counter::PassClientSubnet);
    }
    Ok(8 + octets)
}

/// The host bits of a `/len` prefix of a 64-bit word (`len` ≤ 64).
#[inline(always)]
pub fn mask_past(len: u8) -> u64 {
    if len >= 64 {
        0
    } else {
        u64::MAX >> len
    }
}

/// The echoed address as two big-endian words (an IPv4 address in the high word's top
/// 32 bits).
#[inline(always)]
pub fn address(echo: &[u64; ECHO_WORDS]) -> (u64, u64) {
    (echo[1].swap_bytes(), echo[2].swap_bytes())
}

/// FAMILY and SOURCE PREFIX-LENGTH of the echoed option.
#[inline(always)]
pub fn family_source(echo: &[u64; ECHO_WORDS]) -> (u16, u8) {
    let head = echo[0];
    ((((head >> 32) & 0xffff) as u16).swap_bytes(), (head >> 48) as u8)
}

/// Sets the SCOPE PREFIX-LENGTH of the echo.
#[inline(always)]
pub fn set_scope(echo: &mut [u64; ECHO_WORDS], scope: u8) {
    echo[0] = echo[0] & !(0xff << 56) | u64::from(scope) << 56;
}

/// The one's-complement sum of the echo as 16-bit big-endian words from an even
/// offset (the octets past its length are zero).
#[inline(always)]
pub fn sum(echo: &[u64; ECHO_WORDS]) -> u16 {
    let mut acc = 0u64;
    for &word in echo {
        acc += (word & 0xffff) + (word >> 16 & 0xffff) + (word >> 32 & 0xffff) + (word >> 48);
    }
    // Little-endian words: the folded sum has its octets swapped (RFC 1071 §2(B)).
    fold(acc).swap_bytes()
}
