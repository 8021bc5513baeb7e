//! What each control of a location tells its deployment about itself (SPEC §11,
//! "Changes and sync"): `PREFIX/location/NAME/CONTROL`, the revisions of the intent it
//! applied and those every one of its edges answers by, the revisions it refused and
//! why, and when it last wrote; and `PREFIX/alive/NAME/CONTROL`, held on a lease of 3 ×
//! the store's keepalive, gone when the store stops hearing from that control. A
//! location with several controls (issue 54) has a record of each. `qdnsctl change` and
//! `qdnsctl fleet` read them. Written when something in them changes (checked each
//! second) and at least every [`REWRITE`]; nothing here ever waits on the store but
//! this task.
use std::{collections::VecDeque, sync::Arc, time::Duration};

use qdns_intent::{records::Lease, store::Store, IntentError};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{ctx::Ctx, deployed::Deployment, deployed::STORE_TIMEOUT};

/// The lease of `alive/NAME`: 3 × the store's keepalive (10 s).
pub const LEASE_TTL: i64 = 30;

/// Longest time between two writes of the record.
const REWRITE: Duration = Duration::from_secs(10);

/// Where the records are under PREFIX.
pub const LOCATIONS: &str = "location";
/// Where the liveness keys are under PREFIX.
pub const ALIVE: &str = "alive";

/// A location as it tells the deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Its name (`--location`).
    pub location: String,
    /// The control that wrote it (`--checker-id`, default the host name).
    pub control: String,
    /// The revision of the published files in force at control.
    pub applied: u64,
    /// The revision of the operator state in force at control.
    pub operator: u64,
    /// What every connected edge answers by (control's own with no edge).
    pub serving: Serving,
    /// Each connected edge.
    pub edges: Vec<EdgeRecord>,
    /// Revisions refused here, newest last (at most
    /// [`crate::state::INTENT_REFUSALS_KEPT`]).
    pub refused: Vec<Refusal>,
    /// Unix seconds of this write.
    pub contact: u64,
}

/// The revisions an edge answers by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serving {
    /// Of the published files.
    pub applied: u64,
    /// Of the operator state.
    pub operator: u64,
}

/// A connected edge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// Its name.
    pub name: String,
    /// What it answers by.
    pub serving: Serving,
}

/// A revision refused at a location.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The revision.
    pub revision: u64,
    /// Why.
    pub why: String,
}

/// Where control's pushes put a revision: from snapshot `version`, health delta `seq`
/// on, the edges were sent state made from `serving`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    version: u64,
    seq: u64,
    serving: Serving,
}

/// Marks kept: an edge further behind than the oldest counts as serving nothing.
const MARKS_KEPT: usize = 256;

/// The revisions an edge that acknowledged snapshot `version` and delta `seq` answers
/// by: those of the last mark at or before it.
fn served_by(marks: &VecDeque<Mark>, version: Option<u64>, seq: u64) -> Serving {
    let Some(version) = version else {
        return Serving::default();
    };
    marks
        .iter()
        .rev()
        .find(|m| (m.version, m.seq) <= (version, seq))
        .map_or_else(Serving::default, |m| m.serving)
}

/// The record as the state says now; a new mark when control's revisions moved.
fn record(ctx_state: &crate::state::State, marks: &mut VecDeque<Mark>, location: &str, control: &str) -> Record {
    let here = Serving {
        applied: ctx_state.served.snapshot.intent_revision,
        operator: ctx_state.operator.revision,
    };
    if marks.back().is_none_or(|m| m.serving != here) {
        if marks.len() == MARKS_KEPT {
            marks.pop_front();
        }
        marks.push_back(Mark {
            version: ctx_state.served.snapshot.version,
            seq: ctx_state.served.seq,
            serving: here,
        });
    }
    let edges: Vec<EdgeRecord> = ctx_state
        .served
        .edges
        .connected()
        .map(|edge| EdgeRecord {
            name: edge.name.clone(),
            serving: served_by(marks, edge.snapshot, edge.seq),
        })
        .collect();
    let serving = Serving {
        applied: edges.iter().map(|e| e.serving.applied).min().unwrap_or(here.applied),
        operator: edges.iter().map(|e| e.serving.operator).min().unwrap_or(here.operator),
    };
    Record {
        location: location.to_owned(),
        control: control.to_owned(),
        applied: here.applied,
        operator: here.operator,
        serving,
        edges,
        refused: ctx_state
            .log
            .intent_refused
            .iter()
            .map(|(revision, why)| Refusal {
                revision: *revision,
                why: why.clone(),
            })
            .collect(),
        contact: 0,
    }
}

/// Keeps this location's record and liveness in the store until `shutdown`,
/// reconnecting with backoff when the store is lost.
pub async fn run(ctx: Ctx, deployment: Arc<Deployment>, control: String, shutdown: CancellationToken) {
    let mut marks = VecDeque::new();
    let mut backoff = Duration::from_millis(500);
    loop {
        let ended = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = session(&ctx, &deployment, &control, &mut marks, &mut backoff) => ended,
        };
        if let Err(err) = ended {
            tracing::debug!(%err, "cannot tell the deployment how this location is");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

async fn session(
    ctx: &Ctx,
    deployment: &Deployment,
    control: &str,
    marks: &mut VecDeque<Mark>,
    backoff: &mut Duration,
) -> Result<(), IntentError> {
    let location = &deployment.location;
    let key = record_key(location, control);
    let mut store = Store::connect(&deployment.source.url, &deployment.source.tls, STORE_TIMEOUT).await?;
    let mut lease: Lease = store.lease(LEASE_TTL).await?;
    store
        .put_leased(&format!("{ALIVE}/{key}"), control.as_bytes().to_vec(), &lease)
        .await?;
    // Heard from again: the next loss starts its backoff afresh.
    *backoff = Duration::from_millis(500);
    let mut written: Option<(Record, tokio::time::Instant)> = None;
    let mut renewed = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = record(&*ctx.state.lock().await, marks, location, control);
        let due = written
            .as_ref()
            .is_none_or(|(last, at)| *last != now || at.elapsed() >= REWRITE);
        if due {
            let mut stamped = now.clone();
            stamped.contact = crate::clock::now();
            let body = serde_json::to_vec(&stamped).unwrap_or_default();
            tokio::time::timeout(STORE_TIMEOUT, store.put(&format!("{LOCATIONS}/{key}"), body))
                .await
                .map_err(|_| timed_out(&store))??;
            written = Some((now, tokio::time::Instant::now()));
        }
        if renewed.elapsed() >= Duration::from_secs(10) {
            tokio::time::timeout(STORE_TIMEOUT, lease.renew())
                .await
                .map_err(|_| timed_out(&store))??;
            renewed = tokio::time::Instant::now();
        }
    }
}

/// `NAME/CONTROL`: where under `location/` and `alive/` the control `control` of
/// location `location` keeps its record (a `/` in the control's name made `_`).
#[must_use]
pub fn record_key(location: &str, control: &str) -> String {
    format!("{location}/{}", control.replace('/', "_"))
}

fn timed_out(store: &Store) -> IntentError {
    IntentError::Store {
        endpoints: store.members(),
        reason: format!("no answer within {}s", STORE_TIMEOUT.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_answers_by_the_last_mark_it_acknowledged() {
        let serving = |applied, operator| Serving { applied, operator };
        let marks: VecDeque<Mark> = [
            Mark {
                version: 10,
                seq: 0,
                serving: serving(5, 0),
            },
            Mark {
                version: 10,
                seq: 3,
                serving: serving(5, 7),
            },
            Mark {
                version: 12,
                seq: 0,
                serving: serving(9, 7),
            },
        ]
        .into();
        assert_eq!(served_by(&marks, None, 0), Serving::default());
        assert_eq!(served_by(&marks, Some(9), 9), Serving::default());
        assert_eq!(served_by(&marks, Some(10), 2), serving(5, 0));
        assert_eq!(served_by(&marks, Some(10), 3), serving(5, 7));
        assert_eq!(served_by(&marks, Some(11), 0), serving(5, 7));
        assert_eq!(served_by(&marks, Some(12), 1), serving(9, 7));
    }
}
