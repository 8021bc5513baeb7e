//! Response rate limiting (RRL): one rule for the XDP program and user space.
//!
//! Responses over UDP are limited per source *prefix* (`/24` and `/56` by default), the
//! unit a spoofed flood or a reflection victim shows up as. Each prefix has a token
//! bucket of `rate` responses per second with a one-second burst, kept as a GCRA
//! "theoretical arrival time" (one `u64`), so the bucket is a single store on the
//! packet path. A response over the limit is dropped, except every `slip`-th one, which
//! is sent *slipped*: the answer's header with TC=1, the question and our OPT, no
//! records — a real client retries over TCP (never limited), a victim gets a reply no
//! larger than the query (Knot's mod-rrl and NSD's `rrl-slip` work the same way).
//!
//! The table is direct-mapped: `RRL_BUCKETS` buckets, a prefix's bucket chosen by a
//! seeded hash. A bucket holding another prefix is taken over (starting full), so a
//! collision can only let more through, never limit an innocent prefix, and the seed
//! (random per start) keeps an attacker from aiming collisions. Updates race between
//! CPUs without locks; a lost update lets one more response through.
//!
//! XDP and user space keep separate tables (the program's answers never reach user space
//! and the other way round), so a source whose queries split between the paths may get
//! the rate in each.

/// Name of the XDP program's bucket array.
pub const RRL_MAP: &str = "QDNS_RRL_V1";
/// Buckets of each table (XDP's and user space's): 256 Ki, 6 MiB.
pub const RRL_BUCKETS: u32 = 1 << 18;
/// The burst: a fresh prefix may take one second's worth of responses at once.
pub const WINDOW_NS: u64 = 1_000_000_000;

/// One prefix's state.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RrlBucket {
    /// The prefix key ([`key_v4`], [`key_v6`]); 0 = empty.
    pub key: u64,
    /// Theoretical arrival time (`CLOCK_MONOTONIC` ns) of the next conforming response.
    pub tat: u64,
    /// Responses over the limit so far (the slip count runs on it).
    pub limited: u64,
}
const _: () = assert!(core::mem::size_of::<RrlBucket>() == 24);

/// The limiter's settings, as user space sets them and the loader writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RrlSettings {
    /// Nanoseconds per response (10^9 / rate); 0 = limiting off.
    pub interval_ns: u64,
    /// Every `slip`-th limited response is slipped (0: drop them all; 1: slip them all).
    pub slip: u64,
    /// IPv4 prefix mask, in host order (`0xffff_ff00` for /24).
    pub v4_mask: u32,
    /// Mask of the IPv6 address's first 64 bits, in host order (/56 = top 56 bits).
    pub v6_mask: u64,
    /// Hash seed.
    pub seed: u64,
}

impl RrlSettings {
    /// Settings for `rate` responses per second (0 = off) per `/v4` and `/v6` prefix.
    #[must_use]
    pub const fn new(rate: u32, slip: u32, v4: u8, v6: u8, seed: u64) -> RrlSettings {
        RrlSettings {
            interval_ns: if rate == 0 { 0 } else { WINDOW_NS / rate as u64 },
            slip: slip as u64,
            v4_mask: if v4 == 0 {
                0
            } else if v4 >= 32 {
                u32::MAX
            } else {
                u32::MAX << (32 - v4)
            },
            v6_mask: if v6 == 0 {
                0
            } else if v6 >= 64 {
                u64::MAX
            } else {
                u64::MAX << (64 - v6)
            },
            seed,
        }
    }
}

/// What to do with a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RrlOutcome {
    /// Within the rate: send it.
    Allow,
    /// Over the rate: send the slipped form (TC=1, no records).
    Slip,
    /// Over the rate: send nothing.
    Drop,
}

/// The key of an IPv4 source (`addr` in host order). The top 32 bits are all ones: an
/// IPv6 key with those is in `ff00::/8` (multicast), never a source.
#[inline(always)]
#[must_use]
pub const fn key_v4(addr: u32, settings: &RrlSettings) -> u64 {
    0xffff_ffff_0000_0000 | (addr & settings.v4_mask) as u64
}

/// The key of an IPv6 source (`high` = its first 64 bits, host order).
#[inline(always)]
#[must_use]
pub const fn key_v6(high: u64, settings: &RrlSettings) -> u64 {
    high & settings.v6_mask
}

/// The bucket index of `key`.
#[inline(always)]
#[must_use]
pub const fn index(key: u64, settings: &RrlSettings) -> u32 {
    let mut x = key ^ settings.seed;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32) & (RRL_BUCKETS - 1)
}

/// Charges one response of `key` at `now` (ns) to `bucket` and says what to do.
#[inline(always)]
pub fn decide(bucket: &mut RrlBucket, key: u64, now: u64, settings: &RrlSettings) -> RrlOutcome {
    if bucket.key != key {
        *bucket = RrlBucket {
            key,
            tat: now,
            limited: 0,
        };
    }
    let tat = if bucket.tat > now { bucket.tat } else { now };
    if tat - now + settings.interval_ns > WINDOW_NS {
        bucket.limited += 1;
        if settings.slip != 0 && bucket.limited.is_multiple_of(settings.slip) {
            RrlOutcome::Slip
        } else {
            RrlOutcome::Drop
        }
    } else {
        bucket.tat = tat + settings.interval_ns;
        RrlOutcome::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(settings: &RrlSettings, times: impl Iterator<Item = u64>) -> [u32; 3] {
        let mut bucket = RrlBucket::default();
        let mut seen = [0; 3];
        for now in times {
            seen[decide(&mut bucket, 7, now, settings) as usize] += 1;
        }
        seen
    }

    #[test]
    fn a_burst_of_one_seconds_worth_then_the_rate_with_every_slipth_slipped() {
        let s = RrlSettings::new(10, 2, 24, 56, 0);
        // 100 at once: 10 pass, the other 90 alternate drop, slip.
        assert_eq!(run(&s, core::iter::repeat_n(5_000_000_000, 100)), [10, 45, 45]);
        // Steady at the rate (one per 100 ms for 10 s): every one passes.
        assert_eq!(run(&s, (0..100).map(|i| 5_000_000_000 + i * 100_000_000)), [100, 0, 0]);
        // Twice the rate for 10 s: the burst, then half.
        let [allowed, slipped, dropped] = run(&s, (0..200).map(|i| 5_000_000_000 + i * 50_000_000));
        assert!((109..=111).contains(&allowed), "{allowed}");
        assert_eq!(slipped + dropped + allowed, 200);
        assert!(slipped.abs_diff(dropped) <= 1);
        // slip 0 drops all; slip 1 slips all.
        assert_eq!(
            run(&RrlSettings::new(10, 0, 24, 56, 0), core::iter::repeat_n(1, 20)),
            [10, 0, 10]
        );
        assert_eq!(
            run(&RrlSettings::new(10, 1, 24, 56, 0), core::iter::repeat_n(1, 20)),
            [10, 10, 0]
        );
    }

    #[test]
    fn keys_are_per_prefix_and_a_collision_only_frees() {
        let s = RrlSettings::new(1, 1, 24, 56, 99);
        assert_eq!(key_v4(0xc000_0201, &s), key_v4(0xc000_02fe, &s));
        assert_ne!(key_v4(0xc000_0201, &s), key_v4(0xc000_0301, &s));
        assert_eq!(key_v6(0x2001_0db8_0000_00ff, &s), key_v6(0x2001_0db8_0000_0001, &s));
        assert_ne!(key_v6(0x2001_0db8_0000_0100, &s), key_v6(0x2001_0db8_0000_0000, &s));
        assert_ne!(key_v4(0, &s), key_v6(0, &s));
        assert!(index(key_v4(1, &s), &s) < RRL_BUCKETS);
        // Another prefix in the same bucket takes it over, starting fresh.
        let mut bucket = RrlBucket::default();
        assert_eq!(decide(&mut bucket, 1, 0, &s), RrlOutcome::Allow);
        assert_eq!(decide(&mut bucket, 1, 0, &s), RrlOutcome::Slip);
        assert_eq!(decide(&mut bucket, 2, 0, &s), RrlOutcome::Allow);
        // Masks.
        assert_eq!(RrlSettings::new(1, 1, 32, 64, 0).v4_mask, u32::MAX);
        assert_eq!(RrlSettings::new(1, 1, 0, 0, 0).v6_mask, 0);
        assert_eq!(RrlSettings::new(1, 1, 16, 48, 0).v6_mask, 0xffff_ffff_ffff_0000);
    }
}
