//! The operator state of a deployment (SPEC §11, "Operator changes in a deployment"):
//! one value in the intent store, `PREFIX/operator`, holding what is set for every
//! location and what is set for one location only (`--only-location NAME`).
//!
//! A change given to any location's control is made on the value as read and written
//! back by compare-and-swap before the command answers (`crate::handler`); every
//! location watches the value and installs its part (`crate::intent`). The ends of
//! overrides and shifts are wall times in the store — the same for the whole
//! deployment — armed on each location's monotonic clock when installed there.
use std::collections::BTreeMap;

use qdns_intent::{store::Store, IntentError};
use serde::{Deserialize, Serialize};

use crate::{
    operator::{Ends as _, OperatorState},
    state::State,
};

/// How long a request to the store may take before it counts as unreachable.
pub const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The value's name under the deployment's prefix.
pub const KEY: &str = "operator";

/// Where this location's control finds the deployment, and its name in it.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The store.
    pub source: qdns_intent::Source,
    /// This location (`--location`).
    pub location: String,
}

/// What the operators of a deployment set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployed {
    /// In force at every location.
    #[serde(default)]
    pub all: OperatorState,
    /// In force at one location only, by location; over `all` where both set a thing.
    #[serde(default)]
    pub at: BTreeMap<String, OperatorState>,
    /// The write that made this value.
    #[serde(default)]
    pub last: Last,
}

/// Who wrote the value last and what they changed, as the timeline says it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Last {
    /// The location whose control wrote it.
    pub location: String,
    /// The operator (the control socket's peer), when known.
    #[serde(default)]
    pub actor: Option<String>,
    /// The changes.
    #[serde(default)]
    pub made: Vec<String>,
}

/// A thing an operator sets: two changes made at once are compared by it (the second
/// to reach the store is refused if the first changed the same thing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thing {
    /// The override of a check.
    Override(String),
    /// The status of an external check.
    External(String),
    /// A shift away from an AZ (record set, AZ).
    Shift(String, String),
}

impl std::fmt::Display for Thing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Thing::Override(key) => write!(f, "the override of {key}"),
            Thing::External(key) => write!(f, "the status of {key}"),
            Thing::Shift(rrset, az) => write!(f, "the shift of {rrset} away from {az}"),
        }
    }
}

impl Deployed {
    /// The value as stored.
    ///
    /// # Errors
    /// It does not read.
    pub fn decode(data: &[u8]) -> Result<Deployed, String> {
        serde_json::from_slice(data).map_err(|e| format!("the operator state in the store does not read: {e}"))
    }

    /// The value to store: ended overrides and shifts left out, every end on today's
    /// wall clock.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.clone();
        out.all = in_force(&self.all);
        out.at = self
            .at
            .iter()
            .map(|(location, set)| (location.clone(), in_force(set)))
            .filter(|(_, set)| *set != OperatorState::default())
            .collect();
        serde_json::to_vec(&out).unwrap_or_default()
    }

    /// What is in force at `location`: every location's, then its own over them; the
    /// ends armed on this process's clock.
    #[must_use]
    pub fn for_location(&self, location: &str) -> OperatorState {
        let mut out = self.all.clone();
        if let Some(own) = self.at.get(location) {
            out.overrides.extend(own.overrides.clone());
            out.externals.extend(own.externals.clone());
            for (rrset, azs) in &own.shifts {
                out.shifts.entry(rrset.clone()).or_default().extend(azs.clone());
            }
        }
        out.arm();
        out
    }

    /// The part a change scoped to `only` (a location) or to all (`None`) is made in.
    pub fn part(&mut self, only: Option<&str>) -> &mut OperatorState {
        match only {
            Some(location) => self.at.entry(location.to_owned()).or_default(),
            None => &mut self.all,
        }
    }

    /// `thing` in the part `only`, as stored (to compare two values by).
    #[must_use]
    pub fn get(&self, only: Option<&str>, thing: &Thing) -> Option<String> {
        let part = match only {
            Some(location) => self.at.get(location)?,
            None => &self.all,
        };
        let found = match thing {
            Thing::Override(key) => part.overrides.get(key).map(serde_json::to_string),
            Thing::External(key) => part.externals.get(key).map(serde_json::to_string),
            Thing::Shift(rrset, az) => part
                .shifts
                .get(rrset)
                .and_then(|azs| azs.get(az))
                .map(serde_json::to_string),
        };
        found.and_then(Result::ok)
    }
}

/// `set` without what has ended, its ends on today's wall clock.
fn in_force(set: &OperatorState) -> OperatorState {
    let mut out = set.for_disk();
    out.overrides.retain(|_, o| o.in_force());
    for azs in out.shifts.values_mut() {
        azs.retain(|_, shift| shift.in_force());
    }
    out.shifts.retain(|_, azs| !azs.is_empty());
    out
}

/// The value in the store and the store revision that wrote it (`None`: never written).
///
/// # Errors
/// The store unreachable, or a value that does not read.
pub async fn read(store: &mut Store) -> Result<(Option<u64>, Deployed), IntentError> {
    match store.value(KEY).await?.1 {
        None => Ok((None, Deployed::default())),
        Some(value) => Deployed::decode(&value.data)
            .map(|deployed| (Some(value.revision), deployed))
            .map_err(|reason| IntentError::Damaged {
                revision: value.revision,
                reason,
            }),
    }
}

/// Installs `deployed` (written at store revision `revision`) at `location`, unless a
/// later one is in force: true when installed (the caller pushes health and saves).
pub fn install(state: &mut State, location: &str, revision: u64, deployed: &Deployed) -> bool {
    if revision <= state.operator.revision {
        return false;
    }
    state.operator.set = deployed.for_location(location);
    state.operator.revision = revision;
    state.operator.dirty = true;
    true
}
