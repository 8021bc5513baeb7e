//! Load shedding (issue 30 §3, SPEC §10): a check may read a load figure from each
//! response (`load = { from, low, high }`); a weighted member whose own check reads one
//! keeps its whole weight up to `low`, none from `high`, linearly between — in tenths,
//! so a figure that moves a little does not move the answers.
//!
//! The figure of a check is the lower median of the latest fresh figure of every
//! checker that reads it (any region: load is the endpoint's, not the path's), so one
//! checker reading a stale or lying endpoint cannot shed a member alone.
//!
//! Edges are told by a new snapshot version whose weighted sets carry the effective
//! weights: every member's configured weight × the tenths it keeps (members that read
//! no load keep 10 tenths), which keeps the shares exact. New versions for load are
//! made at most every [`MIN_INTERVAL_SECS`] (each is a whole snapshot until snapshots ship
//! as deltas). A member shed to weight 0 is a zero-weight member: it answers again when
//! every positive-weight member is unhealthy, and when all are shed the set answers
//! every healthy one alike — shedding never takes a set below the fail-open rules.
//!
//! Damped (issue 53 §4), so that a target whose figure flaps cannot make a snapshot
//! version every [`MIN_INTERVAL_SECS`] (each one a serial bump and NOTIFY for
//! secondaries): a member's weight moves by a single tenth only to reach all or
//! nothing (hysteresis: a figure wobbling across a tenth's edge moves nothing), and
//! a weight that rises — load falling — rises no sooner than [`RESTORE_AFTER_SECS`]
//! after that member's last move. Shedding stays prompt: a weight falls as soon as
//! the set may move.
use std::collections::BTreeMap;

use qdns_zone::{
    name,
    snapshot::{LoadGauge, SlotRule},
    PolicyKind, Snapshot,
};

/// Least time between two snapshot versions made for load.
pub const MIN_INTERVAL_SECS: u64 = 10;

/// Least time between a member's last move and a rise of its weight.
pub const RESTORE_AFTER_SECS: u64 = 60;

/// Fresh for this many probe intervals (as checker reports are).
const FRESH_INTERVALS: u64 = 3;

/// The latest load figure of each (check, checker).
#[derive(Debug, Default)]
pub struct Loads {
    by: BTreeMap<(String, String), Figure>,
}

#[derive(Debug, Clone, Copy)]
struct Figure {
    milli: u32,
    /// Monotonic seconds when it was read.
    at: u64,
}

impl Loads {
    /// Records `checker`'s reading of `check`'s load, `milli` thousandths, at monotonic
    /// second `at`.
    pub fn add(&mut self, check: &str, checker: &str, milli: u32, at: u64) {
        self.by
            .insert((check.to_owned(), checker.to_owned()), Figure { milli, at });
    }

    /// `check`'s load now (thousandths): the lower median of its checkers' figures
    /// read within three probe intervals (`interval` seconds); `None` without one.
    #[must_use]
    pub fn figure(&self, check: &str, interval: u32, now: u64) -> Option<u32> {
        let fresh = FRESH_INTERVALS * u64::from(interval.max(1)) + 5;
        let mut figures: Vec<u32> = self
            .by
            .range((check.to_owned(), String::new())..)
            .take_while(|((c, _), _)| c == check)
            .filter(|(_, f)| now.saturating_sub(f.at) <= fresh)
            .map(|(_, f)| f.milli)
            .collect();
        figures.sort_unstable();
        figures.get(figures.len().checked_sub(1)? / 2).copied()
    }

    /// Forgets the checks `keep` rejects (removed by a reload).
    pub fn retain_checks(&mut self, keep: impl Fn(&str) -> bool) {
        self.by.retain(|(check, _), _| keep(check));
    }

    /// Every figure as saved across restarts: (check, checker, thousandths, its age in
    /// seconds at monotonic second `now`).
    #[must_use]
    pub fn saved(&self, now: u64) -> Vec<(String, String, u32, u64)> {
        self.by
            .iter()
            .map(|((check, checker), f)| (check.clone(), checker.clone(), f.milli, now.saturating_sub(f.at)))
            .collect()
    }

    /// Takes back saved figures, each `age` seconds older than when it was saved plus
    /// `since` (the time the process was down), at monotonic second `now`.
    pub fn restore(&mut self, saved: Vec<(String, String, u32, u64)>, since: u64, now: u64) {
        for (check, checker, milli, age) in saved {
            self.add(&check, &checker, milli, now.saturating_sub(age.saturating_add(since)));
        }
    }
}

/// A member's load gauge: the check that reads it, its probe interval, the band.
#[derive(Debug, Clone)]
pub struct Gauge {
    /// Check key (`zone/id`).
    pub check: String,
    /// Its probe interval, seconds.
    pub interval: u32,
    /// Where the figure is and the band.
    pub gauge: LoadGauge,
}

/// A weighted set with at least one member whose check reads load.
#[derive(Debug, Clone)]
pub struct ShedSet {
    /// Zone origin (wire).
    pub origin: Vec<u8>,
    /// Owner (wire) and type.
    pub name: Vec<u8>,
    /// Type.
    pub rtype: u16,
    /// `name TYPE`.
    pub label: String,
    /// Member ids.
    pub ids: Vec<String>,
    /// The weights the zone file gives.
    pub configured: Vec<u32>,
    /// Each member's gauge.
    pub gauges: Vec<Option<Gauge>>,
    /// The tenths each member keeps in the snapshot now.
    pub kept: Vec<u32>,
    /// Monotonic second of each member's last move (none yet).
    pub moved_at: Vec<Option<u64>>,
}

impl ShedSet {
    /// The weights the snapshot carries when members keep `kept` tenths.
    #[must_use]
    pub fn weights(&self, kept: &[u32]) -> Vec<u32> {
        self.configured
            .iter()
            .zip(kept)
            .map(|(&w, &k)| w.saturating_mul(k))
            .collect()
    }
}

/// The sets that shed load, and when a version was last made for it.
#[derive(Debug, Default)]
pub struct Shedding {
    /// Each set.
    pub sets: Vec<ShedSet>,
    /// Monotonic second of the last version made for load.
    last: Option<u64>,
}

/// One set's weights moved: for the timeline.
#[derive(Debug)]
pub struct Moved {
    /// `name TYPE`.
    pub label: String,
    /// `id weight→weight (load 0.85)` per member that moved.
    pub members: Vec<String>,
}

impl Shedding {
    /// The shedding sets of a freshly loaded `snapshot` (weights as configured) — and
    /// that snapshot's weights scaled to tenths, every member keeping all of its weight.
    #[must_use]
    pub fn install(snapshot: &mut Snapshot) -> Shedding {
        let mut sets = Vec::new();
        for zone in &mut snapshot.zones {
            let origin_text = name::to_text(&zone.origin);
            for set in &mut zone.rrsets {
                let label = qdns_zone::master::set_label(set);
                let Some(policy) = set.policy.as_deref_mut().filter(|p| p.kind == PolicyKind::Weighted) else {
                    continue;
                };
                let gauges: Vec<Option<Gauge>> = policy
                    .members
                    .iter()
                    .map(|m| {
                        let slot = zone.slots.get(m.slot as usize)?;
                        let SlotRule::Check { probe: Some(probe), .. } = &slot.rule else {
                            return None;
                        };
                        Some(Gauge {
                            check: format!("{origin_text}/{}", slot.name),
                            interval: probe.interval,
                            gauge: probe.load.clone()?,
                        })
                    })
                    .collect();
                if gauges.iter().all(Option::is_none) {
                    continue;
                }
                let shed = ShedSet {
                    origin: zone.origin.clone(),
                    name: set.name.clone(),
                    rtype: set.rtype,
                    label,
                    ids: policy.members.iter().map(|m| m.id.clone()).collect(),
                    configured: policy.members.iter().map(|m| m.weight).collect(),
                    kept: vec![10; gauges.len()],
                    moved_at: vec![None; gauges.len()],
                    gauges,
                };
                for (member, weight) in policy.members.iter_mut().zip(shed.weights(&shed.kept)) {
                    member.weight = weight;
                }
                sets.push(shed);
            }
        }
        Shedding { sets, last: None }
    }

    /// The tenths each member of `set` should keep under `loads` at `now`, damped (the
    /// module's notes), with the figure it reads.
    #[must_use]
    pub fn target(set: &ShedSet, loads: &Loads, now: u64) -> Vec<(u32, Option<u32>)> {
        set.gauges
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let Some(g) = g else { return (10, None) };
                let figure = loads.figure(&g.check, g.interval, now);
                let wanted = figure.map_or(10, |f| g.gauge.keep_tenths(f));
                let kept = set.kept.get(i).copied().unwrap_or(10);
                let moved_at = set.moved_at.get(i).copied().flatten();
                (damped(kept, wanted, moved_at, now), figure)
            })
            .collect()
    }

    /// True when [`Shedding::apply`] would move a weight now: a set's target differs
    /// from what it keeps, and the last move is [`MIN_INTERVAL_SECS`] behind.
    #[must_use]
    pub fn due(&self, loads: &Loads, now: u64) -> bool {
        let rested = self
            .last
            .is_none_or(|last| now.saturating_sub(last) >= MIN_INTERVAL_SECS);
        rested
            && self.sets.iter().any(|set| {
                Self::target(set, loads, now)
                    .iter()
                    .map(|(kept, _)| *kept)
                    .ne(set.kept.iter().copied())
            })
    }

    /// Moves the weights of `snapshot` to what `loads` asks for, when one differs and
    /// the last move is [`MIN_INTERVAL_SECS`] behind; what moved (empty: nothing did).
    pub fn apply(&mut self, snapshot: &mut Snapshot, loads: &Loads, now: u64) -> Vec<Moved> {
        if self
            .last
            .is_some_and(|last| now.saturating_sub(last) < MIN_INTERVAL_SECS)
        {
            return Vec::new();
        }
        let mut moved = Vec::new();
        for set in &mut self.sets {
            let target = Self::target(set, loads, now);
            let kept: Vec<u32> = target.iter().map(|(k, _)| *k).collect();
            if kept == set.kept {
                continue;
            }
            let Some(policy) = snapshot
                .zones
                .iter_mut()
                .find(|z| z.origin == set.origin)
                .and_then(|z| z.rrsets.iter_mut().find(|s| s.name == set.name && s.rtype == set.rtype))
                .and_then(|s| s.policy.as_deref_mut())
            else {
                continue;
            };
            let (old, new) = (set.weights(&set.kept), set.weights(&kept));
            let mut members = Vec::new();
            for (i, member) in policy.members.iter_mut().enumerate() {
                member.weight = new.get(i).copied().unwrap_or(member.weight);
                if old.get(i) != new.get(i) {
                    let figure = target
                        .get(i)
                        .and_then(|(_, f)| *f)
                        .map_or_else(|| "no figure".to_owned(), |f| format!("load {}", milli_text(f)));
                    members.push(format!(
                        "{} weight {} → {} ({figure})",
                        member.id,
                        tenths_text(old.get(i).copied().unwrap_or(0)),
                        tenths_text(new.get(i).copied().unwrap_or(0)),
                    ));
                }
            }
            for (i, at) in set.moved_at.iter_mut().enumerate() {
                if set.kept.get(i) != kept.get(i) {
                    *at = Some(now);
                }
            }
            set.kept = kept;
            moved.push(Moved {
                label: set.label.clone(),
                members,
            });
        }
        if !moved.is_empty() {
            self.last = Some(now);
        }
        moved
    }

    /// The set `name`/`rtype`, when it sheds load.
    #[must_use]
    pub fn set(&self, name: &[u8], rtype: u16) -> Option<&ShedSet> {
        self.sets.iter().find(|s| s.name == name && s.rtype == rtype)
    }
}

/// What a member keeping `kept` tenths keeps when its figure asks for `wanted`, its
/// last move at `moved_at`, at `now`.
fn damped(kept: u32, wanted: u32, moved_at: Option<u64>, now: u64) -> u32 {
    if wanted == kept {
        return kept;
    }
    // One tenth, not to an end: a wobble across a tenth's edge.
    if wanted.abs_diff(kept) < 2 && wanted != 0 && wanted != 10 {
        return kept;
    }
    // Rising again: not within a minute of the last move.
    if wanted > kept && moved_at.is_some_and(|at| now.saturating_sub(at) < RESTORE_AFTER_SECS) {
        return kept;
    }
    wanted
}

/// A figure in thousandths for people: `0.85`.
#[must_use]
pub fn milli_text(milli: u32) -> String {
    let text = format!("{}.{:03}", milli / 1000, milli % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A weight in tenths for people: `4.5`, `10`.
#[must_use]
pub fn tenths_text(tenths: u32) -> String {
    if tenths.is_multiple_of(10) {
        (tenths / 10).to_string()
    } else {
        format!("{}.{}", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checks_figure_is_the_lower_median_of_fresh_readings() {
        let mut loads = Loads::default();
        assert_eq!(loads.figure("z./web", 10, 1000), None);
        loads.add("z./web", "c1", 900, 1000);
        assert_eq!(loads.figure("z./web", 10, 1000), Some(900));
        loads.add("z./web", "c2", 100, 1000);
        loads.add("z./web", "c3", 500, 1000);
        loads.add("z./other", "c1", 50, 1000);
        assert_eq!(
            loads.figure("z./web", 10, 1000),
            Some(500),
            "one lying checker moves nothing"
        );
        // 3 intervals + 5 s later, the readings are stale.
        assert_eq!(loads.figure("z./web", 10, 1035), Some(500));
        assert_eq!(loads.figure("z./web", 10, 1036), None);
        loads.retain_checks(|c| c != "z./web");
        assert_eq!(loads.figure("z./web", 10, 1000), None);
        assert_eq!(loads.figure("z./other", 10, 1000), Some(50));
    }

    fn snapshot() -> Snapshot {
        let text = format!(
            "{}\n[[health_check]]\nid = \"a\"\ntype = \"http\"\nip = \"192.0.2.1\"\ninterval = 10\n\
             load = {{ from = \"header:x-load\", low = 0.5, high = 0.9 }}\n\
             [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [\n\
             {{ id = \"a\", weight = 3, values = [\"192.0.2.1\"], health_check = \"a\" }},\n\
             {{ id = \"b\", weight = 2, values = [\"192.0.2.2\"] }},\n]\n",
            qdns_testkit::fixtures::zone_head("z.")
        );
        let zone = qdns_zone::parse_zone_text(std::path::Path::new("z.toml"), &text).unwrap();
        Snapshot::new(1, vec![zone], Vec::new())
    }

    fn weights(snapshot: &Snapshot) -> Vec<u32> {
        let set = snapshot.zones[0].rrsets.iter().find(|s| s.policy.is_some()).unwrap();
        set.policy.as_ref().unwrap().members.iter().map(|m| m.weight).collect()
    }

    #[test]
    fn weights_move_in_tenths_at_most_every_ten_seconds() {
        let mut snapshot = snapshot();
        let mut shedding = Shedding::install(&mut snapshot);
        assert_eq!(weights(&snapshot), [30, 20], "scaled to tenths, every member whole");
        assert_eq!(shedding.sets[0].configured, [3, 2]);
        let mut loads = Loads::default();
        assert!(
            shedding.apply(&mut snapshot, &loads, 1000).is_empty(),
            "no figure: nothing moves"
        );
        loads.add("z./a", "c1", 800, 1000);
        let moved = shedding.apply(&mut snapshot, &loads, 1000);
        assert_eq!(weights(&snapshot), [9, 20]);
        assert_eq!(moved[0].members, ["a weight 3 → 0.9 (load 0.8)"]);
        // Within 10 s of that move nothing moves; after, it does.
        loads.add("z./a", "c1", 950, 1005);
        assert!(shedding.apply(&mut snapshot, &loads, 1009).is_empty());
        assert_eq!(shedding.apply(&mut snapshot, &loads, 1010).len(), 1);
        assert_eq!(weights(&snapshot), [0, 20]);
        // The figure goes stale (3 intervals + 5 s): the whole weight comes back, a
        // minute after the member's last move (a rise is never hurried).
        assert!(shedding.apply(&mut snapshot, &loads, 1041).is_empty());
        assert_eq!(shedding.apply(&mut snapshot, &loads, 1070).len(), 1);
        assert_eq!(weights(&snapshot), [30, 20]);
    }

    /// The snapshot versions made for load when member `a`'s figure is `figure(step)`
    /// (thousandths) at each of `steps` steps 10 s apart.
    fn versions_for(steps: u64, figure: impl Fn(u64) -> u32) -> usize {
        let mut snapshot = snapshot();
        let mut shedding = Shedding::install(&mut snapshot);
        let mut loads = Loads::default();
        (0..steps)
            .filter(|&step| {
                let now = 1000 + 10 * step;
                loads.add("z./a", "c1", figure(step), now);
                !shedding.apply(&mut snapshot, &loads, now).is_empty()
            })
            .count()
    }

    /// A target whose figure flaps between idle and overloaded every 10 s for 10
    /// minutes moves the weights at most twice a minute (it moved them at every chance,
    /// 60 times, before), and a figure wobbling across a tenth's edge moves nothing.
    #[test]
    fn a_flapping_figure_is_damped() {
        let versions = versions_for(60, |step| if step % 2 == 0 { 950 } else { 100 });
        assert!(versions <= 21, "{versions} versions in 10 minutes");
        assert!(versions >= 10, "it still sheds and restores: {versions}");
        // 0.71 and 0.73 keep 5 and 4 tenths: after the first move, none.
        let versions = versions_for(30, |step| if step % 2 == 0 { 710 } else { 730 });
        assert_eq!(versions, 1, "one move into the band, none for the wobble");
    }

    #[test]
    fn saved_figures_come_back_as_old_as_they_are() {
        let mut loads = Loads::default();
        loads.add("z./web", "c1", 900, 1000);
        let saved = loads.saved(1010);
        assert_eq!(saved, [("z./web".to_owned(), "c1".to_owned(), 900, 10)]);
        // Down for 20 s; the new process's clock reads 5000: the figure is 30 s old.
        let mut back = Loads::default();
        back.restore(saved, 20, 5000);
        assert_eq!(back.figure("z./web", 10, 5000), Some(900));
        assert_eq!(back.figure("z./web", 10, 5006), None, "fresh for 35 s of age only");
    }

    #[test]
    fn tenths_at_the_edges_used_above() {
        let gauge = |milli| {
            let snapshot = snapshot();
            let shedding = Shedding::install(&mut snapshot.clone());
            shedding.sets[0].gauges[0].as_ref().unwrap().gauge.keep_tenths(milli)
        };
        assert_eq!([gauge(710), gauge(730), gauge(950), gauge(100)], [5, 4, 0, 10]);
    }

    #[test]
    fn texts() {
        assert_eq!(
            [milli_text(850), milli_text(1000), milli_text(0), milli_text(75_500)],
            ["0.85", "1", "0", "75.5"]
        );
        assert_eq!([tenths_text(40), tenths_text(45), tenths_text(0)], ["4", "4.5", "0"]);
    }
}
