//! Per-check state of one checker (SPEC §4): the endpoint becomes unhealthy after
//! `failure_threshold` consecutive failures and healthy again after as many consecutive
//! successes; a result of the other kind resets the run. A new check is healthy.

/// The state of one check as one checker sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    threshold: u32,
    healthy: bool,
    /// Consecutive results that disagree with `healthy`.
    run: u32,
}

impl Tracker {
    /// A new check: healthy until `threshold` failures in a row.
    #[must_use]
    pub fn new(threshold: u32) -> Tracker {
        Tracker {
            threshold: threshold.max(1),
            healthy: true,
            run: 0,
        }
    }

    /// Records one probe result; returns true when the status flipped.
    pub fn record(&mut self, success: bool) -> bool {
        if success == self.healthy {
            self.run = 0;
            return false;
        }
        self.run += 1;
        if self.run >= self.threshold {
            self.healthy = success;
            self.run = 0;
            return true;
        }
        false
    }

    /// The current status.
    #[must_use]
    pub fn healthy(&self) -> bool {
        self.healthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_after_exactly_threshold_results_each_way() {
        let mut t = Tracker::new(3);
        assert!(!t.record(false) && !t.record(false) && t.healthy());
        assert!(t.record(false), "third failure flips");
        assert!(!t.healthy());
        assert!(!t.record(true) && !t.record(true));
        assert!(t.record(true), "third success flips back");
        assert!(t.healthy());
    }

    #[test]
    fn a_result_of_the_other_kind_resets_the_run() {
        let mut t = Tracker::new(2);
        t.record(false);
        t.record(true); // reset
        assert!(!t.record(false) && t.healthy());
        assert!(t.record(false) && !t.healthy());
    }
}
