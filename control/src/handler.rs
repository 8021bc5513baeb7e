//! Carrying out control-socket requests against the state; every change is persisted,
//! re-evaluated, and pushed to the edges before the response is sent.
use qdns_zone::{name, PolicyKind};

mod deployment;

use crate::{
    api::{
        ApiError, CheckHealth, CheckerId, CheckerStatus, ErrorCode, ExternalSet, OverrideCleared, OverrideSet, Reply,
        Request, Response, ShiftEntry, StatusReport, ZoneDump, ZoneStatus,
    },
    clock::now,
    ctx::Ctx,
    deployed::Thing,
    duration::parse_expiry,
    explain::{explain, owner_wire, why},
    operator::{Ends as _, External, Override, Shift},
    reload::{reload, resign},
    state::State,
};

/// Handles one request from `peer` (who sent it, for the timeline).
pub async fn handle(ctx: &Ctx, request: Request, peer: Option<&str>) -> Response {
    handle_all(ctx, vec![Ok(request)], peer)
        .await
        .pop()
        .unwrap_or_else(no_response)
}

/// Handles the requests read together from one connection (a client that pipelines),
/// in order, answering each; `Err` is a line that was already refused. Consecutive
/// operator changes are made together — group commit: under one hold of the state,
/// persisted once (one fsync) and pushed to the edges once — and none is answered
/// before it is persisted. Anything else runs on its own, as if sent alone: it sees
/// only what is in force, and a run of reads (a script dumping zones) never holds the
/// state longer than one of them.
pub async fn handle_all(ctx: &Ctx, incoming: Vec<Result<Request, Response>>, peer: Option<&str>) -> Vec<Response> {
    let mut responses: Vec<Option<Response>> = Vec::with_capacity(incoming.len());
    let mut incoming = incoming.into_iter().peekable();
    while let Some(item) = incoming.next() {
        let request = match item {
            Ok(request) => request,
            Err(refused) => {
                responses.push(Some(refused));
                continue;
            }
        };
        if let Some(deployment) = ctx.deployment.as_ref().filter(|_| is_change(&request)) {
            // In a deployment, the changes go to the intent store first.
            let mut batch = vec![Ok(request)];
            while let Some(next) = incoming.next_if(|next| next.as_ref().map_or(true, is_change)) {
                batch.push(next);
            }
            let answered = deployment::changes(ctx, deployment, batch, peer).await;
            responses.extend(answered.into_iter().map(Some));
            continue;
        }
        if let (Some(deployment), Request::DnssecRollover { zone, step }) = (ctx.deployment.as_ref(), &request) {
            // The deployment's keys move, at every location.
            responses.push(Some(deployment::rollover(ctx, deployment, zone, *step, peer).await));
            continue;
        }
        let mut state = ctx.state.lock().await;
        state.log.actor = peer.map(str::to_owned);
        if is_change(&request) {
            let mut batch = Changes::new(&state);
            batch.make(&mut state, request, &mut responses);
            // The changes sent right after join the group (a line refused among them
            // is answered in its place).
            while let Some(next) = incoming.next_if(|next| next.as_ref().map_or(true, is_change)) {
                match next {
                    Ok(request) => batch.make(&mut state, request, &mut responses),
                    Err(refused) => responses.push(Some(refused)),
                }
            }
            batch.commit(ctx, &mut state, &mut responses);
        } else {
            let before = state.operator.set.clone();
            let result = run(ctx, &mut state, request);
            if result.is_err() && state.operator.set != before {
                state.operator.set = before;
            }
            responses.push(Some(Response::from_result(result)));
        }
        state.log.actor = None;
    }
    responses.into_iter().map(|r| r.unwrap_or_else(no_response)).collect()
}

/// The answer to a line nothing answered (a bug).
fn no_response() -> Response {
    Response::error(&ApiError::new(ErrorCode::Internal, "no response".to_owned()))
}

/// Operator changes made in memory and not yet persisted.
struct Changes {
    /// The operator state before the first of them.
    before: crate::operator::OperatorState,
    /// Each change's place among the responses, its reply and its timeline entry.
    made: Vec<(usize, Made)>,
}

/// A change made in memory: its reply and its timeline entry (kind, text).
struct Made {
    reply: Answer,
    event: (&'static str, String),
    /// What it changed.
    thing: Thing,
}

/// What a change answers once persisted.
enum Answer {
    Reply(Reply),
    /// The shifts in force, and whether each moves traffic — known once health is
    /// recomputed.
    Shifts,
}

impl Changes {
    fn new(state: &State) -> Changes {
        Changes {
            before: state.operator.set.clone(),
            made: Vec::new(),
        }
    }

    /// Makes `request` in memory; its answer waits for the commit (a refusal is
    /// answered at once).
    fn make(&mut self, state: &mut State, request: Request, responses: &mut Vec<Option<Response>>) {
        match change(state, request) {
            Ok(made) => {
                self.made.push((responses.len(), made));
                responses.push(None);
            }
            Err(err) => responses.push(Some(Response::error(&err))),
        }
    }

    /// Persists the changes once and pushes health once, then answers each; a change
    /// that could not be persisted is not made — every one of them is undone and
    /// answered with the error, and a restart would not bring back something never in
    /// force.
    fn commit(self, ctx: &Ctx, state: &mut State, responses: &mut [Option<Response>]) {
        if self.made.is_empty() {
            return;
        }
        if let Err(err) = ctx.save(state) {
            state.operator.set = self.before;
            for (at, _) in self.made {
                responses[at] = Some(Response::error(&err));
            }
            return;
        }
        let mut answers = Vec::with_capacity(self.made.len());
        for (at, made) in self.made {
            let (kind, text) = made.event;
            state.event(kind, text);
            answers.push((at, made.reply));
        }
        ctx.push_health(state);
        for (at, answer) in answers {
            let reply = match answer {
                Answer::Reply(reply) => reply,
                Answer::Shifts => Reply::Shifts(shift_list(state)),
            };
            responses[at] = Some(Response::from_result(Ok(reply)));
        }
    }
}

/// Whether `request` changes the operator state (and so is persisted and pushed).
fn is_change(request: &Request) -> bool {
    matches!(
        request,
        Request::OverrideSet { .. }
            | Request::OverrideClear { .. }
            | Request::External { .. }
            | Request::ShiftStart { .. }
            | Request::ShiftUpdate { .. }
            | Request::ShiftCancel { .. }
    )
}

/// An expiry that does not parse or is over the limit.
fn expiry(text: &str) -> Result<std::time::Duration, ApiError> {
    parse_expiry(text).map_err(|e| ApiError::bad_argument(e.to_string()))
}

fn run(ctx: &Ctx, state: &mut State, request: Request) -> Result<Reply, ApiError> {
    match request {
        Request::Status {} => {
            let mut report = status(state);
            add_transfers(&mut report, state, &ctx.transfers);
            Ok(Reply::Status(Box::new(report)))
        }
        Request::Reload {} => reload(ctx, state).map(Reply::Reloaded),
        Request::Health { check } => health(state, check.as_deref()).map(Reply::Health),
        Request::Explain { name, rtype, client } => {
            explain(state, &name, &rtype, client.as_deref()).map(|e| Reply::Explain(Box::new(e)))
        }
        Request::DnssecDs { zone } => {
            let found = zone_of(state, &zone)?;
            crate::dnssec::key_info(&ctx.key_store(), found)
                .map(Reply::DnssecKeys)
                .map_err(ApiError::from)
        }
        Request::DnssecRollover { zone, step } => {
            let found = zone_of(state, &zone)?.clone();
            let store = ctx.key_store();
            crate::dnssec::rollover(&store, &found, step)?;
            resign(ctx, state, &format!("DNSSEC rollover of {zone}: {step:?}"))?;
            crate::dnssec::key_info(&store, &found)
                .map(Reply::DnssecKeys)
                .map_err(ApiError::from)
        }
        Request::Dump { zone } => {
            let found = zone_of(state, &zone)?;
            Ok(Reply::Dump(ZoneDump {
                zone: name::to_text(&found.origin),
                serial: found.serial,
                text: qdns_zone::master::zone_text(found),
            }))
        }
        Request::Records { zone, dynamic } => {
            let found = zone_of(state, &zone)?;
            records(found, &ctx.state_dir.join(crate::update::dynamic::DIR), dynamic).map(Reply::Records)
        }
        Request::ShiftList {} => Ok(Reply::Shifts(shift_list(state))),
        Request::Events { limit } => {
            let limit = limit.unwrap_or(100);
            Ok(Reply::Events(state.log.events.last(limit).cloned().collect()))
        }
        Request::OverrideSet { .. }
        | Request::OverrideClear { .. }
        | Request::External { .. }
        | Request::ShiftStart { .. }
        | Request::ShiftUpdate { .. }
        | Request::ShiftCancel { .. } => Err(ApiError::new(
            ErrorCode::Internal,
            "an operator change is made by handle_all".to_owned(),
        )),
    }
}

/// Makes the operator change `request` in memory: what to answer once it is persisted,
/// and its timeline entry. A refused change leaves the state as it was.
fn change(state: &mut State, request: Request) -> Result<Made, ApiError> {
    if let Some(only) = only_location(&request) {
        if only != state.settings.site.location {
            return Err(ApiError::bad_argument(format!(
                "--only-location {only}: this is location {}, which follows no deployment (--intent)",
                state.settings.site.location
            )));
        }
    }
    make(state, request)
}

/// The location an operator change is scoped to (`--only-location`).
fn only_location(request: &Request) -> Option<&str> {
    match request {
        Request::OverrideSet { only_location, .. }
        | Request::OverrideClear { only_location, .. }
        | Request::External { only_location, .. }
        | Request::ShiftStart { only_location, .. }
        | Request::ShiftUpdate { only_location, .. }
        | Request::ShiftCancel { only_location, .. } => only_location.as_deref(),
        _ => None,
    }
}

/// [`change`] in the operator state as set in `state`, whatever its scope.
#[expect(clippy::too_many_lines, reason = "one arm per operator change; each arm is short")]
fn make(state: &mut State, request: Request) -> Result<Made, ApiError> {
    let (reply, event, thing) = match request {
        Request::OverrideSet {
            check,
            healthy,
            expires,
            ..
        } => {
            let key = state.check_key(&check)?;
            let expiry = expiry(&expires)?;
            state
                .operator
                .set
                .overrides
                .insert(key.clone(), Override::new(healthy, expiry.as_secs()));
            let event = format!(
                "{key} forced {} for {expires}",
                if healthy { "healthy" } else { "unhealthy" }
            );
            let reply = Reply::OverrideSet(OverrideSet {
                check: key.clone(),
                healthy,
                expires_in_s: expiry.as_secs(),
            });
            (Answer::Reply(reply), ("override", event), Thing::Override(key))
        }
        Request::OverrideClear { check, .. } => {
            let key = state.check_key(&check)?;
            if state.operator.set.overrides.remove(&key).is_none() {
                return Err(ApiError::conflict(format!("{key} has no override")));
            }
            let event = format!("override of {key} cleared");
            let reply = Reply::OverrideCleared(OverrideCleared {
                check: key.clone(),
                cleared: true,
            });
            (Answer::Reply(reply), ("override", event), Thing::Override(key))
        }
        Request::External { check, healthy, .. } => {
            let key = state.check_key(&check)?;
            let is_external = matches!(state.rule(&key), Some(qdns_zone::SlotRule::Check { probe: None, .. }));
            if !is_external {
                return Err(ApiError::conflict(format!(
                    "{key} is not an external check; use override for probed checks"
                )));
            }
            state
                .operator
                .set
                .externals
                .insert(key.clone(), External { healthy, set_at: now() });
            let event = format!("{key} set {}", if healthy { "healthy" } else { "unhealthy" });
            (
                Answer::Reply(Reply::External(ExternalSet {
                    check: key.clone(),
                    healthy,
                })),
                ("external", event),
                Thing::External(key),
            )
        }
        Request::ShiftStart {
            rrset,
            az,
            expires,
            comment,
            ..
        } => {
            let rrset = zonal_set(state, &rrset, &az)?;
            let expiry = expiry(&expires)?;
            if state.shifted(&rrset, &az) {
                return Err(ApiError::conflict(format!(
                    "{rrset} is already shifted away from {az}; use shift update"
                )));
            }
            state
                .operator
                .set
                .shifts
                .entry(rrset.clone())
                .or_default()
                .insert(az.clone(), Shift::new(expiry.as_secs(), comment));
            let event = format!("shift of {rrset} away from {az} started for {expires}");
            (Answer::Shifts, ("shift", event), Thing::Shift(rrset, az))
        }
        Request::ShiftUpdate { rrset, az, expires, .. } => {
            let rrset = zonal_set(state, &rrset, &az)?;
            let expiry = expiry(&expires)?;
            let shift = state
                .operator
                .set
                .shifts
                .get_mut(&rrset)
                .and_then(|azs| azs.get_mut(&az))
                .ok_or_else(|| ApiError::conflict(format!("{rrset} has no shift away from {az}")))?;
            shift.end_in(expiry.as_secs());
            let event = format!("shift of {rrset} away from {az} now ends in {expires}");
            (Answer::Shifts, ("shift", event), Thing::Shift(rrset, az))
        }
        Request::ShiftCancel { rrset, az, .. } => {
            let rrset = zonal_set(state, &rrset, &az)?;
            let removed = state
                .operator
                .set
                .shifts
                .get_mut(&rrset)
                .and_then(|azs| azs.remove(&az));
            if removed.is_none() {
                return Err(ApiError::conflict(format!("{rrset} has no shift away from {az}")));
            }
            state.operator.set.shifts.retain(|_, azs| !azs.is_empty());
            let event = format!("shift of {rrset} away from {az} cancelled");
            (Answer::Shifts, ("shift", event), Thing::Shift(rrset, az))
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::Internal,
                format!("not an operator change: {other:?}"),
            ))
        }
    };
    Ok(Made { reply, event, thing })
}

/// The canonical name of the zonal set(s) at `rrset`, checking `az` exists there.
fn zonal_set(state: &State, rrset: &str, az: &str) -> Result<String, ApiError> {
    let wire = owner_wire(rrset).map_err(ApiError::bad_argument)?;
    let mut found = false;
    for zone in &state.served.snapshot.zones {
        for set in zone.rrsets.iter().filter(|s| s.name == wire) {
            if let Some(policy) = set.policy.as_ref().filter(|p| p.kind == PolicyKind::Zonal) {
                if policy.members.iter().any(|m| m.id == az) {
                    found = true;
                } else {
                    return Err(ApiError::not_found(format!(
                        "{} has no AZ {az:?}",
                        name::to_text(&wire)
                    )));
                }
            }
        }
    }
    if !found {
        return Err(ApiError::not_found(format!(
            "{} is not a zonal record set",
            name::to_text(&wire)
        )));
    }
    Ok(name::to_text(&wire))
}

pub(crate) fn shift_list(state: &State) -> Vec<ShiftEntry> {
    let mut out = Vec::new();
    for (rrset, azs) in &state.operator.set.shifts {
        let failing_open = state
            .failing_open()
            .iter()
            .any(|label| label.split(' ').next() == Some(rrset.as_str()));
        for (az, shift) in azs {
            out.push(ShiftEntry {
                rrset: rrset.clone(),
                az: az.clone(),
                expires_in_s: shift.ends_in(),
                started: shift.started,
                comment: shift.comment.clone(),
                moves_traffic: !failing_open,
                note: failing_open.then(|| {
                    "every AZ is unhealthy or shifted: the set fails open and the shift moves no traffic".to_owned()
                }),
            });
        }
    }
    out
}

/// Each zone's transfer serial and primary, and the zones waiting for a primary.
fn add_transfers(report: &mut StatusReport, state: &State, transfers: &crate::transfer::Transfers) {
    for (zone, status) in state.served.snapshot.zones.iter().zip(report.zones.iter_mut()) {
        let Some(settings) = zone.transfer.as_deref() else {
            continue;
        };
        status.transfer = Some(crate::api::ZoneTransfer {
            serial: transfers.zone(&zone.origin).map(|served| served.serial),
            primary: settings.primary.map(|p| p.to_string()),
        });
    }
    report.waiting_for_primary = transfers.inbound.waiting();
}

pub(crate) fn status(state: &State) -> StatusReport {
    let zones = state
        .served
        .snapshot
        .zones
        .iter()
        .map(|z| ZoneStatus {
            zone: name::to_text(&z.origin),
            serial: z.serial,
            file: z.source.clone(),
            rrsets: z.rrsets.len(),
            health_slots: z.slots.len(),
            dnssec: z.dnssec.as_deref().map(|s| crate::api::ZoneSigning {
                algorithm: s.algorithm.mnemonic().to_owned(),
                signatures: s.sigs.len(),
                inception: s.inception,
                expiration: s.expiration,
            }),
            transfer: None,
        })
        .collect();
    StatusReport {
        snapshot_version: state.served.snapshot.version,
        intent_revision: state.served.snapshot.intent_revision,
        intent_operator_revision: state.operator.revision,
        intent_heard_s: state.log.intent_heard_at.map(|at| now().saturating_sub(at)),
        health_seq: state.served.seq,
        zones,
        fail_open: state.failing_open().iter().cloned().collect(),
        checkers: CheckerStatus {
            reachable: state.reachable_checkers().len(),
            list: state
                .reachable_checkers()
                .iter()
                .map(|(id, region)| CheckerId {
                    id: id.clone(),
                    region: region.clone(),
                })
                .collect(),
            quorum: state.settings.quorum,
            reports_accepted: state.log.reports.accepted(),
            report_bytes: state.log.reports.bytes(),
            reports_rejected: state
                .log
                .reports
                .rejected()
                .map(|(reason, n)| (reason.to_owned(), n))
                .collect(),
        },
        overrides: state.operator.set.overrides.len(),
        shifts: state
            .operator
            .set
            .shifts
            .values()
            .map(std::collections::BTreeMap::len)
            .sum::<usize>(),
        edges: state.served.edges.connected().cloned().collect(),
        persist_error: state.operator.save_error.clone(),
        waiting_for_primary: Vec::new(),
    }
}

pub(crate) fn health(state: &State, check: Option<&str>) -> Result<Vec<CheckHealth>, ApiError> {
    let keys: Vec<String> = match check {
        Some(given) => vec![state.check_key(given)?],
        None => (0..)
            .map_while(|slot| state.slot_key(slot).map(str::to_owned))
            .filter(|k| {
                matches!(
                    state.rule(k),
                    Some(qdns_zone::SlotRule::Check { .. } | qdns_zone::SlotRule::Calculated { .. })
                )
            })
            .collect(),
    };
    Ok(keys
        .iter()
        .filter_map(|key| {
            let slot = state.slot(key)?;
            let kind = match state.rule(key)? {
                qdns_zone::SlotRule::Check { probe: Some(p), .. } => format!("{:?}", p.kind).to_lowercase(),
                qdns_zone::SlotRule::Check { probe: None, .. } => "external".to_owned(),
                _ => "calculated".to_owned(),
            };
            Some(CheckHealth {
                check: key.clone(),
                kind,
                healthy: qdns_abi::health::slot_healthy(&state.served.snapshot.bitmap, slot),
                why: why(state, slot),
                since: state.changed_at(slot),
                observations: state.observed.observations.latest(key).cloned().collect(),
                reachable: state.probe_interval(key).map_or_else(Vec::new, |interval| {
                    state
                        .fresh_observations(key, interval)
                        .map(|o| o.checker.clone())
                        .collect()
                }),
            })
        })
        .collect())
}

/// The zone of the snapshot named `zone`.
/// `zone`'s plain records (`dynamic`: only those dynamic update added, kept under
/// `dir`), each dynamic one with its key and time.
fn records(
    zone: &qdns_zone::Zone,
    dir: &std::path::Path,
    dynamic: bool,
) -> Result<Vec<crate::api::RecordRow>, ApiError> {
    use qdns_zone::master::{present, type_name};
    let added =
        crate::update::dynamic::read(dir, &zone.origin).map_err(|err| ApiError::new(ErrorCode::Internal, err))?;
    let row = |name: &[u8], rtype: u16, ttl: u32, rdata: &[u8]| crate::api::RecordRow {
        name: name::to_text(name),
        ttl,
        rtype: type_name(rtype),
        rdata: present::rdata_text(rtype, rdata),
        key: None,
        added: None,
    };
    if dynamic {
        return Ok(added
            .iter()
            .map(|r| crate::api::RecordRow {
                key: Some(r.key.clone()),
                added: Some(r.at),
                ..row(&r.name, r.rtype, r.ttl, &r.rdata)
            })
            .collect());
    }
    let mut rows = Vec::new();
    for set in zone.rrsets.iter().filter(|s| s.policy.is_none()) {
        for rdata in &set.rdata {
            let by = added
                .iter()
                .find(|r| r.name == set.name && r.rtype == set.rtype && &r.rdata == rdata);
            rows.push(crate::api::RecordRow {
                key: by.map(|r| r.key.clone()),
                added: by.map(|r| r.at),
                ..row(&set.name, set.rtype, set.ttl, rdata)
            });
        }
    }
    Ok(rows)
}

fn zone_of<'s>(state: &'s State, zone: &str) -> Result<&'s qdns_zone::Zone, ApiError> {
    let origin = owner_wire(zone).map_err(ApiError::bad_argument)?;
    state
        .served
        .snapshot
        .zones
        .iter()
        .find(|z| z.origin == origin)
        .ok_or_else(|| ApiError::not_found(format!("no zone {zone}")))
}
