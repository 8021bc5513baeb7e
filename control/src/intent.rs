//! Following the deployment's intent (SPEC §11, `--intent etcd://…/PREFIX`): the zone
//! directory control loads is the revision it applied last, kept under the state
//! directory; each new revision is read, loaded and checked as `reload` does, and
//! installed whole — or refused here (timeline, log) while the last stays in force.
//! No answer and no health decision waits on the store: cut off from it, control serves
//! and steers with what it applied, also across a restart.
use std::{path::PathBuf, sync::Arc, time::Duration};

use qdns_intent::{
    applied::Applied,
    records::Swapped,
    store::{Seen, Store},
    url::StoreUrl,
    watch::Heard,
    IntentError,
};
use tokio_util::sync::CancellationToken;

use crate::{
    ctx::Ctx,
    deployed::{self, Deployment, STORE_TIMEOUT},
    dnssec::KeyStore,
    reloads::Reloads,
};

/// The zones' keys in the store: `PREFIX/secret/dnssec/ORIGIN` (see [`share_keys`]).
const KEYS_SECRET: &str = "dnssec";
/// Where they are under PREFIX.
const ZONE_KEYS: &str = "secret/dnssec";

/// Under `PREFIX`: every secret of the deployment (one watch follows them all).
const SECRETS: &str = "secret";

/// The checkers every location accepts: `PREFIX/secret/checker-keys`, a
/// `--checker-keys` file's text (`qdnsctl secret put checker-keys FILE`).
pub const CHECKER_KEYS: &str = "secret/checker-keys";

/// The TSIG keys of every location: `PREFIX/secret/tsig-keys`, `tsig-keygen`'s form
/// (`qdnsctl secret put tsig-keys FILE`).
pub const TSIG_KEYS: &str = "secret/tsig-keys";

/// Where a location keeps the TSIG keys it applied last (under the state directory).
const TSIG_KEYS_APPLIED: &str = "intent/tsig-keys.conf";

/// Where a location keeps the list it applied last (under the state directory).
const CHECKER_KEYS_APPLIED: &str = "intent/checker-keys.toml";

/// Longest wait between attempts to reach the store again.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub use qdns_intent::Source;

/// What control starts from: a revision's zone directory, and the one applied before
/// to fall back on when this one does not load here.
#[derive(Debug)]
pub struct Start {
    /// The zone directory to load.
    pub dir: PathBuf,
    /// Its revision.
    pub revision: u64,
    /// The revision applied before and its directory, when `dir` is a newer one not yet
    /// loaded here.
    pub fallback: Option<(PathBuf, u64)>,
    applied: Applied,
}

impl Start {
    /// Records `revision` as applied (control loaded it).
    ///
    /// # Errors
    /// When the record cannot be written.
    pub fn commit(&self, revision: u64) -> Result<(), IntentError> {
        if self.applied.revision() == Some(revision) {
            return Ok(());
        }
        self.applied.commit(revision)
    }
}

/// The zone directory to start from: the store's current revision when it answers
/// within [`STORE_TIMEOUT`] (staged; [`Start::commit`] once loaded, or fall back), else
/// the one applied before.
///
/// # Errors
/// The store unreachable and nothing applied here yet, nothing published yet, or a
/// revision that cannot be written to the state directory.
pub async fn at_start(
    deployment: &crate::deployed::Deployment,
    state_dir: &std::path::Path,
    keys: &KeyStore,
    tsig_keys: bool,
) -> Result<Start, IntentError> {
    let source = &deployment.source;
    let applied = Applied::under(state_dir);
    let before = applied.revision();
    match newest(deployment, (state_dir, tsig_keys), &applied, keys).await {
        Ok(Some(revision)) => {
            tracing::info!(revision, "intent read from the store");
            let fallback = before.filter(|&b| b != revision).map(|b| (applied.zones_dir(b), b));
            Ok(Start {
                dir: applied.zones_dir(revision),
                revision,
                fallback,
                applied,
            })
        }
        Ok(None) => Err(IntentError::Files(format!(
            "nothing is published under {} yet: publish the zones with `qdnsctl publish DIR --intent {}`",
            source.url.prefix,
            display(&source.url)
        ))),
        Err(err) => match before {
            Some(revision) => {
                tracing::warn!(%err, revision, "intent store unreachable: serving the revision applied before");
                Ok(Start {
                    dir: applied.zones_dir(revision),
                    revision,
                    fallback: None,
                    applied,
                })
            }
            None => Err(IntentError::Files(format!(
                "{err}; and no revision of the intent was applied here before, so there is nothing to serve"
            ))),
        },
    }
}

/// The store's current revision, staged here (the keys of its signed zones, this
/// location's cookie secrets and — when `tsig_keys`, the deployment's are followed — the
/// TSIG keys taken first: a control started with nothing of its own loads a revision
/// whose zones name them).
async fn newest(
    deployment: &crate::deployed::Deployment,
    (state_dir, tsig_keys): (&std::path::Path, bool),
    applied: &Applied,
    keys: &KeyStore,
) -> Result<Option<u64>, IntentError> {
    let source = &deployment.source;
    let mut store = Store::connect(&source.url, &source.tls, STORE_TIMEOUT).await?;
    let Some((revision, manifest)) = store.current().await? else {
        return Ok(None);
    };
    share_keys(&mut store, &manifest.signed, keys).await?;
    // Not taken here (unreadable, or a store that fails now): the follower takes them,
    // or says why in the timeline (`take_cookies`).
    let cookies = crate::cookies::store_name(&deployment.location);
    let taken = match store.value(&cookies).await {
        Ok((_, Some(value))) => crate::cookies::adopt(state_dir, &value.data),
        Ok((_, None)) => Ok(false),
        Err(err) => Err(err.to_string()),
    };
    match taken {
        Ok(true) => tracing::info!("this location's cookie secrets taken from the deployment before serving"),
        Ok(false) => {}
        Err(err) => tracing::warn!(%err, "this location's cookie secrets in the deployment not taken at start"),
    }
    if tsig_keys {
        // Keys that do not read stay out: the revision naming them is refused and the
        // follower says why (`take_tsig_keys`).
        if let Ok((_, Some(value))) = store.value(TSIG_KEYS).await {
            let path = state_dir.join(TSIG_KEYS_APPLIED);
            let reads = crate::transfer::tsig::Keys::parse_bind(&String::from_utf8_lossy(&value.data)).is_ok();
            if reads && std::fs::read(&path).ok().as_deref() != Some(value.data.as_slice()) {
                let kept = match path.parent() {
                    Some(dir) => {
                        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
                            .create(dir)
                    }
                    None => Ok(()),
                };
                if let Err(err) = kept.and_then(|()| qdns_link::protocol::write_private(&path, &value.data)) {
                    tracing::warn!(%err, "the deployment's TSIG keys not kept at start");
                } else {
                    tracing::info!("the deployment's TSIG keys taken at start");
                }
            }
        }
    }
    if applied.revision() != Some(revision) {
        let intent = store.read(revision, manifest, Some(&applied.chunks())).await?;
        applied.stage(&intent)?;
    }
    Ok(Some(revision))
}

/// Makes the keys of each zone in `signed` the deployment's: the store's when it holds
/// them, else those kept here (a single host moving its zones in keeps its keys, and the
/// parent's DS stays valid) or new ones, stored first — every location then signs with
/// the same keys. Made once per deployment: of two controls making a zone's first key
/// at once, both take the one stored first.
async fn share_keys(
    store: &mut Store,
    signed: &std::collections::BTreeMap<String, String>,
    keys: &KeyStore,
) -> Result<(), IntentError> {
    let keys_error = |e: crate::dnssec::DnssecError| IntentError::Files(e.to_string());
    for (zone, algorithm) in signed {
        let origin = qdns_zone::master::parse_name_wire(zone, b"\0")
            .map_err(|e| IntentError::Files(format!("signed zone {zone:?}: {e}")))?;
        let made = if let Some(file) = keys.file(&origin).map_err(keys_error)? {
            file
        } else {
            let algorithm = qdns_zone::dnssec::Algorithm::parse(algorithm)
                .ok_or_else(|| IntentError::Files(format!("signed zone {zone}: algorithm {algorithm:?}")))?;
            KeyStore::fresh(algorithm).map_err(keys_error)?
        };
        let shared = store.secret_or(&format!("{KEYS_SECRET}/{zone}"), made).await?;
        if keys.adopt(&origin, &shared).map_err(keys_error)? {
            tracing::info!(%zone, "took the deployment's DNSSEC keys for this zone");
        }
    }
    Ok(())
}

/// `etcd://MEMBERS/PREFIX`.
fn display(url: &StoreUrl) -> String {
    format!("etcd://{}/{}", url.members(), url.prefix)
}

/// What following the store works with.
pub struct Follower {
    /// Where the intent is, and this location's name in the deployment.
    pub deployment: Arc<Deployment>,
    /// The applied revision on disk.
    pub applied: Applied,
    /// Loads a revision's zone directory.
    pub reloads: Reloads,
    /// The state (its operator state, its timeline, when the store was last heard
    /// from), and pushing it to the edges.
    pub ctx: Ctx,
    /// The zone keys, shared with every location through the store.
    pub keys: KeyStore,
    /// The deployment's operator state was taken once since control started.
    pub took_operator: std::sync::atomic::AtomicBool,
    /// Set once the store's revision and operator state are in force here (what the
    /// transfer serials wait for: `transfer::Sources::caught_up`).
    pub caught_up: tokio::sync::watch::Sender<bool>,
    /// The checkers the report listener accepts, when the deployment lists them
    /// (`PREFIX/secret/checker-keys`; not with `--checker-keys`).
    pub checker_keys: Option<Arc<arc_swap::ArcSwap<crate::report::Keys>>>,
    /// The TSIG keys are the deployment's (`PREFIX/secret/tsig-keys`; not with
    /// `--tsig-key`).
    pub tsig_keys: bool,
}

/// Applies each new revision until `shutdown`, reconnecting with backoff when the store
/// is lost (a location cut off keeps what it applied).
pub async fn follow(follower: Follower, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    let mut cut_off = false;
    loop {
        let mut reached = false;
        let ended = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = session(&follower, &mut reached, &mut cut_off) => ended,
        };
        if reached {
            backoff = Duration::from_millis(200);
        }
        if let Err(err) = ended {
            if !cut_off {
                cut_off = true;
                tracing::warn!(%err, "intent store lost: serving the revision applied last");
                let event = format!("cut off from the intent store: {err}");
                follower.ctx.state.lock().await.event("intent", event);
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: catches up from the revision applied (a full read of the current
/// one), then applies each revision the watch brings.
async fn session(follower: &Follower, reached: &mut bool, cut_off: &mut bool) -> Result<(), IntentError> {
    let mut store = Store::connect(
        &follower.deployment.source.url,
        &follower.deployment.source.tls,
        STORE_TIMEOUT,
    )
    .await?;
    let current = store.current().await?;
    *reached = true;
    follower.ctx.state.lock().await.intent_heard();
    if std::mem::take(cut_off) {
        let from = follower.applied.revision().unwrap_or(0);
        tracing::info!(revision = from, "intent store reached again: catching up");
        let event = format!("intent store reached again: catching up from revision {from}");
        follower.ctx.state.lock().await.event("intent", event);
    }
    if let Some((revision, manifest)) = current {
        if follower.applied.revision().is_none_or(|applied| revision > applied) {
            apply(follower, &mut store, revision, manifest).await?;
        }
    }
    let watched_from = follower.applied.revision().unwrap_or(0) + 1;
    let mut watch = store.watch(watched_from).await?;
    // The operator state: what is in the store now, then each change.
    let operator_from = take_operator(follower, &mut store).await?;
    follower.caught_up.send_replace(true);
    let mut operator = store.watch_value(deployed::KEY, operator_from + 1).await?;
    // The deployment's secrets (its TSIG keys, checkers' keys and zones' keys, this
    // location's cookie secrets): as the store holds them now, then on each change of
    // any (one watch of `secret/`).
    let secrets_from = take_secrets(follower, &mut store).await?;
    let mut secrets = store.watch_under(SECRETS, secrets_from + 1).await?;
    // The records dynamic update added (every zone's, one watch of `dynamic/`).
    let dynamic_from = crate::update::deployed::take(&follower.ctx, &follower.reloads, &mut store).await?;
    let mut dynamic = store
        .watch_under(crate::update::deployed::STORE, dynamic_from + 1)
        .await?;
    loop {
        let seen = tokio::select! {
            heard = dynamic.next() => match heard? {
                None => return Err(IntentError::Files("the store ended the watch".to_owned())),
                Some(Heard::Changed(_) | Heard::Compacted) => {
                    let from = crate::update::deployed::take(&follower.ctx, &follower.reloads, &mut store).await?;
                    dynamic = store.watch_under(crate::update::deployed::STORE, from + 1).await?;
                    continue;
                }
            },
            seen = tokio::time::timeout(Duration::from_secs(10), watch.next()) => seen,
            heard = secrets.next() => match heard? {
                None => return Err(IntentError::Files("the store ended the watch".to_owned())),
                Some(Heard::Changed(_) | Heard::Compacted) => {
                    let from = take_secrets(follower, &mut store).await?;
                    secrets = store.watch_under(SECRETS, from + 1).await?;
                    continue;
                }
            },
            heard = operator.next() => match heard? {
                None => return Err(IntentError::Files("the store ended the watch".to_owned())),
                Some(Heard::Changed(_) | Heard::Compacted) => {
                    let from = take_operator(follower, &mut store).await?;
                    operator = store.watch_value(deployed::KEY, from + 1).await?;
                    follower.ctx.state.lock().await.intent_heard();
                    continue;
                }
            },
        };
        match seen {
            // Quiet: the store is there if a read answers.
            Err(_) => {
                store.current().await?;
            }
            Ok(Err(err)) => return Err(err),
            Ok(Ok(None)) => return Err(IntentError::Files("the store ended the watch".to_owned())),
            Ok(Ok(Some(Seen::Compacted))) => {
                // The revisions in between are gone: the current one, read whole.
                if let Some((revision, manifest)) = store.current().await? {
                    if follower.applied.revision().is_none_or(|applied| revision > applied) {
                        apply(follower, &mut store, revision, manifest).await?;
                    }
                }
                watch = store.watch(follower.applied.revision().unwrap_or(0) + 1).await?;
            }
            Ok(Ok(Some(Seen::Revision(revision, manifest)))) => {
                if follower.applied.revision().is_none_or(|applied| revision > applied) {
                    apply(follower, &mut store, revision, manifest).await?;
                }
            }
        }
        follower.ctx.state.lock().await.intent_heard();
    }
}

/// Takes each of the deployment's secrets as the store holds it now (each take is a
/// no-op for one unchanged); a revision refused for want of a TSIG key is tried again
/// once the keys come. The store revision of the first read.
async fn take_secrets(follower: &Follower, store: &mut Store) -> Result<u64, IntentError> {
    let from = take_checker_keys(follower, store).await?;
    if take_tsig_keys(follower, store).await? {
        retry_current(follower, store).await?;
    }
    take_keys(follower, store).await?;
    take_cookies(follower, store).await?;
    Ok(from)
}

/// Takes this location's cookie secrets as the store holds them, when they are not the
/// ones in force (saved, then sent to the edges); none there yet: the ones in force
/// become them (create-if-absent, so a second control of the location started at the
/// same time takes the first's). Secrets that do not read are refused (timeline) and
/// the last stay.
async fn take_cookies(follower: &Follower, store: &mut Store) -> Result<(), IntentError> {
    let name = crate::cookies::store_name(&follower.deployment.location);
    let ctx = &follower.ctx;
    for _ in 0..2 {
        let held = *ctx.cookies.borrow();
        let event = match store.value(&name).await?.1 {
            None => match store.swap(&name, None, held.encode()).await? {
                Swapped::Written(revision) => {
                    format!("this location's cookie secrets moved into the deployment (intent revision {revision})")
                }
                Swapped::Changed => continue,
            },
            Some(value) => match crate::cookies::Secrets::decode(&value.data) {
                Ok(theirs) if theirs == held => return Ok(()),
                Ok(theirs) => match crate::cookies::install(&ctx.state_dir, &ctx.cookies, theirs) {
                    Ok(()) => format!(
                        "this location's cookie secrets taken from the deployment (intent revision {})",
                        value.revision
                    ),
                    Err(err) => format!("this location's cookie secrets in the deployment not taken: {err}"),
                },
                Err(err) => format!(
                    "this location's cookie secrets in the deployment (intent revision {}) refused, the last stay in force: {err}",
                    value.revision
                ),
            },
        };
        tracing::info!("{event}");
        ctx.state.lock().await.event("cookies", event);
        return Ok(());
    }
    Ok(())
}

/// Reads, stages and loads `revision`; committed when control installed it, discarded
/// (and the refusal in the timeline) when it did not.
async fn apply(
    follower: &Follower,
    store: &mut Store,
    revision: u64,
    manifest: qdns_intent::manifest::Manifest,
) -> Result<(), IntentError> {
    // Each step's share of the time to apply (the log line says them).
    let started = std::time::Instant::now();
    let intent = store.read(revision, manifest, Some(&follower.applied.chunks())).await?;
    share_keys(store, &intent.signed, &follower.keys).await?;
    let read = started.elapsed();
    let dir = follower.applied.stage(&intent)?;
    let staged = started.elapsed();
    let outcome = follower.reloads.reload_intent(dir, revision).await;
    let loaded = started.elapsed();
    let event = match outcome {
        Ok(()) => {
            follower.applied.commit(revision)?;
            tracing::info!(
                revision,
                message = %intent.message,
                read_ms = read.as_millis(),
                stage_ms = staged.saturating_sub(read).as_millis(),
                load_ms = loaded.saturating_sub(staged).as_millis(),
                "intent revision applied"
            );
            format!("intent revision {revision} applied ({})", intent.message)
        }
        Err(why) => {
            follower.applied.discard(revision);
            tracing::warn!(revision, %why, "intent revision refused here; the last stays in force");
            let mut state = follower.ctx.state.lock().await;
            let refused = &mut state.log.intent_refused;
            if !refused.iter().any(|(r, _)| *r == revision) {
                if refused.len() == crate::state::INTENT_REFUSALS_KEPT {
                    refused.pop_front();
                }
                refused.push_back((revision, why.clone()));
            }
            format!("intent revision {revision} refused here, the last stays in force: {why}")
        }
    };
    follower.ctx.state.lock().await.event("intent", event);
    Ok(())
}

/// Takes the deployment's operator state as the store holds it now (when it is newer
/// than the one in force here): installed, saved, pushed to the edges, and what another
/// location changed put in the timeline. The store revision read.
async fn take_operator(follower: &Follower, store: &mut Store) -> Result<u64, IntentError> {
    let (now, value) = store.value(deployed::KEY).await?;
    // The first value read since control started is the state it starts from; later
    // ones are changes, each said in the timeline.
    let first = !follower.took_operator.swap(true, std::sync::atomic::Ordering::Relaxed);
    let Some(value) = value else {
        move_in(follower, store).await?;
        return Ok(now);
    };
    let deployed = deployed::Deployed::decode(&value.data).map_err(|reason| IntentError::Damaged {
        revision: value.revision,
        reason,
    })?;
    let location = &follower.deployment.location;
    let ctx = &follower.ctx;
    let mut state = ctx.state.lock().await;
    if deployed::install(&mut state, location, value.revision, &deployed) {
        if first {
            let event = format!(
                "operator state of the deployment taken (intent revision {})",
                value.revision
            );
            state.event("intent", event);
        } else if deployed.last.location != *location {
            let by = deployed
                .last
                .actor
                .as_deref()
                .map(|a| format!(" by {a}"))
                .unwrap_or_default();
            for made in &deployed.last.made {
                let event = format!(
                    "{made} (intent revision {}, from {}{by})",
                    value.revision, deployed.last.location
                );
                state.event("intent", event);
            }
        }
        let _ = state.save_operator(&ctx.state_dir);
        ctx.push_health(&mut state);
    }
    Ok(now)
}

/// Nothing set in the deployment yet: what this location had set before it followed
/// the store (a single host moving in: its overrides, externals and shifts) becomes the
/// deployment's — unless another location's did first (create-if-absent).
async fn move_in(follower: &Follower, store: &mut Store) -> Result<(), IntentError> {
    let location = &follower.deployment.location;
    let own = follower.ctx.state.lock().await.operator.set.clone();
    if own == crate::operator::OperatorState::default() {
        return Ok(());
    }
    let moved = deployed::Deployed {
        all: own,
        at: std::collections::BTreeMap::new(),
        last: deployed::Last {
            location: location.clone(),
            actor: None,
            made: vec![format!("the operator state of {location} moved into the deployment")],
        },
    };
    if let Swapped::Written(revision) = store.swap(deployed::KEY, None, moved.encode()).await? {
        let mut state = follower.ctx.state.lock().await;
        state.operator.revision = state.operator.revision.max(revision);
        let event = format!("the operator state set here moved into the deployment (intent revision {revision})");
        state.event("intent", event);
    }
    Ok(())
}

/// Takes the zones' keys as the store holds them now: a zone whose keys changed (a
/// rollover step given at another location) is signed with them at once. The store
/// revision read.
async fn take_keys(follower: &Follower, store: &mut Store) -> Result<u64, IntentError> {
    let (now, values) = store.values_under(ZONE_KEYS).await?;
    let mut changed = Vec::new();
    for (zone, value) in values {
        let Ok(origin) = qdns_zone::master::parse_name_wire(&zone, b"\0") else {
            continue;
        };
        match follower.keys.adopt(&origin, &value.data) {
            Ok(true) => changed.push(zone),
            Ok(false) => {}
            Err(err) => tracing::warn!(%zone, %err, "the deployment's keys of this zone cannot be taken"),
        }
    }
    if !changed.is_empty() {
        let ctx = &follower.ctx;
        let mut state = ctx.state.lock().await;
        let why = format!("the deployment's DNSSEC keys of {} changed", changed.join(", "));
        tracing::info!("{why}");
        // A failure is in the timeline; the next rollover step or revision tries again.
        let _ = crate::reload::resign(ctx, &mut state, &why);
    }
    Ok(now)
}

/// The checkers' keys the deployment listed when this location applied them last
/// (none yet: an empty list, every report refused as from an unknown checker).
#[must_use]
pub fn checker_keys_applied(state_dir: &std::path::Path) -> crate::report::Keys {
    let path = state_dir.join(CHECKER_KEYS_APPLIED);
    match std::fs::read_to_string(&path) {
        Ok(text) => crate::report::Keys::parse(&text, &path).unwrap_or_else(|err| {
            tracing::warn!(%err, "the checker keys applied before do not read; none until the store's come");
            crate::report::Keys::default()
        }),
        Err(_) => crate::report::Keys::default(),
    }
}

/// Takes the deployment's list of checkers as the store holds it now, when this
/// location's report listener follows it: checked, kept under the state directory, and
/// in force for the next report; one that does not read is refused (timeline) and the
/// last stays. The store revision read.
async fn take_checker_keys(follower: &Follower, store: &mut Store) -> Result<u64, IntentError> {
    let (now, value) = store.value(CHECKER_KEYS).await?;
    let (Some(listed), Some(value)) = (&follower.checker_keys, value) else {
        return Ok(now);
    };
    let path = follower.ctx.state_dir.join(CHECKER_KEYS_APPLIED);
    if std::fs::read(&path).is_ok_and(|kept| kept == value.data) {
        return Ok(now);
    }
    let text = String::from_utf8_lossy(&value.data);
    let event = match crate::report::Keys::parse(&text, std::path::Path::new("the deployment's checker-keys")) {
        Ok(keys) => {
            if let Err(err) = qdns_link::protocol::write_private(&path, &value.data) {
                tracing::warn!(%err, "the checker keys are in force but not kept: a restart without the store would not have them");
            }
            let count = keys.len();
            listed.store(Arc::new(keys));
            format!(
                "the deployment's checker keys taken: {count} checkers (intent revision {})",
                value.revision
            )
        }
        Err(err) => format!(
            "the deployment's checker keys (intent revision {}) refused, the last stay in force: {err}",
            value.revision
        ),
    };
    tracing::info!("{event}");
    follower.ctx.state.lock().await.event("intent", event);
    Ok(now)
}

/// The TSIG keys the deployment gave when this location applied them last (none yet:
/// no key; a zone naming one is refused until they come).
#[must_use]
pub fn tsig_keys_applied(state_dir: &std::path::Path) -> crate::transfer::tsig::Keys {
    let path = state_dir.join(TSIG_KEYS_APPLIED);
    match qdns_link::secret::read_to_string(&path) {
        Ok(text) => crate::transfer::tsig::Keys::parse_bind(&text).unwrap_or_else(|err| {
            tracing::warn!(%err, "the TSIG keys applied before do not read; none until the store's come");
            crate::transfer::tsig::Keys::default()
        }),
        Err(_) => crate::transfer::tsig::Keys::default(),
    }
}

/// Takes the deployment's TSIG keys as the store holds them now, when this location
/// follows them: checked (they read, and every zone served here finds the keys it
/// names), kept under the state directory, and in force for the next transfer; keys
/// that do not pass are refused (timeline) and the last stay. True when new keys were
/// put in force.
async fn take_tsig_keys(follower: &Follower, store: &mut Store) -> Result<bool, IntentError> {
    if !follower.tsig_keys {
        return Ok(false);
    }
    let Some(value) = store.value(TSIG_KEYS).await?.1 else {
        return Ok(false);
    };
    let path = follower.ctx.state_dir.join(TSIG_KEYS_APPLIED);
    if std::fs::read(&path).is_ok_and(|kept| kept == value.data) {
        return Ok(false);
    }
    let text = String::from_utf8_lossy(&value.data);
    let ctx = &follower.ctx;
    let mut state = ctx.state.lock().await;
    let checked = crate::transfer::tsig::Keys::parse_bind(&text)
        .and_then(|keys| crate::transfer::check_keys(&state.served.snapshot, &[], &keys).map(|()| keys));
    let (taken, event) = match checked {
        Ok(keys) => {
            if let Err(err) = qdns_link::protocol::write_private(&path, &value.data) {
                tracing::warn!(%err, "the TSIG keys are in force but not kept: a restart without the store would not have them");
            }
            let count = keys.len();
            ctx.transfers.set_keys(keys);
            (
                true,
                format!(
                    "the deployment's TSIG keys taken: {count} keys (intent revision {})",
                    value.revision
                ),
            )
        }
        Err(err) => (
            false,
            format!(
                "the deployment's TSIG keys (intent revision {}) refused, the last stay in force: {err}",
                value.revision
            ),
        ),
    };
    tracing::info!("{event}");
    state.event("intent", event);
    Ok(taken)
}

/// Applies the store's revision in force if it is newer than the one applied here (one
/// refused before may load now).
async fn retry_current(follower: &Follower, store: &mut Store) -> Result<(), IntentError> {
    if let Some((revision, manifest)) = store.current().await? {
        if follower.applied.revision().is_none_or(|applied| revision > applied) {
            apply(follower, store, revision, manifest).await?;
        }
    }
    Ok(())
}
