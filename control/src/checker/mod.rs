//! The embedded checker (SPEC §4): probes every HTTP/HTTPS/TCP check of the loaded zones
//! and reports each result, with its reason, to the location's state.
//!
//! One tokio task per check on the shared runtime (no thread per check); each waits a
//! random part of its interval first, so checks do not synchronise, then probes every
//! `interval` seconds. Per-check [`tracker::Tracker`]s apply `failure_threshold` in both
//! directions and survive reloads while a check's probe settings are unchanged.
pub mod probe;
pub mod tracker;

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex},
    time::Duration,
};

use qdns_zone::snapshot::Probe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::now;

/// One probe result of one checker.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    /// Check key (`zone/id`).
    pub check: String,
    /// The checker's status for the check after this result (thresholds applied).
    pub healthy: bool,
    /// This probe succeeded.
    pub success: bool,
    /// Why it failed (`ok` when it did not).
    pub reason: String,
    /// Unix seconds.
    pub at: u64,
    /// Checker id.
    pub checker: String,
    /// Checker region.
    pub region: String,
    /// How long the probe took, when it succeeded. Not in the observation's own wire
    /// form (older locations read that): reports carry it in their extension
    /// (`crate::report`).
    #[serde(skip)]
    pub timing: Option<probe::Timing>,
    /// The load figure the probe read (thousandths), for load shedding. Carried like
    /// `timing`.
    #[serde(skip)]
    pub load_milli: Option<u32>,
}

/// Identity of a checker.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Checker id.
    pub id: String,
    /// Region.
    pub region: String,
    /// Local address probes are sent from (`None`: the kernel's choice).
    pub source: Option<std::net::IpAddr>,
}

/// Why a checker could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckerError {
    /// The TLS connectors for HTTPS checks could not be made.
    #[error("cannot set up TLS for HTTPS checks: {0}")]
    Tls(#[from] probe::TlsError),
}

/// Runs probes for a set of checks until cancelled; restart with a new set on reload.
pub struct Checker {
    identity: Identity,
    tls: probe::Tls,
    trackers: Arc<Mutex<HashMap<String, (Probe, tracker::Tracker)>>>,
    generation: Option<CancellationToken>,
    observations: mpsc::Sender<Observation>,
}

impl Checker {
    /// A checker sending observations to `observations`; `tls_ca` adds trusted roots
    /// for checks with `tls_verify`.
    pub fn new(
        identity: Identity,
        observations: mpsc::Sender<Observation>,
        tls_ca: Option<&std::path::Path>,
    ) -> Result<Checker, CheckerError> {
        let tls = probe::Tls::new(tls_ca)?;
        Ok(Checker {
            identity,
            tls,
            trackers: Arc::default(),
            generation: None,
            observations,
        })
    }

    /// Probes exactly `checks` from now on (stopping checks no longer present).
    pub fn set_checks(&mut self, checks: Vec<(String, Probe)>, shutdown: &CancellationToken) {
        if let Some(old) = self.generation.take() {
            old.cancel();
        }
        let generation = shutdown.child_token();
        if let Ok(mut trackers) = self.trackers.lock() {
            trackers.retain(|key, (probe, _)| checks.iter().any(|(k, p)| k == key && p == probe));
        }
        let seed = RandomState::new();
        for (key, probe) in checks {
            let interval = Duration::from_secs(u64::from(probe.interval.max(1)));
            let jitter = Duration::from_millis(seed.hash_one(&key) % (interval.as_millis().max(1) as u64));
            tokio::spawn(run_check(
                key,
                probe,
                interval,
                jitter,
                self.identity.clone(),
                self.tls.clone(),
                Arc::clone(&self.trackers),
                self.observations.clone(),
                generation.clone(),
            ));
        }
        self.generation = Some(generation);
    }
}

#[expect(clippy::too_many_arguments, reason = "a task's whole context, passed once at spawn")]
async fn run_check(
    key: String,
    probe: Probe,
    interval: Duration,
    jitter: Duration,
    identity: Identity,
    tls: probe::Tls,
    trackers: Arc<Mutex<HashMap<String, (Probe, tracker::Tracker)>>>,
    observations: mpsc::Sender<Observation>,
    stop: CancellationToken,
) {
    tokio::select! {
        () = stop.cancelled() => return,
        () = tokio::time::sleep(jitter) => {}
    }
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let result = tokio::select! {
            () = stop.cancelled() => return,
            result = probe::probe(&probe, &tls, identity.source) => result,
        };
        let healthy = {
            let Ok(mut map) = trackers.lock() else { return };
            let entry = map
                .entry(key.clone())
                .or_insert_with(|| (probe.clone(), tracker::Tracker::new(probe.failure_threshold)));
            entry.1.record(result.is_ok());
            entry.1.healthy()
        };
        let observation = Observation {
            check: key.clone(),
            healthy,
            success: result.is_ok(),
            reason: result
                .as_ref()
                .err()
                .map_or_else(|| "ok".to_owned(), ToString::to_string),
            at: now(),
            checker: identity.id.clone(),
            region: identity.region.clone(),
            timing: result.as_ref().ok().map(|r| r.timing),
            load_milli: result.as_ref().ok().and_then(|r| r.load_milli),
        };
        if observations.send(observation).await.is_err() {
            return;
        }
    }
}
