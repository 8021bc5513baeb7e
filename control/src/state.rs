//! The control plane's state: the loaded zones, what operators set (overrides, external
//! check statuses, zonal shifts), the derived health bitmap, connected edges, and the
//! event timeline. Every change goes through [`State::recompute`], which re-evaluates
//! health (SPEC §3) and returns the delta to push to the edges.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::PathBuf,
    sync::Arc,
};

use qdns_abi::{
    health::slot_healthy,
    select::{select_chain, select_failover, select_latency, select_multivalue, select_weighted, select_zonal},
};
use qdns_link::protocol::HealthDelta;
use qdns_zone::{
    evaluate::{evaluate, global, Inputs},
    name, PolicyKind, RecordSet, SlotRule, Snapshot, Zone,
};

use crate::{
    clock::now,
    edge_registry::EdgeRegistry,
    observations::Observations,
    operator::{Ends, OperatorState},
    timeline::Timeline,
};

pub use crate::timeline::MAX_EVENTS;

pub use crate::timeline::Event;

pub use crate::edge_registry::EdgeInfo;

/// A check named to the control socket that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckKeyError {
    /// No check has that id or key.
    #[error("no health check {0:?}")]
    NotFound(String),
    /// The id is in several zones.
    #[error("health check id {given:?} is in several zones; name one of {keys}")]
    Ambiguous {
        /// The id given.
        given: String,
        /// The keys it could mean.
        keys: String,
    },
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
    /// Operator state that could not be saved.
    pub persist_failures: u64,
}

/// What control was started with and keeps: read by the recompute and the reload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Quorum share (SPEC §4).
    pub quorum: f64,
    /// Reject special-use check targets on reload.
    pub deny_special_use_targets: bool,
    /// Zone directory.
    pub zones_dir: PathBuf,
    /// The geolocation database geo sets are compiled from (`--geoip-db`).
    pub geoip_db: Option<PathBuf>,
    /// Where this control is: its location (`--location`: members whose `sites` do not
    /// name it are absent) and its own checkers' region (`--region`: the round trips
    /// latency steering reads are the ones they measure).
    pub site: Site,
}

/// Where a control is ([`Settings::site`]).
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// `--location`.
    pub location: String,
    /// `--region`.
    pub region: String,
}

/// What health is decided from besides the operator: the checkers' observations and
/// what steering learnt from them.
#[derive(Debug, Default)]
pub struct Observed {
    /// What the checkers said, and the quorum decisions made from it.
    pub observations: Observations,
    /// Smoothed round trips per check and checker region.
    pub round_trips: crate::round_trips::RoundTrips,
    /// Each latency set's choice.
    pub latency: crate::latency::Choices,
    /// The load figures checks read.
    pub loads: crate::shedding::Loads,
    /// The weighted sets that shed load, with their configured weights.
    pub shedding: crate::shedding::Shedding,
}

/// What operators set, and whether it is saved.
#[derive(Debug, Default)]
pub struct Operator {
    /// Overrides, external statuses, shifts.
    pub set: OperatorState,
    /// Changed without being saved (an expiry during a recompute).
    pub dirty: bool,
    /// Why the last save failed (none since one succeeded).
    pub save_error: Option<String>,
    /// The intent store's revision of the deployment's operator state in force (0:
    /// none taken from a store).
    pub revision: u64,
}

/// Revisions of the intent refused here that are kept (and told the deployment).
pub const INTENT_REFUSALS_KEPT: usize = 8;

/// What happened: the timeline and the counters behind the metrics.
#[derive(Debug, Default)]
pub struct Log {
    /// Timeline, newest last.
    pub events: Timeline,
    /// Who the request being handled came from (the control socket's peer), named
    /// beside the events it causes; `None` outside a request.
    pub actor: Option<String>,
    /// Counters for metrics.
    pub counters: Counters,
    /// Remote checkers' reports accepted and dropped.
    pub reports: crate::report::ReportStats,
    /// When the deployment's intent store last answered (Unix seconds; `--intent`).
    pub intent_heard_at: Option<u64>,
    /// Revisions of the intent refused here and why, newest last (a few).
    pub intent_refused: std::collections::VecDeque<(u64, String)>,
}

/// What the edges are sent, and who they are.
#[derive(Debug)]
pub struct Served {
    /// The current snapshot (its `bitmap` is kept current).
    pub snapshot: Arc<Snapshot>,
    /// Health deltas sent since the snapshot.
    pub seq: u64,
    /// Connected edges, and edge connections refused.
    pub edges: EdgeRegistry,
}

/// Everything control knows, in units each with a job of its own; the slot index is
/// the state's own, rebuilt with each snapshot.
pub struct State {
    /// What control was started with.
    pub settings: Settings,
    /// Observations and what steering learnt.
    pub observed: Observed,
    /// Operator input.
    pub operator: Operator,
    /// The timeline and the counters.
    pub log: Log,
    /// The snapshot, the health deltas and the edges.
    pub served: Served,
    /// Global slot → check key (`zone/name`).
    slot_keys: Vec<String>,
    /// Check key → global slot.
    slot_by_key: HashMap<String, u32>,
    /// Policy sets failing open now (`name TYPE`).
    failing_open: BTreeSet<String>,
    /// When each slot last changed (unix seconds).
    changed_at: Vec<u64>,
    /// Where the latency sets are: (zone, record set) indexes into the snapshot.
    latency_at: Vec<(usize, usize)>,
}

impl State {
    /// The intent store answered just now.
    pub fn intent_heard(&mut self) {
        self.log.intent_heard_at = Some(now());
    }

    /// Saves `state`'s operator state to `dir`, keeping count: a failure is counted
    /// (`qdns_control_persist_failures_total`), kept for `status` until a save succeeds,
    /// logged and put in the timeline (once per episode). The caller decides whether the
    /// change stands (see `handler::handle`).
    pub fn save_operator(&mut self, dir: &std::path::Path) -> Result<(), crate::persist::PersistError> {
        match crate::persist::save(dir, &self.operator.set.for_disk()) {
            Ok(()) => {
                if self.operator.save_error.take().is_some() {
                    self.event("persist", format!("operator state saved to {} again", dir.display()));
                }
                Ok(())
            }
            Err(source) => {
                let err = crate::persist::PersistError::Save {
                    dir: dir.to_path_buf(),
                    source,
                };
                let message = err.to_string();
                self.log.counters.persist_failures += 1;
                tracing::error!("{message}");
                if self.operator.save_error.is_none() {
                    self.event("persist", message.clone());
                }
                self.operator.save_error = Some(message);
                Err(err)
            }
        }
    }

    /// State for a freshly loaded `snapshot`.
    #[must_use]
    pub fn new(zones_dir: PathBuf, mut snapshot: Snapshot, operator: OperatorState) -> State {
        let shedding = crate::shedding::Shedding::install(&mut snapshot);
        let mut state = State {
            settings: Settings {
                quorum: DEFAULT_QUORUM,
                deny_special_use_targets: false,
                zones_dir,
                geoip_db: None,
                site: Site::default(),
            },
            observed: Observed {
                shedding,
                ..Observed::default()
            },
            operator: Operator {
                set: operator,
                ..Operator::default()
            },
            log: Log::default(),
            served: Served {
                snapshot: Arc::new(snapshot),
                seq: 0,
                edges: EdgeRegistry::default(),
            },
            slot_keys: Vec::new(),
            slot_by_key: HashMap::new(),
            failing_open: BTreeSet::new(),
            changed_at: Vec::new(),
            latency_at: Vec::new(),
        };
        state.index();
        let _ = state.recompute();
        state
    }

    fn index(&mut self) {
        self.slot_keys.clear();
        self.slot_by_key.clear();
        for zone in &self.served.snapshot.zones {
            let origin = name::to_text(&zone.origin);
            for slot in &zone.slots {
                let key = format!("{origin}/{}", slot.name);
                self.slot_by_key.insert(key.clone(), self.slot_keys.len() as u32);
                self.slot_keys.push(key);
            }
        }
        self.changed_at = vec![now(); self.slot_keys.len()];
        // Found once per snapshot: health is evaluated every second, and a zone may hold
        // a million sets of which a few are latency sets.
        self.latency_at.clear();
        for (z, zone) in self.served.snapshot.zones.iter().enumerate() {
            for (r, set) in zone.rrsets.iter().enumerate() {
                if set.policy.as_deref().is_some_and(|p| p.kind == PolicyKind::Latency) {
                    self.latency_at.push((z, r));
                }
            }
        }
    }

    /// Adds an event.
    pub fn event(&mut self, kind: &str, message: String) {
        let message = match &self.log.actor {
            Some(actor) => format!("{message} (by {actor})"),
            None => message,
        };
        self.log.events.push(now(), kind, message);
    }

    /// Installs a freshly loaded snapshot (a reload): its weighted sets shed the load
    /// measured now, then it replaces the current one.
    pub fn install_loaded(&mut self, mut snapshot: Snapshot) {
        self.observed.shedding = crate::shedding::Shedding::install(&mut snapshot);
        let _ = self
            .observed
            .shedding
            .apply(&mut snapshot, &self.observed.loads, crate::clock::monotonic());
        self.replace_snapshot(snapshot);
    }

    /// Replaces the snapshot with one of the same zones (signed again) or a freshly
    /// loaded one ([`State::install_loaded`]); health is re-evaluated for it.
    pub fn replace_snapshot(&mut self, snapshot: Snapshot) {
        self.served.snapshot = Arc::new(snapshot);
        self.served.seq = 0;
        self.index();
        self.forget_removed();
        self.failing_open.clear();
        let _ = self.recompute();
    }

    /// Forgets what was learnt about checks and latency sets the snapshot no longer has.
    fn forget_removed(&mut self) {
        let keys: BTreeSet<String> = self.slot_keys.iter().cloned().collect();
        self.observed.observations.retain_checks(|key| keys.contains(key));
        self.observed.round_trips.retain_checks(|key| keys.contains(key));
        self.observed.loads.retain_checks(|key| keys.contains(key));
        let sets: BTreeSet<crate::latency::SetKey> = self.latency_sets().into_iter().map(|s| s.key).collect();
        self.observed.latency.retain(|key| sets.contains(key));
    }

    /// The key of a check given as `ID` (unique across zones) or `ZONE/ID`.
    pub fn check_key(&self, given: &str) -> Result<String, CheckKeyError> {
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
            [] => Err(CheckKeyError::NotFound(given.to_owned())),
            many => Err(CheckKeyError::Ambiguous {
                given: given.to_owned(),
                keys: many.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
            }),
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
        self.served.snapshot.zones.iter().find_map(|z| {
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
        let mut expired = Vec::new();
        self.operator.set.overrides.retain(|key, o| {
            let keep = o.in_force();
            if !keep {
                expired.push(("override", format!("override of {key} expired")));
            }
            keep
        });
        for (rrset, azs) in &mut self.operator.set.shifts {
            azs.retain(|az, s| {
                let keep = s.in_force();
                if !keep {
                    expired.push(("shift", format!("shift of {rrset} away from {az} expired")));
                }
                keep
            });
        }
        self.operator.set.shifts.retain(|_, azs| !azs.is_empty());
        let any = !expired.is_empty();
        self.operator.dirty |= any;
        for (kind, message) in expired {
            self.event(kind, message);
        }
        any
    }

    /// True while AZ `az` of the set named `rrset` is shifted away.
    #[must_use]
    pub fn shifted(&self, rrset: &str, az: &str) -> bool {
        self.operator
            .set
            .shifts
            .get(rrset)
            .and_then(|azs| azs.get(az))
            .is_some_and(Ends::in_force)
    }

    /// The probed checks of the snapshot: (key, probe).
    #[must_use]
    pub fn probed_checks(&self) -> Vec<(String, qdns_zone::snapshot::Probe)> {
        let mut out = Vec::new();
        for zone in &self.served.snapshot.zones {
            let origin = name::to_text(&zone.origin);
            for slot in &zone.slots {
                if let SlotRule::Check { probe: Some(probe), .. } = &slot.rule {
                    out.push((format!("{origin}/{}", slot.name), probe.clone()));
                }
            }
        }
        out
    }

    /// Whether some checker's observation of every probed check came since start (a
    /// restarted control decides from what its checkers say now, not only from the
    /// decisions it kept).
    #[must_use]
    pub fn heard_every_probed_check(&self) -> bool {
        self.probed_checks()
            .iter()
            .all(|(key, _)| self.observed.observations.newest(key).is_some())
    }

    /// Records a checker's observation, made `age` seconds before it reached this
    /// process (measured on the clock that made it).
    pub fn observe(&mut self, observation: crate::checker::Observation, age: u64) {
        if !self.slot_by_key.contains_key(&observation.check) {
            return; // a check removed by a reload
        }
        if let Some(timing) = observation.timing.filter(|_| observation.success) {
            self.observed
                .round_trips
                .add(&observation.check, &observation.region, timing.round_trip_us());
        }
        if let Some(milli) = observation.load_milli.filter(|_| observation.success) {
            // Read now: the figure's age is the report's, a few seconds at most.
            self.observed.loads.add(
                &observation.check,
                &observation.checker,
                milli,
                crate::clock::monotonic().saturating_sub(age),
            );
        }
        self.observed
            .observations
            .record(observation, age, crate::clock::monotonic());
    }

    /// What steering has learnt, to save.
    #[must_use]
    pub fn steering(&self) -> crate::persist::Steering {
        crate::persist::Steering {
            saved_at: now(),
            round_trips: self.observed.round_trips.saved(),
            choices: self.observed.latency.saved(),
            loads: self.observed.loads.saved(crate::clock::monotonic()),
        }
    }

    /// Takes back what steering learnt before a restart, for the sets and checks this
    /// snapshot still has, and applies it: the latency choices and shed weights are
    /// what they were (call before any edge has the snapshot).
    pub fn restore_steering(&mut self, saved: crate::persist::Steering) {
        let down_for = now().saturating_sub(saved.saved_at);
        self.observed.round_trips.restore(saved.round_trips);
        self.observed
            .loads
            .restore(saved.loads, down_for, crate::clock::monotonic());
        self.forget_removed();
        let sets = self.latency_sets();
        let mut taken = Vec::new();
        for (key, member) in saved.choices {
            let Some(set) = sets.iter().find(|s| s.key == key) else {
                continue;
            };
            let Some(id) = set.ids.get(member as usize) else {
                continue;
            };
            self.event(
                "latency",
                format!("{}: answered by {id} as before the restart", set.label),
            );
            taken.push((key, member));
        }
        self.observed.latency.restore(taken);
        let _ = self.observed.shedding.apply(
            Arc::make_mut(&mut self.served.snapshot),
            &self.observed.loads,
            crate::clock::monotonic(),
        );
        let _ = self.recompute();
    }

    /// Moves weighted sets' weights to the load their checks read (at most every
    /// [`crate::shedding::MIN_INTERVAL_SECS`]); true when they moved — the snapshot is
    /// then a new version, to be sent whole.
    pub fn shed_load(&mut self) -> bool {
        let now = crate::clock::monotonic();
        // Checked first: `make_mut` copies the snapshot while another holder (a
        // re-signing under way) shares it, and this runs every second.
        if !self.observed.shedding.due(&self.observed.loads, now) {
            return false;
        }
        let moved = self
            .observed
            .shedding
            .apply(Arc::make_mut(&mut self.served.snapshot), &self.observed.loads, now);
        if moved.is_empty() {
            return false;
        }
        let version = crate::clock::next_version(self.served.snapshot.version);
        Arc::make_mut(&mut self.served.snapshot).version = version;
        self.served.seq = 0;
        for set in moved {
            self.event(
                "load",
                format!("{}: {} (snapshot {version})", set.label, set.members.join(", ")),
            );
        }
        true
    }

    /// `member`'s health slot (zone-local): its own slot, or for a latency set's member
    /// the check its choice slot reads.
    #[must_use]
    pub fn health_slot(zone: &qdns_zone::Zone, member: &qdns_zone::Member) -> u32 {
        match zone.slots.get(member.slot as usize).map(|s| &s.rule) {
            Some(SlotRule::Latency { member: i, health, .. }) => {
                health.get(*i as usize).copied().unwrap_or(member.slot)
            }
            _ => member.slot,
        }
    }

    /// The probed check behind `member` of `zone`, by key (`zone/name`).
    #[must_use]
    pub fn member_check(zone: &qdns_zone::Zone, member: &qdns_zone::Member) -> Option<String> {
        let slot = zone.slots.get(usize::try_from(Self::health_slot(zone, member)).ok()?)?;
        matches!(&slot.rule, SlotRule::Check { probe: Some(_), .. })
            .then(|| format!("{}/{}", name::to_text(&zone.origin), slot.name))
    }

    /// Every latency set with its members' health (under `bitmap`) and round trips.
    #[must_use]
    pub fn latency_sets(&self) -> Vec<LatencySet> {
        let mut out = Vec::with_capacity(self.latency_at.len());
        for &(z, r) in &self.latency_at {
            let Some(zone) = self.served.snapshot.zones.get(z) else {
                continue;
            };
            let Some(set) = zone.rrsets.get(r) else { continue };
            let Some(policy) = set.policy.as_deref().filter(|p| p.kind == PolicyKind::Latency) else {
                continue;
            };
            out.push(LatencySet {
                key: (set.name.clone(), set.rtype),
                label: qdns_zone::master::set_label(set),
                ids: policy.members.iter().map(|m| m.id.clone()).collect(),
                health: policy
                    .members
                    .iter()
                    .map(|m| global(zone.slot_base, Self::health_slot(zone, m)))
                    .collect(),
                rtts: policy
                    .members
                    .iter()
                    .map(|m| self.member_round_trip(zone, m).map(|t| t.smoothed))
                    .collect(),
            });
        }
        out
    }

    /// Moves each latency set's choice on under `bitmap`; true when one changed (the
    /// bitmap must be evaluated again). Each change is an event with the round trips.
    fn update_latency(&mut self, sets: &[LatencySet], bitmap: &[u64]) -> bool {
        let now = crate::clock::monotonic();
        let mut changed = false;
        for set in sets {
            let healthy: Vec<bool> = set.health.iter().map(|&s| slot_healthy(bitmap, s)).collect();
            let members = crate::latency::Members {
                healthy: &healthy,
                rtts: &set.rtts,
            };
            let Some(switch) = self.observed.latency.update(&set.key, &members, now) else {
                continue;
            };
            changed = true;
            let name = |m: Option<u32>| {
                m.and_then(|m| {
                    let id = set.ids.get(m as usize)?;
                    Some(match set.rtts.get(m as usize).copied().flatten() {
                        Some(rtt) => format!("{id} ({:.1} ms)", rtt.as_secs_f64() * 1000.0),
                        None => format!("{id} (not measured)"),
                    })
                })
                .unwrap_or_else(|| "none (fail-open)".to_owned())
            };
            self.event(
                "latency",
                format!(
                    "{}: now answered by {}, was {}: {}",
                    set.label,
                    name(switch.to),
                    name(switch.from),
                    switch.why
                ),
            );
        }
        changed
    }

    /// `member`'s smoothed round trip as this location's own checkers (its region)
    /// measure it.
    #[must_use]
    pub fn member_round_trip(
        &self,
        zone: &qdns_zone::Zone,
        member: &qdns_zone::Member,
    ) -> Option<crate::round_trips::RoundTrip> {
        self.observed
            .round_trips
            .get(&Self::member_check(zone, member)?, &self.settings.site.region)
    }

    /// The quorum view of probed check `key` with probe interval `interval` (SPEC §4,
    /// [`crate::quorum::decide`]) now.
    #[must_use]
    pub fn aggregate(&self, key: &str, interval: u32) -> Aggregate {
        self.observed
            .observations
            .aggregate(key, interval, self.settings.quorum, crate::clock::monotonic())
    }

    /// The latest report of each checker on probed check `key` (probe interval
    /// `interval`) that is still fresh.
    pub fn fresh_observations<'s>(
        &'s self,
        key: &str,
        interval: u32,
    ) -> impl Iterator<Item = &'s crate::checker::Observation> + 's {
        self.observed
            .observations
            .fresh(key, interval, crate::clock::monotonic())
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
        self.observed.observations.reachable()
    }

    /// Re-evaluates health; records transitions and fail-open changes as events, and
    /// returns the delta for the edges (if any word changed).
    pub fn recompute(&mut self) -> Option<HealthDelta> {
        // What has expired ends here, with its event, before health is evaluated.
        self.expire();
        let t = now();
        let external = self.measured();
        let forced: HashMap<u32, bool> = self
            .operator
            .set
            .overrides
            .iter()
            .filter(|(_, o)| o.in_force())
            .filter_map(|(key, o)| Some((self.slot(key)?, o.healthy)))
            .collect();
        let sets = self.latency_sets();
        let evaluate_now = |state: &State| {
            let rtts: HashMap<&crate::latency::SetKey, &[Option<std::time::Duration>]> =
                sets.iter().map(|s| (&s.key, &s.rtts[..])).collect();
            evaluate(
                &state.served.snapshot.zones,
                &Inputs {
                    measured: &|slot| external.get(&slot).copied(),
                    forced: &|slot| forced.get(&slot).copied(),
                    shifted: &|rrset, _, az| state.shifted(&name::to_text(rrset), az),
                    latency: &|rrset, rtype, healthy| {
                        let key = (rrset.to_vec(), rtype);
                        let rtts = rtts.get(&key).copied().unwrap_or(&[]);
                        state
                            .observed
                            .latency
                            .choose(&key, &crate::latency::Members { healthy, rtts })
                    },
                },
            )
        };
        let mut bitmap = evaluate_now(self);
        if self.update_latency(&sets, &bitmap) {
            bitmap = evaluate_now(self);
        }
        let old = self.served.snapshot.bitmap.clone();
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
        self.log.counters.health_transitions += transitions.len() as u64;
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
        Arc::make_mut(&mut self.served.snapshot).bitmap = bitmap;
        self.update_fail_open();
        if words.is_empty() {
            return None;
        }
        self.served.seq += 1;
        Some(HealthDelta {
            snapshot: self.served.snapshot.version,
            seq: self.served.seq,
            words,
        })
    }

    /// Each check's measured health: an external check's status as set, a probed
    /// one's quorum decision over the reachable checkers (checkers coming and going are
    /// events).
    fn measured(&mut self) -> HashMap<u32, bool> {
        let mut external: HashMap<u32, bool> = self
            .operator
            .set
            .externals
            .iter()
            .filter_map(|(key, e)| Some((self.slot(key)?, e.healthy)))
            .collect();
        // Probed checks: the quorum decision over reachable checkers.
        let probed: Vec<(String, u32)> = self
            .probed_checks()
            .into_iter()
            .map(|(key, probe)| (key, probe.interval))
            .collect();
        let (decided, gone, came) =
            self.observed
                .observations
                .evaluate(&probed, self.settings.quorum, crate::clock::monotonic());
        for (key, healthy) in decided {
            if let Some(slot) = self.slot(&key) {
                external.insert(slot, healthy);
            }
        }
        for (id, region) in gone {
            self.event(
                "checker",
                format!("checker {id} ({region}) is unreachable: no fresh report"),
            );
        }
        for (id, region) in came {
            self.event("checker", format!("checker {id} ({region}) is reachable"));
        }
        external
    }

    fn update_fail_open(&mut self) {
        let mut now_failing = BTreeSet::new();
        for zone in &self.served.snapshot.zones {
            for set in &zone.rrsets {
                if fails_open(zone, set, &self.served.snapshot.bitmap) {
                    now_failing.insert(qdns_zone::master::set_label(set));
                }
            }
        }
        let entered: Vec<String> = now_failing.difference(&self.failing_open).cloned().collect();
        let left: Vec<String> = self.failing_open.difference(&now_failing).cloned().collect();
        self.log.counters.fail_open_entered += entered.len() as u64;
        self.log.counters.fail_open_left += left.len() as u64;
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

/// A latency set as control steers it.
#[derive(Debug, Clone)]
pub struct LatencySet {
    /// Owner (wire) and type.
    pub key: crate::latency::SetKey,
    /// `name TYPE`.
    pub label: String,
    /// Member ids, in order.
    pub ids: Vec<String>,
    /// Each member's health slot (global).
    pub health: Vec<u32>,
    /// Each member's smoothed round trip from this location's region.
    pub rtts: Vec<Option<std::time::Duration>>,
}

/// True when `set`'s policy fails open under `bitmap` (never depends on the draw).
#[must_use]
pub fn fails_open(zone: &Zone, set: &RecordSet, bitmap: &[u64]) -> bool {
    let Some(policy) = &set.policy else { return false };
    let slots: Vec<u32> = policy.members.iter().map(|m| global(zone.slot_base, m.slot)).collect();
    match policy.kind {
        PolicyKind::Weighted => {
            let members = qdns_zone::evaluate::weighted_members(zone.slot_base, policy);
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
        PolicyKind::Latency => select_latency(&slots, bitmap).is_none_or(|c| c.fail_open),
        // Some clients get a fail-open answer: a chain with no healthy member.
        PolicyKind::Ip | PolicyKind::Geo => policy.client.as_deref().is_some_and(|rules| {
            rules
                .chains
                .iter()
                .any(|chain| select_chain(chain, &slots, bitmap).is_some_and(|c| c.fail_open))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Override, Shift};

    #[test]
    fn ends_follow_the_monotonic_clock_and_are_persisted_on_the_wall_clock() {
        let mut operator = OperatorState::default();
        operator.overrides.insert("z./c".into(), Override::new(false, 600));
        operator
            .shifts
            .entry("www.z.".into())
            .or_default()
            .insert("az1".into(), Shift::new(300, None));
        let o = &operator.overrides["z./c"];
        assert!(o.in_force() && (599..=600).contains(&o.ends_in()));
        // A wall-clock step is simulated by a persisted end an hour off: while this
        // process runs, the armed monotonic deadline decides.
        let mut stepped = operator.clone();
        stepped.overrides.get_mut("z./c").unwrap().expires -= 3600;
        assert!(stepped.overrides["z./c"].in_force(), "a step back does not end it");
        // Written to disk, the end is re-expressed on the wall clock of the moment, and
        // read back (armed) it ends as far from now as it did.
        let text = serde_json::to_string(&stepped.for_disk()).unwrap();
        let mut back: OperatorState = serde_json::from_str(&text).unwrap();
        back.arm();
        assert!((599..=600).contains(&back.overrides["z./c"].ends_in()));
        assert!((299..=300).contains(&back.shifts["www.z."]["az1"].ends_in()));
        // Without an armed deadline (never in a running process) the wall time decides.
        let mut unarmed: OperatorState = serde_json::from_str(&text).unwrap();
        unarmed.overrides.get_mut("z./c").unwrap().expires = now() - 1;
        assert!(!unarmed.overrides["z./c"].in_force());
    }
}
