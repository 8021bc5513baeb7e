//! A checker following the deployment's intent (`qdns-control checker --intent URL`,
//! SPEC §11): it probes the checks of the revision in force — no zone files copied to
//! checker hosts — and each new one once it loads; the revision followed last is kept
//! under `--state-dir`, so a checker started while the store is down probes what it had.
use std::{path::PathBuf, time::Duration};

use qdns_intent::{applied::Applied, store::Seen, store::Store, IntentError, Source};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::Checks;
use crate::deployed::STORE_TIMEOUT;

/// A revision staged for the checker: its zone directory, and where to say whether its
/// checks loaded (then it is the one followed; else it is dropped).
#[derive(Debug)]
pub struct Staged {
    /// The revision.
    pub revision: u64,
    /// Its zone directory.
    pub dir: PathBuf,
    /// True once its checks are probed.
    pub outcome: oneshot::Sender<bool>,
}

/// The checks to start with: the store's revision in force when it answers within
/// [`STORE_TIMEOUT`] and loads, else the one followed before. Also the revision they
/// are of.
///
/// # Errors
/// The store unreachable (or nothing published) with nothing followed before, or no
/// revision that loads.
pub async fn first<E: std::fmt::Display>(
    source: &Source,
    applied: &Applied,
    load: impl Fn(&std::path::Path) -> Result<Checks, E>,
) -> Result<(Checks, u64), IntentError> {
    let before = applied.revision();
    let newest = match staged_newest(source, applied).await {
        Ok(newest) => newest,
        Err(err) => {
            let Some(revision) = before else {
                return Err(IntentError::Files(format!(
                    "{err}; and no revision was followed here before, so there is nothing to probe"
                )));
            };
            tracing::warn!(%err, revision, "intent store unreachable: probing the revision followed before");
            None
        }
    };
    if let Some(revision) = newest {
        match load(&applied.zones_dir(revision)) {
            Ok(checks) => {
                applied.commit(revision)?;
                return Ok((checks, revision));
            }
            Err(err) => {
                tracing::error!(%err, revision, "intent revision refused; probing the one followed before");
                applied.discard(revision);
            }
        }
    }
    let revision = before.ok_or_else(|| {
        IntentError::Files(format!(
            "nothing is published under {} yet, or nothing that loads",
            source.url.prefix
        ))
    })?;
    let checks = load(&applied.zones_dir(revision)).map_err(|e| IntentError::Files(e.to_string()))?;
    Ok((checks, revision))
}

/// The store's revision in force, staged (`None`: nothing published).
async fn staged_newest(source: &Source, applied: &Applied) -> Result<Option<u64>, IntentError> {
    let mut store = Store::connect(&source.url, &source.tls, STORE_TIMEOUT).await?;
    let Some((revision, manifest)) = store.current().await? else {
        return Ok(None);
    };
    if applied.revision() != Some(revision) {
        let intent = store.read(revision, manifest, Some(&applied.chunks())).await?;
        applied.stage(&intent)?;
    }
    Ok(Some(revision))
}

/// Sends each revision after `from` to the checker, until `shutdown`; reconnects with
/// backoff when the store is lost (the checks in force go on).
pub async fn follow(
    source: Source,
    applied: Applied,
    from: u64,
    revisions: mpsc::Sender<Staged>,
    shutdown: CancellationToken,
) {
    let mut done = from;
    let mut backoff = Duration::from_millis(200);
    loop {
        let ended = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = session(&source, &applied, &mut done, &revisions) => ended,
        };
        if let Err(err) = ended {
            tracing::warn!(%err, retry_in = ?backoff, "intent store lost; the checks in force go on");
        } else {
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// One connection: the revision in force if newer, then each one the watch brings.
/// `Ok` when the checker is gone.
async fn session(
    source: &Source,
    applied: &Applied,
    done: &mut u64,
    revisions: &mpsc::Sender<Staged>,
) -> Result<(), IntentError> {
    let mut store = Store::connect(&source.url, &source.tls, STORE_TIMEOUT).await?;
    if let Some((revision, manifest)) = store.current().await? {
        if revision > *done && !offer(&mut store, applied, revision, manifest, done, revisions).await? {
            return Ok(());
        }
    }
    let mut watch = store.watch(*done + 1).await?;
    loop {
        let seen = match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
            // Quiet: the store is there if a read answers.
            Err(_) => {
                store.current().await?;
                continue;
            }
            Ok(seen) => seen?,
        };
        let (revision, manifest) = match seen {
            None => return Err(IntentError::Files("the store ended the watch".to_owned())),
            Some(Seen::Revision(revision, manifest)) => (revision, manifest),
            Some(Seen::Compacted) => {
                let Some(current) = store.current().await? else {
                    continue;
                };
                watch = store.watch(current.0 + 1).await?;
                current
            }
        };
        if revision > *done && !offer(&mut store, applied, revision, manifest, done, revisions).await? {
            return Ok(());
        }
    }
}

/// Reads and stages `revision` and gives it to the checker: committed when its checks
/// loaded, dropped when not. False when the checker is gone.
async fn offer(
    store: &mut Store,
    applied: &Applied,
    revision: u64,
    manifest: qdns_intent::manifest::Manifest,
    done: &mut u64,
    revisions: &mpsc::Sender<Staged>,
) -> Result<bool, IntentError> {
    let intent = store.read(revision, manifest, Some(&applied.chunks())).await?;
    let dir = applied.stage(&intent)?;
    let (outcome, answer) = oneshot::channel();
    if revisions.send(Staged { revision, dir, outcome }).await.is_err() {
        return Ok(false);
    }
    match answer.await {
        Ok(true) => applied.commit(revision)?,
        Ok(false) => applied.discard(revision),
        Err(_) => return Ok(false),
    }
    *done = revision;
    Ok(true)
}
