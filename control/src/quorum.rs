//! The partition-quorum rule (SPEC §4) as a pure function of the checkers' latest
//! reports, the time and the last decision — no clock read, no state — so every
//! partition scenario is a unit test of microseconds (`State` feeds it `now()`).
//!
//! - A report is **fresh** while it is at most [`fresh_for`]`(interval)` seconds old
//!   (three intervals and 5 s of slack: one late or lost report does not cut a checker
//!   off). A checker whose latest report is older is unreachable and does not count.
//! - With reachable checkers, a check is healthy iff the healthy share of their
//!   reports is **above** the quorum (0.18): a location decides from the checkers it can
//!   hear, whatever happened to the others.
//! - With none reachable, the last decision stays (flagged stale); before any report,
//!   healthy.
//! - A report from the future (the checker's clock ahead, or this one stepped back)
//!   counts as fresh: it is the latest that checker said.

/// Aggregated view of one probed check at one location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The decision.
    pub healthy: bool,
    /// Reachable checkers (fresh reports).
    pub reachable: usize,
    /// Of which report healthy.
    pub healthy_reports: usize,
    /// No checker reachable: the last decision is kept.
    pub stale: bool,
}

/// How long a checker's report counts as fresh, in seconds, for a probe interval of
/// `interval` seconds.
#[must_use]
pub fn fresh_for(interval: u32) -> u64 {
    3 * u64::from(interval) + 5
}

/// Whether a report made at `at` (Unix seconds) is fresh at `now`.
#[must_use]
pub fn is_fresh(at: u64, now: u64, interval: u32) -> bool {
    now.saturating_sub(at) <= fresh_for(interval)
}

/// The decision over `reports` — each checker's latest (made at, says healthy) — at
/// `now`, for a probe of `interval` seconds, with `quorum` and the `last` decision
/// (none before the first).
#[must_use]
pub fn decide(
    reports: impl IntoIterator<Item = (u64, bool)>,
    now: u64,
    interval: u32,
    quorum: f64,
    last: Option<bool>,
) -> Aggregate {
    let (mut any, mut reachable, mut healthy_reports) = (false, 0usize, 0usize);
    for (at, healthy) in reports {
        any = true;
        if is_fresh(at, now, interval) {
            reachable += 1;
            healthy_reports += usize::from(healthy);
        }
    }
    if reachable == 0 {
        return Aggregate {
            healthy: last.unwrap_or(true),
            reachable: 0,
            healthy_reports: 0,
            stale: any,
        };
    }
    #[expect(clippy::cast_precision_loss, reason = "checker counts are tiny")]
    let share = healthy_reports as f64 / reachable as f64;
    Aggregate {
        healthy: share > quorum,
        reachable,
        healthy_reports,
        stale: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: f64 = 0.18;
    const INTERVAL: u32 = 10;
    const NOW: u64 = 1_000_000;

    /// `n` reports made `age` seconds ago saying `healthy`.
    fn reports(n: usize, age: u64, healthy: bool) -> Vec<(u64, bool)> {
        vec![(NOW - age, healthy); n]
    }

    #[test]
    fn healthy_iff_above_the_quorum_of_reachable_checkers() {
        for (healthy, of, expected) in [(1, 5, true), (0, 5, false), (1, 6, false), (2, 11, true), (5, 5, true)] {
            let mut all = reports(healthy, 1, true);
            all.extend(reports(of - healthy, 1, false));
            let a = decide(all, NOW, INTERVAL, Q, None);
            assert_eq!(a.healthy, expected, "{healthy} of {of}");
            assert_eq!((a.reachable, a.healthy_reports, a.stale), (of, healthy, false));
        }
    }

    #[test]
    fn freshness_ends_three_intervals_and_five_seconds_after_a_report() {
        assert_eq!(fresh_for(INTERVAL), 35);
        assert!(is_fresh(NOW - 35, NOW, INTERVAL));
        assert!(!is_fresh(NOW - 36, NOW, INTERVAL));
        assert!(
            is_fresh(NOW + 60, NOW, INTERVAL),
            "a report from the future is the latest"
        );
    }

    /// Three regions of two checkers each, as seen from one location.
    #[test]
    fn partitions() {
        // A region loses its path to the targets: its two checkers say unhealthy, the
        // other four healthy — healthy (4 of 6).
        let mut all = reports(2, 5, false);
        all.extend(reports(4, 5, true));
        assert!(decide(all, NOW, INTERVAL, Q, Some(true)).healthy);
        // The location loses two regions: their reports go stale; it decides from the
        // one left, whichever way that region sees the target.
        let cut_off = reports(4, 40, true);
        for left in [true, false] {
            let mut all = cut_off.clone();
            all.extend(reports(2, 5, left));
            let a = decide(all, NOW, INTERVAL, Q, Some(!left));
            assert_eq!((a.healthy, a.reachable, a.stale), (left, 2, false));
        }
        // Only one checker of six still sees the target, and it is reachable: healthy
        // (1 of 6 is under 18 %: unhealthy; 1 of 5 reachable is over it).
        let mut all = reports(5, 5, false);
        all.extend(reports(1, 5, true));
        assert!(!decide(all.clone(), NOW, INTERVAL, Q, Some(true)).healthy);
        all[0].0 = NOW - 40; // one of the unhealthy ones is cut off
        assert!(decide(all, NOW, INTERVAL, Q, Some(false)).healthy);
        // The targets really die: every region reports it.
        assert!(!decide(reports(6, 1, false), NOW, INTERVAL, Q, Some(true)).healthy);
        // Heal: fresh healthy reports from everyone.
        assert!(decide(reports(6, 1, true), NOW, INTERVAL, Q, Some(false)).healthy);
    }

    #[test]
    fn with_no_checker_reachable_the_last_decision_stays() {
        let stale = reports(6, 100, true);
        let a = decide(stale.clone(), NOW, INTERVAL, Q, Some(false));
        assert_eq!((a.healthy, a.reachable, a.stale), (false, 0, true));
        assert!(decide(stale, NOW, INTERVAL, Q, None).healthy, "never decided: healthy");
        let never = decide(Vec::new(), NOW, INTERVAL, Q, Some(false));
        assert_eq!((never.healthy, never.stale), (false, false));
        assert!(decide(Vec::new(), NOW, INTERVAL, Q, None).healthy, "before any report");
    }
}
