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
//! out control-socket requests; [`edges`] serves snapshots and deltas; `accept` holds
//! the listeners' accept loops and `tasks` the background work; [`explain`]
//! answers "why this answer"; [`persist`] keeps operator input across restarts.
//! [`checker`] is the embedded checker: it probes every HTTP/HTTPS/TCP check and feeds
//! observations into the state, which decides each check by the quorum of reachable
//! checkers (SPEC §4). Remote checkers in other regions are a later piece.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod accept;
pub mod anycast;
pub mod api;
pub mod checker;
pub mod clock;
pub mod config;
pub mod cookies;
pub mod counts;
pub mod ctx;
pub mod deployed;
pub mod dnssec;
pub mod duration;
pub mod edge_listener;
pub mod edge_registry;
pub mod edges;
pub mod explain;
pub mod handler;
pub mod intent;
pub mod latency;
pub mod metrics;
pub mod observations;
pub mod operator;
pub mod persist;
pub mod presence;
pub mod quorum;
mod reload;
pub mod reloads;
pub mod remote;
pub mod report;
pub mod report_listener;
pub mod round_trips;
pub mod shedding;
pub mod special_use;
pub mod state;
pub mod status_page;
mod tasks;
pub mod timeline;
pub mod transfer;
pub mod update;

use std::{io, os::unix::fs::PermissionsExt, path::Path, sync::Arc};

pub use config::Config;
use tokio::{
    net::{UnixListener, UnixSocket},
    sync::{broadcast, Mutex},
};
use tokio_util::sync::CancellationToken;

use crate::{clock::next_version, ctx::Ctx, state::State};

pub use accept::{MAX_CONTROL_CONNECTIONS, MAX_EDGE_CONNECTIONS, MAX_EDGE_CONNECTIONS_PER_SOURCE};

/// A fatal start-up error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The zones failed validation.
    #[error("{0}")]
    Zone(#[from] qdns_zone::ZoneError),
    /// The deployment's intent could not be taken (`--intent`).
    #[error("{0}")]
    Intent(#[from] qdns_intent::IntentError),
    /// The persisted operator state is unreadable.
    #[error("{0}")]
    Persist(#[from] persist::PersistError),
    /// A health-check target is special-use and `deny_special_use_targets` is on.
    #[error("{0}")]
    SpecialUse(#[from] special_use::SpecialUseError),
    /// The `--checker-keys` file is unreadable or invalid.
    #[error("{0}")]
    CheckerKeys(#[from] report::ReportError),
    /// The checker sequences kept in the state directory are unreadable.
    #[error("{0}")]
    Sequences(#[from] report_listener::SequencesError),
    /// The DNS cookie secrets could not be read, made or saved.
    #[error("{0}")]
    Cookies(#[from] cookies::CookieError),
    /// The embedded checker could not be set up.
    #[error("{0}")]
    Checker(#[from] checker::CheckerError),
    /// The edge socket's TLS files are unusable.
    #[error("edge socket TLS: {0}")]
    EdgeTls(#[source] qdns_link::LinkError),
    /// A zone's keys could not be read or made, or it could not be signed.
    #[error("{0}")]
    Dnssec(#[from] dnssec::DnssecError),
    /// The TSIG keys are unusable, or a zone names one that is not there.
    #[error("{0}")]
    Transfer(String),
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
    bind_unix_quiet(path, what, group)
        .await?
        .listen(qdns_listen::BACKLOG)
        .map_err(|source| ControlError::Bind {
            what,
            at: path.display().to_string(),
            source,
        })
}

/// [`bind_unix`] without the listen: connections are refused until the socket's
/// `listen` ([`edge_listener`]).
async fn bind_unix_quiet(path: &Path, what: &'static str, group: Option<u32>) -> Result<UnixSocket, ControlError> {
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
    let socket = UnixSocket::new_stream().map_err(err)?;
    socket.bind(path).map_err(err)?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(err)?;
    }
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    Ok(socket)
}

/// `--check-config`: what [`run`] reads before it serves — the zones (and their
/// special-use check when on), the checker keys, the persisted operator state — without
/// binding anything. Returns a one-line summary.
pub fn check(config: &Config) -> Result<String, ControlError> {
    if let Some(source) = &config.intent {
        return Ok(format!(
            "configuration ok; zones from the intent under {} at {} (read at start)",
            source.url.prefix,
            source.url.members()
        ));
    }
    let (snapshot, pending) = qdns_zone::load_dir_pending(&config.zones, 1, config.zone_sources())?;
    if config.settings.deny_special_use_targets {
        special_use::check(&snapshot)?;
    }
    if let Some(path) = &config.settings.checker_keys {
        report::Keys::load(path)?;
    }
    if config.state_dir.exists() {
        persist::load(&config.state_dir)?;
    }
    let keys = transfer::tsig::Keys::load(&config.settings.tsig_keys).map_err(ControlError::Transfer)?;
    transfer::check_keys(&snapshot, &pending, &keys).map_err(ControlError::Transfer)?;
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

/// `--transfer-listen`: binds TCP and UDP there and serves transfers; keeps the served
/// zones current either way (a zone's `notify` works without the listener only in
/// name: its secondaries could not transfer, so one without the other is warned of).
async fn serve_transfers(
    config: &Config,
    ctx: &Ctx,
    tasks: &mut tokio::task::JoinSet<()>,
    (caught_up, shutdown): (tokio::sync::watch::Receiver<bool>, &CancellationToken),
) -> Result<(), ControlError> {
    let wanted = ctx
        .state
        .lock()
        .await
        .served
        .snapshot
        .zones
        .iter()
        .any(|z| z.transfer.is_some());
    let Some(addr) = &config.settings.transfer_listen else {
        if wanted {
            tracing::warn!(
                "zones set transfer_allow, notify or [[zone.update]] but --transfer-listen is not given: nothing is transferred or updated"
            );
        }
        return Ok(());
    };
    let bind = |source| ControlError::Bind {
        what: "transfer listener",
        at: addr.clone(),
        source,
    };
    let tcp = qdns_listen::bind_tcp(addr.as_str()).await.map_err(bind)?;
    let local = tcp.local_addr().map_err(bind)?;
    let udp = tokio::net::UdpSocket::bind(local).await.map_err(bind)?;
    tracing::info!(transfer_listen = %local, "serving zone transfers");
    tasks.spawn(transfer::follow(
        transfer::Sources {
            updates: ctx.updates.clone(),
            state: Arc::clone(&ctx.state),
            state_dir: ctx.state_dir.clone(),
            store: ctx.key_store(),
            deployment: ctx.deployment.clone(),
            caught_up,
        },
        Arc::clone(&ctx.transfers),
        shutdown.clone(),
    ));
    // UPDATE (RFC 2136) comes on the same listener, carried out by one task.
    let (updates, jobs) = update::queue();
    ctx.transfers.set_updates(updates);
    tasks.spawn(update::serve(ctx.clone(), jobs, shutdown.clone()));
    tasks.spawn(transfer::serve::accept_tcp(
        tcp,
        Arc::clone(&ctx.transfers),
        shutdown.clone(),
    ));
    tasks.spawn(transfer::serve::serve_udp(
        udp,
        Arc::clone(&ctx.transfers),
        shutdown.clone(),
    ));
    Ok(())
}

/// The zones of `config.zones` as control starts with them: loaded, their TSIG keys
/// known, signed, and (with `--deny-special-use-targets`) checked.
fn startup_zones(
    config: &Config,
    tsig_keys: &transfer::tsig::Keys,
) -> Result<(qdns_zone::Snapshot, Vec<qdns_zone::Pending>), ControlError> {
    let (mut snapshot, pending) = qdns_zone::load_dir_pending(&config.zones, next_version(0), config.zone_sources())?;
    transfer::check_keys(&snapshot, &pending, tsig_keys).map_err(ControlError::Transfer)?;
    dnssec::sign_snapshot(
        &dnssec::KeyStore::new(&config.state_dir, config.dnssec).deployed(config.intent.is_some()),
        &mut snapshot,
        dnssec::now(),
        None,
    )?;
    if config.settings.deny_special_use_targets {
        special_use::check(&snapshot)?;
    }
    Ok((snapshot, pending))
}

/// Runs control until `shutdown`.
#[expect(clippy::too_many_lines, reason = "the start-up sequence, step by step in order")]
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), ControlError> {
    private_dir(&config.state_dir).map_err(|source| ControlError::Bind {
        what: "state dir",
        at: config.state_dir.display().to_string(),
        source,
    })?;
    let operator = persist::load(&config.state_dir)?;
    // --tsig-key, else (with --intent) the deployment's keys (as taken at start, or
    // applied here last).
    let follows_tsig_keys = config.intent.is_some() && config.settings.tsig_keys.is_empty();
    let tsig_keys = |config: &Config| {
        if follows_tsig_keys {
            Ok(intent::tsig_keys_applied(&config.state_dir))
        } else {
            transfer::tsig::Keys::load(&config.settings.tsig_keys).map_err(ControlError::Transfer)
        }
    };
    let mut config = config;
    let (tsig_keys, (snapshot, pending)) = match config.intent.clone() {
        None => {
            let tsig_keys = tsig_keys(&config)?;
            let loaded = startup_zones(&config, &tsig_keys)?;
            (tsig_keys, loaded)
        }
        Some(source) => {
            let keys = dnssec::KeyStore::new(&config.state_dir, config.dnssec);
            let deployment = deployed::Deployment {
                source,
                location: config.location.clone(),
            };
            let start = intent::at_start(&deployment, &config.state_dir, &keys, follows_tsig_keys).await?;
            let tsig_keys = tsig_keys(&config)?;
            config.zones.clone_from(&start.dir);
            config.settings.geoip_db = qdns_intent::files::geo_db(&start.dir);
            let (loaded, revision) = match (startup_zones(&config, &tsig_keys), &start.fallback) {
                (Ok(loaded), _) => (loaded, start.revision),
                (Err(err), Some((dir, before))) => {
                    // Refused here: the revision applied before stays (the follower
                    // tries the new one again and says why in the timeline).
                    tracing::warn!(%err, revision = start.revision, before, "intent revision refused here; serving the one applied before");
                    config.zones.clone_from(dir);
                    config.settings.geoip_db = qdns_intent::files::geo_db(dir);
                    (startup_zones(&config, &tsig_keys)?, *before)
                }
                (Err(err), None) => return Err(err),
            };
            start.commit(revision)?;
            let (mut snapshot, pending) = loaded;
            snapshot.intent_revision = revision;
            (tsig_keys, (snapshot, pending))
        }
    };
    for zone in &pending {
        tracing::warn!(zone = %zone.origin, primary = %zone.primary, "no copy from the primary yet: served once the first transfer comes");
    }
    // The checkers this location accepts: --checker-keys, else (with --intent) the
    // deployment's list as applied here last (the follower takes each new one).
    let keys = match (&config.settings.checker_keys, &config.intent) {
        (Some(path), _) => Some(report::Keys::load(path)?),
        (None, Some(_)) => Some(intent::checker_keys_applied(&config.state_dir)),
        (None, None) => None,
    }
    .map(|keys| Arc::new(arc_swap::ArcSwap::from_pointee(keys)));
    let mut state = State::new(config.zones.clone(), snapshot, operator);
    state.settings.quorum = config.settings.quorum;
    state.settings.deny_special_use_targets = config.settings.deny_special_use_targets;
    state.settings.geoip_db.clone_from(&config.settings.geoip_db);
    state.settings.site.location.clone_from(&config.location);
    state.settings.site.region.clone_from(&config.settings.region);
    state.observed.latency.set_hold(config.settings.latency_hold);
    if config.intent.is_some() {
        // The store answered when the revision loaded was committed (at start, or before).
        state.log.intent_heard_at = qdns_intent::applied::Applied::under(&config.state_dir).committed_at();
    }
    state.expire();
    if let Some(saved) = persist::load_steering(&config.state_dir, crate::clock::now()) {
        tracing::info!(
            round_trips = saved.round_trips.len(),
            choices = saved.choices.len(),
            loads = saved.loads.len(),
            "steering taken back from before the restart"
        );
        state.restore_steering(saved);
    }
    let _ = state.recompute();
    for zone in &state.served.snapshot.zones {
        tracing::info!(zone = %qdns_zone::name::to_text(&zone.origin), serial = zone.serial, "zone loaded");
    }
    state.event(
        "reload",
        format!("started with snapshot {}", state.served.snapshot.version),
    );
    let (updates, _) = broadcast::channel(1024);
    let cookies = cookies::load_or_make(&config.state_dir, crate::clock::now())?;
    let cookies = Arc::new(tokio::sync::watch::Sender::new(cookies));
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
        let checker = checker::Checker::new(identity, observations, config.settings.tls_ca.as_deref())?;
        Some(Arc::new(std::sync::Mutex::new(checker)))
    };
    let ctx = Ctx {
        state: Arc::new(Mutex::new(state)),
        updates,
        cookies,
        state_dir: config.state_dir.clone(),
        lifetimes: config.dnssec,
        checker,
        shutdown: shutdown.clone(),
        transfers: Arc::new(
            transfer::Transfers::new(tsig_keys)
                .with_in_max_bytes(config.settings.transfer_in_max_bytes)
                .with_in_deadline(std::time::Duration::from_secs(config.settings.transfer_in_deadline)),
        ),
        deployment: config.intent.clone().map(|source| {
            Arc::new(deployed::Deployment {
                source,
                location: config.location.clone(),
            })
        }),
    };
    ctx.transfers.set_pending(pending);
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
    let edge_socket =
        edge_listener::bind(&config.edge_socket, config.edge_tls.as_ref(), config.edge_socket_gid).await?;
    let tcp = matches!(edge_socket, edge_listener::Quiet::Tcp(..));
    let (caught_up, caught_up_seen) = tokio::sync::watch::channel(false);
    if ctx.deployment.is_some() {
        let gate = edge_listener::Gate {
            caught_up: caught_up_seen.clone(),
            hears_checkers: !config.settings.no_embedded_checker || config.settings.checker_listen.is_some(),
        };
        tasks.spawn(edge_listener::serve_after(
            edge_socket,
            gate,
            ctx.clone(),
            shutdown.clone(),
        ));
    } else {
        // Listening before "control socket ready": edges are taken from then on.
        let listening = edge_socket.listen().map_err(|source| ControlError::Bind {
            what: "edge socket",
            at: config.edge_socket.clone(),
            source,
        })?;
        tasks.spawn(edge_listener::serve(listening, ctx.clone(), shutdown.clone()));
    }
    tasks.spawn(accept::accept_control(control, ctx.clone(), shutdown.clone()));
    tasks.spawn(tasks::expiry_ticker(ctx.clone(), shutdown.clone()));
    tasks.spawn(cookies::rotate(
        config.state_dir.clone(),
        config.settings.cookie_rotation,
        Arc::clone(&ctx.cookies),
        Arc::clone(&ctx.state),
        ctx.deployment.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(tasks::apply_observations(observed, ctx.clone(), shutdown.clone()));
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
    if let (Some(addr), Some(keys)) = (&config.settings.checker_listen, keys.clone()) {
        let listener = qdns_listen::bind_tcp(addr.as_str())
            .await
            .map_err(|source| ControlError::Bind {
                what: "checker listener",
                at: addr.clone(),
                source,
            })?;
        tracing::info!(checker_listen = %listener.local_addr().map_or_else(|_| addr.clone(), |a| a.to_string()), "accepting checker reports");
        let sequences = report_listener::Sequences::load(config.state_dir.join("checker-seq.json"))?;
        let reports = (listener, keys, config.location.clone(), sequences);
        tasks.spawn(accept::accept_reports(reports, ctx.clone(), shutdown.clone()));
    }
    serve_transfers(&config, &ctx, &mut tasks, (caught_up_seen, &shutdown)).await?;
    // Zones with `primary`: taken on timers, and on NOTIFY when the listener runs.
    let (reloads, asks) = reloads::Reloads::new();
    tasks.spawn(reload::serve(ctx.clone(), asks, shutdown.clone()));
    let inbound = transfer::inbound::Inbound {
        state: Arc::clone(&ctx.state),
        state_dir: ctx.state_dir.clone(),
        transfers: Arc::clone(&ctx.transfers),
        reloads: reloads.clone(),
    };
    tasks.spawn(transfer::inbound::follow(inbound, shutdown.clone()));
    if let Some(deployment) = ctx.deployment.clone() {
        let follower = intent::Follower {
            deployment: Arc::clone(&deployment),
            applied: qdns_intent::applied::Applied::under(&config.state_dir),
            reloads: reloads.clone(),
            ctx: ctx.clone(),
            keys: ctx.key_store(),
            took_operator: std::sync::atomic::AtomicBool::new(false),
            caught_up,
            // The deployment's list unless --checker-keys names one here.
            checker_keys: keys.filter(|_| config.settings.checker_keys.is_none()),
            tsig_keys: config.settings.tsig_keys.is_empty(),
        };
        tasks.spawn(intent::follow(follower, shutdown.clone()));
        tasks.spawn(presence::run(
            ctx.clone(),
            deployment,
            config.checker_id.clone(),
            shutdown.clone(),
        ));
    }
    // Every listener bound and the zones compiled: ready for systemd, and for whoever
    // waits for this line (the metrics and report listeners are up too; edges are taken
    // now, or with --intent once the deployment's state is: edge_listener).
    tracing::info!(socket = %config.socket.display(), "control socket ready");
    let version = ctx.state.lock().await.served.snapshot.version;
    qdns_listen::notify::ready(&format!("location ready, snapshot {version}"));
    shutdown.cancelled().await;
    tasks.shutdown().await;
    let steering = ctx.state.lock().await.steering();
    if let Err(err) = persist::save_steering(&config.state_dir, &steering) {
        tracing::warn!(%err, "cannot save what steering learnt; a restart measures afresh");
    }
    let _ = std::fs::remove_file(&config.socket);
    if !tcp {
        let _ = std::fs::remove_file(&config.edge_socket);
    }
    tracing::info!("stopped");
    Ok(())
}
