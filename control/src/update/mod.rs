//! Dynamic update (RFC 2136, SPEC §11): UPDATE messages on `--transfer-listen`, over UDP
//! and TCP, for zones with `[[zone.update]]` rules.
//!
//! The listener hands each UPDATE to one task ([`serve`]) that carries them out one at a
//! time, so each is applied whole or not at all and none sees half of another: TSIG
//! first (an unsigned UPDATE is refused, one that does not verify answered NOTAUTH with
//! its TSIG error), then the zone and its rules, the prerequisites and the updates
//! ([`apply`]); an accepted change is written to the state directory ([`dynamic`]) and
//! the zones are loaded again with it — the serial moves, signed zones are signed again
//! (only the changed sets), secondaries are notified and the edges get it — before the
//! answer goes out. A reload that refuses it puts the records before back and answers
//! SERVFAIL. With `--intent` the records are the deployment's ([`deployed`]): changed
//! in the store by compare-and-swap first, and every location takes them. The queue is bounded ([`QUEUE`]); an UPDATE that finds it full is dropped
//! (counted `busy`: the client retries).
pub mod apply;
pub mod deployed;
pub mod dynamic;
pub mod limit;

use std::{net::IpAddr, time::Duration};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    ctx::Ctx,
    transfer::{
        serve::{short_answer, verify, Signing},
        wire::{self, rcode, rtype},
        Transfers,
    },
};

/// UPDATEs waiting for the task at most.
pub const QUEUE: usize = 64;
/// The longest a listener waits for an UPDATE's answer.
pub const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// What an UPDATE came to, as `qdns_control_updates_total{outcome}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Applied: the records changed.
    Applied,
    /// Nothing to change (the records were already so).
    Unchanged,
    /// A prerequisite failed (NXDOMAIN, YXDOMAIN, NXRRSET, YXRRSET).
    Prerequisite,
    /// Not permitted: no rule of the key, or a record the zone files define.
    RefusedRule,
    /// Unsigned, or its TSIG does not verify.
    RefusedTsig,
    /// A zone not served, or served without `[[zone.update]]` rules.
    NotAuth,
    /// A record outside the zone.
    NotZone,
    /// Malformed.
    Malformed,
    /// The change could not be kept or did not load (the records before stay).
    Failed,
    /// The queue was full: dropped.
    Busy,
    /// With `--intent`: the store could not be reached (or kept changing under the
    /// UPDATE): nothing was changed (SERVFAIL).
    StoreUnreachable,
    /// Over the key's `per_minute` for the zone (REFUSED).
    RateLimited,
}

impl Outcome {
    /// Every outcome, in metric order.
    pub const ALL: [Outcome; 12] = [
        Outcome::Applied,
        Outcome::Unchanged,
        Outcome::Prerequisite,
        Outcome::RefusedRule,
        Outcome::RefusedTsig,
        Outcome::NotAuth,
        Outcome::NotZone,
        Outcome::Malformed,
        Outcome::Failed,
        Outcome::Busy,
        Outcome::StoreUnreachable,
        Outcome::RateLimited,
    ];

    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Unchanged => "unchanged",
            Outcome::Prerequisite => "prerequisite_failed",
            Outcome::RefusedRule => "refused_rule",
            Outcome::RefusedTsig => "refused_tsig",
            Outcome::NotAuth => "notauth",
            Outcome::NotZone => "notzone",
            Outcome::Malformed => "malformed",
            Outcome::Failed => "failed",
            Outcome::Busy => "busy",
            Outcome::StoreUnreachable => "store_unreachable",
            Outcome::RateLimited => "rate_limited",
        }
    }
}

/// Counters per outcome.
pub type Stats = crate::counts::Counts<Outcome, { Outcome::ALL.len() }>;

impl crate::counts::Outcome for Outcome {
    const ALL: &'static [Outcome] = &Outcome::ALL;
}

/// One UPDATE handed to the task.
#[derive(Debug)]
pub struct Job {
    peer: IpAddr,
    message: Vec<u8>,
    answer: oneshot::Sender<Vec<u8>>,
}

/// A new queue: the sender for [`Transfers::set_updates`], the receiver for [`serve`].
#[must_use]
pub fn queue() -> (mpsc::Sender<Job>, mpsc::Receiver<Job>) {
    mpsc::channel(QUEUE)
}

/// True when `message` is an UPDATE (its opcode).
#[must_use]
pub fn is_update(message: &[u8]) -> bool {
    message
        .get(2)
        .is_some_and(|flags| (flags >> 3) & 0xf == wire::opcode::UPDATE)
}

/// The answer to the UPDATE `message` from `peer`; `None`: dropped (no task, the queue
/// full, or no answer in [`ANSWER_WAIT`]).
pub async fn ask(transfers: &Transfers, peer: IpAddr, message: Vec<u8>) -> Option<Vec<u8>> {
    let queue = transfers.updates()?;
    let (answer, answered) = oneshot::channel();
    if queue.try_send(Job { peer, message, answer }).is_err() {
        transfers.update_stats.count(Outcome::Busy);
        return None;
    }
    tokio::time::timeout(ANSWER_WAIT, answered).await.ok()?.ok()
}

/// Carries out the UPDATEs of `jobs` one at a time until `shutdown`.
pub async fn serve(ctx: Ctx, mut jobs: mpsc::Receiver<Job>, shutdown: CancellationToken) {
    let mut limiter = limit::Limiter::default();
    loop {
        let job = tokio::select! {
            () = shutdown.cancelled() => return,
            job = jobs.recv() => match job {
                Some(job) => job,
                None => return,
            },
        };
        let (answer, outcome) = handle(&ctx, &mut limiter, job.peer, &job.message).await;
        ctx.transfers.update_stats.count(outcome);
        let _ = job.answer.send(answer);
    }
}

/// The answer to one UPDATE and what it counts as.
async fn handle(ctx: &Ctx, limiter: &mut limit::Limiter, peer: IpAddr, message: &[u8]) -> (Vec<u8>, Outcome) {
    let now = crate::clock::now();
    let (update, key) = match authenticate(&ctx.transfers, message, now) {
        Ok(authenticated) => authenticated,
        Err(refused) => {
            tracing::info!(%peer, outcome = refused.1.label(), "an UPDATE refused before its zone was read (unreadable, unsigned, or signed with no key of tsig_keys valid now)");
            return refused;
        }
    };
    let request = &update.request;
    let answer = |code: u8, outcome: Outcome| {
        (
            short_answer(request.clone(), code, Signing::Key(key.clone()), now),
            outcome,
        )
    };
    let limit = ctx
        .transfers
        .zone(&request.qname)
        .and_then(|zone| qdns_zone::update::per_minute(&zone.settings.update, &key.name));
    if let Some(per_minute) = limit {
        if !limiter.admit(&request.qname, &key.name, per_minute, std::time::Instant::now()) {
            tracing::info!(%peer, key = %key.name, per_minute, "an UPDATE over its key's per_minute refused");
            return answer(rcode::REFUSED, Outcome::RateLimited);
        }
    }
    let (code, outcome) = if let Some(deployment) = &ctx.deployment {
        deployed::change(ctx, deployment, &update, (&key.name, peer), now).await
    } else {
        let mut state = ctx.state.lock().await;
        change(ctx, &mut state, &update, (&key.name, peer), now)
    };
    answer(code, outcome)
}

/// An UPDATE read and its TSIG verified at `now` with a key of `transfers`: the update
/// and the key. Nothing about any zone is told before this: unsigned → REFUSED, a MAC
/// that does not verify → NOTAUTH with its TSIG error, unreadable or not SOA IN in the
/// zone section → FORMERR (each the answer to send and its outcome).
///
/// # Errors
/// The answer to send instead, and what it counts as.
pub fn authenticate(
    transfers: &Transfers,
    message: &[u8],
    now: u64,
) -> Result<(wire::Update, crate::transfer::tsig::Key), (Vec<u8>, Outcome)> {
    let Ok(update) = wire::read_update(message) else {
        return Err((formerr(message), Outcome::Malformed));
    };
    let request = update.request.clone();
    let key = match verify(transfers, message, &request, now) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Err((
                short_answer(request, rcode::REFUSED, Signing::None, now),
                Outcome::RefusedTsig,
            ))
        }
        Err((why, known)) => {
            return Err((
                short_answer(request, rcode::NOTAUTH, Signing::Refused(why, known), now),
                Outcome::RefusedTsig,
            ))
        }
    };
    if request.qtype != rtype::SOA || request.qclass != 1 {
        return Err((
            short_answer(request, rcode::FORMERR, Signing::Key(key), now),
            Outcome::Malformed,
        ));
    }
    Ok((update, key))
}

/// The zone `origin` names in `snapshot`, and its rules; NOTAUTH when it is not there
/// or has none.
///
/// # Errors
/// NOTAUTH and its outcome.
pub fn zone_and_rules(
    snapshot: &qdns_zone::Snapshot,
    origin: &[u8],
) -> Result<(qdns_zone::Zone, Vec<qdns_zone::update::Rule>), (u8, Outcome)> {
    let zone = snapshot
        .zones
        .iter()
        .find(|z| z.origin == origin)
        .cloned()
        .ok_or((rcode::NOTAUTH, Outcome::NotAuth))?;
    let rules = zone.transfer.as_ref().map(|t| t.update.clone()).unwrap_or_default();
    if rules.is_empty() {
        return Err((rcode::NOTAUTH, Outcome::NotAuth));
    }
    Ok((zone, rules))
}

/// Carries out `update` by `key` from `peer` on the zone it names (the state locked
/// throughout: one UPDATE at a time, none beside a reload); the RCODE and outcome.
fn change(
    ctx: &Ctx,
    state: &mut crate::state::State,
    update: &wire::Update,
    (key, peer): (&str, IpAddr),
    now: u64,
) -> (u8, Outcome) {
    let origin = &update.request.qname;
    let zone_text = qdns_zone::name::to_text(origin);
    let (zone, rules) = match zone_and_rules(&state.served.snapshot, origin) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let dir = ctx.state_dir.join(dynamic::DIR);
    let before = match dynamic::read(&dir, origin) {
        Ok(records) => records,
        Err(err) => {
            state.event(
                "update",
                format!("{zone_text}: the records of dynamic update cannot be read: {err}"),
            );
            return (rcode::SERVFAIL, Outcome::Failed);
        }
    };
    let sections = (&update.prerequisites[..], &update.updates[..]);
    let records = match apply::apply(&zone, &before, sections, (key, &rules), now) {
        Ok(records) => records,
        Err(refused) => return not_applied(&refused, &zone_text, (key, peer)),
    };
    if records == before {
        return (rcode::NOERROR, Outcome::Unchanged);
    }
    keep_and_load(ctx, state, origin, (&before, &records), (key, peer))
}

/// Logs why an UPDATE was not applied; its RCODE and outcome.
fn not_applied(refused: &apply::Refused, zone_text: &str, (key, peer): (&str, IpAddr)) -> (u8, Outcome) {
    tracing::info!(%peer, key, zone = %zone_text, why = %refused.why, rcode = refused.rcode, "UPDATE not applied");
    (refused.rcode, refused.outcome)
}

/// Keeps `records` (were `before`) for the zone at `origin` in the state directory and
/// loads the zones again with them; when that load is refused, `before` is put back.
fn keep_and_load(
    ctx: &Ctx,
    state: &mut crate::state::State,
    origin: &[u8],
    (before, records): (&[apply::Record], &[apply::Record]),
    (key, peer): (&str, IpAddr),
) -> (u8, Outcome) {
    let zone_text = qdns_zone::name::to_text(origin);
    let dir = ctx.state_dir.join(dynamic::DIR);
    if let Err(err) = dynamic::write(&dir, origin, records) {
        state.event("update", format!("{zone_text}: an UPDATE could not be kept: {err}"));
        return (rcode::SERVFAIL, Outcome::Failed);
    }
    state.log.actor = Some(format!("key {key} from {peer}"));
    let loaded = crate::reload::reload(ctx, state);
    state.log.actor = None;
    match loaded {
        Ok(_) => {
            state.event(
                "update",
                format!(
                    "{zone_text}: dynamic update by key {key} from {peer}: {} records kept (were {})",
                    records.len(),
                    before.len()
                ),
            );
            (rcode::NOERROR, Outcome::Applied)
        }
        Err(err) => {
            // The zones in force stay; so do the records before.
            let _ = dynamic::write(&dir, origin, before);
            state.event(
                "update",
                format!("{zone_text}: an UPDATE did not load, nothing changed: {}", err.message),
            );
            (rcode::SERVFAIL, Outcome::Failed)
        }
    }
}

/// FORMERR for a message that does not read: its ID and opcode, nothing else.
fn formerr(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 12];
    if let Some(id) = message.get(..2) {
        out[..2].copy_from_slice(id);
    }
    out[2] = 0x80 | (wire::opcode::UPDATE << 3);
    out[3] = rcode::FORMERR;
    out
}
