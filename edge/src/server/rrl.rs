//! User space's response rate limiter: the `qdns_abi::rrl` rule over a table of its own
//! (the XDP program keeps another), shared by every UDP worker without locks — each
//! bucket is three relaxed atomics read, decided on and written back, racing the way
//! the program's per-CPU updates race (a lost update lets one more response through).
use std::{
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use qdns_abi::rrl::{decide, index, key_v4, key_v6, RrlBucket, RrlOutcome, RrlSettings, RRL_BUCKETS};

/// One bucket's words.
#[derive(Default)]
struct Cell {
    key: AtomicU64,
    tat: AtomicU64,
    limited: AtomicU64,
}

/// The table and its settings.
pub struct Limiter {
    settings: RrlSettings,
    cells: Box<[Cell]>,
}

impl Limiter {
    /// A limiter with `settings` (`interval_ns` must be non-zero).
    #[must_use]
    pub fn new(settings: RrlSettings) -> Limiter {
        Limiter {
            settings,
            cells: (0..RRL_BUCKETS).map(|_| Cell::default()).collect(),
        }
    }

    /// Charges a response to `client` at `now` (`CLOCK_MONOTONIC` ns, as the program's
    /// `bpf_ktime_get_ns`).
    #[must_use]
    pub fn charge(&self, client: IpAddr, now: u64) -> RrlOutcome {
        let key = match client {
            IpAddr::V4(v4) => key_v4(u32::from(v4), &self.settings),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => key_v4(u32::from(v4), &self.settings),
                None => key_v6((u128::from(v6) >> 64) as u64, &self.settings),
            },
        };
        let Some(cell) = self.cells.get(index(key, &self.settings) as usize) else {
            return RrlOutcome::Allow;
        };
        let mut bucket = RrlBucket {
            key: cell.key.load(Relaxed),
            tat: cell.tat.load(Relaxed),
            limited: cell.limited.load(Relaxed),
        };
        let outcome = decide(&mut bucket, key, now, &self.settings);
        cell.key.store(bucket.key, Relaxed);
        cell.tat.store(bucket.tat, Relaxed);
        cell.limited.store(bucket.limited, Relaxed);
        outcome
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock `bpf_ktime_get_ns` reads).
#[must_use]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    let (secs, nanos) = (ts.tv_sec.cast_unsigned(), ts.tv_nsec.cast_unsigned());
    secs.wrapping_mul(1_000_000_000).wrapping_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_prefix_is_limited_another_is_not_and_v4_mapped_is_v4() {
        let limiter = Limiter::new(RrlSettings::new(5, 2, 24, 56, 1));
        let now = now_ns();
        let flood: Vec<_> = (0..20)
            .map(|i| limiter.charge(format!("192.0.2.{i}").parse().unwrap(), now))
            .collect();
        assert_eq!(flood.iter().filter(|&&o| o == RrlOutcome::Allow).count(), 5);
        assert_eq!(flood.iter().filter(|&&o| o == RrlOutcome::Slip).count(), 7);
        assert_eq!(limiter.charge("198.51.100.1".parse().unwrap(), now), RrlOutcome::Allow);
        // ::ffff:192.0.2.9 is the same /24 (a dual-stack socket's view of IPv4).
        assert_ne!(
            limiter.charge("::ffff:192.0.2.9".parse().unwrap(), now),
            RrlOutcome::Allow
        );
        for _ in 0..5 {
            assert_eq!(
                limiter.charge("2001:db8:0:1::1".parse().unwrap(), now),
                RrlOutcome::Allow
            );
        }
        assert_ne!(
            limiter.charge("2001:db8:0:1:ffff::1".parse().unwrap(), now),
            RrlOutcome::Allow
        );
        assert_eq!(
            limiter.charge("2001:db8:0:100::1".parse().unwrap(), now),
            RrlOutcome::Allow
        );
    }
}
