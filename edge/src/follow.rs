//! Following the control plane (SPEC §1): connect to `--control`, take the snapshot
//! (whole, or as a delta from the one served: `qdns_link::delta`), then health deltas
//! and new versions as deltas; persist them in `--state-dir`; reconnect with backoff
//! forever.
//!
//! Statically stable: the engine keeps serving whatever it last applied while control is
//! away, and a restarted edge serves the persisted snapshot before control answers.
use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::ArcSwap;
use qdns_link::protocol::{self, HealthDelta, PersistedHealth, PersistedZones, ToControl, ToEdge, XdpReport};
use qdns_zone::Snapshot;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::{engine::ServeOptions, ready::Readiness, xdp::XdpProgram, Engine};

/// How often the XDP counters go to control (`qdnsctl status`).
pub const XDP_REPORT_EVERY: Duration = Duration::from_secs(2);

/// Longest wait for control's TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where control serves snapshots.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A Unix socket path.
    Unix(PathBuf),
    /// `tcp://ADDR:PORT`: neither encrypted nor authenticated.
    Tcp(String),
    /// `tls://HOST:PORT`: mutual TLS; control must present a certificate of the
    /// location CA for the configured name, and this edge presents its own.
    Tls {
        /// HOST:PORT.
        addr: String,
        /// Certificates (read again when they change).
        tls: Arc<qdns_link::tls::ClientTls>,
    },
}

impl Endpoint {
    /// Parses `tcp://ADDR:PORT` or a path (`tls://` needs its certificates: see
    /// `config`).
    #[must_use]
    pub fn parse(text: &str) -> Endpoint {
        match text.strip_prefix("tcp://") {
            Some(addr) => Endpoint::Tcp(addr.to_owned()),
            None => Endpoint::Unix(PathBuf::from(text)),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
            Endpoint::Tcp(addr) => write!(f, "tcp://{addr}"),
            Endpoint::Tls { addr, .. } => write!(f, "tls://{addr}"),
        }
    }
}

/// Files in the state directory.
fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshot.bin")
}
fn health_path(dir: &Path) -> PathBuf {
    dir.join("health.bin")
}
fn cookies_path(dir: &Path) -> PathBuf {
    dir.join("cookies.bin")
}
fn zones_path(dir: &Path) -> PathBuf {
    dir.join("zones.bin")
}

/// Largest zone list a hello carries (origins and digests); an edge serving more
/// zones than fit asks for the snapshot whole.
const MAX_HELLO_ZONES_OCTETS: usize = 256 * 1024;

/// The location's cookie secrets as persisted (the last [`ToEdge::Cookies`]).
#[derive(serde::Serialize, serde::Deserialize)]
struct PersistedCookies {
    current: [u8; 16],
    previous: Option<[u8; 16]>,
    next: Option<[u8; 16]>,
}

/// Puts the persisted cookie secrets (control's, from before a restart) into `jar`, so
/// cookies this location gave out stay valid while control is away.
pub fn restore_cookies(dir: &Path, jar: &crate::cookies::CookieJar) {
    match protocol::load::<PersistedCookies>(&cookies_path(dir)) {
        Ok(Some(saved)) => jar.set_secrets(saved.current, saved.previous, saved.next),
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(%err, "persisted cookie secrets unusable; using this edge's own until control sends them");
        }
    }
}

/// The persisted snapshot with its latest persisted health, if both are sound.
/// A damaged file is reported and ignored: the edge then waits for control.
#[must_use]
pub fn load_persisted(dir: &Path) -> Option<Snapshot> {
    let mut snapshot = match protocol::load_snapshot(&snapshot_path(dir)) {
        Ok(Some(snapshot)) => snapshot,
        Ok(None) => return None,
        Err(err) => {
            tracing::error!(%err, "persisted snapshot unusable; waiting for control");
            return None;
        }
    };
    match protocol::load::<PersistedHealth>(&health_path(dir)) {
        Ok(Some(health)) if health.snapshot == snapshot.version => snapshot.bitmap = health.bitmap,
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "persisted health unusable; using the snapshot's own"),
    }
    Some(snapshot)
}

/// State of the link.
struct Link {
    snapshot: u64,
    seq: u64,
    bitmap: Vec<u64>,
}

/// What a follower works with.
pub struct Follower {
    /// The location's controls, in the order they are preferred (`--control`, repeated).
    pub endpoints: Vec<Endpoint>,
    /// Where snapshots and health are persisted.
    pub state_dir: PathBuf,
    /// The engine the workers answer from.
    pub engine: Arc<ArcSwap<Engine>>,
    /// Response settings for every compiled engine.
    pub options: ServeOptions,
    /// This edge's name (`Hello`).
    pub edge_name: String,
    /// The XDP program, whose counters are reported.
    pub xdp: Option<Arc<Mutex<XdpProgram>>>,
    /// Told when the link is up and when it is lost.
    pub readiness: Arc<Readiness>,
    /// Longest wait for control to connect and send its snapshot.
    pub control_timeout: Duration,
    /// The keepalive interval asked of control (`--control-keepalive`; `None`: off).
    pub keepalive: Option<Duration>,
    /// Largest frame accepted from control (`--max-snapshot-frame`).
    pub max_frame: usize,
    /// What went wrong with the link and the state directory, for the metrics.
    pub stats: Arc<LinkStats>,
}

/// Faults of the link and the state directory (`qdns_edge_control_timeouts_total`,
/// `qdns_edge_persist_failures_total`).
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Connections given up because control did not connect or send its snapshot in
    /// time (it accepted and stalled).
    pub control_timeouts: std::sync::atomic::AtomicU64,
    /// Snapshots or health words that could not be written to the state directory (it
    /// is full or read-only: the edge serves on, from memory).
    pub persist_failures: std::sync::atomic::AtomicU64,
    /// New snapshot versions taken as deltas.
    pub deltas_applied: std::sync::atomic::AtomicU64,
    /// Deltas that could not be applied (the edge then asks for the snapshot whole).
    pub deltas_refused: std::sync::atomic::AtomicU64,
    /// Frame octets read from control (length prefixes included).
    pub received_octets: std::sync::atomic::AtomicU64,
}

/// The zones the engine serves with their digests, for the hello (empty: unknown, or a
/// delta failed: the next snapshot comes whole).
type ServedZones = Vec<(Vec<u8>, u64)>;

/// What the state directory says the engine (at `version`) serves.
fn persisted_zones(dir: &Path, version: u64) -> ServedZones {
    match protocol::load::<PersistedZones>(&zones_path(dir)) {
        Ok(Some(saved)) if saved.version == version && version > 0 => saved.zones,
        _ => Vec::new(),
    }
}

/// How often an edge that follows a later control of its location asks whether an
/// earlier one answers again.
const EARLIER_PROBE: Duration = Duration::from_secs(5);
/// The longest between two asks, after switches back that did not link.
const EARLIER_PROBE_MAX: Duration = Duration::from_secs(300);

/// How a session with a control ended without an error.
enum Ended {
    /// Control closed the connection.
    Closed,
    /// An earlier control of the location answers again: follow it (its index).
    EarlierBack(usize),
}

/// Follows the location's controls until `shutdown`: the first that answers, in order;
/// the next at once when its link is lost or silent, each again after a backoff once all
/// failed; an earlier one again as soon as it answers.
pub async fn follow(follower: Follower, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(100);
    let mut served = persisted_zones(&follower.state_dir, follower.engine.load().version());
    let count = follower.endpoints.len().max(1);
    // The control followed (its index), and how many in a row ended without linking.
    let mut at = 0;
    let mut failed = 0;
    // How often earlier controls are asked, and whether the one followed is one the
    // edge went back to: an earlier control that accepts connections but does not
    // serve (hung, or refusing this edge) is asked less and less often (doubling up to
    // EARLIER_PROBE_MAX), not switched to every few seconds.
    let mut probe_every = EARLIER_PROBE;
    let mut went_back = false;
    loop {
        let Some(endpoint) = follower.endpoints.get(at) else {
            return;
        };
        let earlier = &follower.endpoints[..at];
        let mut linked = false;
        let attempt = async {
            let (r, w) = tokio::time::timeout(follower.control_timeout, connect(endpoint))
                .await
                .map_err(|_| stalled(&follower, "connect"))??;
            let earlier = (earlier, probe_every);
            session(r, w, &follower, &mut backoff, &mut served, earlier, &mut linked).await
        };
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            result = attempt => result,
        };
        follower.readiness.unlinked();
        let _ = follower.engine.load().check_dnssec_expiry();
        if linked {
            failed = 0;
            if went_back {
                probe_every = EARLIER_PROBE;
            }
        } else if went_back {
            probe_every = (probe_every * 2).min(EARLIER_PROBE_MAX);
        }
        went_back = false;
        match result {
            Ok(Ended::EarlierBack(earlier)) => {
                let back = &follower.endpoints[earlier];
                tracing::info!(control = %back, left = %endpoint, "an earlier control of the location answers again; following it");
                at = earlier;
                failed = 0;
                went_back = true;
                continue;
            }
            Ok(Ended::Closed) => {
                tracing::warn!(control = %endpoint, "control closed the connection; serving the last snapshot");
            }
            Err(err) => {
                tracing::warn!(control = %endpoint, %err, retry_in = ?backoff, "control unreachable; serving the last snapshot");
            }
        }
        // The next control of the location at once; once every one failed in a row,
        // the first again after the backoff.
        failed += 1;
        if failed < count {
            at = (at + 1) % count;
            tracing::info!(control = %follower.endpoints[at], "trying the next control of the location");
            continue;
        }
        failed = 0;
        at = 0;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Resolves with the index of the first of `earlier` that accepts a connection, asked
/// every `every`; never when there is none.
async fn earlier_back(earlier: &[Endpoint], every: Duration) -> usize {
    if earlier.is_empty() {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(every).await;
        for (index, endpoint) in earlier.iter().enumerate() {
            if let Ok(Ok(_)) = tokio::time::timeout(EARLIER_PROBE, connect(endpoint)).await {
                return index;
            }
        }
    }
}

/// The read and write halves of one connection to control.
type Halves = (
    Box<dyn AsyncRead + Unpin + Send + 'static>,
    Box<dyn AsyncWrite + Unpin + Send + 'static>,
);

/// Arms dead-path detection on a TCP link (`qdns_link::liveness`); a refusal is logged
/// and the link used as it is.
fn watch(stream: &tokio::net::TcpStream) {
    if let Err(err) = qdns_link::liveness::watch(stream) {
        tracing::warn!(%err, "cannot arm TCP keepalive on the control link; a dead path may go unnoticed");
    }
}

/// Connects to control; on `tls://`, completes the mutual-TLS handshake first.
async fn connect(endpoint: &Endpoint) -> std::io::Result<Halves> {
    match endpoint {
        Endpoint::Unix(path) => {
            let (r, w) = tokio::net::UnixStream::connect(path).await?.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
        Endpoint::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr.as_str()).await?;
            let _ = stream.set_nodelay(true);
            watch(&stream);
            let (r, w) = stream.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
        Endpoint::Tls { addr, tls } => {
            let stream = tokio::net::TcpStream::connect(addr.as_str()).await?;
            let _ = stream.set_nodelay(true);
            watch(&stream);
            let (connector, name) = tls.connector();
            // A control that cannot prove itself is never read from: nothing of its is
            // applied or persisted.
            let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))?
                .map_err(|e| std::io::Error::new(e.kind(), format!("TLS with control failed: {e}")))?;
            let (r, w) = tokio::io::split(stream);
            Ok((Box::new(r), Box::new(w)))
        }
    }
}

/// Control did not do `what` within the timeout: counted, and the error to retry on.
fn stalled(follower: &Follower, what: &str) -> std::io::Error {
    follower
        .stats
        .control_timeouts
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("control did not {what} within {:?}", follower.control_timeout),
    )
}

async fn session<R: AsyncRead + Unpin + Send + 'static, W: AsyncWrite + Unpin>(
    reader: R,
    mut writer: W,
    follower: &Follower,
    backoff: &mut Duration,
    served: &mut ServedZones,
    (earlier, probe_every): (&[Endpoint], Duration),
    linked: &mut bool,
) -> std::io::Result<Ended> {
    let Follower {
        engine,
        options,
        readiness,
        ..
    } = follower;
    let xdp = follower.xdp.as_deref();
    send_hello(&mut writer, follower, engine.load().version(), served).await?;
    // Keepalives run once control has sent its first (a control that predates them
    // sends none, and would not read ours): then a control silent for
    // KEEPALIVE_MISSES intervals is given up on.
    let every = follower.keepalive.unwrap_or(Duration::from_secs(3600));
    let mut keepalive_on = false;
    let mut keepalives = tokio::time::interval(every);
    keepalives.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let silence = tokio::time::sleep(every * protocol::KEEPALIVE_MISSES);
    tokio::pin!(silence);
    // Frames are read on their own task, so the XDP report tick never cuts a read short.
    let (frames, mut incoming) = tokio::sync::mpsc::channel(4);
    let _reading = AbortOnDrop(tokio::spawn(read_frames(
        reader,
        frames,
        follower.max_frame,
        Arc::clone(&follower.stats),
    )));
    let mut report = tokio::time::interval(XDP_REPORT_EVERY);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut link: Option<Link> = None;
    // The schema control's frames come in: this edge answers in it (a control from
    // before numbering reads frames without a number).
    let mut schema = qdns_link::schema::UNNUMBERED;
    // A snapshot swapped in and not yet persisted (it is, right after its ack).
    let mut unsaved: Option<Snapshot> = None;
    // A control that accepts and then stalls is given up on (and retried with backoff):
    // its snapshot must arrive within the timeout.
    let first_snapshot = tokio::time::sleep(follower.control_timeout);
    tokio::pin!(first_snapshot);
    // An earlier control of the location back: taken between frames, never mid-apply.
    let back = earlier_back(earlier, probe_every);
    tokio::pin!(back);
    loop {
        let msg = tokio::select! {
            // A frame that arrived while a snapshot compiled counts before the silence.
            biased;
            msg = incoming.recv() => match msg {
                Some(Ok((number, msg))) => {
                    schema = number;
                    msg
                }
                Some(Err(err)) => return Err(err),
                None => return Ok(Ended::Closed),
            },
            index = &mut back => return Ok(Ended::EarlierBack(index)),
            () = &mut first_snapshot, if link.is_none() => return Err(stalled(follower, "send its snapshot")),
            () = &mut silence, if keepalive_on => {
                follower.stats.control_timeouts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("control silent for {:?} (keepalive)", every * protocol::KEEPALIVE_MISSES),
                ));
            }
            _ = keepalives.tick(), if keepalive_on => {
                send(&mut writer, schema, &ToControl::Keepalive).await?;
                continue;
            }
            _ = report.tick(), if xdp.is_some() => {
                if let Some(report) = xdp.and_then(xdp_report) {
                    send(&mut writer, schema, &ToControl::Xdp(report)).await?;
                }
                continue;
            }
        };
        silence
            .as_mut()
            .reset(tokio::time::Instant::now() + every * protocol::KEEPALIVE_MISSES);
        let since = follows(&msg);
        let applied = match msg {
            ToEdge::Keepalive => {
                if !keepalive_on && follower.keepalive.is_some() {
                    keepalive_on = true;
                    keepalives.reset();
                    tracing::debug!("control speaks keepalives");
                }
                continue;
            }
            ToEdge::Snapshot { snapshot, seq } => {
                let applied = apply_snapshot(*snapshot, seq, engine, options);
                took_version(applied, served, backoff, &mut link, &mut unsaved)?
            }
            ToEdge::Delta(delta) => {
                let applied = apply_snapshot_delta(*delta, follower).await;
                took_version(applied, served, backoff, &mut link, &mut unsaved)?
            }
            ToEdge::Health(delta) | ToEdge::HealthSince { delta, .. } => {
                let Some(current) = link.as_mut() else {
                    return Err(std::io::Error::other("health delta before a snapshot"));
                };
                apply_health(current, since, &delta, follower).await?
            }
            cookies @ ToEdge::Cookies { .. } => {
                apply_cookies(follower, cookies).await;
                continue;
            }
        };
        readiness.linked();
        *linked = true;
        acknowledge(&mut writer, schema, applied, unsaved.take(), served, follower).await?;
    }
}

/// Acknowledges snapshot version and health delta `applied` once it serves them, then
/// persists the snapshot swapped in, if any, before the next frame is read (so a later
/// health file is never removed by this snapshot's write) — even when the ack could
/// not be sent.
async fn acknowledge<W: AsyncWrite + Unpin>(
    writer: &mut W,
    schema: u16,
    applied: (u64, u64),
    unsaved: Option<Snapshot>,
    served: &mut ServedZones,
    follower: &Follower,
) -> std::io::Result<()> {
    let acked = send(
        writer,
        schema,
        &ToControl::Applied {
            snapshot: applied.0,
            seq: applied.1,
        },
    )
    .await;
    if let Some(snapshot) = unsaved {
        *served = persist_snapshot(snapshot, &follower.state_dir, &follower.stats).await;
    }
    acked
}

/// The health delta a health frame follows: a single delta the one before it, a
/// folded one what it says.
fn follows(msg: &ToEdge) -> u64 {
    match msg {
        ToEdge::Health(delta) => delta.seq.wrapping_sub(1),
        ToEdge::HealthSince { since, .. } => *since,
        _ => 0,
    }
}

/// A new snapshot version applied (swapped in, to persist once acknowledged): the link
/// moves to it, the backoff starts again; the (snapshot, seq) to acknowledge. One that
/// could not be applied leaves the zones served unknown: the next hello names none, and
/// control sends the snapshot whole.
fn took_version(
    applied: std::io::Result<(Link, Snapshot)>,
    served: &mut ServedZones,
    backoff: &mut Duration,
    link: &mut Option<Link>,
    unsaved: &mut Option<Snapshot>,
) -> std::io::Result<(u64, u64)> {
    let (applied, snapshot) = applied.inspect_err(|_| served.clear())?;
    *unsaved = Some(snapshot);
    *backoff = Duration::from_millis(100);
    let ack = (applied.snapshot, applied.seq);
    *link = Some(applied);
    Ok(ack)
}

/// The hello, with the keepalive this edge asks for in its extension, and the zones it
/// serves (control then sends only what differs).
async fn send_hello<W: AsyncWrite + Unpin>(
    writer: &mut W,
    follower: &Follower,
    serving: u64,
    served: &ServedZones,
) -> std::io::Result<()> {
    let octets: usize = served.iter().map(|(origin, _)| origin.len() + 10).sum();
    let zones = if serving > 0 && octets <= MAX_HELLO_ZONES_OCTETS {
        served.clone()
    } else {
        Vec::new()
    };
    let hello = protocol::encode_hello(
        &follower.edge_name,
        (serving > 0).then_some(serving),
        &protocol::HelloExtension {
            version: protocol::HELLO_EXTENSION_VERSION,
            keepalive_secs: follower
                .keepalive
                .map_or(0, |k| u16::try_from(k.as_secs()).unwrap_or(u16::MAX)),
            cookies: follower.options.cookies.is_some(),
            deltas: true,
            zones,
            schema: qdns_link::schema::SCHEMA,
        },
    )
    .map_err(std::io::Error::other)?;
    writer.write_all(&hello).await?;
    writer.flush().await
}

/// Applies a health delta to the link's bitmap, the engine and the state directory;
/// the (snapshot, seq) to acknowledge. A delta out of sequence ends the session (a
/// full snapshot follows on reconnect).
async fn apply_health(
    current: &mut Link,
    since: u64,
    delta: &HealthDelta,
    follower: &Follower,
) -> std::io::Result<(u64, u64)> {
    if !apply_delta(current, since, delta) {
        tracing::warn!(
            have = current.seq,
            got = delta.seq,
            "health delta out of sequence or past the snapshot's slots; resyncing"
        );
        return Err(std::io::Error::other("delta out of sequence"));
    }
    follower.engine.load().set_health(current.bitmap.clone());
    let health = PersistedHealth {
        snapshot: current.snapshot,
        seq: current.seq,
        bitmap: current.bitmap.clone(),
    };
    let dir = follower.state_dir.clone();
    let stats = Arc::clone(&follower.stats);
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(err) = protocol::persist(&health_path(&dir), &health) {
            stats
                .persist_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(%err, "cannot persist health; serving it from memory");
        }
    })
    .await;
    Ok((current.snapshot, current.seq))
}

/// Takes the location's cookie secrets and persists them (a failure is counted: the
/// secrets serve from memory).
async fn apply_cookies(follower: &Follower, message: ToEdge) {
    let (
        ToEdge::Cookies {
            current,
            previous,
            next,
        },
        Some(jar),
    ) = (message, &follower.options.cookies)
    else {
        return;
    };
    let secrets = PersistedCookies {
        current,
        previous,
        next,
    };
    jar.set_secrets(secrets.current, secrets.previous, secrets.next);
    tracing::info!(
        previous = secrets.previous.is_some(),
        next = secrets.next.is_some(),
        "cookie secrets from control"
    );
    let dir = follower.state_dir.clone();
    let stats = Arc::clone(&follower.stats);
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(err) = protocol::persist(&cookies_path(&dir), &secrets) {
            stats
                .persist_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(%err, "cannot persist the cookie secrets; serving them from memory");
        }
    })
    .await;
}

/// Compiles and swaps in `snapshot`; the link state it starts, and the snapshot to
/// persist.
fn apply_snapshot(
    snapshot: Snapshot,
    seq: u64,
    engine: &ArcSwap<Engine>,
    options: &ServeOptions,
) -> std::io::Result<(Link, Snapshot)> {
    swap_in(&snapshot, engine, options, None)?;
    tracing::info!(
        version = snapshot.version,
        zones = snapshot.zones.len(),
        "snapshot applied"
    );
    Ok((link_of(&snapshot, seq), snapshot))
}

/// The link state a snapshot at health delta `seq` starts.
fn link_of(snapshot: &Snapshot, seq: u64) -> Link {
    Link {
        snapshot: snapshot.version,
        seq,
        bitmap: snapshot.bitmap.clone(),
    }
}

/// Compiles `snapshot` and swaps it in; a snapshot that does not compile is refused and
/// the running one kept.
/// `changes`: the names a delta changed, when the snapshot came from one.
fn swap_in(
    snapshot: &Snapshot,
    engine: &ArcSwap<Engine>,
    options: &ServeOptions,
    changes: Option<crate::engine::Changes>,
) -> std::io::Result<()> {
    let compiled = match Engine::compile(snapshot) {
        Ok(e) => match changes {
            Some(changes) => e.with_options(options).with_changes(changes),
            None => e.with_options(options),
        },
        Err(err) => {
            tracing::error!(%err, version = snapshot.version, "snapshot rejected; keeping the running one");
            return Err(std::io::Error::other("rejected snapshot"));
        }
    };
    let _ = compiled.check_dnssec_expiry();
    engine.store(Arc::new(compiled));
    Ok(())
}

/// A delta applied: the snapshot it makes, whether it keeps every zone as it is, and
/// the names it changes (when it only changes record sets).
type Applied = (Snapshot, bool, Option<crate::engine::Changes>);

/// Applies a delta to the snapshot served (read back from the state directory, where
/// every applied snapshot is persisted before it is acknowledged): compiled and swapped
/// in, or — when it keeps every zone as it is — the engine relabelled with the new
/// version and health. A delta for another version, or one that does not make the
/// zones control has, is refused (counted) and changes nothing.
async fn apply_snapshot_delta(
    delta: qdns_link::delta::SnapshotDelta,
    follower: &Follower,
) -> std::io::Result<(Link, Snapshot)> {
    let dir = follower.state_dir.clone();
    let serving = follower.engine.load().version();
    let seq = delta.seq;
    let started = std::time::Instant::now();
    let built = tokio::task::spawn_blocking(move || -> Result<Applied, String> {
        let base = protocol::load_snapshot(&snapshot_path(&dir))
            .map_err(|e| e.to_string())?
            .ok_or("no persisted snapshot to apply it to")?;
        if base.version != serving {
            return Err(format!(
                "the persisted snapshot is {}, not the served {serving}",
                base.version
            ));
        }
        let same_zones = delta.zones.len() == base.zones.len()
            && delta.zones.iter().zip(&base.zones).all(|(change, zone)| {
                matches!(change, qdns_link::delta::ZoneChange::Keep { origin } if *origin == zone.origin)
            });
        // The names it changes, for the XDP tables' patch (`crate::xdp::patch`).
        let changes = qdns_link::delta::changed_names(&base, &delta)
            .map(|names| crate::engine::Changes::new(base.version, names));
        let snapshot = qdns_link::delta::apply(base, delta).map_err(|e| e.to_string())?;
        Ok((snapshot, same_zones, changes))
    })
    .await
    .map_err(std::io::Error::other)?;
    let (snapshot, same_zones, changes) = built.map_err(|err| {
        follower
            .stats
            .deltas_refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(%err, "snapshot delta refused; asking control for the whole snapshot");
        std::io::Error::other(format!("delta refused: {err}"))
    })?;
    follower
        .stats
        .deltas_applied
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let built_in = started.elapsed();
    if same_zones {
        let engine = follower.engine.load();
        engine.set_health(snapshot.bitmap.clone());
        engine.relabel(snapshot.version);
    } else {
        swap_in(&snapshot, &follower.engine, &follower.options, changes)?;
    }
    tracing::info!(
        version = snapshot.version,
        zones = snapshot.zones.len(),
        from = "delta",
        recompiled = !same_zones,
        built_ms = built_in.as_millis(),
        swapped_ms = started.elapsed().as_millis(),
        "snapshot applied"
    );
    Ok((link_of(&snapshot, seq), snapshot))
}

/// Persists `snapshot` as the one served and the digests of its zones (the health file
/// of the one before goes); the zones it serves. A failure is counted: the snapshot
/// serves from memory.
async fn persist_snapshot(snapshot: Snapshot, state_dir: &Path, stats: &Arc<LinkStats>) -> ServedZones {
    let dir = state_dir.to_path_buf();
    let stats = Arc::clone(stats);
    let zones = tokio::task::spawn_blocking(move || {
        let zones: ServedZones = snapshot
            .zones
            .iter()
            .map(|zone| (zone.origin.clone(), qdns_link::delta::zone_digest(zone)))
            .collect();
        let saved = PersistedZones {
            version: snapshot.version,
            zones,
        };
        let written = protocol::persist(&snapshot_path(&dir), &snapshot)
            .and_then(|()| protocol::persist(&zones_path(&dir), &saved));
        if let Err(err) = written {
            stats.persist_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(%err, "cannot persist the snapshot; serving it from memory (a restart would serve the last one persisted)");
        }
        let _ = std::fs::remove_file(health_path(&dir));
        saved.zones
    })
    .await
    .unwrap_or_default();
    // The snapshot is persisted and dropped: give the pages back (best effort: mimalloc
    // collects this thread's heap and abandoned ones).
    crate::memory::release_freed();
    zones
}

/// Reads frames until the connection ends (`None` to the receiver) or fails.
async fn read_frames<R: AsyncRead + Unpin>(
    mut reader: R,
    frames: tokio::sync::mpsc::Sender<std::io::Result<(u16, ToEdge)>>,
    max_frame: usize,
    stats: Arc<LinkStats>,
) {
    loop {
        let mut prefix = [0u8; 4];
        let msg = match reader.read_exact(&mut prefix).await {
            Ok(_) => read_body(&mut reader, prefix, max_frame, &stats).await,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
            Err(e) => Err(e),
        };
        let failed = msg.is_err();
        if frames.send(msg).await.is_err() || failed {
            return;
        }
    }
}

/// A frame's schema and message: the buffer grows only with octets that arrive (a
/// snapshot may be large, but a peer announcing one and sending nothing costs nothing).
async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    prefix: [u8; 4],
    max_frame: usize,
    stats: &LinkStats,
) -> std::io::Result<(u16, ToEdge)> {
    let len = protocol::frame_len_within(prefix, max_frame)
        .map_err(|e| std::io::Error::other(format!("{e} (--max-snapshot-frame): raise it for snapshots this large")))?;
    let mut body = Vec::new();
    let got = reader.take(len as u64).read_to_end(&mut body).await?;
    stats
        .received_octets
        .fetch_add(got as u64 + 4, std::sync::atomic::Ordering::Relaxed);
    if got != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    protocol::decode_to_edge(&body).map_err(std::io::Error::other)
}

/// Aborts the task when the session ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn xdp_report(xdp: &Mutex<XdpProgram>) -> Option<XdpReport> {
    let program = xdp.lock().ok()?;
    Some(XdpReport {
        interfaces: program.interfaces().to_vec(),
        generation: program.table_stats().0,
        counters: program
            .counters()
            .into_iter()
            .map(|(label, n)| (label.to_owned(), n))
            .collect(),
    })
}

/// Applies `delta` (which folds in the deltas after `since`) when it follows what the
/// link holds for this snapshot and stays within its bitmap.
fn apply_delta(link: &mut Link, since: u64, delta: &HealthDelta) -> bool {
    if delta.snapshot != link.snapshot || since != link.seq || delta.seq <= since {
        return false;
    }
    if !apply_words(&mut link.bitmap, &delta.words) {
        return false;
    }
    link.seq = delta.seq;
    true
}

/// Writes changed words into `bitmap`, all or none: false (and nothing written) when a
/// word is past its end. The snapshot sized the bitmap for its slots, and a delta never
/// adds slots — growing it on a delta's word index would let one frame ask for
/// 2^32 words (32 GiB).
pub fn apply_words(bitmap: &mut [u64], words: &[(u32, u64)]) -> bool {
    if words.iter().any(|&(index, _)| index as usize >= bitmap.len()) {
        return false;
    }
    for &(index, value) in words {
        if let Some(word) = bitmap.get_mut(index as usize) {
            *word = value;
        }
    }
    true
}

/// Writes `msg` in `schema` (its form has not changed since numbering).
async fn send<W: AsyncWrite + Unpin>(writer: &mut W, schema: u16, msg: &ToControl) -> std::io::Result<()> {
    let frame = protocol::encode_in(schema, msg).map_err(std::io::Error::other)?;
    writer.write_all(&frame).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use qdns_link::protocol::HealthDelta;

    use super::{apply_delta, Link};

    fn delta(snapshot: u64, seq: u64, words: Vec<(u32, u64)>) -> HealthDelta {
        HealthDelta { snapshot, seq, words }
    }

    #[test]
    fn health_deltas_apply_in_sequence_single_or_folded() {
        let mut link = Link {
            snapshot: 7,
            seq: 2,
            bitmap: vec![0, 0],
        };
        // A single delta follows the one held.
        assert!(!apply_delta(&mut link, 3, &delta(7, 4, vec![(0, 1)])), "a gap");
        assert!(
            !apply_delta(&mut link, 2, &delta(8, 3, vec![(0, 1)])),
            "another version"
        );
        assert!(apply_delta(&mut link, 2, &delta(7, 3, vec![(0, 1)])));
        // A folded one (deltas 4..=9) follows the one held, and moves past them all.
        assert!(!apply_delta(&mut link, 4, &delta(7, 9, vec![(1, 5)])), "not from 3");
        assert!(!apply_delta(&mut link, 3, &delta(7, 3, vec![(1, 5)])), "nothing new");
        assert!(
            !apply_delta(&mut link, 3, &delta(7, 9, vec![(2, 5)])),
            "past the bitmap"
        );
        assert_eq!(link.bitmap, [1, 0], "a refused delta writes nothing");
        assert!(apply_delta(&mut link, 3, &delta(7, 9, vec![(1, 5), (0, 3)])));
        assert_eq!((link.seq, link.bitmap.as_slice()), (9, &[3, 5][..]));
    }
}
