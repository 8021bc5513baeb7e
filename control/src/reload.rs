//! Loading the zone directory again, and signing the snapshot again: the services the
//! control socket, transfer-in (through [`crate::reloads::Reloads`]) and the expiry
//! ticker call, each installing the result and pushing it to the edges.
use std::sync::Arc;

use qdns_zone::name;

use crate::{
    api::{ApiError, ErrorCode, Reloaded},
    ctx::Ctx,
    state::State,
};

/// Why a snapshot was not signed again in the background.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RefreshError {
    /// Signing failed.
    #[error("{0}")]
    Sign(#[from] crate::dnssec::DnssecError),
    /// The signing task panicked or was cancelled.
    #[error("the signing task ended early: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Signs `base`, the current snapshot when called, again as a new version — without
/// the state lock and off the async workers: a 1,000,000-set zone takes ~27 s of both
/// cores, and health decisions, API calls and edge pushes go on meanwhile. The result
/// is installed and pushed only if the snapshot is still `base` (a reload or a rollover
/// step in the meantime signed its own). A failure is in the timeline.
pub(crate) async fn refresh_signatures(
    ctx: &Ctx,
    base: Arc<qdns_zone::Snapshot>,
    why: &str,
) -> Result<(), RefreshError> {
    let from = base.version;
    let version = crate::clock::next_version(from);
    let store = ctx.key_store();
    let signed = tokio::task::spawn_blocking(move || {
        // Copy, then let go of the shared snapshot at once: a health change while this
        // signs updates the state's own without copying it under the lock.
        let copy = (*base).clone();
        drop(base);
        crate::dnssec::sign_again(&store, copy, version)
    })
    .await
    .map_err(RefreshError::from)
    .and_then(|r| r.map_err(RefreshError::from));
    let mut state = ctx.state.lock().await;
    let snapshot = match signed {
        Ok(snapshot) => snapshot,
        Err(err) => {
            state.event("dnssec", format!("re-signing failed: {err}"));
            return Err(err);
        }
    };
    if state.served.snapshot.version == from {
        install_signed(ctx, &mut state, snapshot, why);
    }
    Ok(())
}

/// Signs the current snapshot's signed zones again (new keys, or signatures near
/// expiry) and pushes it as a new snapshot version; health is kept.
pub(crate) fn resign(ctx: &Ctx, state: &mut State, why: &str) -> Result<(), ApiError> {
    let version = crate::clock::next_version(state.served.snapshot.version);
    let snapshot = crate::dnssec::resign(&ctx.key_store(), &state.served.snapshot, version).map_err(|err| {
        state.event("dnssec", format!("re-signing failed: {err}"));
        ApiError::new(ErrorCode::Internal, err.to_string())
    })?;
    install_signed(ctx, state, snapshot, why);
    Ok(())
}

/// Installs `snapshot`, the current one signed again, and pushes it to the edges. Its
/// health is the state's now (health may have moved while it was signed).
fn install_signed(ctx: &Ctx, state: &mut State, mut snapshot: qdns_zone::Snapshot, why: &str) {
    let version = snapshot.version;
    snapshot.bitmap.clone_from(&state.served.snapshot.bitmap);
    // Same zones and slots: replacing recomputes the same health from what is observed.
    let before = Arc::clone(&state.served.snapshot);
    state.replace_snapshot(snapshot);
    ctx.push_snapshot(state, &before);
    state.event("dnssec", format!("{why}: signed again as snapshot {version}"));
}

/// Loads the zone directory again as a new snapshot version (checked, signed),
/// installs it and pushes it to the edges; a refusal is in the timeline.
pub(crate) fn reload(ctx: &Ctx, state: &mut State) -> Result<Reloaded, ApiError> {
    let revision = state.served.snapshot.intent_revision;
    reload_revision(ctx, state, revision)
}

/// [`reload`], the snapshot made from revision `intent_revision` of the intent.
fn reload_revision(ctx: &Ctx, state: &mut State, intent_revision: u64) -> Result<Reloaded, ApiError> {
    let version = crate::clock::next_version(state.served.snapshot.version);
    let secondary_dir = ctx.state_dir.join(crate::transfer::SECONDARY_DIR);
    let dynamic_dir = ctx.state_dir.join(crate::update::dynamic::DIR);
    let (mut snapshot, pending) = qdns_zone::load_dir_pending(
        &state.settings.zones_dir,
        version,
        qdns_zone::Sources {
            geoip_db: state.settings.geoip_db.as_deref(),
            location: Some(&state.settings.site.location),
            secondary_dir: Some(&secondary_dir),
            dynamic_dir: Some(&dynamic_dir),
        },
    )
    .map_err(|e| {
        let message = e.to_string();
        state.event("reload", format!("reload rejected: {message}"));
        ApiError::new(ErrorCode::InvalidZone, message)
    })?;
    crate::transfer::check_keys(&snapshot, &pending, &ctx.transfers.keys()).map_err(|message| {
        state.event("reload", format!("reload rejected: {message}"));
        ApiError::new(ErrorCode::InvalidZone, message)
    })?;
    let before = Some(&*state.served.snapshot);
    crate::dnssec::sign_snapshot(&ctx.key_store(), &mut snapshot, crate::dnssec::now(), before).map_err(|err| {
        state.event("reload", format!("reload rejected: {err}"));
        ApiError::new(ErrorCode::InvalidZone, err.to_string())
    })?;
    if state.settings.deny_special_use_targets {
        crate::special_use::check(&snapshot).map_err(|err| {
            state.event("reload", format!("reload rejected: {err}"));
            ApiError::new(ErrorCode::InvalidZone, err.to_string())
        })?;
    }
    ctx.transfers.set_pending(pending);
    snapshot.intent_revision = intent_revision;
    let before = Arc::clone(&state.served.snapshot);
    state.install_loaded(snapshot);
    ctx.update_checker(state);
    ctx.push_snapshot(state, &before);
    let zones: Vec<String> = state
        .served
        .snapshot
        .zones
        .iter()
        .map(|z| format!("{} serial {}", name::to_text(&z.origin), z.serial))
        .collect();
    state.event(
        "reload",
        format!("reloaded {} zones as snapshot {version}", zones.len()),
    );
    // The old zone set goes with the last reference here (edges' connections hold the
    // current one); its pages go back to the system.
    drop(before);
    qdns_listen::memory::release_freed();
    Ok(Reloaded {
        snapshot_version: version,
        zones,
    })
}

/// Carries out the reloads asked for through [`crate::reloads::Reloads`], one at a
/// time, until `shutdown`.
pub(crate) async fn serve(
    ctx: Ctx,
    mut asks: tokio::sync::mpsc::Receiver<crate::reloads::Ask>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let ask = tokio::select! {
            () = shutdown.cancelled() => return,
            ask = asks.recv() => match ask {
                Some(ask) => ask,
                None => return,
            },
        };
        let mut state = ctx.state.lock().await;
        state.log.actor = Some(ask.by.to_owned());
        let outcome = match ask.intent {
            None => reload(&ctx, &mut state),
            Some((dir, revision)) => {
                // The revision's geo database comes with its zones (or none).
                let geo = qdns_intent::files::geo_db(&dir);
                let geo_before = std::mem::replace(&mut state.settings.geoip_db, geo);
                let before = std::mem::replace(&mut state.settings.zones_dir, dir);
                let loaded = reload_revision(&ctx, &mut state, revision);
                if loaded.is_err() {
                    state.settings.zones_dir = before;
                    state.settings.geoip_db = geo_before;
                }
                loaded
            }
        }
        .map(drop)
        .map_err(|err| err.message);
        state.log.actor = None;
        drop(state);
        let _ = ask.outcome.send(outcome);
    }
}
