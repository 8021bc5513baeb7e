//! Operator changes in a deployment (`--intent`, SPEC §11): made on the deployment's
//! operator state as the store holds it, written back by compare-and-swap, and only
//! then put in force here and answered. A store that does not take them within
//! [`STORE_TIMEOUT`] (this location cut off from it, or no quorum) gets every change
//! of the batch refused, naming the store: nothing is half made. Of two changes of the
//! same thing made at once, the second to reach the store is refused, saying that the
//! thing changed under it; changes of different things are both made.
use std::collections::BTreeMap;

use qdns_intent::{records::Swapped, store::Store, IntentError};

use super::{make, only_location, shift_list, zone_of, Answer, Made};
use crate::{
    api::{ApiError, ErrorCode, Reply, Request, Response},
    ctx::Ctx,
    deployed::STORE_TIMEOUT,
    deployed::{self, Deployed, Deployment, Last},
    dnssec::RolloverStep,
};

/// Writes of one batch tried while other things change the value under it.
const TRIES: usize = 8;

/// A batch made and written: the answers of the lines refused, the changes made (each
/// with its place and scope) and the value written, with its store revision.
struct Written {
    answers: Vec<Option<Response>>,
    made: Vec<(usize, Option<String>, Made)>,
    value: Option<(u64, Deployed)>,
}

/// Makes the changes of `batch` (a line refused before is answered in its place) in the
/// deployment's operator state, then here; one response a line.
pub(super) async fn changes(
    ctx: &Ctx,
    deployment: &Deployment,
    batch: Vec<Result<Request, Response>>,
    peer: Option<&str>,
) -> Vec<Response> {
    let written = match tokio::time::timeout(STORE_TIMEOUT, write(ctx, deployment, &batch, peer)).await {
        Ok(Ok(written)) => written,
        Ok(Err(err)) => return refused(&batch, &err),
        Err(_) => return refused(&batch, &no_answer(deployment)),
    };
    let Written {
        mut answers,
        made,
        value,
    } = written;
    let Some((revision, value)) = value else {
        return answers
            .into_iter()
            .map(|a| a.unwrap_or_else(super::no_response))
            .collect();
    };
    let mut state = ctx.state.lock().await;
    state.log.actor = peer.map(str::to_owned);
    // Taken here unless the follower took this revision or a later one first.
    deployed::install(&mut state, &deployment.location, revision, &value);
    let mut replies = Vec::with_capacity(made.len());
    for (at, only, made) in made {
        let (kind, text) = made.event;
        state.event(
            kind,
            format!("{} (intent revision {revision})", scoped(&text, only.as_deref())),
        );
        replies.push((at, made.reply));
    }
    // In force whether or not it is saved here (the store has it); a failure is
    // counted and shown.
    let _ = state.save_operator(&ctx.state_dir);
    ctx.push_health(&mut state);
    for (at, reply) in replies {
        let reply = match reply {
            Answer::Reply(reply) => reply,
            Answer::Shifts => Reply::Shifts(shift_list(&state)),
        };
        if let Some(slot) = answers.get_mut(at) {
            *slot = Some(Response::from_result(Ok(reply)));
        }
    }
    state.log.actor = None;
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(super::no_response))
        .collect()
}

/// Reads the deployment's operator state, makes the batch's changes in it (checked
/// against what this location serves), and writes it back if no one changed it since.
async fn write(
    ctx: &Ctx,
    deployment: &Deployment,
    batch: &[Result<Request, Response>],
    peer: Option<&str>,
) -> Result<Written, ApiError> {
    let mut store = Store::connect(&deployment.source.url, &deployment.source.tls, STORE_TIMEOUT)
        .await
        .map_err(unavailable)?;
    let (mut expected, mut based) = deployed::read(&mut store).await.map_err(unavailable)?;
    // Lines refused before the write: unknown locations, things changed under them.
    let mut refused_lines = unknown_locations(&mut store, deployment, batch).await?;
    for _ in 0..TRIES {
        let mut next = based.clone();
        let mut answers = Vec::with_capacity(batch.len());
        let mut made = Vec::new();
        {
            let mut state = ctx.state.lock().await;
            let in_force = std::mem::take(&mut state.operator.set);
            for (at, item) in batch.iter().enumerate() {
                let request = match item {
                    Err(refused) => {
                        answers.push(Some(refused.clone()));
                        continue;
                    }
                    Ok(request) => request,
                };
                if let Some(err) = refused_lines.get(&at) {
                    answers.push(Some(Response::error(err)));
                    continue;
                }
                // Made on the part of the deployment's state it is scoped to.
                let only = only_location(request).map(str::to_owned);
                state.operator.set = next.part(only.as_deref()).clone();
                state.operator.set.arm();
                match make(&mut state, request.clone()) {
                    Ok(change) => {
                        *next.part(only.as_deref()) = std::mem::take(&mut state.operator.set);
                        made.push((at, only, change));
                        answers.push(None);
                    }
                    Err(err) => answers.push(Some(Response::error(&err))),
                }
            }
            state.operator.set = in_force;
        }
        if made.is_empty() {
            return Ok(Written {
                answers,
                made,
                value: None,
            });
        }
        next.last = Last {
            location: deployment.location.clone(),
            actor: peer.map(str::to_owned),
            made: made
                .iter()
                .map(|(_, only, change)| scoped(&change.event.1, only.as_deref()))
                .collect(),
        };
        match store
            .swap(deployed::KEY, expected, next.encode())
            .await
            .map_err(unavailable)?
        {
            Swapped::Written(revision) => {
                return Ok(Written {
                    answers,
                    made,
                    value: Some((revision, next)),
                })
            }
            Swapped::Changed => {
                // Changed meanwhile: a change whose thing changed is refused, the
                // others are made again on the new value.
                let (now_at, now) = deployed::read(&mut store).await.map_err(unavailable)?;
                for (at, only, change) in &made {
                    if based.get(only.as_deref(), &change.thing) != now.get(only.as_deref(), &change.thing) {
                        let err = ApiError::conflict(format!(
                            "{} changed under this change ({} at {}); look again before repeating it",
                            change.thing,
                            now.last.made.join("; "),
                            now.last.location
                        ));
                        refused_lines.insert(*at, err);
                    }
                }
                (expected, based) = (now_at, now);
            }
        }
    }
    Err(ApiError::new(
        ErrorCode::Unavailable,
        "nothing was changed: the deployment's operator state kept changing under this change; try again".to_owned(),
    ))
}

/// `dnssec rollover` in a deployment: the step is made on the zone's keys as the store
/// holds them and written back by compare-and-swap, then signed with here; every other
/// location takes them from the store and signs with them too (`crate::intent`), so
/// `dnssec ds` answers the same everywhere.
pub(super) async fn rollover(
    ctx: &Ctx,
    deployment: &Deployment,
    zone: &str,
    step: RolloverStep,
    peer: Option<&str>,
) -> Response {
    let found = match zone_of(&*ctx.state.lock().await, zone) {
        Ok(found) => found.clone(),
        Err(err) => return Response::error(&err),
    };
    let written = match tokio::time::timeout(STORE_TIMEOUT, roll(deployment, &found, step)).await {
        Ok(Ok(written)) => written,
        Ok(Err(err)) => return Response::error(&err),
        Err(_) => return Response::error(&no_answer(deployment)),
    };
    let (revision, file) = written;
    let keys = ctx.key_store();
    let mut state = ctx.state.lock().await;
    state.log.actor = peer.map(str::to_owned);
    let why = format!("DNSSEC rollover of {zone}: {step:?} at every location (intent revision {revision})");
    let result = keys
        .adopt(&found.origin, &file)
        .map_err(ApiError::from)
        .and_then(|_| crate::reload::resign(ctx, &mut state, &why))
        .and_then(|()| {
            crate::dnssec::key_info(&keys, &found)
                .map(Reply::DnssecKeys)
                .map_err(ApiError::from)
        });
    state.log.actor = None;
    Response::from_result(result)
}

/// The zone's keys in the store moved one step and written back: the store revision and
/// the key file.
async fn roll(deployment: &Deployment, zone: &qdns_zone::Zone, step: RolloverStep) -> Result<(u64, Vec<u8>), ApiError> {
    let origin = qdns_zone::name::to_text(&zone.origin);
    let name = format!("secret/dnssec/{origin}");
    let mut store = Store::connect(&deployment.source.url, &deployment.source.tls, STORE_TIMEOUT)
        .await
        .map_err(unavailable)?;
    let Some(value) = store.value(&name).await.map_err(unavailable)?.1 else {
        return Err(ApiError::conflict(format!(
            "{origin} has no keys in the deployment yet (they are made when a revision signing it is applied)"
        )));
    };
    let keys = crate::dnssec::rolled(zone, crate::dnssec::keys_of(&zone.origin, &value.data)?, step)?;
    let file = crate::dnssec::key_file(&keys)?;
    match store
        .swap(&name, Some(value.revision), file.clone())
        .await
        .map_err(unavailable)?
    {
        Swapped::Written(revision) => Ok((revision, file)),
        Swapped::Changed => Err(ApiError::conflict(format!(
            "the keys of {origin} changed under this rollover; look again (`qdnsctl dnssec ds {origin}`) before \
             repeating it"
        ))),
    }
}

/// The lines of `batch` scoped to a location the deployment does not know (a typo
/// during an incident), refused rather than kept for a location that never takes them.
async fn unknown_locations(
    store: &mut Store,
    deployment: &Deployment,
    batch: &[Result<Request, Response>],
) -> Result<BTreeMap<usize, ApiError>, ApiError> {
    let mut refused = BTreeMap::new();
    for (at, item) in batch.iter().enumerate() {
        let Some(only) = item.as_ref().ok().and_then(only_location) else {
            continue;
        };
        if only == deployment.location {
            continue;
        }
        // A record of one of its controls (`location/NAME/CONTROL`), or one written
        // before controls had names of their own (`location/NAME`).
        let record = format!("{}/{only}", crate::presence::LOCATIONS);
        let known = store.value(&record).await.map_err(unavailable)?.1.is_some()
            || !store.values_under(&record).await.map_err(unavailable)?.1.is_empty();
        if !known {
            let err = ApiError::not_found(format!(
                "--only-location {only}: no such location in the deployment (`qdnsctl fleet` lists them)"
            ));
            refused.insert(at, err);
        }
    }
    Ok(refused)
}

/// The store did not answer within [`STORE_TIMEOUT`].
fn no_answer(deployment: &Deployment) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "nothing was changed: intent store {}: no answer within {}s (this location is cut off from it, or it \
             has no quorum)",
            deployment.source.url.members(),
            STORE_TIMEOUT.as_secs()
        ),
    )
}

/// A change's timeline text with where it is in force.
fn scoped(text: &str, only: Option<&str>) -> String {
    match only {
        Some(location) => format!("{text} at {location} only"),
        None => format!("{text} at every location"),
    }
}

/// The store's failure, as the change's refusal.
#[expect(clippy::needless_pass_by_value, reason = "made to be given to map_err")]
fn unavailable(err: IntentError) -> ApiError {
    let message = format!("nothing was changed: {err}");
    let code = match err {
        IntentError::Damaged { .. } => ErrorCode::Internal,
        _ => ErrorCode::Unavailable,
    };
    ApiError::new(code, message)
}

/// Every line of `batch` answered with `err` (a line refused before with its own).
fn refused(batch: &[Result<Request, Response>], err: &ApiError) -> Vec<Response> {
    batch
        .iter()
        .map(|item| match item {
            Ok(_) => Response::error(err),
            Err(refused) => refused.clone(),
        })
        .collect()
}
