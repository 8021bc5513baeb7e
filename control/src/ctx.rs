//! What control's tasks share: the state, the channels to the edges and the checker,
//! and where things are kept; and pushing a changed state to the edges.
use std::{path::PathBuf, sync::Arc};

use qdns_link::protocol::ToEdge;
use tokio::sync::{broadcast, Mutex};

use crate::{
    api::{ApiError, ErrorCode},
    edge_registry::{HealthUpdate, SnapshotUpdate, Update},
    state::State,
};

/// What control's tasks work with.
#[derive(Clone)]
pub struct Ctx {
    /// The embedded checker, when it runs.
    pub checker: Option<Arc<std::sync::Mutex<crate::checker::Checker>>>,
    /// Root shutdown token (checker tasks hang off it).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The state.
    pub state: Arc<Mutex<State>>,
    /// What goes to the edges.
    pub updates: broadcast::Sender<Update>,
    /// The location's cookie secrets (sent to each edge that takes them, again at each
    /// rotation).
    pub cookies: Arc<tokio::sync::watch::Sender<crate::cookies::Secrets>>,
    /// Where operator state is saved.
    pub state_dir: PathBuf,
    /// How long signatures last, and when they are made again.
    pub lifetimes: crate::dnssec::Lifetimes,
    /// Zone transfer out: the served zones, the TSIG keys, the counters.
    pub transfers: Arc<crate::transfer::Transfers>,
    /// The deployment this location is part of (`--intent`): operator changes go to its
    /// store.
    pub deployment: Option<Arc<crate::deployed::Deployment>>,
}

impl Ctx {
    /// What a new edge connection is fed.
    #[must_use]
    pub fn feeds(&self) -> crate::edges::Feeds {
        crate::edges::Feeds {
            updates: self.updates.clone(),
            cookies: self.cookies.subscribe(),
        }
    }

    /// Recomputes health and pushes a delta if anything changed.
    pub fn push_health(&self, state: &mut State) {
        if let Some(delta) = state.recompute() {
            let (version, seq, words) = (delta.snapshot, delta.seq, Arc::new(delta.words.clone()));
            match qdns_link::protocol::encode(&ToEdge::Health(delta)) {
                Ok(frame) => {
                    let frame = Arc::new(frame);
                    let _ = self.updates.send(Update::Health(HealthUpdate {
                        version,
                        seq,
                        frame,
                        words,
                    }));
                }
                Err(err) => tracing::error!(%err, "cannot encode a health delta"),
            }
        }
        let before = Arc::clone(&state.served.snapshot);
        if state.shed_load() {
            self.push_snapshot(state, &before);
        }
    }

    /// Pushes the state's snapshot, which replaced `before`: the changes from `before`
    /// (per zone, per record set) to every edge that takes deltas and serves it, the
    /// whole snapshot to the others.
    pub fn push_snapshot(&self, state: &mut State, before: &qdns_zone::Snapshot) {
        state.served.edges.retire_frame(state.served.snapshot.version);
        let digests = state.served.edges.zone_digests(&state.served.snapshot);
        let delta = qdns_link::delta::between(before, &state.served.snapshot, &digests, state.served.seq);
        let delta = match qdns_link::protocol::encode(&ToEdge::Delta(Box::new(delta))) {
            Ok(frame) => Some(Arc::new(frame)),
            Err(err) => {
                tracing::error!(%err, "cannot encode a snapshot delta; edges get the whole snapshot");
                None
            }
        };
        let _ = self.updates.send(Update::Snapshot(SnapshotUpdate {
            base: before.version,
            version: state.served.snapshot.version,
            seq: state.served.seq,
            delta,
        }));
    }

    /// Points the embedded checker at the snapshot's probed checks.
    pub fn update_checker(&self, state: &State) {
        if let Some(checker) = &self.checker {
            if let Ok(mut checker) = checker.lock() {
                checker.set_checks(state.probed_checks(), &self.shutdown);
            }
        }
    }

    /// The zone keys under the state dir.
    pub(crate) fn key_store(&self) -> crate::dnssec::KeyStore {
        crate::dnssec::KeyStore::new(&self.state_dir, self.lifetimes).deployed(self.deployment.is_some())
    }

    pub(crate) fn save(&self, state: &mut State) -> Result<(), ApiError> {
        state
            .save_operator(&self.state_dir)
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))
    }
}
