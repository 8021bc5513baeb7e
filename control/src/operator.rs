//! What operators set for a while and what survives their restarts (SPEC §5): overrides
//! of checks, the status of `external` checks, zonal shifts — each end kept on both
//! clocks ([`Ends`]).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::now;

/// A forced status with an expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The forced status.
    pub healthy: bool,
    /// Unix seconds when it ends (persisted and shown; see [`Override::ends_in`]).
    pub expires: u64,
    /// Unix seconds when it was set.
    pub set_at: u64,
    /// When it ends on this process's monotonic clock.
    #[serde(skip)]
    deadline: Option<u64>,
}

/// What an operator sets for a while (an override, a shift): its end is persisted as a
/// wall time and, in this process, armed as a monotonic deadline. While the process
/// runs the monotonic clock decides, so stepping the wall clock neither ends nor
/// prolongs it ([`crate::clock`]); the wall time is what a restarted process reads back.
pub trait Ends {
    /// Unix seconds when it ends, as persisted.
    fn expires(&self) -> u64;
    /// When it ends on this process's monotonic clock, once armed.
    fn deadline(&self) -> Option<u64>;

    /// Seconds until it ends (0: ended).
    fn ends_in(&self) -> u64 {
        match self.deadline() {
            Some(deadline) => deadline.saturating_sub(crate::clock::monotonic()),
            None => self.expires().saturating_sub(now()),
        }
    }

    /// Still in force.
    fn in_force(&self) -> bool {
        self.ends_in() > 0
    }
}

impl Ends for Override {
    fn expires(&self) -> u64 {
        self.expires
    }
    fn deadline(&self) -> Option<u64> {
        self.deadline
    }
}

impl Ends for Shift {
    fn expires(&self) -> u64 {
        self.expires
    }
    fn deadline(&self) -> Option<u64> {
        self.deadline
    }
}

impl Override {
    /// Forced `healthy` from now for `secs` seconds.
    #[must_use]
    pub fn new(healthy: bool, secs: u64) -> Override {
        let t = now();
        Override {
            healthy,
            expires: t.saturating_add(secs),
            set_at: t,
            deadline: Some(crate::clock::monotonic().saturating_add(secs)),
        }
    }
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
    /// Unix seconds when it ends (persisted and shown; see [`Shift::ends_in`]).
    pub expires: u64,
    /// Unix seconds when it started.
    pub started: u64,
    /// Free text.
    pub comment: Option<String>,
    /// When it ends on this process's monotonic clock.
    #[serde(skip)]
    deadline: Option<u64>,
}

impl Shift {
    /// A shift from now for `secs` seconds.
    #[must_use]
    pub fn new(secs: u64, comment: Option<String>) -> Shift {
        let mut shift = Shift {
            expires: 0,
            started: now(),
            comment,
            deadline: None,
        };
        shift.end_in(secs);
        shift
    }

    /// Makes it end `secs` seconds from now.
    pub fn end_in(&mut self, secs: u64) {
        self.expires = now().saturating_add(secs);
        self.deadline = Some(crate::clock::monotonic().saturating_add(secs));
    }
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

impl OperatorState {
    /// Arms the monotonic deadlines of state read back from disk: each override and
    /// shift ends as far from now as its persisted wall time says.
    pub fn arm(&mut self) {
        let (wall, mono) = (now(), crate::clock::monotonic());
        for o in self.overrides.values_mut() {
            o.deadline = Some(mono.saturating_add(o.expires.saturating_sub(wall)));
        }
        for shift in self.shifts.values_mut().flat_map(BTreeMap::values_mut) {
            shift.deadline = Some(mono.saturating_add(shift.expires.saturating_sub(wall)));
        }
    }

    /// The state as it is to be persisted: every end re-expressed on today's wall clock
    /// (a wall-clock step since it was set does not move it when read back).
    #[must_use]
    pub fn for_disk(&self) -> OperatorState {
        let mut out = self.clone();
        let wall = now();
        for o in out.overrides.values_mut() {
            o.expires = wall.saturating_add(o.ends_in());
        }
        for shift in out.shifts.values_mut().flat_map(BTreeMap::values_mut) {
            shift.expires = wall.saturating_add(shift.ends_in());
        }
        out
    }
}
