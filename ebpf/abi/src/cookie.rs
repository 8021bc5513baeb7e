//! DNS cookies (RFC 7873) with interoperable server cookies (RFC 9018): what both paths
//! answer a query's COOKIE option with, so the XDP program and user space send the same
//! octets and each accepts the other's cookies.
//!
//! A server cookie is 16 octets: version 1, three reserved zeros, a 32-bit timestamp
//! (seconds, serial number arithmetic) and SipHash-2-4 of the client cookie, those
//! eight octets and the client's IP address under the location's 128-bit secret
//! (RFC 9018 §4.4). Hand-written rather than a crate's SipHash because it must compile
//! for BPF: no slices, no loops over data lengths, everything on `u64` words.
//!
//! Octet strings travel as little-endian words (the first octet lowest), the way the
//! program loads them from the frame: a server cookie is two words, `[stamp, hash]`,
//! where the stamp word holds version, reserved and timestamp and the hash word is
//! SipHash's output as RFC 9018 writes it (little-endian).

/// Name of the secrets map: [`COOKIE_SLOTS`] [`CookieSecrets`].
pub const COOKIE_MAP: &str = "QDNS_COOKIE_V3";
/// The COOKIE option code (RFC 7873 §4).
pub const OPTION_COOKIE: u16 = 10;
/// Octets of a client cookie.
pub const CLIENT_LEN: usize = 8;
/// Octets of the server cookies this server makes (RFC 9018 §4).
pub const SERVER_LEN: usize = 16;
/// Octets of the COOKIE option in a response: code, length, client and server cookie.
pub const ECHO_LEN: usize = 4 + CLIENT_LEN + SERVER_LEN;
/// A server cookie is accepted for an hour after its timestamp (RFC 9018 §4.3) …
pub const ACCEPT_PAST: i32 = 3600;
/// … and up to five minutes before it (clock skew between servers of a location).
pub const ACCEPT_FUTURE: i32 = 300;
/// A valid server cookie younger than this is sent back as it came; an older one is
/// replaced (RFC 9018 §4.3: refreshed after half an hour).
pub const REUSE_FOR: i32 = 1800;

/// [`CookieSecrets::flags`]: cookies are on (without it both paths ignore COOKIE
/// options, as they ignore unknown ones).
pub const COOKIES_ON: u64 = 1;
/// [`CookieSecrets::flags`]: `previous` holds the secret before the last rotation,
/// still accepted (a cookie made under it is valid but replaced).
pub const COOKIES_PREVIOUS: u64 = 2;
/// [`CookieSecrets::flags`]: `next` holds the secret the next rotation makes current,
/// accepted already (RFC 9018 §5: every server of the location accepts a new secret
/// before any makes cookies with it, so a cookie from an edge that rotated first is
/// valid at one that has not yet).
pub const COOKIES_NEXT: u64 = 4;

/// The location's cookie secrets, as the program reads them (little-endian words of
/// the 16 secret octets: SipHash's k0 and k1).
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct CookieSecrets {
    /// The secret new cookies are made with.
    pub current: [u64; 2],
    /// The one before it (when [`COOKIES_PREVIOUS`] is set).
    pub previous: [u64; 2],
    /// The one after it (when [`COOKIES_NEXT`] is set).
    pub next: [u64; 2],
    /// [`COOKIES_ON`], [`COOKIES_PREVIOUS`], [`COOKIES_NEXT`].
    pub flags: u64,
}

const _: () = assert!(core::mem::size_of::<CookieSecrets>() == 56);

/// The secrets are never printed: only whether there are any.
impl core::fmt::Debug for CookieSecrets {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CookieSecrets")
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

/// Entries of [`COOKIE_MAP`]: two, written in turn; [`crate::answer::CONFIG_COOKIE_SLOT`]
/// says which one the program reads (a reader never sees half of a new pair).
pub const COOKIE_SLOTS: u32 = 2;

impl CookieSecrets {
    /// Secrets from their octets: `current`, and `previous` and `next` when there are.
    #[must_use]
    pub fn new(current: [u8; 16], previous: Option<[u8; 16]>, next: Option<[u8; 16]>) -> CookieSecrets {
        CookieSecrets {
            current: key_words(current),
            previous: previous.map_or([0; 2], key_words),
            next: next.map_or([0; 2], key_words),
            flags: COOKIES_ON
                | if previous.is_some() { COOKIES_PREVIOUS } else { 0 }
                | if next.is_some() { COOKIES_NEXT } else { 0 },
        }
    }
}

/// A 16-octet secret as SipHash's two key words.
#[must_use]
pub fn key_words(secret: [u8; 16]) -> [u64; 2] {
    let (mut low, mut high) = ([0u8; 8], [0u8; 8]);
    low.copy_from_slice(&secret[..8]);
    high.copy_from_slice(&secret[8..]);
    [u64::from_le_bytes(low), u64::from_le_bytes(high)]
}

/// The client's address as SipHash reads it: the octets as little-endian words, an
/// IPv4 address in the low 32 bits of the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress {
    /// The octets.
    pub words: [u64; 2],
    /// IPv6 (16 octets) rather than IPv4 (4).
    pub v6: bool,
}

impl ClientAddress {
    /// An IPv4 client.
    #[must_use]
    pub const fn v4(octets: [u8; 4]) -> ClientAddress {
        ClientAddress {
            words: [u32::from_le_bytes(octets) as u64, 0],
            v6: false,
        }
    }

    /// An IPv6 client.
    #[must_use]
    pub const fn v6(o: [u8; 16]) -> ClientAddress {
        ClientAddress {
            words: [
                u64::from_le_bytes([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]),
                u64::from_le_bytes([o[8], o[9], o[10], o[11], o[12], o[13], o[14], o[15]]),
            ],
            v6: true,
        }
    }
}

/// What a query's COOKIE option is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieAnswer {
    /// The server cookie sent back: `[stamp, hash]` words.
    pub server: [u64; 2],
    /// The query's server cookie was valid (the rate limiter exempts the client).
    pub valid: bool,
}

/// The stamp word of a server cookie made at `now`: version 1, reserved 0, the
/// timestamp big-endian.
#[inline(always)]
#[must_use]
pub const fn stamp(now: u32) -> u64 {
    1 | (now.swap_bytes() as u64) << 32
}

/// The answer to a query from `client` (address) whose COOKIE option carries client
/// cookie `cookie` and, when it is exactly 16 octets, the server cookie `presented`
/// (any other length can never be ours: a new cookie, as for none). `now` is the
/// location's clock in seconds.
#[inline(always)]
#[must_use]
pub fn answer(
    secrets: &CookieSecrets,
    cookie: u64,
    presented: Option<[u64; 2]>,
    client: &ClientAddress,
    now: u32,
) -> CookieAnswer {
    let mut valid = false;
    if let Some([their_stamp, their_hash]) = presented {
        // Version 1 (the reserved octets are not checked: RFC 9018 §4.3 says a verifier
        // MUST NOT, and the hash covers them), then the timestamp within the window
        // (serial number arithmetic, RFC 1982).
        let age = now
            .wrapping_sub(((their_stamp >> 32) as u32).swap_bytes())
            .cast_signed();
        if their_stamp & 0xff == 1 && (-ACCEPT_FUTURE..=ACCEPT_PAST).contains(&age) {
            if hash(secrets.current, cookie, their_stamp, client) == their_hash {
                if age <= REUSE_FOR {
                    return CookieAnswer {
                        server: [their_stamp, their_hash],
                        valid: true,
                    };
                }
                valid = true;
            } else {
                // Made under the secret before, or (by an edge that rotated first) the
                // one after: valid, and replaced by one under the current secret.
                valid = (secrets.flags & COOKIES_PREVIOUS != 0
                    && hash(secrets.previous, cookie, their_stamp, client) == their_hash)
                    || (secrets.flags & COOKIES_NEXT != 0
                        && hash(secrets.next, cookie, their_stamp, client) == their_hash);
            }
        }
    }
    let made = stamp(now);
    CookieAnswer {
        server: [made, hash(secrets.current, cookie, made, client)],
        valid,
    }
}

/// SipHash-2-4 of client cookie | version | reserved | timestamp | client address
/// (RFC 9018 §4.4): 20 octets for IPv4, 32 for IPv6.
#[inline(always)]
#[must_use]
pub fn hash(key: [u64; 2], cookie: u64, stamp: u64, client: &ClientAddress) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    compress(&mut v, cookie);
    compress(&mut v, stamp);
    let last = if client.v6 {
        compress(&mut v, client.words[0]);
        compress(&mut v, client.words[1]);
        32 << 56
    } else {
        20 << 56 | (client.words[0] & 0xffff_ffff)
    };
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// One message word, two rounds (SipHash-2-…).
#[inline(always)]
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    round(v);
    v[0] ^= m;
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// A server cookie's words as its 16 octets.
#[must_use]
pub fn server_octets(server: [u64; 2]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&server[0].to_le_bytes());
    out[8..].copy_from_slice(&server[1].to_le_bytes());
    out
}

/// 16 octets as a server cookie's words.
#[must_use]
pub fn server_words(octets: [u8; 16]) -> [u64; 2] {
    key_words(octets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex<const N: usize>(text: &str) -> [u8; N] {
        let mut out = [0u8; N];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    /// RFC 9018 Appendix A: each server cookie the examples show, made from their
    /// secret, client cookie, address and time.
    #[test]
    fn rfc_9018_examples() {
        let one = hex::<16>("e5e973e5a6b2a43f48e7dc849e37bfcf");
        let cases = [
            (
                one,
                "2464c4abcf10c957",
                ClientAddress::v4([198, 51, 100, 100]),
                1_559_731_985,
                "010000005cf79f111f8130c3eee29480",
            ),
            (
                one,
                "2464c4abcf10c957",
                ClientAddress::v4([198, 51, 100, 100]),
                1_559_734_385,
                "010000005cf7a871d4a564a1442aca77",
            ),
            (
                one,
                "fc93fc62807ddb86",
                ClientAddress::v4([203, 0, 113, 203]),
                1_559_734_700,
                "010000005cf7a9acf73a7810aca2381e",
            ),
            (
                hex::<16>("445536bcd2513298075a5d379663c962"),
                "22681ab97d52c298",
                ClientAddress::v6([
                    0x20, 0x01, 0x0d, 0xb8, 0x02, 0x20, 0, 1, 0x59, 0xde, 0xd0, 0xf4, 0x87, 0x69, 0x82, 0xb8,
                ]),
                1_559_741_961,
                "010000005cf7c609a6bb79d16625507a",
            ),
        ];
        for (secret, client, address, now, expected) in cases {
            let secrets = CookieSecrets::new(secret, None, None);
            let cookie = u64::from_le_bytes(hex::<8>(client));
            let made = answer(&secrets, cookie, None, &address, now);
            assert_eq!(server_octets(made.server), hex::<16>(expected), "{client} at {now}");
            assert!(!made.valid);
        }
    }

    #[test]
    fn valid_cookies_are_reused_refreshed_or_replaced() {
        let secret = [7u8; 16];
        let secrets = CookieSecrets::new(secret, None, None);
        let client = ClientAddress::v4([192, 0, 2, 1]);
        let cookie = 0x0102_0304_0506_0708;
        let made = answer(&secrets, cookie, None, &client, 1_000_000).server;
        // Fresh: sent back as it came, valid.
        let later = answer(&secrets, cookie, Some(made), &client, 1_000_000 + 1800);
        assert_eq!(
            later,
            CookieAnswer {
                server: made,
                valid: true
            }
        );
        // Over half an hour old: valid, and a new one made.
        let old = answer(&secrets, cookie, Some(made), &client, 1_000_000 + 1801);
        assert!(old.valid && old.server != made && old.server[0] == stamp(1_000_001 + 1800));
        // Over an hour old, from the future, another client, another cookie, a bit
        // flipped: invalid.
        assert!(!answer(&secrets, cookie, Some(made), &client, 1_000_000 + 3601).valid);
        assert!(answer(&secrets, cookie, Some(made), &client, 1_000_000 - 300).valid);
        assert!(!answer(&secrets, cookie, Some(made), &client, 1_000_000 - 301).valid);
        assert!(
            !answer(
                &secrets,
                cookie,
                Some(made),
                &ClientAddress::v4([192, 0, 2, 2]),
                1_000_010
            )
            .valid
        );
        assert!(!answer(&secrets, cookie ^ 1, Some(made), &client, 1_000_010).valid);
        assert!(!answer(&secrets, cookie, Some([made[0], made[1] ^ 1]), &client, 1_000_010).valid);
        // Version 2: not ours.
        assert!(!answer(&secrets, cookie, Some([made[0] + 1, made[1]]), &client, 1_000_010).valid);
        // After a rotation the old secret's cookie is valid and replaced; after the
        // next, refused.
        let rotated = CookieSecrets::new([8u8; 16], Some(secret), None);
        let after = answer(&rotated, cookie, Some(made), &client, 1_000_010);
        assert!(after.valid && after.server != made);
        assert!(
            !answer(
                &CookieSecrets::new([9u8; 16], Some([8u8; 16]), None),
                cookie,
                Some(made),
                &client,
                1_000_010
            )
            .valid
        );
        // A cookie made under the next secret (an edge that rotated first): valid here,
        // and replaced by one under the current secret.
        let ahead = answer(
            &CookieSecrets::new([8u8; 16], Some(secret), None),
            cookie,
            None,
            &client,
            1_000_000,
        )
        .server;
        let staged = CookieSecrets::new(secret, None, Some([8u8; 16]));
        let here = answer(&staged, cookie, Some(ahead), &client, 1_000_010);
        assert!(here.valid && here.server != ahead);
        assert!(!answer(&secrets, cookie, Some(ahead), &client, 1_000_010).valid);
        // Timestamps wrap (RFC 1982).
        let near_wrap = answer(&secrets, cookie, None, &client, u32::MAX - 5).server;
        assert!(answer(&secrets, cookie, Some(near_wrap), &client, 100).valid);
    }
}
