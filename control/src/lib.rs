//! qdns-control: the control plane of one edge location.
//!
//! ```text
//!   zones/*.toml ─► qdns-zone (validate, slots) ─► State { snapshot, operator input }
//!   qdnsctl ─► control socket (JSON lines) ─► handler ─► recompute health ─┐
//!   expiry ticker (shifts, overrides) ─────────────────────────────────────┤
//!                       edges ◄── full snapshot on connect, then deltas ◄──┘
//! ```
//!
//! [`state`] holds what control knows and derives health from it; [`handler`] carries
//! out control-socket requests; [`edges`] serves snapshots and deltas; [`explain`]
//! answers "why this answer"; [`persist`] keeps operator input across restarts.
//! [`checker`] is the embedded checker: it probes every HTTP/HTTPS/TCP check and feeds
//! observations into the state, which decides each check by the quorum of reachable
//! checkers (SPEC §4). Remote checkers in other regions are a later piece.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod anycast;
pub mod api;
pub mod checker;
pub mod clock;
pub mod config;
pub mod dnssec;
pub mod duration;
pub mod edge_registry;
pub mod edges;
pub mod explain;
pub mod handler;
pub mod latency;
pub mod metrics;
pub mod observations;
pub mod persist;
pub mod quorum;
pub mod remote;
pub mod report;
pub mod report_listener;
pub mod round_trips;
pub mod shedding;
pub mod special_use;
pub mod state;
pub mod status_page;
pub mod timeline;

use std::{
    io,
    os::unix::fs::PermissionsExt,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

pub use config::Config;
use qdns_listen::{Limits, Pool, Ticket};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, UnixListener},
    sync::{broadcast, Mutex},
};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{ApiError, ErrorCode, Response, MAX_REQUEST},
    handler::{handle, next_version, Ctx},
    state::State,
};

/// A control-socket connection with no complete request for this long is closed, so
/// idle clients cannot hold the 64 slots.
const CONTROL_IDLE: Duration = Duration::from_secs(60);

/// A fatal start-up error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The zones failed validation.
    #[error("{0}")]
    Zone(#[from] qdns_zone::ZoneError),
    /// The persisted operator state is unreadable.
    #[error("{0}")]
    State(String),
    /// A zone's keys could not be read or made, or it could not be signed.
    #[error("{0}")]
    Dnssec(#[from] dnssec::DnssecError),
    /// A socket could not be bound.
    #[error("cannot listen on {what} {at}: {source}")]
    Bind {
        /// Which socket.
        what: &'static str,
        /// Where.
        at: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Binds a Unix socket at `path`, removing a stale file left by a killed predecessor
/// (but not the socket of a running one): mode 0600, or 0660 and given to `group`.
async fn bind_unix(path: &Path, what: &'static str, group: Option<u32>) -> Result<UnixListener, ControlError> {
    let err = |source| ControlError::Bind {
        what,
        at: path.display().to_string(),
        source,
    };
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another process is serving it",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(err)?;
    }
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    Ok(listener)
}

/// `--check-config`: what [`run`] reads before it serves — the zones (and their
/// special-use check when on), the checker keys, the persisted operator state — without
/// binding anything. Returns a one-line summary.
pub fn check(config: &Config) -> Result<String, ControlError> {
    let snapshot = qdns_zone::load_dir_from(&config.zones, 1, config.zone_sources())?;
    if config.settings.deny_special_use_targets {
        special_use::check(&snapshot).map_err(ControlError::State)?;
    }
    if let Some(path) = &config.settings.checker_keys {
        report::Keys::load(path).map_err(ControlError::State)?;
    }
    if config.state_dir.exists() {
        persist::load(&config.state_dir).map_err(ControlError::State)?;
    }
    Ok(format!(
        "configuration ok; {} zones load from {}",
        snapshot.zones.len(),
        config.zones.display()
    ))
}

/// Makes the state directory, or tightens it, to mode 0700: it holds the DNSSEC keys
/// and the operator state, for control's user alone (an edge's user on the same host
/// must not read them; systemd's `StateDirectoryMode=0700` says the same).
fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Runs control until `shutdown`.
#[expect(clippy::too_many_lines, reason = "the start-up sequence, step by step in order")]
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), ControlError> {
    private_dir(&config.state_dir).map_err(|source| ControlError::Bind {
        what: "state dir",
        at: config.state_dir.display().to_string(),
        source,
    })?;
    let operator = persist::load(&config.state_dir).map_err(ControlError::State)?;
    let mut snapshot = qdns_zone::load_dir_from(&config.zones, next_version(0), config.zone_sources())?;
    dnssec::sign_snapshot(
        &dnssec::KeyStore::new(&config.state_dir, config.dnssec),
        &mut snapshot,
        dnssec::now(),
    )?;
    if config.settings.deny_special_use_targets {
        special_use::check(&snapshot).map_err(ControlError::State)?;
    }
    let keys = match &config.settings.checker_keys {
        Some(path) => Some(Arc::new(report::Keys::load(path).map_err(ControlError::State)?)),
        None => None,
    };
    let mut state = State::new(config.zones.clone(), snapshot, operator);
    state.quorum = config.settings.quorum;
    state.deny_special_use_targets = config.settings.deny_special_use_targets;
    state.geoip_db.clone_from(&config.settings.geoip_db);
    state.location.clone_from(&config.location);
    state.region.clone_from(&config.settings.region);
    state.latency.set_hold(config.settings.latency_hold);
    state.expire();
    if let Some(saved) = persist::load_steering(&config.state_dir, state::now()) {
        tracing::info!(
            round_trips = saved.round_trips.len(),
            choices = saved.choices.len(),
            loads = saved.loads.len(),
            "steering taken back from before the restart"
        );
        state.restore_steering(saved);
    }
    let _ = state.recompute();
    for zone in &state.snapshot.zones {
        tracing::info!(zone = %qdns_zone::name::to_text(&zone.origin), serial = zone.serial, "zone loaded");
    }
    state.event("reload", format!("started with snapshot {}", state.snapshot.version));
    let (updates, _) = broadcast::channel(1024);
    let (observations, observed) = tokio::sync::mpsc::channel(4096);
    let checker = if config.settings.no_embedded_checker {
        drop(observations);
        None
    } else {
        let identity = checker::Identity {
            id: config.checker_id.clone(),
            region: config.settings.region.clone(),
            source: None,
        };
        let checker = checker::Checker::new(identity, observations, config.settings.tls_ca.as_deref())
            .map_err(ControlError::State)?;
        Some(Arc::new(std::sync::Mutex::new(checker)))
    };
    let ctx = Ctx {
        state: Arc::new(Mutex::new(state)),
        updates,
        state_dir: config.state_dir.clone(),
        lifetimes: config.dnssec,
        checker,
        shutdown: shutdown.clone(),
    };
    {
        let state = ctx.state.lock().await;
        ctx.update_checker(&state);
        tracing::info!(
            checks = state.probed_checks().len(),
            embedded = !config.settings.no_embedded_checker,
            "health checking"
        );
    }

    let control = bind_unix(&config.socket, "control socket", config.socket_gid).await?;
    let mut tasks = tokio::task::JoinSet::new();
    let tcp = config
        .edge_socket
        .strip_prefix("tls://")
        .or_else(|| config.edge_socket.strip_prefix("tcp://"));
    if let Some(addr) = tcp {
        let tls = match &config.edge_tls {
            Some(files) => Some(Arc::new(
                qdns_link::tls::ServerTls::new(files.clone())
                    .map_err(|e| ControlError::State(format!("edge socket TLS: {e}")))?,
            )),
            None => None,
        };
        let listener = qdns_listen::bind_tcp(addr).await.map_err(|source| ControlError::Bind {
            what: "edge socket",
            at: config.edge_socket.clone(),
            source,
        })?;
        let scheme = if tls.is_some() { "tls" } else { "tcp" };
        let local = listener.local_addr();
        tracing::info!(edge_socket = %local.as_ref().map_or_else(|_| addr.to_owned(), |a| format!("{scheme}://{a}")), "serving edges");
        if tls.is_none() && !local.as_ref().is_ok_and(|a| a.ip().is_loopback()) {
            tracing::warn!(
                "the tcp:// edge socket is neither encrypted nor authenticated: anyone who reaches it \
                 reads every zone, and a spoofed control can feed edges; use tls:// (docs/OPERATIONS.md)"
            );
        }
        tasks.spawn(accept_edges_tcp(listener, tls, ctx.clone(), shutdown.clone()));
    } else {
        let listener = bind_unix(Path::new(&config.edge_socket), "edge socket", config.edge_socket_gid).await?;
        tracing::info!(edge_socket = %config.edge_socket, "serving edges");
        tasks.spawn(accept_edges_unix(listener, ctx.clone(), shutdown.clone()));
    }
    tasks.spawn(accept_control(control, ctx.clone(), shutdown.clone()));
    tasks.spawn(expiry_ticker(ctx.clone(), shutdown.clone()));
    tasks.spawn(apply_observations(observed, ctx.clone(), shutdown.clone()));
    if let Some(addr) = &config.settings.metrics {
        let listener = qdns_listen::bind_tcp(addr.as_str())
            .await
            .map_err(|source| ControlError::Bind {
                what: "metrics",
                at: addr.clone(),
                source,
            })?;
        tracing::info!(metrics = %listener.local_addr().map_or_else(|_| addr.clone(), |a| a.to_string()), "serving metrics");
        tasks.spawn(metrics::serve(listener, ctx.clone(), shutdown.clone()));
    }
    if let (Some(addr), Some(keys)) = (&config.settings.checker_listen, keys) {
        let listener = qdns_listen::bind_tcp(addr.as_str())
            .await
            .map_err(|source| ControlError::Bind {
                what: "checker listener",
                at: addr.clone(),
                source,
            })?;
        tracing::info!(checker_listen = %listener.local_addr().map_or_else(|_| addr.clone(), |a| a.to_string()), "accepting checker reports");
        let sequences =
            report_listener::Sequences::load(config.state_dir.join("checker-seq.json")).map_err(ControlError::State)?;
        let reports = (listener, keys, config.location.clone(), sequences);
        tasks.spawn(accept_reports(reports, ctx.clone(), shutdown.clone()));
    }
    // Every listener bound, the zones compiled and edges served: ready for systemd, and
    // for whoever waits for this line (the metrics and report listeners are up too).
    tracing::info!(socket = %config.socket.display(), "control socket ready");
    let version = ctx.state.lock().await.snapshot.version;
    qdns_listen::notify::ready(&format!("location ready, snapshot {version}"));
    shutdown.cancelled().await;
    tasks.shutdown().await;
    let steering = ctx.state.lock().await.steering();
    if let Err(err) = persist::save_steering(&config.state_dir, &steering) {
        tracing::warn!(%err, "cannot save what steering learnt; a restart measures afresh");
    }
    let _ = std::fs::remove_file(&config.socket);
    if tcp.is_none() {
        let _ = std::fs::remove_file(&config.edge_socket);
    }
    tracing::info!("stopped");
    Ok(())
}

/// Most edge connections control serves at once (each holds a snapshot copy while it
/// is sent); more are closed at once and logged.
pub const MAX_EDGE_CONNECTIONS: usize = 1024;
/// Most control-socket connections at once.
pub const MAX_CONTROL_CONNECTIONS: usize = 64;

/// Most edge connections from one address (edges are one per host; a few more let an
/// edge reconnect while its previous connection is still being torn down).
pub const MAX_EDGE_CONNECTIONS_PER_SOURCE: usize = 16;

/// A place in `pool` for a connection from `source`, or `None` when refused (logged at
/// debug level only: a flood must not become a log flood; callers count refusals).
fn admit(pool: &Pool, source: std::net::IpAddr, what: &'static str) -> Option<Ticket> {
    match pool.admit(source) {
        Ok(ticket) => Some(ticket),
        Err(refusal) => {
            tracing::debug!(what, %source, reason = refusal.label(), "connection refused");
            None
        }
    }
}

fn edge_pool() -> Pool {
    Pool::new(Limits {
        total: MAX_EDGE_CONNECTIONS,
        per_source: MAX_EDGE_CONNECTIONS_PER_SOURCE,
    })
}

async fn accept_edges_unix(listener: UnixListener, ctx: Ctx, shutdown: CancellationToken) {
    // One source: the socket's file permissions say who may connect.
    let pool = Pool::new(Limits {
        total: MAX_EDGE_CONNECTIONS,
        per_source: MAX_EDGE_CONNECTIONS,
    });
    loop {
        let Some(stream) = qdns_listen::accept_unix(&listener, &shutdown).await else {
            return;
        };
        let Some(ticket) = admit(&pool, qdns_listen::pool::LOCAL, "edge socket") else {
            edges::count_refusal(&ctx.state, "connection_limit").await;
            continue;
        };
        let (r, w) = stream.into_split();
        tokio::spawn(edges::serve_edge(
            r,
            w,
            edges::Peer::Unchecked,
            ticket,
            Arc::clone(&ctx.state),
            ctx.updates.clone(),
            shutdown.clone(),
        ));
    }
}

/// Longest TLS handshake of an edge connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts edges on TCP: with `tls`, each must complete a mutual-TLS handshake (a
/// certificate from the location CA) within [`HANDSHAKE_TIMEOUT`] before a byte of it is
/// read; one that does not is counted (`edge_links_refused{reason="tls"}`) and closed.
async fn accept_edges_tcp(
    listener: TcpListener,
    tls: Option<Arc<qdns_link::tls::ServerTls>>,
    ctx: Ctx,
    shutdown: CancellationToken,
) {
    let pool = edge_pool();
    loop {
        let Some((stream, from)) = qdns_listen::accept_tcp(&listener, &shutdown).await else {
            return;
        };
        let Some(ticket) = admit(&pool, from.ip(), "edge socket") else {
            edges::count_refusal(&ctx.state, "connection_limit").await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        // A quiet link over a dead path is noticed (and the edge dropped from the
        // registry) within qdns_link::liveness::DEAD_AFTER.
        if let Err(err) = qdns_link::liveness::watch(&stream) {
            tracing::warn!(%from, %err, "cannot arm TCP keepalive on an edge link");
        }
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let (state, updates) = (Arc::clone(&ctx.state), ctx.updates.clone());
            let Some(tls) = tls else {
                let (r, w) = stream.into_split();
                edges::serve_edge(r, w, edges::Peer::Unchecked, ticket, state, updates, shutdown).await;
                return;
            };
            let handshake = tokio::select! {
                () = ticket.evicted() => {
                    edges::count_refusal(&state, "evicted").await;
                    return;
                }
                handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)) => handshake,
            };
            let stream = match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => {
                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                    if LOG.allow() {
                        tracing::warn!(%from, %err, "edge connection refused: TLS authentication failed");
                    }
                    edges::count_refusal(&state, "tls").await;
                    return;
                }
                Err(_) => {
                    tracing::warn!(%from, "edge connection refused: no TLS handshake within the timeout");
                    edges::count_refusal(&state, "tls").await;
                    return;
                }
            };
            let Some(cert) = qdns_link::tls::client_certificate(stream.get_ref().1) else {
                return; // the verifier requires one; nothing to serve without it
            };
            let (r, w) = tokio::io::split(stream);
            edges::serve_edge(
                r,
                w,
                edges::Peer::Certified(cert, tls),
                ticket,
                state,
                updates,
                shutdown,
            )
            .await;
        });
    }
}

async fn accept_control(listener: UnixListener, ctx: Ctx, shutdown: CancellationToken) {
    let pool = Pool::new(Limits {
        total: MAX_CONTROL_CONNECTIONS,
        per_source: MAX_CONTROL_CONNECTIONS,
    });
    loop {
        let Some(stream) = qdns_listen::accept_unix(&listener, &shutdown).await else {
            return;
        };
        let Some(mut ticket) = admit(&pool, qdns_listen::pool::LOCAL, "control socket") else {
            continue;
        };
        let ctx = ctx.clone();
        // Who is asking, named beside every change in the timeline (the socket's mode
        // and group decide who may ask at all).
        let peer = stream.peer_cred().ok().map(|cred| {
            let user = cred.uid();
            let name = qdns_listen::accounts::user_name(user).unwrap_or_else(|| format!("uid {user}"));
            match cred.pid() {
                Some(pid) => format!("{name} (pid {pid})"),
                None => name,
            }
        });
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = BufReader::new(r);
            let mut line = String::new();
            loop {
                line.clear();
                // Waiting for a request: the oldest such connection makes room for a
                // new one when all 64 places are taken.
                ticket.set_evictable(true);
                let mut limited = (&mut lines).take(MAX_REQUEST as u64);
                let read = tokio::select! {
                    () = ticket.evicted() => return,
                    read = tokio::time::timeout(CONTROL_IDLE, limited.read_line(&mut line)) => read,
                };
                match read {
                    Ok(Ok(0) | Err(_)) | Err(_) => return,
                    Ok(Ok(_)) => {}
                }
                ticket.set_evictable(false);
                // A line cut at the limit: refused whole, and the connection closed (the
                // rest of it is not a request).
                let complete = line.ends_with('\n') || line.len() < MAX_REQUEST;
                let response = if complete {
                    match Response::parse_request(&line) {
                        Ok(request) => handle(&ctx, request, peer.as_deref()).await,
                        Err(refused) => refused,
                    }
                } else {
                    Response::error(&ApiError::new(
                        ErrorCode::Malformed,
                        format!("bad request: over {MAX_REQUEST} octets"),
                    ))
                };
                let mut text = serde_json::to_string(&response).unwrap_or_else(|_| "{\"ok\":false}".to_owned());
                text.push('\n');
                let written = tokio::time::timeout(CONTROL_IDLE, w.write_all(text.as_bytes())).await;
                if !matches!(written, Ok(Ok(()))) || !complete {
                    return;
                }
            }
        });
    }
}

/// Accepts signed reports from remote checkers (SPEC §4) through the bounded listener
/// (`report_listener`): an accepted report's observations go into the state under the
/// authenticated identity; a dropped frame or connection is counted by reason and
/// logged.
/// The report listener, its keys, this location's name and the sequences kept.
type Reports = (TcpListener, Arc<report::Keys>, String, report_listener::Sequences);

async fn accept_reports((listener, keys, location, sequences): Reports, ctx: Ctx, shutdown: CancellationToken) {
    let sink = move |verdict: Result<report::Report, report::Reject>, peer: String, octets: u64| {
        let ctx = ctx.clone();
        async move {
            let mut state = ctx.state.lock().await;
            match verdict {
                Ok(report) => {
                    state.reports.accept(octets);
                    // A checker's clock may be off by up to MAX_SKEW_SECS, more than a
                    // short interval's freshness (3 × 5 s + 5 s): its timestamps move
                    // into this location's clock by the report's own `sent_at`, so
                    // whether a report is fresh does not depend on the checker's clock.
                    let now = state::now();
                    let offset =
                        i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(report.sent_at).unwrap_or(i64::MAX);
                    for mut observation in report.observations {
                        // Its age, on the checker's own clock, is what freshness uses.
                        let age = report.sent_at.saturating_sub(observation.at);
                        observation.at = observation.at.saturating_add_signed(offset).min(now);
                        // The authenticated identity, not what the body claims per item.
                        observation.checker.clone_from(&report.checker);
                        observation.region.clone_from(&report.region);
                        state.observe(observation, age);
                    }
                    ctx.push_health(&mut state);
                }
                Err(reject) => {
                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                    state.reports.reject(reject.label());
                    if LOG.allow() {
                        tracing::warn!(%peer, reason = reject.label(), "checker report dropped");
                    }
                }
            }
        }
    };
    report_listener::serve(listener, keys, location, sequences, sink, shutdown).await;
}

/// Feeds checker observations into the state, in batches, and pushes health changes.
async fn apply_observations(
    mut observed: tokio::sync::mpsc::Receiver<checker::Observation>,
    ctx: Ctx,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = shutdown.cancelled() => return,
            first = observed.recv() => first,
        };
        let Some(first) = first else { return };
        let mut state = ctx.state.lock().await;
        // The embedded checker's observations are made on this host's wall clock.
        let now = state::now();
        let age = now.saturating_sub(first.at);
        state.observe(first, age);
        while let Ok(more) = observed.try_recv() {
            let age = now.saturating_sub(more.at);
            state.observe(more, age);
        }
        ctx.push_health(&mut state);
    }
}

/// Ends expired shifts and overrides every second; re-evaluates checker freshness.
async fn expiry_ticker(ctx: Ctx, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut resign_after = Instant::now();
    let mut steering_saved = Instant::now();
    // The re-signing under way: its own task, so expiries and checker freshness keep
    // their one-second beat while a large zone is signed.
    let mut refreshing: Option<tokio::task::JoinHandle<Result<(), String>>> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut state = ctx.state.lock().await;
        let expired = state.expire();
        if expired || !state.observations.is_empty() {
            // Expiries end shifts and overrides; reports age, so a checker that stops
            // reporting becomes unreachable.
            ctx.push_health(&mut state);
        }
        if refreshing.as_ref().is_some_and(tokio::task::JoinHandle::is_finished) {
            if let Some(done) = refreshing.take() {
                // A failure is in the timeline; tried again a minute later (edges warn
                // on their own as expiry nears).
                if !matches!(done.await, Ok(Ok(()))) {
                    resign_after = Instant::now() + Duration::from_secs(60);
                }
            }
        }
        let due =
            refreshing.is_none() && ctx.lifetimes.due(&state.snapshot, dnssec::now()) && Instant::now() >= resign_after;
        let base = due.then(|| state.snapshot.clone());
        let steering = (steering_saved.elapsed() >= persist::STEERING_EVERY).then(|| state.steering());
        if std::mem::take(&mut state.operator_dirty) {
            // An expiry is in force whether or not it is saved; a failure is counted
            // and retried at the next change (a restart re-expires it anyway).
            let _ = persist::save_operator(&ctx.state_dir, &mut state);
        }
        drop(state);
        if let Some(steering) = steering {
            steering_saved = Instant::now();
            let dir = ctx.state_dir.clone();
            // Off the async workers: a write and an fsync.
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(err) = persist::save_steering(&dir, &steering) {
                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                    if LOG.allow() {
                        tracing::warn!(%err, "cannot save what steering learnt");
                    }
                }
            })
            .await;
        }
        if let Some(base) = base {
            // Signatures near their end: sign again, without the lock.
            let ctx = ctx.clone();
            refreshing = Some(tokio::spawn(async move {
                handler::refresh_signatures(&ctx, base, "signatures due for refresh").await
            }));
        }
    }
}
