//! Round trips the checkers measure (issue 30, SPEC §10 "Latency answers"): per probed
//! check and checker region, a smoothed figure from each successful probe's time to
//! first byte (HTTP/HTTPS) or connect time (TCP).
//!
//! Smoothing: each new sample is the median of the region's last three probes, then an
//! exponentially weighted average (weight [`WEIGHT`] for the new median). One outlier
//! probe — a retransmitted SYN, a garbage collection pause at the target — is never the
//! median of three, so it moves nothing; a real change moves the median after two
//! probes and the average most of the way within five more.
use std::{collections::BTreeMap, time::Duration};

/// Weight of each new median in the average.
pub const WEIGHT: f64 = 0.3;

/// One check's figure from one region.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Smoothed {
    /// The last three samples (µs), newest last; `seen` of them are real.
    recent: [u32; 3],
    seen: usize,
    /// The smoothed figure, µs.
    average: f64,
    /// Samples taken.
    samples: u64,
}

impl Smoothed {
    fn add(&mut self, micros: u32) {
        self.recent.rotate_left(1);
        self.recent[2] = micros;
        self.seen = (self.seen + 1).min(3);
        let mut last = self.recent;
        let window = &mut last[3 - self.seen..];
        window.sort_unstable();
        // Two samples: the lower (an outlier is a slow probe, not a fast one).
        let median = f64::from(window[(window.len() - 1) / 2]);
        self.average = if self.samples == 0 {
            median
        } else {
            self.average + WEIGHT * (median - self.average)
        };
        self.samples += 1;
    }
}

/// A smoothed round trip, as shown and steered by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTrip {
    /// The smoothed figure.
    pub smoothed: Duration,
    /// Probes it is made of.
    pub samples: u64,
}

/// Smoothed round trips per (check key, checker region).
#[derive(Debug, Default)]
pub struct RoundTrips {
    by: BTreeMap<(String, String), Smoothed>,
}

impl RoundTrips {
    /// Adds a successful probe of `check` from `region` that took `micros`.
    pub fn add(&mut self, check: &str, region: &str, micros: u32) {
        self.by
            .entry((check.to_owned(), region.to_owned()))
            .or_default()
            .add(micros);
    }

    /// The smoothed round trip of `check` from `region`, once measured.
    #[must_use]
    pub fn get(&self, check: &str, region: &str) -> Option<RoundTrip> {
        let s = self.by.get(&(check.to_owned(), region.to_owned()))?;
        Some(RoundTrip {
            smoothed: Duration::from_secs_f64(s.average / 1e6),
            samples: s.samples,
        })
    }

    /// Forgets the checks `keep` rejects (removed by a reload).
    pub fn retain_checks(&mut self, keep: impl Fn(&str) -> bool) {
        self.by.retain(|(check, _), _| keep(check));
    }

    /// Everything, as saved across restarts.
    #[must_use]
    pub fn saved(&self) -> Vec<SavedRoundTrip> {
        self.by
            .iter()
            .map(|((check, region), smoothed)| SavedRoundTrip {
                check: check.clone(),
                region: region.clone(),
                smoothed: smoothed.clone(),
            })
            .collect()
    }

    /// Takes back what [`RoundTrips::saved`] gave (a figure that makes no sense is
    /// left out).
    pub fn restore(&mut self, saved: Vec<SavedRoundTrip>) {
        for s in saved {
            if s.smoothed.seen <= 3 && s.smoothed.average.is_finite() && s.smoothed.average >= 0.0 {
                self.by.insert((s.check, s.region), s.smoothed);
            }
        }
    }
}

/// One (check, region)'s figure as saved across restarts.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SavedRoundTrip {
    check: String,
    region: String,
    #[serde(flatten)]
    smoothed: Smoothed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(trips: &RoundTrips) -> f64 {
        trips.get("z./c", "fra").unwrap().smoothed.as_secs_f64() * 1000.0
    }

    #[test]
    fn one_outlier_probe_moves_nothing_and_a_real_change_is_followed() {
        let mut trips = RoundTrips::default();
        assert_eq!(trips.get("z./c", "fra"), None);
        for _ in 0..5 {
            trips.add("z./c", "fra", 20_000);
        }
        assert!((ms(&trips) - 20.0).abs() < 1e-6);
        // One probe at 900 ms (a retransmitted SYN): the median of three is still 20.
        trips.add("z./c", "fra", 900_000);
        assert!((ms(&trips) - 20.0).abs() < 1e-6, "{}", ms(&trips));
        trips.add("z./c", "fra", 20_000);
        assert!((ms(&trips) - 20.0).abs() < 1e-6);
        // The path really got slower: followed within a few probes.
        for _ in 0..8 {
            trips.add("z./c", "fra", 60_000);
        }
        assert!(ms(&trips) > 55.0, "{}", ms(&trips));
        assert_eq!(trips.get("z./c", "fra").unwrap().samples, 15);
        // Regions are apart; a reload that drops the check forgets it.
        assert_eq!(trips.get("z./c", "ams"), None);
        trips.retain_checks(|_| false);
        assert_eq!(trips.get("z./c", "fra"), None);
    }

    #[test]
    fn the_first_two_samples_take_the_lower() {
        let mut trips = RoundTrips::default();
        trips.add("z./c", "fra", 30_000);
        trips.add("z./c", "fra", 500_000);
        // Median of two is the lower: 30; average 30 + 0.3 × (30 − 30).
        assert!((ms(&trips) - 30.0).abs() < 1e-6, "{}", ms(&trips));
    }
}
