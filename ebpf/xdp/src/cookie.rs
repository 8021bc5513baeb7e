//! DNS cookies (RFC 7873, server cookies per RFC 9018) in the program: the query's
//! first COOKIE option checked as user space checks it (`qdns_edge::wire::edns`: 8 or
//! 16 to 40 octets, else user space answers FORMERR), answered with `qdns_abi::cookie`
//! under the secrets and clock user space wrote, and echoed after our OPT record (and
//! its Client Subnet option) from a scratch buffer, as the Client Subnet echo is.
use aya_ebpf::programs::XdpContext;
use qdns_abi::{
    cookie::{answer, ClientAddress, CLIENT_LEN, ECHO_LEN, OPTION_COOKIE, SERVER_LEN},
    Counter,
};

use crate::{
    maps,
    parse::{Offsets, Window},
    subnet::ECHO_WORDS,
};

/// Largest query offset an option may start at (the answer path reads no further).
const OPTION_AT_MAX: usize = 1500;
/// Longest COOKIE option data: a client cookie and a 32-octet server cookie.
const COOKIE_MAX: usize = CLIENT_LEN + 32;

/// Reads the COOKIE option at `at` (0: the query has none) and fills `echo` with the
/// option our response carries: code, length, the client cookie, our server cookie.
/// Returns the octets it takes in the response (0 without one, or with cookies off)
/// and whether the query's server cookie was valid.
#[inline(always)]
pub fn read(
    ctx: &XdpContext,
    at: &Offsets,
    option_at: usize,
    echo: &mut [u64; ECHO_WORDS],
) -> Result<(usize, bool), Counter> {
    // `echo` is read only when the returned length is not 0: it is not cleared.
    if option_at == 0 {
        return Ok((0, false));
    }
    if option_at > OPTION_AT_MAX {
        return Err(Counter::PassCookie);
    }
    let Some((secrets, now)) = maps::cookies() else {
        // Cookies off: the option is ignored whatever it holds, as user space ignores it.
        return Ok((0, false));
    };
    let head = Window::<4>::at(ctx, option_at).map_err(|_| Counter::PassCookie)?;
    let len = usize::from(head.get16(2));
    // RFC 7873 §5.2.2: a client cookie alone, or with a server cookie of 8 to 32 octets.
    if len != CLIENT_LEN && !(CLIENT_LEN + 8..=COOKIE_MAX).contains(&len) {
        return Err(Counter::PassCookie);
    }
    let client = Window::<8>::at(ctx, option_at + 4)
        .map_err(|_| Counter::PassCookie)?
        .get64_le(0);
    // Only a 16-octet server cookie can be one of ours; any other is answered as none.
    let presented = if len == CLIENT_LEN + SERVER_LEN {
        let server = Window::<16>::at(ctx, option_at + 4 + CLIENT_LEN).map_err(|_| Counter::PassCookie)?;
        Some([server.get64_le(0), server.get64_le(8)])
    } else {
        None
    };
    let address = client_address(ctx, at)?;
    let made = answer(secrets, client, presented, &address, now);
    let [stamp, hash] = made.server;
    // Code 10, length 24 (big-endian), then the cookies, as little-endian words.
    let header = u64::from(OPTION_COOKIE) << 8 | ((CLIENT_LEN + SERVER_LEN) as u64) << 24;
    echo[0] = header | client << 32;
    echo[1] = client >> 32 | stamp << 32;
    echo[2] = stamp >> 32 | hash << 32;
    echo[3] = hash >> 32;
    Ok((ECHO_LEN, made.valid))
}

/// The packet's source address as the cookie hash reads it (an IPv4-mapped IPv6
/// source is that IPv4 client, as user space reads a dual-stack socket's).
#[inline(always)]
fn client_address(ctx: &XdpContext, at: &Offsets) -> Result<ClientAddress, Counter> {
    if at.ipv6 {
        let ip = Window::<16>::at(ctx, at.l3 + 8)?;
        let (high, low) = (ip.get64_le(0), ip.get64_le(8));
        // ::ffff:a.b.c.d: octets 10 and 11 are 0xff, the rest before the address zero.
        if high == 0 && low & 0xffff_ffff == 0xffff_0000 {
            return Ok(ClientAddress {
                words: [low >> 32, 0],
                v6: false,
            });
        }
        Ok(ClientAddress {
            words: [high, low],
            v6: true,
        })
    } else {
        let ip = Window::<4>::at(ctx, at.l3 + 12)?;
        Ok(ClientAddress {
            words: [u64::from(ip.get32_le(0)), 0],
            v6: false,
        })
    }
}
