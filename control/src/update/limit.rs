//! The `per_minute` limit of `[[zone.update]]` rules: a token bucket per zone and key,
//! held by the update task (which carries out one UPDATE at a time, so it needs no
//! lock). A key's bucket holds `per_minute` UPDATEs and refills evenly over a minute; an
//! UPDATE that finds it empty is refused (REFUSED, counted `rate_limited`) before its
//! prerequisites are read. The buckets are as many as the zones' rules name keys: only
//! UPDATEs whose TSIG verified reach them.
use std::{collections::HashMap, time::Instant};

/// One zone's and key's bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// UPDATEs it would take now.
    tokens: f64,
    /// When `tokens` was worked out.
    at: Instant,
}

/// The buckets, by zone origin (wire, lowercase) and key name.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: HashMap<(Vec<u8>, String), Bucket>,
}

impl Limiter {
    /// True when `key` may make one more UPDATE to the zone at `origin` under a limit of
    /// `per_minute`, taken from its bucket at `now`.
    pub fn admit(&mut self, origin: &[u8], key: &str, per_minute: u32, now: Instant) -> bool {
        let size = f64::from(per_minute);
        let bucket = self
            .buckets
            .entry((origin.to_vec(), key.to_ascii_lowercase()))
            .or_insert(Bucket { tokens: size, at: now });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * size / 60.0).min(size);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Limiter;

    #[test]
    fn a_burst_of_the_limit_then_one_every_minute_over_it() {
        let mut limiter = Limiter::default();
        let start = std::time::Instant::now();
        let admitted = (0..5).filter(|_| limiter.admit(b"\x03dyn\0", "k", 3, start)).count();
        assert_eq!(admitted, 3);
        // Another key and another zone have buckets of their own.
        assert!(limiter.admit(b"\x03dyn\0", "other", 3, start));
        assert!(limiter.admit(b"\x03oth\0", "k", 3, start));
        // A third of a minute refills one of three (the 19 s before it were not lost).
        assert!(!limiter.admit(b"\x03dyn\0", "K", 3, start + Duration::from_secs(19)));
        assert!(limiter.admit(b"\x03dyn\0", "k", 3, start + Duration::from_secs(21)));
        assert!(!limiter.admit(b"\x03dyn\0", "k", 3, start + Duration::from_secs(22)));
        // Never more than the limit, however long the wait.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..5).filter(|_| limiter.admit(b"\x03dyn\0", "k", 3, later)).count(), 3);
    }
}
