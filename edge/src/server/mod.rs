//! Running the edge: load the snapshot, bind the sockets, serve until shutdown.
//!
//! `run` takes an injected shutdown token so tests can start and stop it in-process; the
//! binary cancels it on SIGTERM/SIGINT. SIGHUP re-reads the zone directory (standalone
//! mode): a zone set that fails validation is logged and the running one keeps serving.
pub mod rrl;
pub mod tcp;
pub mod udp;

use std::{
    io,
    net::SocketAddr,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Source,
    engine::{EngineError, ServeOptions},
    stats::{self, WorkerStats},
    xdp::{XdpLoadError, XdpProgram},
    Config, Engine,
};

/// A fatal start-up error (the binary prints it as one line and exits non-zero).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The zones failed validation.
    #[error("{0}")]
    Zone(#[from] qdns_zone::ZoneError),
    /// The snapshot could not be compiled.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// A socket could not be bound.
    #[error("cannot listen on {addr} ({proto}): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// udp or tcp.
        proto: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A thread or the runtime could not start.
    #[error("cannot start: {0}")]
    Start(#[source] io::Error),
    /// XDP could not be set up.
    #[error("{0}")]
    Xdp(#[from] XdpLoadError),
    /// Taking over from the running edge failed (it keeps serving).
    #[error("{0}")]
    Takeover(#[from] crate::takeover::TakeoverError),
}

/// Loads `dir` (with `sources`: the geolocation database, the location) into an engine
/// of snapshot `version`.
pub fn load_engine(
    dir: &Path,
    sources: qdns_zone::Sources<'_>,
    version: u64,
    options: &ServeOptions,
) -> Result<Engine, ServerError> {
    let engine = {
        let snapshot = qdns_zone::load_dir_from(dir, version, sources)?;
        Engine::compile(&snapshot)?.with_options(options)
    };
    // The snapshot and the parse behind it are gone: give their pages back.
    crate::memory::release_freed();
    Ok(engine)
}

/// Serves DNS per `config` until `shutdown` is cancelled.
#[expect(clippy::too_many_lines, reason = "the start-up sequence, step by step in order")]
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), ServerError> {
    // Installed first: SIGHUP's default action would kill the process.
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    // The cookie clock runs from the start: cookies made while zones load are current.
    if let Some(jar) = &config.cookies {
        tokio::spawn(crate::cookies::tick(Arc::clone(jar), shutdown.clone()));
    }
    let version = AtomicU64::new(1);
    let engine = initial_engine(&config, version.load(Ordering::Relaxed))?;
    for (zone, serial) in engine.zones() {
        tracing::info!(%zone, serial, "zone loaded");
    }
    let engine = Arc::new(ArcSwap::from_pointee(engine));

    // Taking over: the running edge's own sockets (see `crate::takeover`); else bind
    // everything before serving anything, so a bad address fails start-up whole.
    let (takeover, inherited) = match (&config.settings.takeover_socket, config.settings.takeover) {
        (Some(path), true) => {
            let (stream, inherited) = crate::takeover::request(path)?;
            tracing::info!(socket = %path.display(), "taking over from the running edge");
            (Some(stream), Some(inherited))
        }
        _ => (None, None),
    };
    let Sockets {
        udp: udp_sockets,
        udp_groups,
        tcp: tcp_listeners,
        metrics: metrics_listener,
    } = sockets(&config, inherited).await?;
    let handover = crate::takeover::Listeners {
        udp: udp_groups,
        tcp: tcp_listeners.iter().filter_map(|l| l.local_addr().ok()).collect(),
        metrics: metrics_listener.as_ref().and_then(|l| l.local_addr().ok()),
    };
    let handover_fds: Vec<std::os::fd::RawFd> = {
        use std::os::fd::AsRawFd;
        udp_sockets
            .iter()
            .map(AsRawFd::as_raw_fd)
            .chain(tcp_listeners.iter().map(AsRawFd::as_raw_fd))
            .chain(metrics_listener.iter().map(AsRawFd::as_raw_fd))
            .collect()
    };
    if let (Source::Control { state_dir, .. }, Some(jar)) = (&config.source, &config.cookies) {
        crate::follow::restore_cookies(state_dir, jar);
    }
    let xdp = load_xdp(&config, &tcp_listeners, &engine, takeover.is_some())?;
    // Logged once everything is in place: tests and operators take it as "ready".
    for listener in &tcp_listeners {
        if let Ok(bound) = listener.local_addr() {
            tracing::info!(udp = %bound, tcp = %bound, workers = config.workers, "listening");
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    // Each address's sockets share its workers (a crew per socket; see `udp`).
    let sizes: Vec<usize> = handover
        .udp
        .iter()
        .flat_map(|&(_, sockets)| udp::crew_sizes(config.workers, sockets))
        .collect();
    let crews: Vec<(socket2::Socket, usize)> = udp_sockets.into_iter().zip(sizes).collect();
    let threads: usize = crews.iter().map(|(_, size)| size).sum();
    let worker_stats: Vec<Arc<WorkerStats>> = (0..=threads).map(|_| Arc::default()).collect();
    let limiter = config.rrl.map(|settings| Arc::new(rrl::Limiter::new(settings)));
    let (tap, tap_thread) = match &config.settings.dnstap {
        Some(target) => {
            let identity = crate::dnstap::Identity {
                identity: config
                    .settings
                    .nsid
                    .as_deref()
                    .map_or_else(|| qdns_listen::accounts::host_name("edge").into_bytes(), <[u8]>::to_vec),
                mask: config.settings.dnstap_mask,
            };
            let (tap, thread) = crate::dnstap::start(target.clone(), identity, Arc::clone(&engine), Arc::clone(&stop))
                .map_err(ServerError::Start)?;
            tracing::info!(dnstap = %target, "query logs: dnstap to the reader");
            (Some(tap), Some(thread))
        }
        None => (None, None),
    };
    let mut udp_threads =
        udp::spawn(crews, &engine, &worker_stats, limiter.as_ref(), tap.as_ref(), &stop).map_err(ServerError::Start)?;
    udp_threads.extend(tap_thread);
    let xdp = match xdp {
        Some((program, installed)) => {
            let watcher = crate::xdp::watch::spawn(
                Arc::clone(&program),
                Arc::clone(&engine),
                installed,
                config.cookies.clone(),
                Arc::clone(&stop),
            )
            .map_err(ServerError::Start)?;
            udp_threads.push(watcher);
            Some(program)
        }
        None => None,
    };
    let tcp_stats = worker_stats.last().cloned().unwrap_or_default();
    let limits = tcp::TcpLimits {
        idle_timeout: config.tcp_idle_timeout(),
        max_connections: config.settings.max_tcp_connections,
        max_per_source: config.settings.max_tcp_per_source,
        source_prefixes: (
            config.settings.tcp_source_ipv4_prefix,
            config.settings.tcp_source_ipv6_prefix,
        ),
    };
    let readiness = Arc::new(match &config.source {
        Source::Zones(_) => crate::ready::Readiness::standalone(),
        Source::Control { .. } => crate::ready::Readiness::follower(config.ready_max_stale()),
    });
    let link_stats = Arc::new(crate::follow::LinkStats::default());
    let mut tcp_tasks = tokio::task::JoinSet::new();
    if let Some(listener) = metrics_listener {
        let addr = listener.local_addr().map_err(ServerError::Start)?;
        let sources = crate::metrics::Sources {
            udp: worker_stats
                .iter()
                .take(worker_stats.len().saturating_sub(1))
                .cloned()
                .collect(),
            tcp: Arc::clone(&tcp_stats),
            engine: Arc::clone(&engine),
            xdp: xdp.clone(),
            ready: Arc::clone(&readiness),
            link: matches!(config.source, Source::Control { .. }).then(|| Arc::clone(&link_stats)),
            dnstap: tap.clone(),
        };
        tracing::info!(metrics = %addr, "serving metrics");
        tcp_tasks.spawn(crate::metrics::serve(listener, sources, shutdown.clone()));
    }
    for listener in tcp_listeners {
        tcp_tasks.spawn(tcp::serve(
            listener,
            Arc::clone(&engine),
            Arc::clone(&tcp_stats),
            limits,
            tap.clone(),
            shutdown.clone(),
        ));
    }

    if let Source::Control { endpoints, state_dir } = &config.source {
        let follower = crate::follow::Follower {
            endpoints: endpoints.clone(),
            state_dir: state_dir.clone(),
            engine: Arc::clone(&engine),
            options: config.serve_options(),
            edge_name: config.edge_id.clone(),
            xdp: xdp.clone(),
            readiness: Arc::clone(&readiness),
            control_timeout: config.control_timeout(),
            keepalive: config.control_keepalive(),
            max_frame: config.max_snapshot_frame(),
            stats: Arc::clone(&link_stats),
        };
        tokio::spawn(crate::follow::follow(follower, shutdown.clone()));
    }
    let replacing = takeover.is_some();
    if let Some(stream) = takeover {
        complete_takeover(&stream, &config, xdp.as_ref())?;
    }
    if let Some(path) = &config.settings.takeover_socket {
        let handover = crate::takeover::Handover {
            listeners: handover,
            fds: handover_fds,
            xdp: xdp.clone(),
            bpffs: config.settings.bpffs.clone(),
        };
        offer_takeover(path, replacing, handover, &shutdown)?;
    }
    tokio::spawn(announce_ready(Arc::clone(&engine), replacing, shutdown.clone()));
    reload_on_hup(hup, &config, (&engine, tap.as_deref()), &version, &shutdown).await;

    stop.store(true, Ordering::Relaxed);
    while tcp_tasks.join_next().await.is_some() {}
    wind_down(udp_threads, &worker_stats, xdp.as_deref());
    Ok(())
}

/// Joins the UDP threads (told to stop) and logs what the edge answered, and the XDP
/// program's counters before it detaches.
fn wind_down(
    udp_threads: Vec<std::thread::JoinHandle<()>>,
    worker_stats: &[Arc<WorkerStats>],
    xdp: Option<&std::sync::Mutex<XdpProgram>>,
) {
    for thread in udp_threads {
        let _ = thread.join();
    }
    let totals = stats::totals(worker_stats.iter().map(AsRef::as_ref));
    tracing::info!(%totals, "stopped");
    if let Some(Ok(program)) = xdp.map(std::sync::Mutex::lock) {
        let counters = stats::counts(&program.counters());
        tracing::info!(%counters, interfaces = %program.interfaces().join(","), "detaching XDP");
    }
}

/// The engine to serve from at start: the zones (standalone), or the snapshot persisted
/// before the last stop (following control; none or a damaged one: an empty engine that
/// refuses queries until control sends one).
fn initial_engine(config: &Config, version: u64) -> Result<Engine, ServerError> {
    Ok(match &config.source {
        Source::Zones(dir) => load_engine(dir, config.zone_sources(), version, &config.serve_options())?,
        Source::Control { state_dir, .. } => {
            // The edge's own (the snapshot, the cookie secrets): no one else reads it.
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(ServerError::Start)?;
            match crate::follow::load_persisted(state_dir).map(|s| Engine::compile(&s)) {
                Some(Ok(engine)) => {
                    tracing::info!(
                        version = engine.version(),
                        "serving the persisted snapshot until control answers"
                    );
                    engine.with_options(&config.serve_options())
                }
                Some(Err(err)) => {
                    tracing::error!(%err, "persisted snapshot does not compile; waiting for control");
                    Engine::default()
                }
                None => {
                    tracing::info!(
                        "no persisted snapshot; answering SERVFAIL (EDE 14, Not Ready) until control sends one"
                    );
                    Engine::default()
                }
            }
        }
    })
}

/// The XDP program shared by the edge's parts, and the engine whose tables it holds.
type LoadedXdp = (Arc<std::sync::Mutex<XdpProgram>>, Arc<Engine>);

/// The XDP program, loaded with its tables and (unless `taking_over`, when the running
/// edge's links move to it later) attached; `None` without `--xdp`.
fn load_xdp(
    config: &Config,
    tcp_listeners: &[tokio::net::TcpListener],
    engine: &ArcSwap<Engine>,
    taking_over: bool,
) -> Result<Option<LoadedXdp>, ServerError> {
    if config.settings.xdp.is_empty() {
        return Ok(None);
    }
    // The bound addresses (port 0 resolved): the program answers only queries to
    // these, not to every address of the interface.
    let mut listen: Vec<std::net::SocketAddr> = tcp_listeners.iter().filter_map(|l| l.local_addr().ok()).collect();
    listen.sort_unstable();
    listen.dedup();
    let mut program = XdpProgram::load(&listen, config.settings.max_udp_payload)?;
    // Without the switch the program would answer NSID requests without the NSID.
    program
        .set_nsid(config.settings.nsid.is_some())
        .map_err(|err| ServerError::Start(std::io::Error::other(format!("XDP NSID switch: {err}"))))?;
    if let Some(jar) = &config.cookies {
        jar.tick();
        program
            .set_cookie_clock(jar.now())
            .and_then(|()| program.set_cookie_secrets(&jar.secrets()))
            .map_err(|err| ServerError::Start(std::io::Error::other(format!("XDP cookies: {err}"))))?;
    }
    if let Some(settings) = &config.rrl {
        program
            .set_rrl(settings)
            .map_err(|err| ServerError::Start(std::io::Error::other(format!("XDP rate limiter: {err}"))))?;
    }
    // Tables first, then attach: the program never runs without its answers.
    let installed = engine.load_full();
    program
        .fit_links(&config.settings.xdp)
        .map_err(|err| ServerError::Start(std::io::Error::other(format!("XDP link size: {err}"))))?;
    let started = std::time::Instant::now();
    match program.install(&installed) {
        Ok(stats) => tracing::info!(
            %stats,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "XDP tables installed"
        ),
        Err(err) => tracing::error!(%err, "XDP tables not installed; user space answers everything"),
    }
    // Taking over, the old edge's links are updated to this program once it serves.
    if !taking_over {
        program.attach(&config.settings.xdp, config.settings.xdp_mode)?;
    }
    Ok(Some((Arc::new(std::sync::Mutex::new(program)), installed)))
}

/// Lets a new edge take over at `path` (`--takeover-socket`), and SIGUSR2 start one.
fn offer_takeover(
    path: &std::path::Path,
    replacing: bool,
    handover: crate::takeover::Handover,
    shutdown: &CancellationToken,
) -> Result<(), ServerError> {
    // Registered before the socket says "may take over": a SIGUSR2 from then on is
    // handled, never the default action (termination).
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2()) {
        Ok(usr2) => {
            tokio::spawn(replace_on_usr2(usr2, shutdown.clone()));
        }
        Err(err) => tracing::warn!(%err, "no SIGUSR2 handler: replace with `qdns-edge --takeover` instead"),
    }
    let listener = crate::takeover::bind(path, replacing)?;
    tracing::info!(socket = %path.display(), "a new edge may take over here (--takeover)");
    tokio::spawn(crate::takeover::serve(listener, handover, shutdown.clone()));
    Ok(())
}

/// Tells systemd the edge is ready (`Type=notify`) once it serves a snapshot: at once
/// standalone or with a persisted snapshot, else when control's first one arrives
/// (until then the edge refuses every query, which is not ready).
async fn announce_ready(engine: Arc<ArcSwap<Engine>>, took_over: bool, shutdown: CancellationToken) {
    loop {
        let version = engine.load().version();
        if version != 0 {
            if took_over {
                qdns_listen::notify::notify(&format!(
                    "MAINPID={}\nREADY=1\nSTATUS=serving snapshot {version} (took over)\n",
                    std::process::id()
                ));
            } else {
                qdns_listen::notify::ready(&format!("serving snapshot {version}"));
            }
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

/// On SIGUSR2, starts this binary again (by the path it was started with, so an
/// upgraded binary is the one that runs) with the same arguments and `--takeover`: the
/// new process takes over from this one (`crate::takeover`), which then exits.
async fn replace_on_usr2(mut usr2: tokio::signal::unix::Signal, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = usr2.recv() => {}
        }
        let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        if args.is_empty() {
            continue;
        }
        let program = args.remove(0);
        if !args.iter().any(|a| a == "--takeover") {
            args.push("--takeover".into());
        }
        match std::process::Command::new(&program).args(&args).spawn() {
            Ok(mut child) => {
                tracing::info!(
                    pid = child.id(),
                    program = %Path::new(&program).display(),
                    "SIGUSR2: started a new edge to take over from this one"
                );
                // Reaped here if it fails before this edge exits (then it is not ours).
                std::thread::spawn(move || child.wait());
            }
            Err(err) => {
                tracing::error!(%err, program = %Path::new(&program).display(), "SIGUSR2: cannot start a new edge; still serving");
            }
        }
    }
}

/// Waits for shutdown; on each SIGHUP reloads the zones and swaps the engine atomically.
async fn reload_on_hup(
    hup: io::Result<tokio::signal::unix::Signal>,
    config: &Config,
    (engine, tap): (&ArcSwap<Engine>, Option<&crate::dnstap::Tap>),
    version: &AtomicU64,
    shutdown: &CancellationToken,
) {
    let mut hup = match hup {
        Ok(hup) => hup,
        Err(err) => {
            tracing::warn!(%err, "no SIGHUP handler: reload by restart only");
            shutdown.cancelled().await;
            return;
        }
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = hup.recv() => {}
        }
        if let Some(tap) = tap {
            remask(tap);
        }
        let Source::Zones(dir) = &config.source else {
            tracing::info!("SIGHUP ignored: zones come from control (use qdnsctl reload)");
            continue;
        };
        let next = version.load(Ordering::Relaxed) + 1;
        match load_engine(dir, config.zone_sources(), next, &config.serve_options()) {
            Ok(new) => {
                version.store(next, Ordering::Relaxed);
                engine.store(Arc::new(new));
                tracing::info!(version = next, "zones reloaded");
                crate::memory::release_freed();
            }
            Err(err) => tracing::error!(%err, "reload rejected; the running zones keep serving"),
        }
    }
}

/// The query logs' mask as the flags and `--config` file say now (SIGHUP: the file may
/// have changed); the running one stays when they do not read.
fn remask(tap: &crate::dnstap::Tap) {
    use qdns_settings::Declared as _;
    match crate::config::Settings::from_argv(std::env::args_os()) {
        Ok(settings) if settings.dnstap_mask != tap.mask() => {
            let mask = settings.dnstap_mask;
            tap.set_mask(mask);
            tracing::info!(
                v4 = mask.v4,
                v6 = mask.v6,
                "query logs: client addresses masked to new prefix lengths"
            );
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "SIGHUP: the settings do not read; the query logs' mask stays"),
    }
}

/// The sockets an edge serves on.
struct Sockets {
    /// UDP sockets, address by address.
    udp: Vec<socket2::Socket>,
    /// (address, how many of `udp`), in order.
    udp_groups: Vec<(SocketAddr, usize)>,
    /// A TCP listener per address.
    tcp: Vec<tokio::net::TcpListener>,
    /// The metrics listener.
    metrics: Option<tokio::net::TcpListener>,
}

/// The inherited sockets (all of them: the old edge served them), and bound ones for
/// the configured addresses and metrics listener not among them.
async fn sockets(config: &Config, inherited: Option<crate::takeover::Inherited>) -> Result<Sockets, ServerError> {
    let mut out = Sockets {
        udp: Vec::new(),
        udp_groups: Vec::new(),
        tcp: Vec::new(),
        metrics: None,
    };
    let inherited = inherited.unwrap_or(crate::takeover::Inherited {
        udp: Vec::new(),
        tcp: Vec::new(),
        metrics: None,
    });
    let start = |e: io::Error| ServerError::Start(e);
    let mut have = Vec::new();
    for (addr, group) in inherited.udp {
        have.push(addr);
        out.udp_groups.push((addr, group.len()));
        out.udp.extend(group);
    }
    for (_, listener) in inherited.tcp {
        listener.set_nonblocking(true).map_err(start)?;
        out.tcp
            .push(tokio::net::TcpListener::from_std(listener).map_err(start)?);
    }
    // A configured address is inherited when the old edge had it (port 0: any port
    // on that address, as it bound one).
    let inherited_addr = |a: &SocketAddr| have.iter().any(|h| h == a || (a.port() == 0 && h.ip() == a.ip()));
    for &addr in config.settings.listen.iter().filter(|a| !inherited_addr(a)) {
        let (sockets, listener) = bind_address(addr, config.workers)?;
        let bound = listener.local_addr().unwrap_or(addr);
        out.udp_groups.push((bound, sockets.len()));
        out.udp.extend(sockets);
        out.tcp.push(listener);
    }
    out.metrics = match (inherited.metrics, config.settings.metrics) {
        (Some(listener), _) => {
            listener.set_nonblocking(true).map_err(start)?;
            Some(tokio::net::TcpListener::from_std(listener).map_err(start)?)
        }
        (None, Some(addr)) => {
            Some(
                qdns_listen::bind_tcp(&addr.to_string())
                    .await
                    .map_err(|source| ServerError::Bind {
                        addr,
                        proto: "metrics",
                        source,
                    })?,
            )
        }
        (None, None) => None,
    };
    Ok(out)
}

/// The new edge serves: READY to the old one, adopt its pinned XDP links (or remove
/// them when this edge runs without XDP), attach to interfaces it did not cover, DONE.
fn complete_takeover(
    stream: &std::os::unix::net::UnixStream,
    config: &Config,
    xdp: Option<&Arc<std::sync::Mutex<XdpProgram>>>,
) -> Result<(), ServerError> {
    let pins = crate::takeover::ready(stream)?;
    match xdp.map(|p| p.lock()) {
        Some(Ok(mut program)) => {
            program.adopt_links(&pins)?;
            let rest: Vec<String> = config
                .settings
                .xdp
                .iter()
                .filter(|iface| !pins.iter().any(|(i, _)| i == *iface))
                .cloned()
                .collect();
            if !rest.is_empty() {
                program.attach(&rest, config.settings.xdp_mode)?;
            }
        }
        _ => {
            // Unpinned, the links close with the old edge: its program detaches.
            for (iface, pin) in &pins {
                tracing::info!(%iface, "the old edge's XDP program detaches (this edge runs without --xdp)");
                let _ = std::fs::remove_file(pin);
            }
        }
    }
    // Under systemd this process is the service's main one from now on; said before
    // DONE, so before the old edge exits (the unit has NotifyAccess=all).
    qdns_listen::notify::notify(&format!("MAINPID={}\n", std::process::id()));
    crate::takeover::finish(stream);
    tracing::info!("takeover complete");
    Ok(())
}

/// Binds the UDP sockets `workers` threads need (see [`udp::sockets_for`]) and one TCP
/// listener on the same address and port. With port 0 the first UDP socket picks the
/// port; if TCP cannot have that port too, another is tried.
fn bind_address(
    addr: SocketAddr,
    workers: usize,
) -> Result<(Vec<socket2::Socket>, tokio::net::TcpListener), ServerError> {
    let udp_err = |source| ServerError::Bind {
        addr,
        proto: "udp",
        source,
    };
    let attempts = if addr.port() == 0 { 32 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let first = udp::bind(addr).map_err(udp_err)?;
        let bound = first.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
        match bind_tcp(bound) {
            Ok(listener) => {
                let mut sockets = vec![first];
                for _ in 1..udp::sockets_for(workers) {
                    sockets.push(udp::bind(bound).map_err(udp_err)?);
                }
                return Ok((sockets, listener));
            }
            Err(err) => last = Some(err),
        }
    }
    Err(ServerError::Bind {
        addr,
        proto: "tcp",
        source: last.unwrap_or_else(|| io::Error::other("no attempt made")),
    })
}

fn bind_tcp(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(socket.into())
}
