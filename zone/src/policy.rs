//! Policy record sets (SPEC §2, §3): weighted, failover, multivalue, zonal, and alias
//! members, compiled into [`Policy`] values with health slots.
//!
//! Aliases are resolved once every set is known: the target must be a set of the same
//! zone and type; with `evaluate_target_health` the member gets a derived slot,
//! healthy iff any candidate of the target is. Alias chains are ordered so a target's
//! slots exist before the slot that reads them; a loop is an error.
use std::collections::{BTreeMap, BTreeSet};

use hickory_proto::rr::{Name, RecordType};
use qdns_abi::{health::ALWAYS_HEALTHY, select::MAX_MEMBERS};
use toml::Spanned;

use crate::{
    load::{Origin, OriginKey, ZoneBuilder},
    name,
    schema::{AzEntry, MemberEntry, RrsetEntry},
    snapshot::{Answer, Member, Policy, PolicyKind, Slot, SlotRule},
    RecordSet, ZoneError,
};

/// A record set's key: owner (wire) and type.
type SetKey = (Vec<u8>, u16);

/// An alias member waiting for its target.
pub(crate) struct PendingAlias {
    /// The set holding the member.
    pub(crate) set: SetKey,
    /// Its index in the set's members.
    pub(crate) member: usize,
    /// Target owner (wire).
    target: Vec<u8>,
    /// Read the target's health.
    evaluate: bool,
    /// Where, for errors (in the zone file).
    line: usize,
    /// Which key.
    key: String,
}

impl ZoneBuilder<'_> {
    pub(crate) fn policy_rrset(&mut self, index: usize, entry: &RrsetEntry) -> Result<(), ZoneError> {
        let key = |field: &str| format!("rrset[{index}].{field}");
        let (owner, owner_wire, rtype) = self.owner_and_type(entry, index)?;
        let Some(policy_text) = &entry.policy else {
            return Ok(());
        };
        let kind = self.policy_kind(policy_text, &key("policy"))?;
        if matches!(rtype, RecordType::NS | RecordType::SOA) {
            return Err(self.err(
                &entry.rtype,
                &key("type"),
                format!("{rtype} sets cannot have a routing policy"),
            ));
        }
        if let Some(values) = &entry.values {
            return Err(self.err(
                values,
                &key("values"),
                "a policy set takes members (or zones for zonal), not values",
            ));
        }
        if entry.cross_zone.is_some() && kind != PolicyKind::Zonal {
            return Err(self.err(policy_text, &key("cross_zone"), "cross_zone belongs to zonal sets"));
        }
        let ttl = match &entry.ttl {
            Some(ttl) => self.ttl_value(ttl, &key("ttl"))?,
            None => self.ttl,
        };
        let degraded_ttl = entry
            .degraded_ttl
            .as_ref()
            .map(|t| self.ttl_value(t, &key("degraded_ttl")))
            .transpose()?;
        let fail_open_below_permille = self.fail_open_below(entry, kind, &key("fail_open_below"))?;
        let set_key = (owner_wire.clone(), u16::from(rtype));
        let mut client = None;
        let members = if kind == PolicyKind::Zonal {
            if let Some(m) = &entry.members {
                return Err(self.err(m, &key("members"), "a zonal set takes zones, not members"));
            }
            let zones = entry
                .zones
                .as_ref()
                .ok_or_else(|| self.err(policy_text, &key("zones"), "a zonal set needs zones"))?;
            self.zonal_members(
                &owner,
                &owner_wire,
                rtype,
                zones,
                entry.cross_zone.unwrap_or(false),
                index,
            )?
        } else {
            if let Some(z) = &entry.zones {
                return Err(self.err(z, &key("zones"), "zones belong to zonal sets"));
            }
            let members = entry
                .members
                .as_ref()
                .ok_or_else(|| self.err(policy_text, &key("members"), "a policy set needs members"))?;
            match kind {
                PolicyKind::Ip => client = Some(self.ip_rules(members, index)?),
                PolicyKind::Geo => self.geo_members(members, index, set_key.clone())?,
                _ => {}
            }
            let mut built = self.members(&owner, rtype, kind, members, index, &set_key)?;
            if kind == PolicyKind::Latency {
                self.latency_slots(&mut built, members, index, &set_key)?;
            }
            built
        };
        let set = RecordSet {
            name: owner_wire,
            rtype: u16::from(rtype),
            ttl,
            rdata: Vec::new(),
            policy: Some(Box::new(Policy {
                kind,
                members,
                fail_open_below_permille,
                degraded_ttl,
                client,
            })),
        };
        let origin = Origin::in_zone_file(Some(self.line(entry.name.span().start)), OriginKey::rrset(index));
        self.insert(set, origin)
    }

    /// The `policy` key's kind.
    fn policy_kind(&self, text: &Spanned<String>, key: &str) -> Result<PolicyKind, ZoneError> {
        Ok(match text.get_ref().as_str() {
            "weighted" => PolicyKind::Weighted,
            "failover" => PolicyKind::Failover,
            "multivalue" => PolicyKind::Multivalue,
            "zonal" => PolicyKind::Zonal,
            "ip" => PolicyKind::Ip,
            "geo" => PolicyKind::Geo,
            "latency" => PolicyKind::Latency,
            other => {
                return Err(self.err(
                    text,
                    key,
                    format!("unknown policy {other:?}: use weighted, failover, multivalue, zonal, ip, geo or latency"),
                ))
            }
        })
    }

    /// `fail_open_below` in thousandths (0 when absent).
    fn fail_open_below(&self, entry: &RrsetEntry, kind: PolicyKind, key: &str) -> Result<u32, ZoneError> {
        if let (Some(f), true) = (&entry.fail_open_below, kind.is_client_aware()) {
            return Err(self.err(
                f,
                key,
                "a client-aware set falls back to broader matches, then fails open over the most specific: fail_open_below does not apply",
            ));
        }
        let permille = match &entry.fail_open_below {
            #[expect(clippy::cast_sign_loss, reason = "checked to be within 0.0..=1.0 first")]
            Some(f) if (0.0..=1.0).contains(f.get_ref()) => (f.get_ref() * 1000.0).round() as u32,
            Some(f) => return Err(self.err(f, key, format!("{} is outside 0.0..=1.0", f.get_ref()))),
            None => 0,
        };
        Ok(permille)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one rule per member field, in SPEC order; splitting scatters them"
    )]
    fn members(
        &mut self,
        owner: &Name,
        rtype: RecordType,
        kind: PolicyKind,
        entries: &Spanned<Vec<Spanned<MemberEntry>>>,
        index: usize,
        set_key: &SetKey,
    ) -> Result<Vec<Member>, ZoneError> {
        let list = entries.get_ref();
        let key = |m: usize, field: &str| format!("rrset[{index}].members[{m}].{field}");
        if list.is_empty() || list.len() > MAX_MEMBERS {
            return Err(self.err(
                entries,
                &format!("rrset[{index}].members"),
                format!("1..={MAX_MEMBERS} members are allowed"),
            ));
        }
        let mut ids = BTreeSet::new();
        let mut members: Vec<(bool, Member)> = Vec::with_capacity(list.len());
        let (mut primaries, mut secondaries) = (0, 0);
        for (m, spanned) in list.iter().enumerate() {
            let entry = spanned.get_ref();
            if !ids.insert(entry.id.get_ref().clone()) {
                return Err(self.err(
                    &entry.id,
                    &key(m, "id"),
                    format!("duplicate member id {:?}", entry.id.get_ref()),
                ));
            }
            let weight = match (&entry.weight, kind) {
                (Some(w), PolicyKind::Weighted) => {
                    u32::try_from(*w.get_ref()).ok().filter(|&w| w <= 255).ok_or_else(|| {
                        self.err(
                            w,
                            &key(m, "weight"),
                            format!("weight {} is outside 0..=255", w.get_ref()),
                        )
                    })?
                }
                (None, PolicyKind::Weighted) => {
                    return Err(self.err(&entry.id, &key(m, "weight"), "a weighted member needs a weight"))
                }
                (Some(w), _) => return Err(self.err(w, &key(m, "weight"), "weight belongs to weighted sets")),
                (None, _) => 0,
            };
            let primary = match (&entry.role, kind) {
                (Some(r), PolicyKind::Failover) => match r.get_ref().as_str() {
                    "primary" => {
                        primaries += 1;
                        if primaries > 1 {
                            return Err(self.err(r, &key(m, "role"), "two primaries; a failover set has one"));
                        }
                        true
                    }
                    "secondary" => {
                        secondaries += 1;
                        if secondaries > 1 {
                            return Err(self.err(r, &key(m, "role"), "two secondaries; a failover set has one"));
                        }
                        false
                    }
                    other => {
                        return Err(self.err(r, &key(m, "role"), format!("role {other:?}: use primary or secondary")))
                    }
                },
                (None, PolicyKind::Failover) => {
                    return Err(self.err(&entry.id, &key(m, "role"), "a failover member needs a role"))
                }
                (Some(r), _) => return Err(self.err(r, &key(m, "role"), "role belongs to failover sets")),
                (None, _) => false,
            };
            if let (Some(cidr), false) = (&entry.cidr, kind == PolicyKind::Ip) {
                return Err(self.err(cidr, &key(m, "cidr"), "cidr belongs to ip sets"));
            }
            if let (Some(location), false) = (&entry.location, kind == PolicyKind::Geo) {
                return Err(self.err(location, &key(m, "location"), "location belongs to geo sets"));
            }
            self.note_sites(entry, set_key, key(m, "sites"))?;
            let (slot, check) = match &entry.health_check {
                Some(id) => {
                    let slot = *self.checks.get(id.get_ref()).ok_or_else(|| {
                        self.err(
                            id,
                            &key(m, "health_check"),
                            format!("unknown health check id {:?}", id.get_ref()),
                        )
                    })?;
                    (slot, Some(id.get_ref().clone()))
                }
                None => (ALWAYS_HEALTHY, None),
            };
            let answer = match (&entry.values, &entry.alias) {
                (Some(values), None) => {
                    if values.get_ref().is_empty() {
                        return Err(self.err(values, &key(m, "values"), "at least one value is required"));
                    }
                    if kind == PolicyKind::Multivalue && values.get_ref().len() != 1 {
                        return Err(self.err(values, &key(m, "values"), "a multivalue member has exactly one value"));
                    }
                    if entry.evaluate_target_health {
                        return Err(self.err(
                            &entry.id,
                            &key(m, "evaluate_target_health"),
                            "evaluate_target_health belongs to alias members",
                        ));
                    }
                    Answer::Values(self.values(owner, rtype, values.get_ref(), &key(m, "values"))?)
                }
                (None, Some(alias)) => {
                    if kind == PolicyKind::Multivalue {
                        return Err(self.err(alias, &key(m, "alias"), "multivalue members answer values, not aliases"));
                    }
                    if entry.health_check.is_some() && entry.evaluate_target_health {
                        return Err(self.err(
                            alias,
                            &key(m, "health_check"),
                            "use either health_check or evaluate_target_health",
                        ));
                    }
                    let target = name::to_wire(&self.name(alias, &key(m, "alias"))?);
                    self.aliases.push(PendingAlias {
                        set: set_key.clone(),
                        member: m,
                        target: target.clone(),
                        evaluate: entry.evaluate_target_health,
                        line: self.line(alias.span().start),
                        key: key(m, "alias"),
                    });
                    Answer::Alias { target }
                }
                (Some(v), Some(_)) => {
                    return Err(self.err(v, &key(m, "values"), "a member has values or an alias, not both"))
                }
                (None, None) => {
                    return Err(self.err(&entry.id, &key(m, "values"), "a member needs values or an alias"))
                }
            };
            members.push((
                primary,
                Member {
                    id: entry.id.get_ref().clone(),
                    weight,
                    slot,
                    check,
                    answer,
                },
            ));
        }
        if kind == PolicyKind::Failover {
            if primaries == 0 {
                return Err(self.err(
                    entries,
                    &format!("rrset[{index}].members"),
                    "a failover set needs a primary",
                ));
            }
            // Primary first, secondary second.
            members.sort_by_key(|(primary, _)| !primary);
            // Pending aliases refer to member positions: re-point them after the sort.
            let order: Vec<String> = members.iter().map(|(_, m)| m.id.clone()).collect();
            for pending in self.aliases.iter_mut().filter(|p| &p.set == set_key) {
                if let Some(id) = list.get(pending.member).map(|e| e.get_ref().id.get_ref()) {
                    pending.member = order.iter().position(|o| o == id).unwrap_or(pending.member);
                }
            }
        }
        Ok(members.into_iter().map(|(_, m)| m).collect())
    }

    /// A `latency` set's members get a slot each that control sets for the one it
    /// chooses ([`SlotRule::Latency`]); the member's own check stays its health, read
    /// by that rule. Alias members are refused: an alias's slot is its target's health.
    fn latency_slots(
        &mut self,
        members: &mut [Member],
        entries: &Spanned<Vec<Spanned<MemberEntry>>>,
        index: usize,
        (rrset, rtype): &SetKey,
    ) -> Result<(), ZoneError> {
        if let Some((m, entry)) = entries
            .get_ref()
            .iter()
            .enumerate()
            .find(|(_, e)| e.get_ref().alias.is_some())
        {
            return Err(self.err(
                entry,
                &format!("rrset[{index}].members[{m}].alias"),
                "latency members answer values, not aliases",
            ));
        }
        let health: Vec<u32> = members.iter().map(|m| m.slot).collect();
        let label = format!("{} {}", name::to_text(rrset), RecordType::from(*rtype));
        for (i, member) in members.iter_mut().enumerate() {
            let slot = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
            self.slots.push(Slot {
                name: format!("{label}/{} (latency choice)", member.id),
                rule: SlotRule::Latency {
                    rrset: rrset.clone(),
                    rtype: *rtype,
                    member: i as u32,
                    health: health.clone(),
                },
            });
            member.slot = slot;
        }
        Ok(())
    }

    fn zonal_members(
        &mut self,
        owner: &Name,
        owner_wire: &[u8],
        rtype: RecordType,
        zones: &Spanned<Vec<Spanned<AzEntry>>>,
        cross_zone: bool,
        index: usize,
    ) -> Result<Vec<Member>, ZoneError> {
        let list = zones.get_ref();
        let key = |z: usize, field: &str| format!("rrset[{index}].zones[{z}].{field}");
        if list.is_empty() || list.len() > MAX_MEMBERS {
            return Err(self.err(
                zones,
                &format!("rrset[{index}].zones"),
                format!("1..={MAX_MEMBERS} zones are allowed"),
            ));
        }
        let groups: BTreeMap<&str, u32> = list
            .iter()
            .flat_map(|z| z.get_ref().targets.get_ref().keys())
            .map(String::as_str)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .enumerate()
            .map(|(i, g)| (g, i as u32))
            .collect();
        if groups.len() > qdns_abi::health::MAX_TARGET_GROUPS as usize {
            return Err(self.err(zones, &format!("rrset[{index}].zones"), "at most 16 target groups"));
        }
        let mut targets = Vec::new();
        let mut names = BTreeSet::new();
        for (z, spanned) in list.iter().enumerate() {
            let az = spanned.get_ref();
            if !names.insert(az.az.get_ref().clone()) {
                return Err(self.err(&az.az, &key(z, "az"), format!("duplicate AZ {:?}", az.az.get_ref())));
            }
            for (group, ids) in az.targets.get_ref() {
                for (t, id) in ids.iter().enumerate() {
                    let slot = *self.checks.get(id.get_ref()).ok_or_else(|| {
                        self.err(
                            id,
                            &key(z, &format!("targets.{group}[{t}]")),
                            format!("unknown health check id {:?}", id.get_ref()),
                        )
                    })?;
                    targets.push((z as u32, groups.get(group.as_str()).copied().unwrap_or(0), slot));
                }
            }
        }
        if targets.len() > qdns_abi::health::MAX_ZONAL_TARGETS {
            return Err(self.err(zones, &format!("rrset[{index}].zones"), "at most 256 targets"));
        }
        let set_name = owner.to_string();
        let mut members = Vec::with_capacity(list.len());
        for (z, spanned) in list.iter().enumerate() {
            let az = spanned.get_ref();
            if az.values.get_ref().is_empty() {
                return Err(self.err(&az.values, &key(z, "values"), "at least one value is required"));
            }
            let values = self.values(owner, rtype, az.values.get_ref(), &key(z, "values"))?;
            let slot = self.slots.len() as u32;
            let slot_name = format!("{set_name}@{}", az.az.get_ref());
            self.slots.push(Slot {
                name: slot_name.clone(),
                rule: SlotRule::Az {
                    rrset: owner_wire.to_vec(),
                    rtype: u16::from(rtype),
                    az: az.az.get_ref().clone(),
                    index: z as u32,
                    targets: targets.clone(),
                    groups: groups.len() as u32,
                    cross_zone,
                },
            });
            members.push(Member {
                id: az.az.get_ref().clone(),
                weight: 0,
                slot,
                check: Some(slot_name),
                answer: Answer::Values(values),
            });
        }
        Ok(members)
    }

    /// Checks every alias target and gives evaluate-target-health members their slot.
    pub(crate) fn resolve_aliases(&mut self) -> Result<(), ZoneError> {
        let pending = std::mem::take(&mut self.aliases);
        let path = self.path;
        let fail =
            |p: &PendingAlias, reason: String| ZoneError::invalid(path, Some(p.line), Some(p.key.clone()), reason);
        // The alias graph: set → target sets, for ordering and loop detection.
        let mut edges: BTreeMap<SetKey, Vec<SetKey>> = BTreeMap::new();
        for p in &pending {
            let target = (p.target.clone(), p.set.1);
            if !self.sets.contains(&target.0, target.1) {
                let other = self.sets.iter().find(|(s, _)| s.name == p.target).map(|(s, _)| s.rtype);
                return Err(match other {
                    Some(t) => fail(
                        p,
                        format!(
                            "alias to {} {}, another type than the set's",
                            name::to_text(&p.target),
                            RecordType::from(t)
                        ),
                    ),
                    None => fail(
                        p,
                        format!(
                            "alias target {} {} does not exist in this zone",
                            name::to_text(&p.target),
                            RecordType::from(p.set.1)
                        ),
                    ),
                });
            }
            edges.entry(p.set.clone()).or_default().push(target);
        }
        // Depth-first order: targets before the sets aliasing them.
        let mut order: Vec<SetKey> = Vec::new();
        let mut state: BTreeMap<SetKey, bool> = BTreeMap::new();
        for p in &pending {
            visit(&p.set, &edges, &mut state, &mut order).map_err(|at| {
                fail(
                    p,
                    format!("alias loop through {} {}", name::to_text(&at.0), RecordType::from(at.1)),
                )
            })?;
        }
        for set_key in order {
            for p in pending.iter().filter(|p| p.set == set_key && p.evaluate) {
                let target_slots: Vec<u32> =
                    match self.sets.get(&p.target, p.set.1).and_then(|(s, _)| s.policy.as_ref()) {
                        Some(policy) => policy.members.iter().map(|m| m.slot).collect(),
                        None => Vec::new(),
                    };
                let slot = self.slots.len() as u32;
                let slot_name = format!("{}/{}", name::to_text(&p.set.0), name::to_text(&p.target));
                self.slots.push(Slot {
                    name: slot_name.clone(),
                    rule: SlotRule::AliasTarget { members: target_slots },
                });
                if let Some(member) = self
                    .sets
                    .get_mut_hashed(self.sets.key_hash(&p.set.0, p.set.1), &p.set.0, p.set.1)
                    .and_then(|s| s.policy.as_mut())
                    .and_then(|policy| policy.members.get_mut(p.member))
                {
                    member.slot = slot;
                    member.check = Some(slot_name);
                }
            }
        }
        Ok(())
    }
}

/// Depth-first visit of the alias graph: pushes targets before the sets aliasing them;
/// `Err` names a set met again while still open (a loop).
fn visit(
    node: &SetKey,
    edges: &BTreeMap<SetKey, Vec<SetKey>>,
    state: &mut BTreeMap<SetKey, bool>,
    order: &mut Vec<SetKey>,
) -> Result<(), SetKey> {
    match state.get(node) {
        Some(true) => return Ok(()),
        Some(false) => return Err(node.clone()),
        None => {}
    }
    state.insert(node.clone(), false);
    for next in edges.get(node).into_iter().flatten() {
        visit(next, edges, state, order)?;
    }
    state.insert(node.clone(), true);
    order.push(node.clone());
    Ok(())
}
