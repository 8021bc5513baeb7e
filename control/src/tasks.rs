//! Control's background work: feeding the embedded checker's observations into the
//! state, and the one-second ticker (expiries, checker freshness, re-signing, saving
//! what steering learnt).
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::{checker, ctx::Ctx, dnssec, persist};

/// Feeds checker observations into the state, in batches, and pushes health changes.
pub(crate) async fn apply_observations(
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
        let now = crate::clock::now();
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
pub(crate) async fn expiry_ticker(ctx: Ctx, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut resign_after = Instant::now();
    let mut steering_saved = Instant::now();
    // The re-signing under way: its own task, so expiries and checker freshness keep
    // their one-second beat while a large zone is signed.
    let mut refreshing: Option<tokio::task::JoinHandle<Result<(), crate::reload::RefreshError>>> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut state = ctx.state.lock().await;
        let expired = state.expire();
        if expired || !state.observed.observations.is_empty() {
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
        let due = refreshing.is_none()
            && ctx.lifetimes.due(&state.served.snapshot, dnssec::now())
            && Instant::now() >= resign_after;
        let base = due.then(|| state.served.snapshot.clone());
        let steering = (steering_saved.elapsed() >= persist::STEERING_EVERY).then(|| state.steering());
        if std::mem::take(&mut state.operator.dirty) {
            // An expiry is in force whether or not it is saved; a failure is counted
            // and retried at the next change (a restart re-expires it anyway).
            let _ = state.save_operator(&ctx.state_dir);
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
                crate::reload::refresh_signatures(&ctx, base, "signatures due for refresh").await
            }));
        }
    }
}
