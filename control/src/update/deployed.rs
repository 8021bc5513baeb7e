//! Dynamic update in a deployment (SPEC §11: records added by UPDATE are intent): each
//! zone's records are one value in the store, `PREFIX/dynamic/ORIGIN` (the text of the
//! zone's dynamic file), changed by compare-and-swap before the UPDATE is answered.
//! The location that takes the UPDATE loads them at once; every other location's
//! intent follower sees the value change ([`take`]) and loads them too.
use std::{collections::BTreeSet, net::IpAddr, path::Path};

use qdns_intent::{records::Swapped, store::Store, IntentError};

use super::{apply, dynamic, Outcome};
use crate::{
    ctx::Ctx,
    deployed::{Deployment, STORE_TIMEOUT},
    transfer::wire::{self, rcode},
};

/// Where the records are under PREFIX.
pub const STORE: &str = "dynamic";

/// Times an UPDATE is tried again when the store's value changed under it.
const RETRIES: usize = 3;

/// The store name of the zone at `origin` (wire).
fn store_name(origin: &[u8]) -> String {
    format!("{STORE}/{}", qdns_zone::name::to_text(origin))
}

/// Carries out `update` on the deployment's records of its zone (read, checked and
/// written back by compare-and-swap), then here; the RCODE and outcome. A store that
/// does not answer within [`STORE_TIMEOUT`] changes nothing (SERVFAIL).
pub async fn change(
    ctx: &Ctx,
    deployment: &Deployment,
    update: &wire::Update,
    (key, peer): (&str, IpAddr),
    now: u64,
) -> (u8, Outcome) {
    let origin = &update.request.qname;
    let zone_text = qdns_zone::name::to_text(origin);
    let (zone, rules) = match super::zone_and_rules(&ctx.state.lock().await.served.snapshot, origin) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let unreachable = |err: &dyn std::fmt::Display| {
        tracing::warn!(%peer, key, zone = %zone_text, %err, "UPDATE not applied: the intent store does not answer");
        (rcode::SERVFAIL, Outcome::StoreUnreachable)
    };
    let source = &deployment.source;
    let connected = tokio::time::timeout(STORE_TIMEOUT, Store::connect(&source.url, &source.tls, STORE_TIMEOUT)).await;
    let mut store = match connected {
        Ok(Ok(store)) => store,
        Ok(Err(err)) => return unreachable(&err),
        Err(_) => return unreachable(&"no answer within the store timeout"),
    };
    let name = store_name(origin);
    for _ in 0..RETRIES {
        let read = tokio::time::timeout(STORE_TIMEOUT, store.value(&name)).await;
        let value = match read {
            Ok(Ok((_, value))) => value,
            Ok(Err(err)) => return unreachable(&err),
            Err(_) => return unreachable(&"no answer within the store timeout"),
        };
        let (expected, before) = match &value {
            None => (None, Vec::new()),
            Some(value) => match dynamic::parse(&value.data, &name) {
                Ok(records) => (Some(value.revision), records),
                Err(err) => {
                    ctx.state.lock().await.event("update", format!("{zone_text}: {err}"));
                    return (rcode::SERVFAIL, Outcome::Failed);
                }
            },
        };
        let sections = (&update.prerequisites[..], &update.updates[..]);
        let records = match apply::apply(&zone, &before, sections, (key, &rules), now) {
            Ok(records) => records,
            Err(refused) => return super::not_applied(&refused, &zone_text, (key, peer)),
        };
        if records == before {
            return (rcode::NOERROR, Outcome::Unchanged);
        }
        let text = dynamic::text(&records).into_bytes();
        let written = tokio::time::timeout(STORE_TIMEOUT, store.swap(&name, expected, text)).await;
        match written {
            Ok(Ok(Swapped::Written(revision))) => {
                let mut state = ctx.state.lock().await;
                let local = dynamic::read(&ctx.state_dir.join(dynamic::DIR), origin).unwrap_or_default();
                let (code, outcome) = super::keep_and_load(ctx, &mut state, origin, (&local, &records), (key, peer));
                if outcome == Outcome::Applied {
                    state.event(
                        "update",
                        format!("{zone_text}: written to the deployment (intent revision {revision}): every location takes it"),
                    );
                } else {
                    // Refused here: the deployment's records go back to what they were.
                    drop(state);
                    let back = dynamic::text(&before).into_bytes();
                    let _ = tokio::time::timeout(STORE_TIMEOUT, store.swap(&name, Some(revision), back)).await;
                }
                return (code, outcome);
            }
            Ok(Ok(Swapped::Changed)) => {}
            Ok(Err(err)) => return unreachable(&err),
            Err(_) => return unreachable(&"no answer within the store timeout"),
        }
    }
    unreachable(&"the records kept changing under the UPDATE")
}

/// Takes the deployment's dynamic records of every zone into the state directory and
/// loads the zones again when any changed; a zone with records here but none in the
/// store moves them in (create-if-absent: a single host joining keeps its records).
/// The store's revision when read.
///
/// # Errors
/// The store unreachable.
pub async fn take(ctx: &Ctx, reloads: &crate::reloads::Reloads, store: &mut Store) -> Result<u64, IntentError> {
    let (now, values) = store.values_under(STORE).await?;
    let dir = ctx.state_dir.join(dynamic::DIR);
    let mut failed = Vec::new();
    let mut changed = false;
    let local_only: Vec<std::path::PathBuf> = {
        // Under the state lock: the update task writes these files (and loads them)
        // under it too, so neither reads a file the other is writing.
        let _state = ctx.state.lock().await;
        let mut named = BTreeSet::new();
        for (origin_text, value) in values {
            let file = dir.join(format!("{origin_text}zone"));
            named.insert(file.clone());
            if std::fs::read(&file).unwrap_or_default() != value.data {
                match put(&dir, &file, &value.data) {
                    Ok(()) => changed = true,
                    Err(err) => failed.push(err),
                }
            }
        }
        files_in(&dir).into_iter().filter(|f| !named.contains(f)).collect()
    };
    for err in failed {
        ctx.state.lock().await.event("update", err);
    }
    for file in local_only {
        let Some(origin_text) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("zone"))
        else {
            continue;
        };
        let data = std::fs::read(&file).unwrap_or_default();
        match store.swap(&format!("{STORE}/{origin_text}"), None, data).await? {
            Swapped::Written(revision) => {
                let event = format!("{origin_text}: the records of dynamic update here moved into the deployment (intent revision {revision})");
                ctx.state.lock().await.event("update", event);
            }
            // Another location's came first: taken with the next change of the values.
            Swapped::Changed => {}
        }
    }
    if changed {
        if let Err(err) = reloads.reload("dynamic update").await {
            let event = format!("the deployment's records of dynamic update did not load here: {err}");
            ctx.state.lock().await.event("update", event);
        }
    }
    Ok(now)
}

/// Writes (or, empty, removes) `file` under `dir`.
fn put(dir: &Path, file: &Path, data: &[u8]) -> Result<(), String> {
    let done = if data.is_empty() {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        }
    } else {
        std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| qdns_link::pki::write_atomic(file, data, 0o600).map_err(|e| e.to_string()))
    };
    done.map_err(|err| {
        format!(
            "{}: the deployment's records of dynamic update not kept here: {err}",
            file.display()
        )
    })
}

/// The zone files under `dir` (none when it is missing).
fn files_in(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "zone"))
                .collect()
        })
        .unwrap_or_default()
}
