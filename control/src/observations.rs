//! What a location has heard from its checkers (SPEC §4): each checker's latest
//! observation of each probed check, the last decision per check, and which checkers
//! were reachable at the last evaluation — the quorum aggregation unit of control's
//! state, with the rule itself in [`crate::quorum`].
//!
//! Freshness runs on this process's monotonic clock ([`crate::clock::monotonic`]): an
//! observation was made at "heard − age", its age measured on the clock of whoever made
//! it (a remote checker: its report's `sent_at` minus the observation's time). A step of
//! the wall clock — here or at a checker — neither revives an old report nor ages a new
//! one; the wall-clock `at` kept in each observation is for display only.
use std::collections::{BTreeMap, HashMap};

use crate::{checker::Observation, quorum::Aggregate};

/// An observation and when it was made, in monotonic seconds.
#[derive(Debug, Clone)]
struct Heard {
    observation: Observation,
    made: u64,
}

/// Checker id → region, of the checkers that became (un)reachable.
pub type Changes = Vec<(String, String)>;

/// The latest observations per check and checker, and the decisions made from them.
#[derive(Debug, Default)]
pub struct Observations {
    /// Check key → checker id → latest.
    latest: BTreeMap<String, BTreeMap<String, Heard>>,
    /// Last decision per probed check (kept while no checker is reachable).
    decisions: HashMap<String, bool>,
    /// Checkers reachable at the last [`Observations::evaluate`] (id → region).
    reachable: BTreeMap<String, String>,
}

impl Observations {
    /// Records `observation`, made `age` seconds before `now` (monotonic).
    pub fn record(&mut self, observation: Observation, age: u64, now: u64) {
        let made = now.saturating_sub(age);
        let by_checker = self.latest.entry(observation.check.clone()).or_default();
        // Reports can arrive out of order (a reconnect resends a queued batch): an older
        // observation never replaces a newer one.
        if by_checker.get(&observation.checker).is_some_and(|h| h.made > made) {
            return;
        }
        by_checker.insert(observation.checker.clone(), Heard { observation, made });
    }

    /// Forgets the checks `keep` rejects (removed by a reload).
    pub fn retain_checks(&mut self, keep: impl Fn(&str) -> bool) {
        self.latest.retain(|key, _| keep(key));
        self.decisions.retain(|key, _| keep(key));
    }

    /// Nothing heard yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// The latest observation of every checker on check `key`, fresh or not.
    pub fn latest<'s>(&'s self, key: &str) -> impl Iterator<Item = &'s Observation> + 's {
        self.latest
            .get(key)
            .into_iter()
            .flat_map(BTreeMap::values)
            .map(|h| &h.observation)
    }

    /// The most recently made observation of check `key`.
    #[must_use]
    pub fn newest(&self, key: &str) -> Option<&Observation> {
        self.latest
            .get(key)?
            .values()
            .max_by_key(|h| h.made)
            .map(|h| &h.observation)
    }

    /// The observations of check `key` (probe interval `interval`) still fresh at `now`.
    pub fn fresh<'s>(&'s self, key: &str, interval: u32, now: u64) -> impl Iterator<Item = &'s Observation> + 's {
        self.latest
            .get(key)
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter(move |h| crate::quorum::is_fresh(h.made, now, interval))
            .map(|h| &h.observation)
    }

    /// The quorum view of check `key` at `now`, without recording it.
    #[must_use]
    pub fn aggregate(&self, key: &str, interval: u32, quorum: f64, now: u64) -> Aggregate {
        crate::quorum::decide(
            self.latest
                .get(key)
                .into_iter()
                .flat_map(BTreeMap::values)
                .map(|h| (h.made, h.observation.healthy)),
            now,
            interval,
            quorum,
            self.decisions.get(key).copied(),
        )
    }

    /// Decides every probed check in `checks` (key, interval) at `now`, remembering
    /// each decision and who was reachable; returns the decisions and the checkers that
    /// became unreachable and reachable since the last evaluation.
    pub fn evaluate(
        &mut self,
        checks: &[(String, u32)],
        quorum: f64,
        now: u64,
    ) -> (Vec<(String, bool)>, Changes, Changes) {
        let mut reachable = BTreeMap::new();
        let mut decided = Vec::with_capacity(checks.len());
        for (key, interval) in checks {
            let aggregate = self.aggregate(key, *interval, quorum, now);
            for o in self.fresh(key, *interval, now) {
                reachable.insert(o.checker.clone(), o.region.clone());
            }
            self.decisions.insert(key.clone(), aggregate.healthy);
            decided.push((key.clone(), aggregate.healthy));
        }
        let changed = |from: &BTreeMap<String, String>, to: &BTreeMap<String, String>| -> Changes {
            from.iter()
                .filter(|(id, _)| !to.contains_key(*id))
                .map(|(i, r)| (i.clone(), r.clone()))
                .collect()
        };
        let gone = changed(&self.reachable, &reachable);
        let came = changed(&reachable, &self.reachable);
        self.reachable = reachable;
        (decided, gone, came)
    }

    /// Checkers with a fresh report at the last evaluation (id → region).
    #[must_use]
    pub fn reachable(&self) -> &BTreeMap<String, String> {
        &self.reachable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: f64 = 0.18;
    const INTERVAL: u32 = 10;

    fn observation(checker: &str, healthy: bool, at: u64) -> Observation {
        Observation {
            check: "z./c".into(),
            healthy,
            success: healthy,
            reason: if healthy { "ok" } else { "status 503" }.into(),
            at,
            checker: checker.into(),
            region: format!("r-{checker}"),
            timing: None,
            load_milli: None,
        }
    }

    fn checks() -> Vec<(String, u32)> {
        vec![("z./c".to_owned(), INTERVAL)]
    }

    #[test]
    fn freshness_runs_on_the_monotonic_clock_whatever_the_wall_clock_says() {
        let mut o = Observations::default();
        // Wall-clock times an hour in the future and a day in the past: irrelevant.
        o.record(observation("a", true, 1_000_000 + 3600), 0, 100);
        o.record(observation("b", false, 1_000_000 - 86_400), 2, 100);
        let a = o.aggregate("z./c", INTERVAL, Q, 100);
        assert_eq!((a.reachable, a.healthy_reports, a.healthy), (2, 1, true));
        // b's report was 2 s old when heard: it goes stale 2 s before a's.
        let a = o.aggregate("z./c", INTERVAL, Q, 100 + 35 - 2 + 1);
        assert_eq!((a.reachable, a.healthy_reports), (1, 1));
        let a = o.aggregate("z./c", INTERVAL, Q, 100 + 35 + 1);
        assert_eq!(
            (a.reachable, a.stale, a.healthy),
            (0, true, true),
            "the last decision is kept"
        );
    }

    #[test]
    fn an_older_observation_never_replaces_a_newer_one() {
        let mut o = Observations::default();
        o.record(observation("a", false, 50), 0, 100);
        // A batch that was queued during a partition arrives late: made 30 s earlier.
        o.record(observation("a", true, 20), 30, 101);
        assert_eq!(o.newest("z./c").map(|x| x.healthy), Some(false));
    }

    #[test]
    fn evaluation_remembers_decisions_and_who_came_and_went() {
        let mut o = Observations::default();
        o.record(observation("a", false, 0), 0, 100);
        o.record(observation("b", false, 0), 0, 100);
        let (decided, gone, came) = o.evaluate(&checks(), Q, 101);
        assert_eq!(decided, [("z./c".to_owned(), false)]);
        assert!(gone.is_empty());
        assert_eq!(came.len(), 2);
        assert_eq!(o.reachable().len(), 2);
        // Both stale: the unhealthy decision stays, both are gone.
        let (decided, gone, came) = o.evaluate(&checks(), Q, 200);
        assert_eq!(decided, [("z./c".to_owned(), false)]);
        assert_eq!(
            gone,
            [("a".to_owned(), "r-a".to_owned()), ("b".to_owned(), "r-b".to_owned())]
        );
        assert!(came.is_empty() && o.reachable().is_empty());
        // A reload that drops the check forgets it.
        o.retain_checks(|_| false);
        assert!(o.is_empty());
        assert!(o.aggregate("z./c", INTERVAL, Q, 200).healthy, "no history: healthy");
    }
}
