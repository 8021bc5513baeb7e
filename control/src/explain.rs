//! "Why this answer" (SPEC §6 `explain`, `health`): candidates, their health and the
//! reason for it, fail-open state, shifts, and the answer distribution, computed with
//! the same `qdns-abi` functions the data plane uses.
use crate::{
    api::{
        ApiError, Candidate, Distribution, ExplainDetail, Explanation, MemberAnswer, PolicyExplanation, SetShift, Share,
    },
    operator::Ends as _,
    state::{fails_open, State},
};
use qdns_abi::{
    health::{slot_healthy, ALWAYS_HEALTHY},
    select::{select_failover, select_latency, select_multivalue, select_weighted, select_zonal, WeightedMember},
};
use qdns_zone::{
    evaluate::global,
    master::{rdata_text, type_code},
    name, Answer, PolicyKind, RecordSet, SlotRule, Zone,
};

mod client;

/// Why slot `slot` (global) has its status.
#[must_use]
pub fn why(state: &State, slot: u32) -> String {
    if slot == ALWAYS_HEALTHY {
        return "no health check: always healthy".to_owned();
    }
    let bitmap = &state.served.snapshot.bitmap;
    let Some(key) = state.slot_key(slot) else {
        return "unknown slot".to_owned();
    };
    if let Some(o) = state.operator.set.overrides.get(key).filter(|o| o.in_force()) {
        return format!(
            "override: forced {} for another {}s",
            if o.healthy { "healthy" } else { "unhealthy" },
            o.ends_in()
        );
    }
    let Some((zone, local)) = state.local(slot) else {
        return "unknown slot".to_owned();
    };
    match &zone.slots[local].rule {
        SlotRule::Check {
            probe,
            inverted,
            disabled,
        } => {
            if *disabled {
                return "disabled: always healthy".to_owned();
            }
            let base = match (probe, state.operator.set.externals.get(key)) {
                (None, Some(e)) => format!(
                    "external status set {} at {}",
                    if e.healthy { "healthy" } else { "unhealthy" },
                    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(e.set_at))
                ),
                (None, None) => "external check, never set: healthy".to_owned(),
                (Some(p), _) => why_probed(state, key, p),
            };
            if *inverted {
                format!("{base}; inverted")
            } else {
                base
            }
        }
        SlotRule::Latency { member, health, .. } => {
            let own = health.get(*member as usize).map(|&h| global(zone.slot_base, h));
            why_latency(state, slot, own)
        }
        SlotRule::Calculated { children, threshold } => {
            let healthy = children
                .iter()
                .filter(|&&c| slot_healthy(bitmap, global(zone.slot_base, c)))
                .count();
            format!(
                "calculated: {healthy} of {} children healthy, needs {threshold}",
                children.len()
            )
        }
        SlotRule::AliasTarget { members } => {
            let healthy = members
                .iter()
                .filter(|&&m| slot_healthy(bitmap, global(zone.slot_base, m)))
                .count();
            format!(
                "alias target has {healthy} of {} candidates healthy (evaluate_target_health)",
                members.len()
            )
        }
        SlotRule::Az {
            rrset,
            az,
            targets,
            groups,
            cross_zone,
            index,
            ..
        } => {
            let covered: Vec<String> = (0..*groups)
                .map(|g| {
                    let ok = targets.iter().any(|&(t_az, t_g, s)| {
                        t_g == g && (*cross_zone || t_az == *index) && slot_healthy(bitmap, global(zone.slot_base, s))
                    });
                    format!("group {g} {}", if ok { "covered" } else { "has no healthy target" })
                })
                .collect();
            let shifted = if state.shifted(&name::to_text(rrset), az) {
                "; shifted away"
            } else {
                ""
            };
            format!(
                "AZ {az}: {}{} (cross_zone {})",
                if covered.is_empty() {
                    "no target groups".to_owned()
                } else {
                    covered.join(", ")
                },
                shifted,
                cross_zone
            )
        }
    }
}

/// Why a probed check has its status: the quorum over reachable checkers, or why
/// there is none.
/// A latency member's slot (`slot`): its own health (slot `own`) and whether it is the
/// choice.
fn why_latency(state: &State, slot: u32, own: Option<u32>) -> String {
    let own = own.map_or_else(|| "unknown".to_owned(), |h| why(state, h));
    let chosen = if slot_healthy(&state.served.snapshot.bitmap, slot) {
        "the latency choice: this location answers with it"
    } else {
        "not the latency choice"
    };
    format!("{own}; {chosen}")
}

fn why_probed(state: &State, key: &str, p: &qdns_zone::snapshot::Probe) -> String {
    let a = state.aggregate(key, p.interval);
    let target = format!("{} {}:{}", format!("{:?}", p.kind).to_lowercase(), p.ip, p.port);
    // A probe result that disagrees with its checker's status is held by the threshold:
    // say so, rather than leave "healthy … last: connection refused" to be puzzled over.
    let threshold = p.failure_threshold;
    let last = match state.observed.observations.newest(key) {
        Some(o) if !o.success && o.healthy => format!(
            "; the last probe failed ({}, from {} ({})) but {} still reports healthy until {threshold} \
             failures in a row (failure_threshold)",
            o.reason, o.checker, o.region, o.checker
        ),
        Some(o) if o.success && !o.healthy => format!(
            "; the last probe succeeded (from {} ({})) but {} still reports unhealthy until {threshold} \
             successes in a row (failure_threshold)",
            o.checker, o.region, o.checker
        ),
        Some(o) => format!("; last: {} from {} ({})", o.reason, o.checker, o.region),
        None => String::new(),
    };
    if a.stale {
        format!("{target}: no checker reachable — keeping the last status (stale){last}")
    } else if a.reachable == 0 {
        format!("{target}: no observation yet — healthy until the first result")
    } else {
        format!(
            "{target}: {} of {} reachable checkers report healthy; healthy iff share > {}{last}",
            a.healthy_reports, a.reachable, state.settings.quorum
        )
    }
}

/// Each member of `policy` as explain shows it.
fn candidates(
    state: &State,
    zone: &qdns_zone::Zone,
    set: &qdns_zone::RecordSet,
    policy: &qdns_zone::Policy,
    slots: &[u32],
    bitmap: &[u64],
) -> Vec<Candidate> {
    let rtype = set.rtype;
    let values = |rdata: &[Vec<u8>]| -> Vec<String> { rdata.iter().map(|r| rdata_text(rtype, r)).collect() };
    // A set that sheds load carries configured weight × tenths kept.
    let shed = state.observed.shedding.set(&set.name, set.rtype);
    let loads =
        shed.map(|shed| crate::shedding::Shedding::target(shed, &state.observed.loads, crate::clock::monotonic()));
    policy
        .members
        .iter()
        .zip(slots)
        .enumerate()
        .map(|(i, (m, &slot))| Candidate {
            id: m.id.clone(),
            weight: (policy.kind == PolicyKind::Weighted)
                .then(|| shed.and_then(|s| s.configured.get(i).copied()).unwrap_or(m.weight)),
            role: (policy.kind == PolicyKind::Failover)
                .then(|| if i == 0 { "primary" } else { "secondary" }.to_owned()),
            check: m.check.clone(),
            cidr: policy.client.as_ref().and_then(|r| r.labels.get(i)).cloned(),
            // A latency member's slot says whether it is chosen; its health is its check's.
            healthy: slot_healthy(bitmap, global(zone.slot_base, State::health_slot(zone, m))),
            why: why(state, slot),
            rtt_us: state
                .member_round_trip(zone, m)
                .map(|trip| u64::try_from(trip.smoothed.as_micros()).unwrap_or(u64::MAX)),
            load: loads
                .as_ref()
                .and_then(|l| l.get(i)?.1)
                .map(|milli| f64::from(milli) / 1000.0),
            effective_weight: shed
                .filter(|s| s.gauges.get(i).is_some_and(Option::is_some))
                .map(|_| f64::from(m.weight) / 10.0),
            answers: match &m.answer {
                Answer::Values(rdata) => MemberAnswer::Records {
                    records: rdata.len(),
                    values: values(rdata),
                },
                Answer::Alias { target } => MemberAnswer::Alias {
                    alias: name::to_text(target),
                },
            },
        })
        .collect()
}

/// The `explain NAME TYPE [--client ADDR[/LEN]]` result.
pub fn explain(state: &State, owner: &str, rtype: &str, asked_for: Option<&str>) -> Result<Explanation, ApiError> {
    let code = type_code(rtype).ok_or_else(|| ApiError::bad_argument(format!("unknown type {rtype:?}")))?;
    let wire = owner_wire(owner).map_err(ApiError::bad_argument)?;
    let (zone, set) = find_set(state, &wire, code).ok_or_else(|| {
        ApiError::not_found(format!(
            "no {} record set at {}",
            rtype.to_ascii_uppercase(),
            name::to_text(&wire)
        ))
    })?;
    let bitmap = &state.served.snapshot.bitmap;
    let values = |rdata: &[Vec<u8>]| -> Vec<String> { rdata.iter().map(|r| rdata_text(set.rtype, r)).collect() };
    let Some(policy) = &set.policy else {
        return Ok(Explanation {
            name: name::to_text(&set.name),
            rtype: qdns_zone::master::type_name(set.rtype),
            policy: "plain".to_owned(),
            ttl: set.ttl,
            detail: ExplainDetail::Plain {
                answer: format!("all {} records, always", set.rdata.len()),
                values: values(&set.rdata),
            },
        });
    };
    let slots: Vec<u32> = policy.members.iter().map(|m| global(zone.slot_base, m.slot)).collect();
    let fail_open = fails_open(zone, set, bitmap);
    let candidates = candidates(state, zone, set, policy, &slots, bitmap);
    let (distribution, client) = match policy.client.as_deref() {
        Some(rules) => client::explain(rules, zone.geo.as_deref(), asked_for, &policy.members, &slots, bitmap)?,
        None => (
            distribution(
                policy.kind,
                &policy.members,
                &slots,
                bitmap,
                policy.fail_open_below_permille,
            ),
            None,
        ),
    };
    let label = qdns_zone::master::set_label(set);
    let shifts: Vec<SetShift> = state
        .operator
        .set
        .shifts
        .get(&name::to_text(&set.name))
        .map(|azs| {
            azs.iter()
                .map(|(az, s)| SetShift {
                    az: az.clone(),
                    expires_in_s: s.ends_in(),
                    comment: s.comment.clone(),
                    moves_traffic: !fail_open,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Explanation {
        name: name::to_text(&set.name),
        rtype: qdns_zone::master::type_name(set.rtype),
        policy: format!("{:?}", policy.kind).to_lowercase(),
        ttl: set.ttl,
        detail: ExplainDetail::Policy(Box::new(PolicyExplanation {
            degraded_ttl: policy.degraded_ttl,
            fail_open_below: f64::from(policy.fail_open_below_permille) / 1000.0,
            fail_open,
            fail_open_note: fail_open.then(|| {
                format!(
                    "{label}: no candidate healthy (or below fail_open_below): every candidate is treated as healthy"
                )
            }),
            latency: latency_note(state, set),
            candidates,
            shifts,
            distribution,
            client,
        })),
    })
}

/// A latency set's choice, the margin that holds it and the member challenging it.
fn latency_note(state: &State, set: &qdns_zone::RecordSet) -> Option<String> {
    use std::fmt::Write as _;
    let key = (set.name.clone(), set.rtype);
    let latency = state.latency_sets().into_iter().find(|s| s.key == key)?;
    let healthy: Vec<bool> = latency
        .health
        .iter()
        .map(|&s| slot_healthy(&state.served.snapshot.bitmap, s))
        .collect();
    let members = crate::latency::Members {
        healthy: &healthy,
        rtts: &latency.rtts,
    };
    let ms = |d: std::time::Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let name = |m: u32| {
        let id = latency.ids.get(m as usize).map_or("?", String::as_str);
        match latency.rtts.get(m as usize).copied().flatten() {
            Some(rtt) => format!("{id} ({})", ms(rtt)),
            None => format!("{id} (not measured)"),
        }
    };
    let Some(chosen) = state.observed.latency.choose(&key, &members) else {
        return Some("no member is healthy: the first answers (fail-open)".to_owned());
    };
    let mut note = format!("answered by {}", name(chosen));
    if let Some(rtt) = latency.rtts.get(chosen as usize).copied().flatten() {
        let _ = write!(
            note,
            "; another member takes over when faster by {} (the larger of 5 ms and 20 %) for {} s",
            ms(crate::latency::margin(rtt)),
            state.observed.latency.hold()
        );
    }
    if let Some((challenger, since)) = state.observed.latency.challenger(&key) {
        let _ = write!(
            note,
            "; {} has been faster by that for {} s",
            name(challenger),
            crate::clock::monotonic().saturating_sub(since)
        );
    }
    Some(note)
}

/// Share of answers per member (weighted: exact, over a grid of draws through the data
/// plane's own function), or which members answer.
fn distribution(
    kind: PolicyKind,
    members: &[qdns_zone::Member],
    slots: &[u32],
    bitmap: &[u64],
    permille: u32,
) -> Distribution {
    match kind {
        PolicyKind::Weighted => {
            let weighted: Vec<WeightedMember> = members
                .iter()
                .zip(slots)
                .map(|(m, &slot)| WeightedMember { slot, weight: m.weight })
                .collect();
            let mut counts = vec![0u32; members.len()];
            for k in 0u32..4096 {
                if let Some(choice) = select_weighted(&weighted, bitmap, permille, k << 20) {
                    if let Some(c) = counts.get_mut(choice.index as usize) {
                        *c += 1;
                    }
                }
            }
            Distribution::Shares(
                members
                    .iter()
                    .zip(counts)
                    .map(|(m, c)| Share {
                        member: Some(m.id.clone()),
                        share: (f64::from(c) / 4096.0 * 1000.0).round() / 1000.0,
                    })
                    .collect(),
            )
        }
        PolicyKind::Latency => Distribution::Shares(vec![Share {
            member: select_latency(slots, bitmap).and_then(|c| members.get(c.index as usize).map(|m| m.id.clone())),
            share: 1.0,
        }]),
        PolicyKind::Failover => {
            let choice = select_failover(
                slots.first().copied().unwrap_or(u32::MAX),
                slots.get(1).copied(),
                bitmap,
            );
            Distribution::Shares(vec![Share {
                member: members.get(choice.index as usize).map(|m| m.id.clone()),
                share: 1.0,
            }])
        }
        PolicyKind::Multivalue => {
            let c = select_multivalue(slots, bitmap, permille, 0);
            let pool: Vec<String> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| c.fail_open || slot_healthy(bitmap, slots[*i]))
                .map(|(_, m)| m.id.clone())
                .collect();
            let per_answer = pool.len().min(8);
            Distribution::Multivalue {
                answered_from: pool,
                per_answer,
            }
        }
        // Client-aware sets are explained by `client::by_client`.
        PolicyKind::Ip | PolicyKind::Geo => Distribution::ByClient { by_client: Vec::new() },
        PolicyKind::Zonal => {
            let c = select_zonal(slots, bitmap);
            Distribution::Zonal {
                answered_azs: members
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| c.mask >> i & 1 == 1)
                    .map(|(_, m)| m.id.clone())
                    .collect(),
            }
        }
    }
}

/// Wire form of a presentation name (absolute; a missing trailing dot is added; RFC 1035
/// §5.1 escapes as in zone files).
pub fn owner_wire(owner: &str) -> Result<Vec<u8>, String> {
    // Absolute when it ends with a dot that is not escaped: an even number of
    // backslashes before it.
    let backslashes = owner
        .strip_suffix('.')
        .map(|s| s.len() - s.trim_end_matches('\\').len());
    let text = if backslashes.is_some_and(|n| n % 2 == 0) {
        owner.to_owned()
    } else {
        format!("{owner}.")
    };
    qdns_zone::master::parse_name_wire(&text, b"\0").map_err(|e| format!("bad name {text:?}: {e}"))
}

/// The zone and set with this owner and type.
#[must_use]
pub fn find_set<'s>(state: &'s State, owner: &[u8], rtype: u16) -> Option<(&'s Zone, &'s RecordSet)> {
    state.served.snapshot.zones.iter().find_map(|zone| {
        zone.rrsets
            .iter()
            .find(|s| s.name == owner && s.rtype == rtype)
            .map(|s| (zone, s))
    })
}
