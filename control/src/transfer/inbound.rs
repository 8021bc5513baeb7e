//! Zone transfer in (SPEC §10, `[zone] primary`): control as the secondary of a hidden
//! primary.
//!
//! For each zone with `primary`, control asks the primary for its SOA — at start, on
//! the primary's NOTIFY (received on `--transfer-listen`), and on the SOA's refresh
//! timer (retry after a failure) — and when the serial moved (or there is no copy yet)
//! takes the whole zone by AXFR over TCP, TSIG-signed with `primary_tsig`. The records
//! (DNSSEC records left out: control signs what the zone file asks it to) are written
//! as a master file, `STATE_DIR/secondary/ORIGIN.zone`, which the zone file's health
//! checks and policy sets load on top of (a name in both is the loader's "defined
//! twice" error); then control reloads as `qdnsctl reload` does. A copy that does not
//! load is put back to the one before, so the zone keeps serving; a primary that is
//! gone leaves the last copy serving until the SOA's expire, then the zone is dropped.
//!
//! Every transfer is bounded before and while it is authenticated: [`MAX_BYTES`]
//! (`--transfer-in-max-bytes`),
//! [`MAX_RECORDS`], each message read within [`READ_TIMEOUT`].
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_util::sync::CancellationToken;

use super::{catalog, ixfr, primary::Primary};
use super::{
    serial_after,
    tsig::{self, Chain, Key},
    wire::{self, rcode, rtype},
    Outcome, Transfers,
};

/// What following primaries works with: the state (for the zones that name a
/// primary), where copies are kept, the transfer settings and counters, and the reload
/// service a new copy is loaded through.
pub struct Inbound {
    /// The state.
    pub state: std::sync::Arc<tokio::sync::Mutex<crate::state::State>>,
    /// The state directory (copies go under [`super::SECONDARY_DIR`]).
    pub state_dir: PathBuf,
    /// The transfer settings, keys and counters.
    pub transfers: std::sync::Arc<super::Transfers>,
    /// Loads the zone directory again.
    pub reloads: crate::reloads::Reloads,
}

/// Most octets one transfer in may carry, unless `--transfer-in-max-bytes` says.
pub const MAX_BYTES: usize = 512 << 20;
/// Most records one transfer in may carry.
pub const MAX_RECORDS: usize = 20_000_000;
/// Time to connect, and to read each message.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest wait between refreshes of a zone, whatever its SOA says.
const MIN_REFRESH: Duration = Duration::from_secs(5);
/// Longest refresh unless `--transfer-in-deadline` says otherwise.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// The zones taken from a primary, and the NOTIFYs received for them.
#[derive(Debug, Default)]
pub struct Primaries {
    zones: Mutex<BTreeMap<Vec<u8>, Primary>>,
    pending: Mutex<Vec<qdns_zone::Pending>>,
    notified: Mutex<BTreeSet<Vec<u8>>>,
    wake: tokio::sync::Notify,
}

impl Primaries {
    pub(super) fn set_pending(&self, pending: Vec<qdns_zone::Pending>) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = pending;
        self.wake.notify_one();
    }

    /// The zones not served for want of a copy, and the catalog zones (`ORIGIN from
    /// PRIMARY`).
    #[must_use]
    pub fn waiting(&self) -> Vec<String> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|p| {
                let what = if p.catalog { "catalog" } else { "no copy yet" };
                format!("{} from {} ({what})", p.origin, p.primary)
            })
            .collect()
    }

    fn set_zones(&self, zones: BTreeMap<Vec<u8>, Primary>) {
        *self.zones.lock().unwrap_or_else(PoisonError::into_inner) = zones;
    }

    /// The primary of zone `origin` (wire, lowercase).
    #[must_use]
    pub fn primary_of(&self, origin: &[u8]) -> Option<Primary> {
        self.zones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(origin)
            .cloned()
    }

    /// True when `peer` is the primary of a zone taken from one.
    #[must_use]
    pub fn is_primary(&self, peer: IpAddr) -> bool {
        self.zones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|primary| same_host(primary.addr.ip(), peer))
    }

    /// Marks `origin` notified and wakes the follower.
    pub fn notified(&self, origin: &[u8]) {
        self.notified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(origin.to_vec());
        self.wake.notify_one();
    }

    fn take_notified(&self) -> BTreeSet<Vec<u8>> {
        std::mem::take(&mut *self.notified.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// True when `peer` is `primary`'s address (an IPv4 primary seen as an IPv4-mapped
/// IPv6 peer included).
fn same_host(primary: IpAddr, peer: IpAddr) -> bool {
    primary == peer || matches!((primary, peer), (IpAddr::V4(a), IpAddr::V6(b)) if b.to_ipv4_mapped() == Some(a))
}

/// The answer to a NOTIFY for `origin` from `peer` (signed by `key`, if it was): true
/// when it comes from the zone's primary with the zone's key.
#[must_use]
pub fn accept_notify(transfers: &Transfers, origin: &[u8], peer: IpAddr, key: Option<&Key>) -> bool {
    let Some(primary) = transfers.inbound.primary_of(origin) else {
        return false;
    };
    let from_primary = same_host(primary.addr.ip(), peer);
    let signed_right = primary.tsig.as_deref() == key.map(|k| k.name.as_str()) || primary.tsig.is_none();
    if from_primary && signed_right {
        transfers.inbound.notified(origin);
        true
    } else {
        false
    }
}

/// What is known of one zone's refreshes.
#[derive(Debug, Clone)]
struct Timers {
    /// The records of the last transfer (SOA first), what an IXFR's changes apply to;
    /// `None` after a start (the first refresh takes the whole zone).
    base: Option<Vec<wire::Rr>>,
    /// The serial of the copy.
    serial: Option<u32>,
    /// Next SOA check.
    due: Instant,
    /// The last refresh that reached the primary (or the copy's load at start).
    last_ok: Instant,
    /// When the last refresh began (none yet): a NOTIFY refreshes no sooner than
    /// [`NOTIFY_FLOOR`] after it.
    last_attempt: Option<Instant>,
    refresh: Duration,
    retry: Duration,
    expire: Duration,
}

/// The least time between refreshes a NOTIFY can cause (issue 53 §8): Knot's
/// `refresh-min-interval` default.
const NOTIFY_FLOOR: Duration = Duration::from_secs(2);

/// Keeps the zones taken from a primary current until `shutdown`.
pub async fn follow(ctx: Inbound, shutdown: CancellationToken) {
    let dir = ctx.state_dir.join(super::SECONDARY_DIR);
    if let Err(err) = std::fs::create_dir_all(&dir) {
        tracing::error!(%err, dir = %dir.display(), "cannot make the directory for zones taken from a primary");
        return;
    }
    let mut timers: HashMap<Vec<u8>, Timers> = HashMap::new();
    loop {
        let zones = primaries(&ctx).await;
        ctx.transfers.inbound.set_zones(zones.clone());
        timers.retain(|origin, _| zones.contains_key(origin));
        let notified = ctx.transfers.inbound.take_notified();
        let now = Instant::now();
        for (origin, primary) in &zones {
            let copy = dir.join(qdns_zone::secondary_copy_name(origin));
            let entry = timers.entry(origin.clone()).or_insert_with(|| start_timers(&copy, now));
            if entry.serial.is_some() && now.duration_since(entry.last_ok) > entry.expire {
                expire(&ctx, origin, &copy).await;
                *entry = start_timers(&copy, now);
                continue;
            }
            if entry.due > now {
                if !notified.contains(origin) {
                    continue;
                }
                // A NOTIFY from the primary's address (spoofable, when unsigned) refreshes
                // at once, but no sooner than the floor after the last refresh: a flood of
                // them costs one refresh per floor, the rest folded into it.
                if let Some(floor) = entry.last_attempt.map(|at| at + NOTIFY_FLOOR).filter(|&f| f > now) {
                    entry.due = entry.due.min(floor);
                    continue;
                }
            }
            entry.last_attempt = Some(now);
            let keys = ctx.transfers.keys();
            let key = primary.tsig.as_deref().and_then(|name| keys.named(name));
            let deadline = match ctx.transfers.in_deadline {
                Duration::ZERO => DEADLINE,
                set => set,
            };
            let outcome = tokio::time::timeout(
                deadline,
                refresh(&ctx, origin, primary, key, (entry.serial, &mut entry.base), &copy),
            )
            .await
            .unwrap_or_else(|_| {
                Err(Failed::Transfer(format!(
                    "the refresh took over {}s (--transfer-in-deadline); cut off",
                    deadline.as_secs()
                )))
            });
            entry.due = Instant::now() + if outcome.is_ok() { entry.refresh } else { entry.retry };
            match outcome {
                Ok(Refreshed::Current) => {
                    entry.last_ok = Instant::now();
                    ctx.transfers.stats.count(Outcome::InCurrent);
                }
                Ok(Refreshed::Loaded(soa, incremental)) => {
                    entry.last_ok = Instant::now();
                    apply_soa(entry, &soa);
                    ctx.transfers.stats.count(if incremental {
                        Outcome::InIncremental
                    } else {
                        Outcome::InTransferred
                    });
                }
                Err(Failed::Transfer(why)) => {
                    tracing::warn!(zone = %qdns_zone::name::to_text(origin), primary = %primary.addr, %why, "transfer from the primary failed; the copy served is kept");
                    ctx.transfers.stats.count(Outcome::InFailed);
                }
                Err(Failed::Rejected(why)) => {
                    tracing::warn!(zone = %qdns_zone::name::to_text(origin), %why, "the transferred copy does not load; the copy served is kept");
                    ctx.transfers.stats.count(Outcome::InRejected);
                }
            }
        }
        let next = timers.values().map(|t| t.due).min();
        let sleep = next.map_or(Duration::from_secs(60), |due| {
            due.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = ctx.transfers.inbound.wake.notified() => {}
            () = tokio::time::sleep(sleep.max(Duration::from_millis(100))) => {}
        }
    }
}

/// Every zone with `primary`: those loaded and those waiting for their first copy.
async fn primaries(ctx: &Inbound) -> BTreeMap<Vec<u8>, Primary> {
    let mut out = BTreeMap::new();
    for zone in &ctx.state.lock().await.served.snapshot.zones {
        if let Some(t) = zone.transfer.as_deref() {
            if let Some(addr) = t.primary {
                out.insert(
                    zone.origin.clone(),
                    Primary {
                        addr,
                        tsig: t.primary_tsig.clone(),
                        catalog: false,
                    },
                );
            }
        }
    }
    let pending = ctx
        .transfers
        .inbound
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for zone in pending {
        if let Ok(origin) = qdns_zone::master::parse_name_wire(&zone.origin, b"\0") {
            out.insert(
                origin,
                Primary {
                    addr: zone.primary,
                    tsig: zone.tsig,
                    catalog: zone.catalog,
                },
            );
        }
    }
    out
}

/// Timers for a zone at start: its copy's SOA, or none (checked at once).
fn start_timers(copy: &Path, now: Instant) -> Timers {
    let mut timers = Timers {
        base: None,
        serial: None,
        due: now,
        last_ok: now,
        last_attempt: None,
        // No copy yet: try again soon (the copy's SOA sets these once there is one).
        refresh: Duration::from_secs(3600),
        retry: Duration::from_secs(30),
        expire: Duration::from_secs(7 * 86_400),
    };
    if let Some(soa) = copy_soa(copy) {
        apply_soa(&mut timers, &soa);
    }
    timers
}

/// Serial, refresh, retry, expire from SOA RDATA's last 20 octets.
fn apply_soa(timers: &mut Timers, soa: &[u8]) {
    let fixed = soa.len().saturating_sub(20);
    let field = |i: usize| {
        soa.get(fixed + 4 * i..fixed + 4 * i + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    timers.serial = Some(field(0));
    let secs = |s: u32| Duration::from_secs(u64::from(s)).max(MIN_REFRESH);
    timers.refresh = secs(field(1));
    timers.retry = secs(field(2));
    timers.expire = secs(field(3)).max(timers.refresh);
}

/// The SOA RDATA recorded in a copy's first line (`; soa HEX`).
fn copy_soa(copy: &Path) -> Option<Vec<u8>> {
    let text = std::fs::read_to_string(copy).ok()?;
    let hex = text.lines().next()?.strip_prefix("; soa ")?;
    (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

async fn expire(ctx: &Inbound, origin: &[u8], copy: &Path) {
    let zone = qdns_zone::name::to_text(origin);
    tracing::warn!(%zone, "no refresh from the primary within the SOA expire: the zone is no longer served");
    ctx.transfers.stats.count(Outcome::InExpired);
    let _ = std::fs::remove_file(copy);
    let _ = ctx.reloads.reload("transfer-in (expired)").await;
}

enum Refreshed {
    /// The primary's serial is the copy's.
    Current,
    /// A new copy was taken and loaded; its SOA RDATA, and whether by IXFR changes.
    Loaded(Vec<u8>, bool),
}

enum Failed {
    Transfer(String),
    Rejected(String),
}

/// One refresh: SOA, then AXFR when the serial moved (or there is no copy), then the
/// copy written and loaded.
async fn refresh(
    ctx: &Inbound,
    origin: &[u8],
    zone: &Primary,
    key: Option<&Key>,
    (serial, base): (Option<u32>, &mut Option<Vec<wire::Rr>>),
    copy: &Path,
) -> Result<Refreshed, Failed> {
    let fail = |why: String| Failed::Transfer(why);
    let mut stream = connect(zone.addr).await.map_err(fail)?;
    let soa = exchange(&mut stream, origin, (rtype::SOA, None), key, MAX_BYTES)
        .await
        .map_err(fail)?;
    let theirs = soa
        .iter()
        .find(|r| r.rtype == rtype::SOA && r.owner == origin)
        .map(|r| r.rdata.clone())
        .ok_or_else(|| fail("the primary's SOA answer holds no SOA".to_owned()))?;
    let their_serial = serial_of(&theirs);
    if serial.is_some_and(|ours| !serial_after(their_serial, ours)) {
        return Ok(Refreshed::Current);
    }
    let limit = match usize::try_from(ctx.transfers.in_max_bytes) {
        Ok(0) | Err(_) => MAX_BYTES,
        Ok(n) => n,
    };
    let asked = match base.as_deref().filter(|_| serial.is_some()) {
        Some(held) => Some(incremental(&mut stream, origin, key, limit, held).await),
        None => None,
    };
    let (records, incremental) = match asked {
        Some(Ok(Some(found))) => found,
        Some(Ok(None)) => return Ok(Refreshed::Current),
        Some(Err(why)) => {
            tracing::info!(zone = %qdns_zone::name::to_text(origin), %why, "IXFR from the primary failed; taking the whole zone");
            let mut fresh = connect(zone.addr).await.map_err(fail)?;
            let records = exchange(&mut fresh, origin, (rtype::AXFR, None), key, limit)
                .await
                .map_err(fail)?;
            (records, false)
        }
        None => {
            let records = exchange(&mut stream, origin, (rtype::AXFR, None), key, limit)
                .await
                .map_err(fail)?;
            (records, false)
        }
    };
    let text = master_text(origin, &records).map_err(fail)?;
    if zone.catalog {
        catalog_members(ctx, origin, zone, &records, copy, &text).await?;
    } else {
        install(ctx, copy, &text).await?;
    }
    tracing::info!(zone = %qdns_zone::name::to_text(origin), serial = serial_of(&theirs), records = records.len(), incremental, "zone taken from the primary");
    let soa = records.first().map(|r| r.rdata.clone()).unwrap_or(theirs);
    *base = Some(records);
    Ok(Refreshed::Loaded(soa, incremental))
}

/// A TCP connection to `primary`, within [`READ_TIMEOUT`].
async fn connect(primary: SocketAddr) -> Result<TcpStream, String> {
    tokio::time::timeout(READ_TIMEOUT, TcpStream::connect(primary))
        .await
        .map_err(|_| format!("no connection to {primary} within {READ_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot connect to {primary}: {e}"))
}

/// IXFR from the serial of `held` (the last copy's records, SOA first): the new
/// records and whether they came as changes (not the whole zone), `None` when the
/// primary says the copy is current; an error to take the whole zone instead.
async fn incremental(
    stream: &mut TcpStream,
    origin: &[u8],
    key: Option<&Key>,
    limit: usize,
    held: &[wire::Rr],
) -> Result<Option<(Vec<wire::Rr>, bool)>, String> {
    let soa = held.first().ok_or("no copy held")?;
    let ours = wire::record(origin, rtype::SOA, soa.ttl, &soa.rdata);
    let answer = exchange(stream, origin, (rtype::IXFR, Some(&ours)), key, limit).await?;
    match ixfr::parse(origin, &answer)? {
        Some(ixfr::Ixfr::Current) => Ok(None),
        Some(ixfr::Ixfr::Whole(records)) => Ok(Some((records, false))),
        Some(ixfr::Ixfr::Changes(changes)) => ixfr::apply(held, &changes).map(|records| Some((records, true))),
        None => Err("an IXFR answer cut short".to_owned()),
    }
}

fn serial_of(soa: &[u8]) -> u32 {
    let at = soa.len().saturating_sub(20);
    soa.get(at..at + 4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A catalog zone's new copy (RFC 9432): writes a zone file for each member (its
/// primary and key the catalog's) under the members directory, removes those of
/// members no longer listed (and their copies), and reloads when the set changed.
async fn catalog_members(
    ctx: &Inbound,
    origin: &[u8],
    zone: &Primary,
    records: &[wire::Rr],
    copy: &Path,
    text: &str,
) -> Result<(), Failed> {
    let fail = |why: String| Failed::Transfer(why);
    let members = catalog::members(origin, records).map_err(fail)?;
    let dir = copy.parent().unwrap_or_else(|| Path::new("."));
    let name = copy.file_name().and_then(|n| n.to_str()).unwrap_or("catalog");
    crate::persist::write_private(dir, name, text.as_bytes())
        .map_err(|e| fail(format!("cannot write {}: {e}", copy.display())))?;
    let changed = catalog::sync_files(&dir.join(qdns_zone::CATALOG_MEMBERS_DIR), origin, zone, &members)
        .map_err(|e| fail(format!("cannot write the member zone files: {e}")))?;
    for member in &changed.taken {
        tracing::warn!(
            catalog = %qdns_zone::name::to_text(origin),
            member = %qdns_zone::name::to_text(member),
            "this member is another catalog's (the first to list it keeps it); left out"
        );
    }
    if changed.any() {
        for gone in &changed.removed {
            let _ = std::fs::remove_file(dir.join(qdns_zone::secondary_copy_name(gone)));
        }
        ctx.reloads.reload("catalog").await.map_err(Failed::Rejected)?;
    }
    Ok(())
}

/// Writes `text` as the copy and reloads; a copy that does not load is put back.
async fn install(ctx: &Inbound, copy: &Path, text: &str) -> Result<(), Failed> {
    let dir = copy.parent().unwrap_or_else(|| Path::new("."));
    let name = copy.file_name().and_then(|n| n.to_str()).unwrap_or("zone");
    let before = std::fs::read(copy).ok();
    crate::persist::write_private(dir, name, text.as_bytes())
        .map_err(|e| Failed::Transfer(format!("cannot write {}: {e}", copy.display())))?;
    let Err(why) = ctx.reloads.reload("transfer-in").await else {
        return Ok(());
    };
    let restored = match before {
        Some(old) => crate::persist::write_private(dir, name, &old),
        None => std::fs::remove_file(copy),
    };
    if let Err(err) = restored {
        tracing::error!(%err, copy = %copy.display(), "cannot put the previous copy back");
    }
    Err(Failed::Rejected(why))
}

/// Asks `qtype` (SOA or AXFR) for `origin` on `stream`; the answer records (for AXFR
/// every message's, up to the closing SOA), each message's TSIG verified.
async fn exchange(
    stream: &mut TcpStream,
    origin: &[u8],
    (qtype, soa): (u16, Option<&[u8]>),
    key: Option<&Key>,
    max_bytes: usize,
) -> Result<Vec<wire::Rr>, String> {
    let id = super::notify::rand_id();
    let mut query = wire::query(id, origin, qtype, soa);
    let mut prior = key.map(|k| tsig::sign(&mut query, k, Chain::Request, crate::clock::now(), 0));
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    stream
        .write_all(&framed)
        .await
        .map_err(|e| format!("cannot send: {e}"))?;
    let mut records = Vec::new();
    let (mut bytes, mut first, mut between) = (0usize, true, Vec::new());
    let mut unsigned_run = 0u32;
    loop {
        let mut len = [0u8; 2];
        read(stream, &mut len).await?;
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
        read(stream, &mut message).await?;
        bytes += message.len();
        if bytes > max_bytes {
            return Err(format!(
                "the transfer is over {max_bytes} octets (--transfer-in-max-bytes)"
            ));
        }
        let response = wire::read_response(&message).map_err(|_| "a malformed message".to_owned())?;
        if response.id != id {
            return Err("a message with another ID".to_owned());
        }
        if response.rcode != rcode::NOERROR {
            return Err(format!("the primary answered RCODE {}", response.rcode));
        }
        if let (Some(key), Some(mac)) = (key, prior.as_mut()) {
            match &response.tsig {
                Some((t, at)) => {
                    if !tsig::verify_chained(key, mac, &between, &message, *at, t, first) {
                        return Err("a message whose TSIG does not verify".to_owned());
                    }
                    mac.clone_from(&t.mac);
                    between.clear();
                    unsigned_run = 0;
                }
                None if first => return Err("an unsigned answer to a signed request".to_owned()),
                None => {
                    // RFC 8945 §5.3.1: up to 99 unsigned messages between signed ones.
                    unsigned_run += 1;
                    if unsigned_run > 99 {
                        return Err("more than 99 unsigned messages in a row".to_owned());
                    }
                    between.extend_from_slice(&message);
                }
            }
        }
        first = false;
        // A message that adds nothing makes no progress: a primary sending such (each
        // within the read timeout) would hold the refresh as long as it liked.
        if response.answers.is_empty() {
            return Err("an empty message from the primary".to_owned());
        }
        records.extend(response.answers);
        if records.len() > MAX_RECORDS {
            return Err(format!("the transfer is over {MAX_RECORDS} records"));
        }
        let complete = match qtype {
            rtype::AXFR => {
                records.len() > 1
                    && records
                        .last()
                        .is_some_and(|r| r.rtype == rtype::SOA && r.owner == origin)
            }
            // An IXFR can only end at the apex SOA: read it whole only then, not after
            // every message (that made a long transfer quadratic).
            rtype::IXFR => {
                records
                    .last()
                    .is_some_and(|r| r.rtype == rtype::SOA && r.owner == origin)
                    && ixfr::parse(origin, &records)?.is_some()
            }
            _ => true,
        };
        if !complete {
            continue;
        }
        // The last message of a transfer must be signed (RFC 8945 §5.3.1).
        if key.is_some() && response.tsig.is_none() {
            return Err("the last message is not signed".to_owned());
        }
        if qtype == rtype::AXFR {
            // SOA first, and the closing SOA (RFC 5936 §2.2) dropped.
            if records.first().is_none_or(|r| r.rtype != rtype::SOA) {
                return Err("the transfer does not start with the SOA".to_owned());
            }
            records.pop();
        }
        return Ok(records);
    }
}

async fn read(stream: &mut TcpStream, buf: &mut [u8]) -> Result<(), String> {
    match tokio::time::timeout(READ_TIMEOUT, stream.read_exact(buf)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("the transfer was cut short: {e}")),
        Err(_) => Err(format!("nothing from the primary for {READ_TIMEOUT:?}")),
    }
}

/// The copy as a master file: the SOA first (its RDATA also in hex on the first line,
/// for the timers at the next start), records of other zones and classes and DNSSEC
/// records left out.
fn master_text(origin: &[u8], records: &[wire::Rr]) -> Result<String, String> {
    use std::fmt::Write as _;
    let soa = records
        .first()
        .filter(|r| r.rtype == rtype::SOA)
        .ok_or("the transfer does not start with the SOA")?;
    let mut out = String::with_capacity(records.len() * 48);
    let _ = write!(out, "; soa ");
    for b in &soa.rdata {
        let _ = write!(out, "{b:02x}");
    }
    let _ = writeln!(out, "\n; taken from the primary; replaced at each transfer");
    for r in records {
        if r.class != 1 || !qdns_zone::name::is_at_or_below(&r.owner, origin) {
            continue;
        }
        if qdns_zone::master::refused_type(r.rtype).is_err() {
            continue;
        }
        let _ = writeln!(
            out,
            "{} {} IN {} {}",
            qdns_zone::name::to_text(&r.owner),
            r.ttl,
            qdns_zone::master::type_name(r.rtype),
            qdns_zone::master::present::rdata_text(r.rtype, &r.rdata)
        );
    }
    Ok(out)
}
