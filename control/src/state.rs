//! The control plane's state: the loaded zones, what operators set (overrides, external
//! check statuses, zonal shifts), the derived health bitmap, connected edges, and the
//! event timeline. Every change goes through [`State::recompute`], which re-evaluates
//! health (SPEC §3) and returns the delta to push to the edges.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use qdns_abi::{
    health::slot_healthy,
    select::{select_failover, select_multivalue, select_weighted, select_zonal, WeightedMember},
};
use qdns_zone::{
    evaluate::{evaluate, global, Inputs},
    name,
    sync::HealthDelta,
    PolicyKind, RecordSet, SlotRule, Snapshot, Zone,
};
use serde::{Deserialize, Serialize};

/// Events kept in the timeline.
pub const MAX_EVENTS: usize = 1000;

/// Seconds since the epoch.
#[must_use]
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A forced status with an expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The forced status.
    pub healthy: bool,
    /// Unix seconds when it ends.
    pub expires: u64,
    /// Unix seconds when it was set.
    pub set_at: u64,
}

/// The status an operator gave an `external` check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct External {
    /// The status.
    pub healthy: bool,
    /// Unix seconds when it was set.
    pub set_at: u64,
}

/// A zonal shift: the AZ is treated as unhealthy for the record set until `expires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shift {
    /// Unix seconds when it ends.
    pub expires: u64,
    /// Unix seconds when it started.
    pub started: u64,
    /// Free text.
    pub comment: Option<String>,
}

/// What operators set; persisted across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// Check key (`zone/id`) → override.
    pub overrides: BTreeMap<String, Override>,
    /// Check key → external status.
    pub externals: BTreeMap<String, External>,
    /// `rrset name` → AZ → shift.
    pub shifts: BTreeMap<String, BTreeMap<String, Shift>>,
}

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unix seconds.
    pub time: u64,
    /// `health`, `fail-open`, `reload`, `shift`, `override`, `external`, `edge`.
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// A connected edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeInfo {
    /// Its name.
    pub name: String,
    /// Snapshot version it acknowledged.
    pub snapshot: Option<u64>,
    /// Health delta it acknowledged.
    pub seq: u64,
    /// Unix seconds of the connection.
    pub connected_at: u64,
    /// Its XDP fast path, as last reported (none without `--xdp`).
    pub xdp: Option<qdns_zone::sync::XdpReport>,
}

/// Default quorum: healthy iff more than this share of reachable checkers say so.
pub const DEFAULT_QUORUM: f64 = 0.18;

pub use crate::quorum::{fresh_for, Aggregate};

/// Monotonic counters for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Health slot transitions.
    pub health_transitions: u64,
    /// Sets entering fail-open.
    pub fail_open_entered: u64,
    /// Sets leaving fail-open.
    pub fail_open_left: u64,
    /// Reloads applied.
    pub reloads_ok: u64,
    /// Reloads rejected.
    pub reloads_rejected: u64,
}

/// Everything control knows.
pub struct State {
    /// Quorum share (SPEC §4).
    pub quorum: f64,
    /// Reject special-use check targets on reload.
    pub deny_special_use_targets: bool,
    /// Reports accepted from remote checkers.
    pub reports_accepted: u64,
    /// Octets of accepted reports (frames, prefix included).
    pub report_bytes: u64,
    /// Counters for metrics.
    pub counters: Counters,
    /// Operator state changed without being saved (an expiry during a recompute).
    pub operator_dirty: bool,
    /// Reports dropped, by reason.
    pub reports_rejected: BTreeMap<&'static str, u64>,
    /// Edge connections refused before a snapshot was sent, by reason.
    pub edge_links_refused: BTreeMap<&'static str, u64>,
    /// Check key → checker id → latest observation.
    pub observations: BTreeMap<String, BTreeMap<String, crate::checker::Observation>>,
    /// Last decision per probed check (kept while no checker is reachable).
    decisions: HashMap<String, bool>,
    /// Checkers reachable at the last recompute (id → region).
    reachable: BTreeMap<String, String>,
    /// Zone directory.
    pub zones_dir: PathBuf,
    /// The current snapshot (its `bitmap` is kept current).
    pub snapshot: Arc<Snapshot>,
    /// Deltas sent since the snapshot.
    pub seq: u64,
    /// Operator input.
    pub operator: OperatorState,
    /// Timeline, newest last.
    pub events: VecDeque<Event>,
    /// Connected edges by connection id.
    pub edges: BTreeMap<u64, EdgeInfo>,
    /// Global slot → check key (`zone/name`).
    slot_keys: Vec<String>,
    /// Check key → global slot.
    slot_by_key: HashMap<String, u32>,
    /// Policy sets failing open now (`name TYPE`).
    failing_open: BTreeSet<String>,
    /// When each slot last changed (unix seconds).
    changed_at: Vec<u64>,
}

/// A name for a record set: `www.shop.example. A`.
#[must_use]
pub fn set_label(set: &RecordSet) -> String {
    format!(
        "{} {}",
        name::to_text(&set.name),
        qdns_zone::master::type_name(set.rtype)
    )
}

impl State {
    /// State for a freshly loaded `snapshot`.
    #[must_use]
    pub fn new(zones_dir: PathBuf, snapshot: Snapshot, operator: OperatorState) -> State {
        let mut state = State {
            quorum: DEFAULT_QUORUM,
            deny_special_use_targets: false,
            reports_accepted: 0,
            report_bytes: 0,
            counters: Counters::default(),
            operator_dirty: false,
            reports_rejected: BTreeMap::new(),
            edge_links_refused: BTreeMap::new(),
            observations: BTreeMap::new(),
            decisions: HashMap::new(),
            reachable: BTreeMap::new(),
            zones_dir,
            snapshot: Arc::new(snapshot),
            seq: 0,
            operator,
            events: VecDeque::new(),
            edges: BTreeMap::new(),
            slot_keys: Vec::new(),
            slot_by_key: HashMap::new(),
            failing_open: BTreeSet::new(),
            changed_at: Vec::new(),
        };
        state.index();
        let _ = state.recompute();
        state
    }

    fn index(&mut self) {
        self.slot_keys.clear();
        self.slot_by_key.clear();
        for zone in &self.snapshot.zones {
            let origin = name::to_text(&zone.origin);
            for slot in &zone.slots {
                let key = format!("{origin}/{}", slot.name);
                self.slot_by_key.insert(key.clone(), self.slot_keys.len() as u32);
                self.slot_keys.push(key);
            }
        }
        self.changed_at = vec![now(); self.slot_keys.len()];
    }

    /// Adds an event.
    pub fn event(&mut self, kind: &str, message: String) {
        tracing::info!(kind, %message, "event");
        self.events.push_back(Event {
            time: now(),
            kind: kind.to_owned(),
            message,
        });
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
    }

    /// Replaces the snapshot (a reload); health is re-evaluated for it.
    pub fn replace_snapshot(&mut self, snapshot: Snapshot) {
        self.snapshot = Arc::new(snapshot);
        self.seq = 0;
        self.index();
        let keys: BTreeSet<String> = self.slot_keys.iter().cloned().collect();
        self.observations.retain(|key, _| keys.contains(key));
        self.decisions.retain(|key, _| keys.contains(key));
        self.failing_open.clear();
        let _ = self.recompute();
    }

    /// The key of a check given as `ID` (unique across zones) or `ZONE/ID`.
    pub fn check_key(&self, given: &str) -> Result<String, crate::api::ApiError> {
        use crate::api::ApiError;
        if self.slot_by_key.contains_key(given) && self.is_check_key(given) {
            return Ok(given.to_owned());
        }
        let matches: Vec<&String> = self
            .slot_keys
            .iter()
            .filter(|k| k.rsplit_once('/').is_some_and(|(_, id)| id == given) && self.is_check_key(k))
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(ApiError::not_found(format!("no health check {given:?}"))),
            many => Err(ApiError::bad_argument(format!(
                "health check id {given:?} is in several zones; name one of {}",
                many.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn is_check_key(&self, key: &str) -> bool {
        self.rule(key)
            .is_some_and(|rule| matches!(rule, SlotRule::Check { .. } | SlotRule::Calculated { .. }))
    }

    /// The rule of the slot with `key`.
    #[must_use]
    pub fn rule(&self, key: &str) -> Option<&SlotRule> {
        let slot = *self.slot_by_key.get(key)?;
        self.local(slot).map(|(zone, local)| &zone.slots[local].rule)
    }

    /// The zone and local index of a global slot.
    #[must_use]
    pub fn local(&self, slot: u32) -> Option<(&Zone, usize)> {
        self.snapshot.zones.iter().find_map(|z| {
            let local = slot.checked_sub(z.slot_base)? as usize;
            (local < z.slots.len()).then_some((z, local))
        })
    }

    /// Key of a global slot.
    #[must_use]
    pub fn slot_key(&self, slot: u32) -> Option<&str> {
        self.slot_keys.get(slot as usize).map(String::as_str)
    }

    /// Global slot of a key.
    #[must_use]
    pub fn slot(&self, key: &str) -> Option<u32> {
        self.slot_by_key.get(key).copied()
    }

    /// Unix seconds when a slot last changed.
    #[must_use]
    pub fn changed_at(&self, slot: u32) -> u64 {
        self.changed_at.get(slot as usize).copied().unwrap_or(0)
    }

    /// Drops expired overrides and shifts (with events); true when something expired.
    pub fn expire(&mut self) -> bool {
        let t = now();
        let mut expired = Vec::new();
        self.operator.overrides.retain(|key, o| {
            let keep = o.expires > t;
            if !keep {
                expired.push(("override", format!("override of {key} expired")));
            }
            keep
        });
        for (rrset, azs) in &mut self.operator.shifts {
            azs.retain(|az, s| {
                let keep = s.expires > t;
                if !keep {
                    expired.push(("shift", format!("shift of {rrset} away from {az} expired")));
                }
                keep
            });
        }
        self.operator.shifts.retain(|_, azs| !azs.is_empty());
        let any = !expired.is_empty();
        self.operator_dirty |= any;
        for (kind, message) in expired {
            self.event(kind, message);
        }
        any
    }

    /// True while AZ `az` of the set named `rrset` is shifted away.
    #[must_use]
    pub fn shifted(&self, rrset: &str, az: &str) -> bool {
        let t = now();
        self.operator
            .shifts
            .get(rrset)
            .and_then(|azs| azs.get(az))
            .is_some_and(|s| s.expires > t)
    }

    /// The probed checks of the snapshot: (key, probe).
    #[must_use]
    pub fn probed_checks(&self) -> Vec<(String, qdns_zone::snapshot::Probe)> {
        let mut out = Vec::new();
        for zone in &self.snapshot.zones {
            let origin = name::to_text(&zone.origin);
            for slot in &zone.slots {
                if let SlotRule::Check { probe: Some(probe), .. } = &slot.rule {
                    out.push((format!("{origin}/{}", slot.name), probe.clone()));
                }
            }
        }
        out
    }

    /// Records a checker's observation.
    pub fn observe(&mut self, observation: crate::checker::Observation) {
        if !self.slot_by_key.contains_key(&observation.check) {
            return; // a check removed by a reload
        }
        self.observations
            .entry(observation.check.clone())
            .or_default()
            .insert(observation.checker.clone(), observation);
    }

    /// The quorum view of probed check `key` with probe interval `interval` (SPEC §4,
    /// [`crate::quorum::decide`]) now.
    #[must_use]
    pub fn aggregate(&self, key: &str, interval: u32) -> Aggregate {
        crate::quorum::decide(
            self.observations
                .get(key)
                .into_iter()
                .flat_map(BTreeMap::values)
                .map(|o| (o.at, o.healthy)),
            now(),
            interval,
            self.quorum,
            self.decisions.get(key).copied(),
        )
    }

    /// The latest report of each checker on probed check `key` (probe interval
    /// `interval`) that is still fresh.
    pub fn fresh_observations<'s>(
        &'s self,
        key: &str,
        interval: u32,
    ) -> impl Iterator<Item = &'s crate::checker::Observation> + 's {
        let t = now();
        self.observations
            .get(key)
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter(move |o| crate::quorum::is_fresh(o.at, t, interval))
    }

    /// The probe interval of check `key`, when it is probed.
    #[must_use]
    pub fn probe_interval(&self, key: &str) -> Option<u32> {
        match self.rule(key)? {
            SlotRule::Check { probe: Some(p), .. } => Some(p.interval),
            _ => None,
        }
    }

    /// Checkers with at least one fresh report (id → region).
    #[must_use]
    pub fn reachable_checkers(&self) -> &BTreeMap<String, String> {
        &self.reachable
    }

    /// Re-evaluates health; records transitions and fail-open changes as events, and
    /// returns the delta for the edges (if any word changed).
    pub fn recompute(&mut self) -> Option<HealthDelta> {
        // What has expired ends here, with its event, before health is evaluated.
        self.expire();
        let t = now();
        let mut external: HashMap<u32, bool> = self
            .operator
            .externals
            .iter()
            .filter_map(|(key, e)| Some((self.slot(key)?, e.healthy)))
            .collect();
        // Probed checks: the quorum decision over reachable checkers.
        let mut reachable = BTreeMap::new();
        for (key, probe) in self.probed_checks() {
            let aggregate = self.aggregate(&key, probe.interval);
            if let Some(by_checker) = self.observations.get(&key) {
                for o in by_checker
                    .values()
                    .filter(|o| crate::quorum::is_fresh(o.at, t, probe.interval))
                {
                    reachable.insert(o.checker.clone(), o.region.clone());
                }
            }
            self.decisions.insert(key.clone(), aggregate.healthy);
            if let Some(slot) = self.slot(&key) {
                external.insert(slot, aggregate.healthy);
            }
        }
        let gone: Vec<(String, String)> = self
            .reachable
            .iter()
            .filter(|(id, _)| !reachable.contains_key(*id))
            .map(|(i, r)| (i.clone(), r.clone()))
            .collect();
        let came: Vec<(String, String)> = reachable
            .iter()
            .filter(|(id, _)| !self.reachable.contains_key(*id))
            .map(|(i, r)| (i.clone(), r.clone()))
            .collect();
        for (id, region) in gone {
            self.event(
                "checker",
                format!("checker {id} ({region}) is unreachable: no fresh report"),
            );
        }
        for (id, region) in came {
            self.event("checker", format!("checker {id} ({region}) is reachable"));
        }
        self.reachable = reachable;
        let forced: HashMap<u32, bool> = self
            .operator
            .overrides
            .iter()
            .filter(|(_, o)| o.expires > t)
            .filter_map(|(key, o)| Some((self.slot(key)?, o.healthy)))
            .collect();
        let bitmap = evaluate(
            &self.snapshot.zones,
            &Inputs {
                measured: &|slot| external.get(&slot).copied(),
                forced: &|slot| forced.get(&slot).copied(),
                shifted: &|rrset, _, az| self.shifted(&name::to_text(rrset), az),
            },
        );
        let old = self.snapshot.bitmap.clone();
        let mut words = Vec::new();
        for (i, &word) in bitmap.iter().enumerate() {
            if old.get(i) != Some(&word) {
                words.push((i as u32, word));
            }
        }
        let mut transitions = Vec::new();
        for slot in 0..self.slot_keys.len() as u32 {
            let (was, is) = (slot_healthy(&old, slot), slot_healthy(&bitmap, slot));
            if was != is && !old.is_empty() {
                transitions.push((slot, is));
            }
        }
        self.counters.health_transitions += transitions.len() as u64;
        for (slot, is) in transitions {
            if let Some(at) = self.changed_at.get_mut(slot as usize) {
                *at = t;
            }
            let key = self.slot_key(slot).unwrap_or("?").to_owned();
            self.event(
                "health",
                format!("{key} is now {}", if is { "healthy" } else { "unhealthy" }),
            );
        }
        Arc::make_mut(&mut self.snapshot).bitmap = bitmap;
        self.update_fail_open();
        if words.is_empty() {
            return None;
        }
        self.seq += 1;
        Some(HealthDelta {
            snapshot: self.snapshot.version,
            seq: self.seq,
            words,
        })
    }

    fn update_fail_open(&mut self) {
        let mut now_failing = BTreeSet::new();
        for zone in &self.snapshot.zones {
            for set in &zone.rrsets {
                if fails_open(zone, set, &self.snapshot.bitmap) {
                    now_failing.insert(set_label(set));
                }
            }
        }
        let entered: Vec<String> = now_failing.difference(&self.failing_open).cloned().collect();
        let left: Vec<String> = self.failing_open.difference(&now_failing).cloned().collect();
        self.counters.fail_open_entered += entered.len() as u64;
        self.counters.fail_open_left += left.len() as u64;
        for label in entered {
            self.event(
                "fail-open",
                format!("{label} entered fail-open: no candidate is healthy, all are answered"),
            );
        }
        for label in left {
            self.event("fail-open", format!("{label} left fail-open"));
        }
        self.failing_open = now_failing;
    }

    /// Policy sets failing open now.
    #[must_use]
    pub fn failing_open(&self) -> &BTreeSet<String> {
        &self.failing_open
    }
}

/// True when `set`'s policy fails open under `bitmap` (never depends on the draw).
#[must_use]
pub fn fails_open(zone: &Zone, set: &RecordSet, bitmap: &[u64]) -> bool {
    let Some(policy) = &set.policy else { return false };
    let slots: Vec<u32> = policy.members.iter().map(|m| global(zone.slot_base, m.slot)).collect();
    match policy.kind {
        PolicyKind::Weighted => {
            let members: Vec<WeightedMember> = policy
                .members
                .iter()
                .zip(&slots)
                .map(|(m, &slot)| WeightedMember { slot, weight: m.weight })
                .collect();
            select_weighted(&members, bitmap, policy.fail_open_below_permille, 0).is_none_or(|c| c.fail_open)
        }
        PolicyKind::Failover => {
            select_failover(
                slots.first().copied().unwrap_or(u32::MAX),
                slots.get(1).copied(),
                bitmap,
            )
            .fail_open
        }
        PolicyKind::Multivalue => select_multivalue(&slots, bitmap, policy.fail_open_below_permille, 0).fail_open,
        PolicyKind::Zonal => select_zonal(&slots, bitmap).fail_open,
    }
}

/// Duration until `expires` (unix seconds), for display.
#[must_use]
pub fn remaining(expires: u64) -> Duration {
    Duration::from_secs(expires.saturating_sub(now()))
}
