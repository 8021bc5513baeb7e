//! The `checker` role (SPEC §4): probe the checks of the zones and report every
//! observation, signed, to each location given with `--report-to`.
//!
//! Each location gets its own sender with its own bounded queue (the oldest
//! observations go first when a location is unreachable for long), reconnecting with
//! backoff. Reports are batches sent at most every 500 ms.
use std::{
    collections::VecDeque,
    net::IpAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{io::AsyncWriteExt, net::TcpStream, sync::Mutex};
use tokio_util::sync::CancellationToken;

use crate::{
    checker::{Checker, CheckerError, Identity, Observation},
    clock::now,
    report::{sign, Report},
};

mod follow;

/// The checks a checker probes: each check's key and probe.
pub(crate) type Checks = Vec<(String, qdns_zone::snapshot::Probe)>;

/// Observations kept per location while it is unreachable.
pub const MAX_QUEUED: usize = 100_000;
/// How long a connection attempt to a location may take: a location behind a broken
/// path does not answer SYNs, and the kernel's own retries would take two minutes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long sent reports may stay unacknowledged before the connection is given up
/// (`TCP_USER_TIMEOUT`): without it a connection into a partition keeps queueing while
/// TCP's retransmission backoff grows, and after the heal the location hears nothing
/// new until the next retransmission — up to two minutes later.
pub const UNACKED_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of a checker process.
#[derive(Debug, Clone)]
pub struct CheckerConfig {
    /// Checker id (must match the locations' key files).
    pub id: String,
    /// Region.
    pub region: String,
    /// Where the checks to probe are.
    pub zones: Zones,
    /// This checker's key.
    pub key: Vec<u8>,
    /// Locations to report to: name (signed into each report) and listener address.
    pub report_to: Vec<(String, String)>,
    /// Local address to probe from.
    pub source: Option<IpAddr>,
    /// Extra trusted roots for `tls_verify` checks (PEM).
    pub tls_ca: Option<PathBuf>,
}

/// Where a checker finds the checks to probe.
#[derive(Debug, Clone)]
pub enum Zones {
    /// A zone directory (`--zones`; SIGHUP reads it again).
    Dir(PathBuf),
    /// The deployment's intent (`--intent`), each revision followed; the one followed
    /// last kept under the state directory.
    Intent {
        /// The store.
        source: qdns_intent::Source,
        /// `--state-dir`.
        state_dir: PathBuf,
    },
}

/// Why a checker process could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// SIGHUP (reload) could not be handled.
    #[error("cannot handle SIGHUP: {0}")]
    Signal(#[source] std::io::Error),
    /// The zones failed validation.
    #[error("{0}")]
    Zone(#[from] qdns_zone::ZoneError),
    /// The prober could not be set up.
    #[error("{0}")]
    Checker(#[from] CheckerError),
    /// The deployment's intent could not be taken (`--intent`).
    #[error("{0}")]
    Intent(#[from] qdns_intent::IntentError),
}

/// Runs the checker until `shutdown`.
pub async fn run_checker(config: CheckerConfig, shutdown: CancellationToken) -> Result<(), RemoteError> {
    // Installed first: SIGHUP's default action would end the process.
    let mut hup =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(RemoteError::Signal)?;
    // The checks, and with --intent the revisions to come.
    let (zones, checks, mut revisions) = match &config.zones {
        Zones::Dir(dir) => (Some(dir.clone()), probed_checks(dir)?, None),
        Zones::Intent { source, state_dir } => {
            let applied = qdns_intent::applied::Applied::under(state_dir);
            let (checks, from) = follow::first(source, &applied, probed_checks).await?;
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tokio::spawn(follow::follow(source.clone(), applied, from, tx, shutdown.clone()));
            (None, checks, Some(rx))
        }
    };
    tracing::info!(checks = checks.len(), id = %config.id, region = %config.region, locations = config.report_to.len(), "checker running");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Observation>(4096);
    let mut checker = Checker::new(
        Identity {
            id: config.id.clone(),
            region: config.region.clone(),
            source: config.source,
        },
        tx,
        config.tls_ca.as_deref(),
    )?;
    checker.set_checks(checks, &shutdown);
    // Sequence numbers grow across restarts: start time in seconds × 10^6, then +1 per
    // report.
    let seq = Arc::new(AtomicU64::new(now().saturating_mul(1_000_000)));
    let queues: Vec<Arc<Mutex<VecDeque<Observation>>>> = config.report_to.iter().map(|_| Arc::default()).collect();
    for (target, queue) in config.report_to.iter().zip(&queues) {
        tokio::spawn(send_loop(
            target.clone(),
            Arc::clone(queue),
            config.clone(),
            Arc::clone(&seq),
            shutdown.clone(),
        ));
    }
    loop {
        let observation = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            _ = hup.recv() => {
                // SIGHUP: re-read the zones; an invalid set is logged and the running
                // checks go on.
                let Some(dir) = &zones else { continue };
                match probed_checks(dir) {
                    Ok(checks) => {
                        tracing::info!(checks = checks.len(), "zones reloaded");
                        checker.set_checks(checks, &shutdown);
                    }
                    Err(err) => tracing::error!(%err, "reload rejected; the running checks go on"),
                }
                continue;
            }
            Some(revision) = next_revision(&mut revisions) => {
                // A new revision of the intent: probed if it loads, else the running
                // checks go on.
                match probed_checks(&revision.dir) {
                    Ok(checks) => {
                        tracing::info!(checks = checks.len(), revision = revision.revision, "intent revision taken");
                        checker.set_checks(checks, &shutdown);
                        let _ = revision.outcome.send(true);
                    }
                    Err(err) => {
                        tracing::error!(%err, revision = revision.revision, "intent revision refused; the running checks go on");
                        let _ = revision.outcome.send(false);
                    }
                }
                continue;
            }
            o = rx.recv() => o,
        };
        let Some(observation) = observation else { return Ok(()) };
        for queue in &queues {
            let mut q = queue.lock().await;
            if q.len() >= MAX_QUEUED {
                q.pop_front();
            }
            q.push_back(observation.clone());
        }
    }
}

/// The next revision from the follower (never, without `--intent`).
async fn next_revision(revisions: &mut Option<tokio::sync::mpsc::Receiver<follow::Staged>>) -> Option<follow::Staged> {
    match revisions {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The probed checks of the zones in `dir`.
pub(crate) fn probed_checks(dir: &std::path::Path) -> Result<Checks, qdns_zone::ZoneError> {
    // Checks only: geo sets need no database here.
    let snapshot = qdns_zone::load_dir_with(
        dir,
        1,
        &qdns_zone::LoadContext {
            geo: Some(&qdns_zone::geo::GeoDb::empty()),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )?;
    Ok(
        crate::state::State::new(dir.to_path_buf(), snapshot, crate::operator::OperatorState::default())
            .probed_checks(),
    )
}

async fn send_loop(
    (location, target): (String, String),
    queue: Arc<Mutex<VecDeque<Observation>>>,
    config: CheckerConfig,
    seq: Arc<AtomicU64>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let connected = tokio::select! {
            () = shutdown.cancelled() => return,
            c = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target.as_str())) => {
                c.unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no connection within 5 s")))
            }
        };
        let mut stream = match connected {
            Ok(stream) => {
                backoff = Duration::from_millis(200);
                if let Err(err) = socket2::SockRef::from(&stream).set_tcp_user_timeout(Some(UNACKED_TIMEOUT)) {
                    tracing::warn!(location = %target, %err, "cannot bound unacknowledged reports");
                }
                tracing::info!(location = %target, "reporting");
                stream
            }
            Err(err) => {
                tracing::warn!(location = %target, %err, retry_in = ?backoff, "location unreachable");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        // The first report goes out as soon as there is one: a location under a flood
        // of connections keeps a new connection only once it has proven itself.
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
            first = false;
            let batch: Vec<Observation> = {
                let mut q = queue.lock().await;
                let n = q.len().min(5000);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                continue;
            }
            let report = Report {
                checker: config.id.clone(),
                region: config.region.clone(),
                location: location.clone(),
                seq: seq.fetch_add(1, Ordering::Relaxed) + 1,
                sent_at: now(),
                observations: batch.clone(),
            };
            let frame = match sign(&report, &config.key).and_then(|s| s.frame()) {
                Ok(frame) => frame,
                Err(err) => {
                    tracing::error!(%err, "cannot sign a report");
                    continue;
                }
            };
            if let Err(err) = stream.write_all(&frame).await {
                tracing::warn!(location = %target, %err, "report not sent; reconnecting");
                let mut q = queue.lock().await;
                for o in batch.into_iter().rev() {
                    q.push_front(o);
                }
                break;
            }
        }
    }
}
