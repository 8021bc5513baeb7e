//! Zone transfer out (SPEC §10; RFC 5936 AXFR, RFC 1995 IXFR, RFC 1996 NOTIFY, RFC
//! 8945 TSIG): control serves the zones that have `transfer_allow` to their
//! secondaries on `--transfer-listen`.
//!
//! ```text
//!   snapshot + health ─► view (records health allows now, signed) ─► Served { serial, records, journal }
//!        ▲ every update to the edges                                     │
//!        └── follow ─────────────────────────────────────────────────────┤
//!                                  serve: AXFR / IXFR / SOA ◄─────────────┤
//!                                  notify: NOTIFY to each secondary ◄─────┘
//! ```
//!
//! The serial moves whenever what a transfer carries changes (a health change that
//! moves an answer, a reload): the zone file's serial when it is ahead, else one more
//! than the last. The serial and a digest of the content are kept in
//! `STATE_DIR/transfer.json`, so a restart neither moves the serial back nor forward
//! without cause; with `--intent`, also in the store, shared by the controls of the
//! location ([`shared`]). The journal of changes (for IXFR) lives in memory: after a
//! restart a secondary asking from an older serial gets the whole zone.
pub mod catalog;
pub mod inbound;
pub mod ixfr;
pub mod notify;
pub mod primary;
pub mod serve;
pub mod shared;
pub mod tsig;
pub mod view;
pub mod wire;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    path::PathBuf,
    sync::{Arc, RwLock},
};

use qdns_zone::{snapshot::Transfer, Snapshot, Zone};

/// Most changes kept per zone for IXFR.
pub const JOURNAL_CHANGES: usize = 64;
/// Most records the journal of a zone holds, over all its changes, as a multiple of
/// the zone's own record count (beyond it a transfer of the whole zone is cheaper).
const JOURNAL_RECORDS_FACTOR: usize = 2;
const SERIALS_FILE: &str = "transfer.json";
/// Where, under the state directory, copies of zones taken from a primary are kept.
pub const SECONDARY_DIR: &str = "secondary";

/// One change of a served zone.
#[derive(Debug)]
pub struct Diff {
    /// Serial before.
    pub from: u32,
    /// Serial after.
    pub to: u32,
    /// The SOA (and its RRSIGs) before.
    pub old_soa: Vec<Vec<u8>>,
    /// The SOA (and its RRSIGs) after.
    pub new_soa: Vec<Vec<u8>>,
    /// Records gone.
    pub removed: Vec<Box<[u8]>>,
    /// Records new.
    pub added: Vec<Box<[u8]>>,
}

/// A zone as transfers serve it now.
#[derive(Debug)]
pub struct Served {
    /// Apex, wire.
    pub origin: Vec<u8>,
    /// Who may transfer it, whom to notify.
    pub settings: Transfer,
    /// The serial transfers carry.
    pub serial: u32,
    /// The SOA RR, then its RRSIG RRs (signed zones).
    pub soa: Vec<Vec<u8>>,
    /// Every other record.
    pub records: Arc<Vec<Box<[u8]>>>,
    /// Changes, oldest first, the last ending at `serial`.
    pub journal: VecDeque<Arc<Diff>>,
    /// Digest of the content (see [`view::View::digest`]).
    pub digest: u64,
}

impl Served {
    /// The changes from `serial` to now, when the journal reaches back to it.
    #[must_use]
    pub fn changes_since(&self, serial: u32) -> Option<Vec<Arc<Diff>>> {
        let start = self.journal.iter().position(|d| d.from == serial)?;
        let chain: Vec<Arc<Diff>> = self.journal.iter().skip(start).cloned().collect();
        let linked = chain.windows(2).all(|w| w[0].to == w[1].from);
        (linked && chain.last().is_some_and(|d| d.to == self.serial)).then_some(chain)
    }
}

/// What transfers have answered and refused.
pub type Stats = crate::counts::Counts<Outcome, { Outcome::ALL.len() }>;

/// How a transfer request or a NOTIFY went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A whole zone sent for AXFR.
    Axfr,
    /// Changes sent for IXFR.
    Ixfr,
    /// The whole zone sent for IXFR (the journal does not reach back).
    IxfrWhole,
    /// The SOA alone (a SOA query, or IXFR from the current serial).
    Soa,
    /// Refused: the peer is not in `transfer_allow`.
    RefusedAcl,
    /// Refused: no TSIG, the wrong key, a bad MAC or time.
    RefusedTsig,
    /// Refused or not answered: another zone, type, class or opcode.
    RefusedOther,
    /// Malformed.
    Malformed,
    /// Dropped: too many connections, or too slow.
    Dropped,
    /// NOTIFY sent.
    NotifySent,
    /// NOTIFY answered.
    NotifyAcked,
    /// NOTIFY given up after its retries.
    NotifyFailed,
    /// Transfer in: a new copy taken from the primary and loaded.
    InTransferred,
    /// Transfer in: a new copy made from the primary's IXFR changes and loaded.
    InIncremental,
    /// Transfer in: the primary's serial is ours.
    InCurrent,
    /// Transfer in: the primary could not be reached, refused, or sent a bad, short or
    /// oversized transfer (the copy served is kept).
    InFailed,
    /// Transfer in: the copy did not load with the zone file (the copy served is kept).
    InRejected,
    /// Transfer in: no refresh for longer than the SOA expire; the zone is not served.
    InExpired,
    /// A NOTIFY from a zone's primary, accepted.
    NotifyIn,
    /// A NOTIFY refused: not from the primary, or without its key.
    NotifyInRefused,
}

impl Outcome {
    /// Every outcome, in metric order.
    pub const ALL: [Outcome; 20] = [
        Outcome::Axfr,
        Outcome::Ixfr,
        Outcome::IxfrWhole,
        Outcome::Soa,
        Outcome::RefusedAcl,
        Outcome::RefusedTsig,
        Outcome::RefusedOther,
        Outcome::Malformed,
        Outcome::Dropped,
        Outcome::NotifySent,
        Outcome::NotifyAcked,
        Outcome::NotifyFailed,
        Outcome::InTransferred,
        Outcome::InIncremental,
        Outcome::InCurrent,
        Outcome::InFailed,
        Outcome::InRejected,
        Outcome::InExpired,
        Outcome::NotifyIn,
        Outcome::NotifyInRefused,
    ];

    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Axfr => "axfr",
            Outcome::Ixfr => "ixfr",
            Outcome::IxfrWhole => "ixfr_whole_zone",
            Outcome::Soa => "soa",
            Outcome::RefusedAcl => "refused_acl",
            Outcome::RefusedTsig => "refused_tsig",
            Outcome::RefusedOther => "refused_other",
            Outcome::Malformed => "malformed",
            Outcome::Dropped => "dropped",
            Outcome::NotifySent => "notify_sent",
            Outcome::NotifyAcked => "notify_acked",
            Outcome::NotifyFailed => "notify_failed",
            Outcome::InTransferred => "in_transferred",
            Outcome::InIncremental => "in_incremental",
            Outcome::InCurrent => "in_current",
            Outcome::InFailed => "in_failed",
            Outcome::InRejected => "in_rejected",
            Outcome::InExpired => "in_expired",
            Outcome::NotifyIn => "notify_in",
            Outcome::NotifyInRefused => "notify_in_refused",
        }
    }
}

impl crate::counts::Outcome for Outcome {
    const ALL: &'static [Outcome] = &Outcome::ALL;
}

/// Every served zone, the TSIG keys and the counters; shared by the listener, the
/// follower and the metrics.
#[derive(Debug, Default)]
pub struct Transfers {
    zones: RwLock<BTreeMap<Vec<u8>, Arc<Served>>>,
    /// Every served zone's `transfer_allow` prefixes in one list, each once: what
    /// [`Transfers::may_ask`] reads per connection (not every zone's list).
    askers: RwLock<qdns_zone::snapshot::Transfer>,
    /// `tsig_keys`, or the deployment's (`--intent`), which may change while control runs.
    keys: arc_swap::ArcSwap<tsig::Keys>,
    /// Counters.
    pub stats: Stats,
    /// Zones taken from a primary: loaded or waiting for their first copy.
    pub inbound: inbound::Primaries,
    /// Most octets one transfer in may carry (`--transfer-in-max-bytes`; 0: the default).
    pub in_max_bytes: u64,
    /// Longest refresh from a primary (`--transfer-in-deadline`; zero: the default).
    pub in_deadline: std::time::Duration,
    /// Where the listener hands UPDATEs (set once the update task runs).
    updates: std::sync::OnceLock<tokio::sync::mpsc::Sender<crate::update::Job>>,
    /// UPDATEs by outcome.
    pub update_stats: crate::update::Stats,
}

impl Transfers {
    /// Transfers with `keys`, no zone served yet.
    #[must_use]
    pub fn new(keys: tsig::Keys) -> Transfers {
        Transfers {
            keys: arc_swap::ArcSwap::from_pointee(keys),
            ..Transfers::default()
        }
    }

    /// Hands later UPDATEs to `queue` ([`crate::update::serve`]'s).
    pub fn set_updates(&self, queue: tokio::sync::mpsc::Sender<crate::update::Job>) {
        let _ = self.updates.set(queue);
    }

    /// Where UPDATEs go; `None` before the update task runs.
    #[must_use]
    pub fn updates(&self) -> Option<&tokio::sync::mpsc::Sender<crate::update::Job>> {
        self.updates.get()
    }

    /// The TSIG keys in force.
    #[must_use]
    pub fn keys(&self) -> std::sync::Arc<tsig::Keys> {
        self.keys.load_full()
    }

    /// Puts `keys` in force (the deployment's changed).
    pub fn set_keys(&self, keys: tsig::Keys) {
        self.keys.store(std::sync::Arc::new(keys));
    }

    /// With `--transfer-in-deadline`.
    #[must_use]
    pub fn with_in_deadline(mut self, deadline: std::time::Duration) -> Transfers {
        self.in_deadline = deadline;
        self
    }

    /// With `--transfer-in-max-bytes`.
    #[must_use]
    pub fn with_in_max_bytes(mut self, bytes: u64) -> Transfers {
        self.in_max_bytes = bytes;
        self
    }

    /// The zone `origin` (wire, lowercase), if served.
    #[must_use]
    pub fn zone(&self, origin: &[u8]) -> Option<Arc<Served>> {
        self.zones
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(origin)
            .cloned()
    }

    /// The served zone `name` (wire, lowercase) is at or below, the closest.
    #[must_use]
    pub fn enclosing(&self, name: &[u8]) -> Option<Arc<Served>> {
        let zones = self.zones.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut at = name;
        loop {
            if let Some(zone) = zones.get(at) {
                return Some(Arc::clone(zone));
            }
            let len = usize::from(*at.first()?);
            if len == 0 {
                return None;
            }
            at = at.get(1 + len..)?;
        }
    }

    /// True when `peer` may ask for anything here: a served zone's `transfer_allow`
    /// takes it, or it is the primary of a zone taken from one (its NOTIFYs). Checked
    /// before a TCP connection holds a place.
    #[must_use]
    pub fn may_ask(&self, peer: std::net::IpAddr) -> bool {
        let askers = self.askers.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        askers.allows(peer) || self.inbound.is_primary(peer)
    }

    /// Every served zone.
    #[must_use]
    pub fn served(&self) -> Vec<Arc<Served>> {
        self.zones
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The zones taken from a primary that have no copy yet (from the last load).
    pub fn set_pending(&self, pending: Vec<qdns_zone::Pending>) {
        self.inbound.set_pending(pending);
    }

    fn install(&self, zones: BTreeMap<Vec<u8>, Arc<Served>>) {
        let allow: std::collections::BTreeSet<(std::net::IpAddr, u8)> = zones
            .values()
            .flat_map(|zone| zone.settings.allow.iter().copied())
            .collect();
        let askers = qdns_zone::snapshot::Transfer {
            allow: allow.into_iter().collect(),
            ..qdns_zone::snapshot::Transfer::default()
        };
        *self.zones.write().unwrap_or_else(std::sync::PoisonError::into_inner) = zones;
        *self.askers.write().unwrap_or_else(std::sync::PoisonError::into_inner) = askers;
    }
}

/// Each zone's last serial and content digest, as saved.
type Serials = BTreeMap<String, (u32, u64)>;

/// `a` is after `b` in serial number arithmetic (RFC 1982).
#[must_use]
pub fn serial_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000_0000
}

/// The serial for content `digest` given the last one served (or saved) and the zone
/// file's.
#[must_use]
pub fn next_serial(last: Option<(u32, u64)>, file_serial: u32, digest: u64) -> u32 {
    match last {
        None => file_serial,
        Some((serial, seen)) if seen == digest => serial,
        Some((serial, _)) if serial_after(file_serial, serial) => file_serial,
        Some((serial, _)) => serial.wrapping_add(1),
    }
}

/// Checks that every zone's `transfer_tsig` and `primary_tsig` (of the zones loaded and
/// of those waiting for their first transfer) name a key of `keys`.
pub fn check_keys(snapshot: &Snapshot, pending: &[qdns_zone::Pending], keys: &tsig::Keys) -> Result<(), String> {
    let named = snapshot.zones.iter().flat_map(|zone| {
        let t = zone.transfer.as_deref();
        [
            (zone.source.clone(), "transfer_tsig", t.and_then(|t| t.tsig.clone())),
            (
                zone.source.clone(),
                "primary_tsig",
                t.and_then(|t| t.primary_tsig.clone()),
            ),
        ]
    });
    let waiting = pending
        .iter()
        .map(|p| (p.path.display().to_string(), "primary_tsig", p.tsig.clone()));
    for (source, field, name) in named.chain(waiting) {
        if let Some(name) = name.filter(|n| keys.named(n).is_none()) {
            return Err(format!(
                "{source}: zone.{field}: no tsig key named {name:?} (add it to control's `tsig_keys`)"
            ));
        }
    }
    Ok(())
}

/// Serves `snapshot`'s zones with transfer settings at once, as the follower does,
/// without notifying (the fuzz target and tests that drive [`serve::respond`] directly).
pub fn serve_snapshot(
    transfers: &Arc<Transfers>,
    snapshot: &Snapshot,
    store: crate::dnssec::KeyStore,
    state_dir: PathBuf,
) {
    let mut follower = Follower {
        transfers: Arc::clone(transfers),
        state_dir,
        store,
        saved: Serials::new(),
        shared: Serials::new(),
        made: HashMap::new(),
    };
    follower.rebuild(snapshot);
}

/// The serial for content `digest` given the last one served here (`last`), the one
/// the controls of the location agreed on (`shared`, [`shared`]) and the zone file's:
/// the shared one when it stands for the same content and is not before ours (a
/// secondary never sees a serial go back); ours while our content is unchanged (two
/// controls that read health differently do not push each other's serials on); for new
/// content, one more than the later of the two ([`next_serial`]).
#[must_use]
pub fn next_shared_serial(last: Option<(u32, u64)>, shared: Option<(u32, u64)>, file_serial: u32, digest: u64) -> u32 {
    match (last, shared) {
        (ours, Some((serial, seen))) if seen == digest && ours.is_none_or(|(o, _)| !serial_after(o, serial)) => serial,
        (Some((serial, seen)), _) if seen == digest => serial,
        (Some(ours), Some(theirs)) => {
            let later = if serial_after(theirs.0, ours.0) { theirs } else { ours };
            next_serial(Some(later), file_serial, digest)
        }
        (ours, theirs) => next_serial(ours.or(theirs), file_serial, digest),
    }
}

/// What the follower keeps between rebuilds.
struct Follower {
    transfers: Arc<Transfers>,
    state_dir: PathBuf,
    store: crate::dnssec::KeyStore,
    saved: Serials,
    /// The location's serials as the store held them before this rebuild (with
    /// `--intent`).
    shared: Serials,
    made: HashMap<Vec<u8>, view::MadeSignatures>,
}

/// What keeping the served zones current reads: the updates sent to the edges, the
/// state's snapshot, where serials are kept and the zone keys.
pub struct Sources {
    /// The updates sent to the edges (each may move a serial).
    pub updates: tokio::sync::broadcast::Sender<crate::edge_registry::Update>,
    /// The state, for its snapshot.
    pub state: Arc<tokio::sync::Mutex<crate::state::State>>,
    /// Where the serials served are kept.
    pub state_dir: PathBuf,
    /// The zone keys.
    pub store: crate::dnssec::KeyStore,
    /// The deployment whose location's controls share the serials, with `--intent`.
    pub deployment: Option<Arc<crate::deployed::Deployment>>,
    /// True once the deployment's revision and operator state are in force (with a
    /// deployment): the first serials wait for it — a control started beside a running
    /// one would otherwise give its secondaries, and the location's serials, the
    /// content of its own state directory first — for at most twice the store timeout.
    pub caught_up: tokio::sync::watch::Receiver<bool>,
}

/// Rebuilds chosen again at once, at most, when another control of the location wrote
/// the serials first (then the next update).
const SHARED_RETRIES: usize = 3;

/// Keeps the served zones current: rebuilds them at start and after every update sent
/// to the edges (coalesced over 100 ms), then notifies the secondaries of each zone
/// whose serial moved. With a deployment, each rebuild starts from the serials the
/// location's controls share and ends by writing its own there.
pub async fn follow(sources: Sources, transfers: Arc<Transfers>, shutdown: tokio_util::sync::CancellationToken) {
    let Sources {
        updates,
        state,
        state_dir,
        store,
        deployment,
        mut caught_up,
    } = sources;
    if deployment.is_some() {
        let waited = tokio::select! {
            () = shutdown.cancelled() => return,
            waited = tokio::time::timeout(crate::deployed::STORE_TIMEOUT * 2, caught_up.wait_for(|c| *c)) => waited,
        };
        if waited.is_err() {
            tracing::warn!(
                "serving zone transfers before the deployment's operator state was taken (the store does not answer)"
            );
        }
    }
    let mut shared = deployment.map(shared::Shared::new);
    let mut updates = updates.subscribe();
    let saved: Serials = std::fs::read(state_dir.join(SERIALS_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut follower = Some(Follower {
        transfers,
        state_dir,
        store,
        saved,
        shared: Serials::new(),
        made: HashMap::new(),
    });
    let mut retries = 0;
    loop {
        let snapshot = Arc::clone(&state.lock().await.served.snapshot);
        let Some(mut current) = follower.take() else { return };
        let transferred = snapshot
            .zones
            .iter()
            .any(|z| z.transfer.as_deref().is_some_and(Transfer::served));
        let sharing = shared.as_mut().filter(|_| transferred);
        if let Some(held) = match sharing {
            Some(shared) => shared.read().await,
            None => None,
        } {
            current.shared = held;
        }
        let rebuilt = tokio::task::spawn_blocking(move || {
            let moved = current.rebuild(&snapshot);
            (current, moved)
        })
        .await;
        let Ok((current, moved)) = rebuilt else {
            tracing::error!("the zone transfer rebuild failed; transfers keep the last copy");
            return;
        };
        for served in moved {
            notify::spawn(&current.transfers, &served, &shutdown);
        }
        let written = match shared.as_mut().filter(|_| transferred) {
            Some(shared) => shared.write(&current.serving()).await,
            None => true,
        };
        follower = Some(current);
        if !written && retries < SHARED_RETRIES {
            retries += 1;
            continue;
        }
        retries = 0;
        tokio::select! {
            () = shutdown.cancelled() => return,
            got = updates.recv() => {
                if matches!(got, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                    return;
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        while updates.try_recv().is_ok() {}
    }
}

impl Follower {
    /// The serial and digest of every zone served now.
    fn serving(&self) -> Serials {
        self.transfers
            .zones
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|z| (qdns_zone::name::to_text(&z.origin), (z.serial, z.digest)))
            .collect()
    }

    /// Rebuilds every zone with transfer settings; returns those whose serial moved.
    fn rebuild(&mut self, snapshot: &Snapshot) -> Vec<Arc<Served>> {
        let mut zones = BTreeMap::new();
        let mut moved = Vec::new();
        for zone in &snapshot.zones {
            let Some(settings) = zone.transfer.as_deref().filter(|t| t.served()) else {
                continue;
            };
            let old = self.transfers.zone(&zone.origin);
            match self.serve(zone, settings, snapshot, old.as_deref()) {
                Ok(served) => {
                    let served = Arc::new(served);
                    if old.as_ref().is_none_or(|o| o.serial != served.serial) {
                        tracing::info!(
                            zone = %qdns_zone::name::to_text(&zone.origin),
                            serial = served.serial,
                            "zone transfer serial"
                        );
                        moved.push(Arc::clone(&served));
                    }
                    zones.insert(zone.origin.clone(), served);
                }
                Err(err) => {
                    tracing::error!(zone = %qdns_zone::name::to_text(&zone.origin), %err, "cannot serve the zone for transfer; the last copy stays");
                    if let Some(old) = old {
                        zones.insert(zone.origin.clone(), old);
                    }
                }
            }
        }
        self.transfers.install(zones);
        if !moved.is_empty() {
            let text = serde_json::to_vec(&self.saved).unwrap_or_default();
            if let Err(err) = crate::persist::write_private(&self.state_dir, SERIALS_FILE, &text) {
                tracing::warn!(%err, "cannot save the transfer serials; a restart may move them again");
            }
        }
        moved
    }

    fn serve(
        &mut self,
        zone: &Zone,
        settings: &Transfer,
        snapshot: &Snapshot,
        old: Option<&Served>,
    ) -> Result<Served, String> {
        let signers = match zone.dnssec.as_deref().filter(|d| d.is_signed()) {
            Some(d) => self
                .store
                .keys_for(&zone.origin, d.algorithm)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|key| key.signer_with(self.store.nonces()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        let made = self.made.entry(zone.origin.clone()).or_default();
        let view = view::build(
            zone,
            &snapshot.bitmap,
            Some(view::Signing {
                signers: &signers,
                made: &mut *made,
            }),
        )?;
        let key = qdns_zone::name::to_text(&zone.origin);
        let last = old
            .map(|o| (o.serial, o.digest))
            .or_else(|| self.saved.get(&key).copied());
        let serial = next_shared_serial(last, self.shared.get(&key).copied(), zone.serial, view.digest);
        let soa = view::soa_records(
            zone,
            &view,
            serial,
            Some(view::Signing {
                signers: &signers,
                made,
            }),
        )?;
        self.saved.insert(key, (serial, view.digest));
        let records = Arc::new(view.records);
        let mut journal = old.map(|o| o.journal.clone()).unwrap_or_default();
        if let Some(old) = old.filter(|o| o.serial != serial) {
            let (removed, added) = difference(&old.records, &records);
            journal.push_back(Arc::new(Diff {
                from: old.serial,
                to: serial,
                old_soa: old.soa.clone(),
                new_soa: soa.clone(),
                removed,
                added,
            }));
        }
        let limit = records.len().max(1024) * JOURNAL_RECORDS_FACTOR;
        while journal.len() > JOURNAL_CHANGES
            || journal.iter().map(|d| d.removed.len() + d.added.len()).sum::<usize>() > limit
        {
            journal.pop_front();
        }
        Ok(Served {
            origin: zone.origin.clone(),
            settings: settings.clone(),
            serial,
            soa,
            records,
            journal,
            digest: view.digest,
        })
    }
}

/// Records in wire form, each a whole RR.
type RecordList = Vec<Box<[u8]>>;

/// What is in `old` and not in `new`, and the other way round (both sorted).
fn difference(old: &[Box<[u8]>], new: &[Box<[u8]>]) -> (RecordList, RecordList) {
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                removed.push(a.clone());
                i += 1;
            }
            (Some(_) | None, Some(b)) => {
                added.push(b.clone());
                j += 1;
            }
            (Some(a), None) => {
                removed.push(a.clone());
                i += 1;
            }
            (None, None) => break,
        }
    }
    (removed, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_move_only_with_the_content() {
        assert_eq!(next_serial(None, 7, 1), 7);
        assert_eq!(next_serial(Some((9, 1)), 7, 1), 9);
        assert_eq!(next_serial(Some((9, 1)), 7, 2), 10);
        assert_eq!(next_serial(Some((9, 1)), 2_026_120_501, 2), 2_026_120_501);
        assert_eq!(next_serial(Some((u32::MAX, 1)), 7, 2), 7);
        assert_eq!(next_serial(Some((u32::MAX, 1)), 0x8000_0000, 2), 0);
        assert!(serial_after(0, u32::MAX) && !serial_after(5, 5) && serial_after(6, 5));
    }

    /// The location's serials (issue 54 §2): the same content, the same serial; never a
    /// serial back for a secondary; no churn while two controls' content differs.
    #[test]
    fn shared_serials_are_taken_for_the_same_content_and_never_go_back() {
        let (x, y, z) = (1, 2, 3);
        // Nothing served here yet (a control started beside another): theirs.
        assert_eq!(next_shared_serial(None, Some((10, x)), 1, x), 10);
        // Theirs for our content, later than ours: taken.
        assert_eq!(next_shared_serial(Some((9, y)), Some((10, x)), 1, x), 10);
        assert_eq!(next_shared_serial(Some((10, x)), Some((10, x)), 1, x), 10);
        // Theirs for our content but before ours (a store read before an outage, a
        // restart with a later serial saved): ours stays, or moves on.
        assert_eq!(next_shared_serial(Some((15, x)), Some((11, x)), 1, x), 15);
        assert_eq!(next_shared_serial(Some((11, y)), Some((10, x)), 1, x), 12);
        // Our content unchanged, theirs another and later: ours stays (no churn).
        assert_eq!(next_shared_serial(Some((10, x)), Some((11, y)), 1, x), 10);
        // New content: one more than the later of the two.
        assert_eq!(next_shared_serial(Some((10, x)), Some((11, y)), 1, z), 12);
        assert_eq!(next_shared_serial(Some((12, x)), Some((11, y)), 1, z), 13);
        assert_eq!(next_shared_serial(None, Some((11, y)), 1, z), 12);
        assert_eq!(next_shared_serial(None, None, 7, z), 7);
        // Across the wrap (RFC 1982): u32::MAX is before 0.
        assert_eq!(next_shared_serial(Some((u32::MAX, x)), Some((0, y)), 1, z), 1);
    }

    #[test]
    fn differences_of_sorted_records() {
        let r = |s: &str| s.as_bytes().to_vec().into_boxed_slice();
        let old = vec![r("a"), r("b"), r("d")];
        let new = vec![r("b"), r("c"), r("d"), r("e")];
        assert_eq!(difference(&old, &new), (vec![r("a")], vec![r("c"), r("e")]));
    }
}
