//! Health evaluation: check results, overrides and shifts in, the health bitmap out.
//!
//! Slots are evaluated in their stored order, which puts every derived slot after the
//! slots it reads (calculated children, AZ targets, alias targets). The rules are those
//! of SPEC §3, through the same `qdns-abi` functions the data plane uses.
use qdns_abi::health::{
    az_healthy, calculated_status, check_status, set_slot, slot_healthy, words_for, ZonalTarget, ALWAYS_HEALTHY,
};

use crate::{snapshot::SlotRule, Zone};

/// What evaluation reads besides the zones.
pub struct Inputs<'a> {
    /// Latest measured result of a check slot (global index); `None` before the first.
    pub measured: &'a dyn Fn(u32) -> Option<bool>,
    /// A forced status of a slot (an override, or an external check's set status).
    pub forced: &'a dyn Fn(u32) -> Option<bool>,
    /// True while AZ `az` of the set (owner wire, type) is shifted away.
    pub shifted: &'a dyn Fn(&[u8], u16, &str) -> bool,
    /// The member a `latency` set (owner wire, type) answers with, given which of its
    /// members are healthy (in order); `None` when none is.
    pub latency: &'a LatencyChoice<'a>,
}

/// Which member a `latency` set answers with: owner (wire), type, each member healthy.
pub type LatencyChoice<'a> = dyn Fn(&[u8], u16, &[bool]) -> Option<u32> + 'a;

/// The `latency` choice without measurements: the first healthy member listed.
#[must_use]
pub fn first_healthy(healthy: &[bool]) -> Option<u32> {
    healthy.iter().position(|&h| h).and_then(|i| u32::try_from(i).ok())
}

/// Global slot of local `slot` in a zone starting at `base`.
#[must_use]
pub fn global(base: u32, slot: u32) -> u32 {
    if slot == ALWAYS_HEALTHY {
        slot
    } else {
        base + slot
    }
}

/// A weighted set's members as SPEC §3's selection takes them: each one's global health
/// slot (the zone's slots start at `base`) and weight.
#[must_use]
pub fn weighted_members(base: u32, policy: &crate::Policy) -> Vec<qdns_abi::select::WeightedMember> {
    policy
        .members
        .iter()
        .map(|m| qdns_abi::select::WeightedMember {
            slot: global(base, m.slot),
            weight: m.weight,
        })
        .collect()
}

/// The bitmap for `zones` under `inputs`.
#[must_use]
pub fn evaluate(zones: &[Zone], inputs: &Inputs<'_>) -> Vec<u64> {
    let total = zones
        .iter()
        .map(|z| z.slot_base + z.slots.len() as u32)
        .max()
        .unwrap_or(0);
    let mut bitmap = vec![0u64; words_for(total)];
    let mut targets: Vec<ZonalTarget> = Vec::new();
    for zone in zones {
        let base = zone.slot_base;
        for (local, slot) in zone.slots.iter().enumerate() {
            let at = base + local as u32;
            let healthy = if let Some(forced) = (inputs.forced)(at) {
                forced
            } else {
                match &slot.rule {
                    SlotRule::Check { inverted, disabled, .. } => {
                        check_status((inputs.measured)(at).unwrap_or(true), *inverted, *disabled)
                    }
                    SlotRule::Calculated { children, threshold } => {
                        let healthy = children
                            .iter()
                            .filter(|&&c| slot_healthy(&bitmap, global(base, c)))
                            .count();
                        calculated_status(healthy as u32, *threshold)
                    }
                    SlotRule::AliasTarget { members } => {
                        members.is_empty() || members.iter().any(|&m| slot_healthy(&bitmap, global(base, m)))
                    }
                    SlotRule::Az {
                        rrset,
                        rtype,
                        az,
                        index,
                        targets: list,
                        groups,
                        cross_zone,
                    } => {
                        targets.clear();
                        targets.extend(list.iter().map(|&(az, group, slot)| ZonalTarget {
                            az,
                            group,
                            slot: global(base, slot),
                        }));
                        az_healthy(&targets, *index, *groups, *cross_zone, &bitmap)
                            && !(inputs.shifted)(rrset, *rtype, az)
                    }
                    SlotRule::Latency {
                        rrset,
                        rtype,
                        member,
                        health,
                    } => {
                        let healthy: Vec<bool> =
                            health.iter().map(|&h| slot_healthy(&bitmap, global(base, h))).collect();
                        (inputs.latency)(rrset, *rtype, &healthy) == Some(*member)
                    }
                }
            };
            set_slot(&mut bitmap, at, healthy);
        }
    }
    bitmap
}

/// Standalone mode (no health checks run): every check healthy, nothing shifted.
#[must_use]
pub fn all_checks_healthy(zones: &[Zone]) -> Vec<u64> {
    let zones_ref = zones;
    let is_check = move |at: u32| {
        zones_ref.iter().find_map(|z| {
            let local = at.checked_sub(z.slot_base)? as usize;
            let slot = z.slots.get(local)?;
            Some(matches!(slot.rule, SlotRule::Check { .. }).then_some(true))
        })?
    };
    evaluate(
        zones,
        &Inputs {
            measured: &|_| Some(true),
            forced: &is_check,
            shifted: &|_, _, _| false,
            latency: &|_, _, healthy| first_healthy(healthy),
        },
    )
}
