//! What a zone transfer carries (SPEC §10): every record set of the zone, a policy set
//! as the records health allows at this location now — failover: the active member;
//! weighted and multivalue: every member a query could get; zonal: every healthy AZ;
//! latency: the chosen member; `ip` and `geo`: the `*` answer — and, for a signed
//! zone, the RRSIG of each set and the NSEC chain.
//!
//! A set's signature is the one control made for the edges when the transferred answer
//! is one an edge gives; otherwise (a weighted set's healthy members together, the SOA
//! with the transfer's serial) it is made here, with the zone's keys and its
//! signatures' validity, and kept for as long as they are.
use std::collections::HashMap;

use qdns_abi::select::{select_chain, select_failover, select_latency, select_zonal, weighted_pool};
use qdns_zone::{
    dnssec::{answer_key, rtype as dns_type, Signature},
    evaluate::global,
    snapshot::{Answer, RecordSet},
    PolicyKind, Zone,
};

use super::wire::record;

/// Longest alias chain followed (as the edge does).
const MAX_ALIAS_DEPTH: u32 = 8;

/// A zone's records for transfer, SOA apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The SOA RDATA as the zone file gives it (serial replaced when served).
    pub soa_rdata: Vec<u8>,
    /// The SOA's TTL.
    pub soa_ttl: u32,
    /// Every other record (RRSIGs included, the SOA's excepted), each a whole RR in
    /// wire form, sorted and without duplicates.
    pub records: Vec<Box<[u8]>>,
    /// A digest of the records and the SOA without its serial: equal digests, same
    /// zone content.
    pub digest: u64,
}

/// Signatures made here, by (owner, type, answer key), for one validity window.
#[derive(Debug, Default)]
pub struct MadeSignatures {
    window: (u64, u64),
    made: HashMap<(Vec<u8>, u16, u64), Vec<Vec<u8>>>,
}

/// What signs a set the edges' signatures do not cover.
pub struct Signing<'s> {
    /// The zone keys' signers.
    pub signers: &'s [qdns_zone::dnssec::keys::Signer],
    /// Kept across views of the zone.
    pub made: &'s mut MadeSignatures,
}

/// The records of `set` health allows with `bitmap`, and their TTL; `None` for a set
/// with nothing to transfer (an alias to a missing set).
#[must_use]
pub fn answer_of(zone: &Zone, index: &SetIndex<'_>, set: &RecordSet, bitmap: &[u64]) -> Option<(Vec<Vec<u8>>, u32)> {
    answer_at(zone, index, set, bitmap, 0)
}

/// Record sets by (owner, type).
pub type SetIndex<'z> = HashMap<(&'z [u8], u16), &'z RecordSet>;

fn answer_at(
    zone: &Zone,
    index: &SetIndex<'_>,
    set: &RecordSet,
    bitmap: &[u64],
    depth: u32,
) -> Option<(Vec<Vec<u8>>, u32)> {
    let Some(policy) = set.policy.as_deref() else {
        return Some((set.rdata.clone(), set.ttl));
    };
    let slots: Vec<u32> = policy.members.iter().map(|m| global(zone.slot_base, m.slot)).collect();
    let healthy = |slot: u32| qdns_abi::health::slot_healthy(bitmap, slot);
    let (mask, fail_open): (u64, bool) = match policy.kind {
        PolicyKind::Weighted => {
            let members = qdns_zone::evaluate::weighted_members(zone.slot_base, policy);
            weighted_pool(&members, bitmap, policy.fail_open_below_permille)
                .map_or((0, true), |pool| (pool.eligible, pool.fail_open))
        }
        PolicyKind::Failover => {
            let choice = select_failover(
                slots.first().copied().unwrap_or(u32::MAX),
                slots.get(1).copied(),
                bitmap,
            );
            (1 << choice.index, choice.fail_open)
        }
        PolicyKind::Multivalue => {
            let mask = slots
                .iter()
                .enumerate()
                .filter(|&(_, &s)| healthy(s))
                .fold(0u64, |m, (i, _)| m | 1 << (i & 63));
            let n = slots.len() as u64;
            let below = u64::from(mask.count_ones()) * 1000 < n * u64::from(policy.fail_open_below_permille);
            if mask == 0 || below {
                (u64::MAX >> (64 - n.clamp(1, 64)), true)
            } else {
                (mask, false)
            }
        }
        PolicyKind::Zonal => {
            let c = select_zonal(&slots, bitmap);
            (c.mask, c.fail_open)
        }
        PolicyKind::Latency => {
            let c = select_latency(&slots, bitmap)?;
            (1 << (c.index & 63), c.fail_open)
        }
        PolicyKind::Ip | PolicyKind::Geo => {
            let rules = policy.client.as_deref()?;
            let decision = rules.default_decision();
            let c = select_chain(decision.chain, &slots, bitmap)?;
            (1 << (c.index & 63), c.fail_open)
        }
    };
    let any_unhealthy = slots.iter().any(|&s| !healthy(s));
    let latency = policy.kind == PolicyKind::Latency;
    let degraded = if latency { fail_open } else { any_unhealthy || fail_open };
    let mut ttl = match policy.degraded_ttl {
        Some(d) if degraded => d,
        _ => set.ttl,
    };
    let mut rdata = Vec::new();
    for (i, member) in policy.members.iter().enumerate().take(64) {
        if mask & (1 << i) == 0 {
            continue;
        }
        match &member.answer {
            Answer::Values(values) => rdata.extend(values.iter().cloned()),
            Answer::Alias { target } if depth < MAX_ALIAS_DEPTH => {
                let Some(target_set) = index.get(&(target.as_slice(), set.rtype)) else {
                    continue;
                };
                if let Some((values, target_ttl)) = answer_at(zone, index, target_set, bitmap, depth + 1) {
                    rdata.extend(values);
                    ttl = ttl.min(target_ttl);
                }
            }
            Answer::Alias { .. } => {}
        }
    }
    rdata.sort();
    rdata.dedup();
    (!rdata.is_empty()).then_some((rdata, ttl))
}

/// The view of `zone` under `bitmap`; `signing` for a signed zone.
pub fn build(zone: &Zone, bitmap: &[u64], mut signing: Option<Signing<'_>>) -> Result<View, String> {
    let index: SetIndex<'_> = zone.rrsets.iter().map(|s| ((s.name.as_slice(), s.rtype), s)).collect();
    let signed = zone.dnssec.as_deref().filter(|d| d.is_signed());
    let sigs: HashMap<(&[u8], u16, u64), &Signature> = signed
        .map(|d| {
            d.sigs
                .iter()
                .map(|s| ((s.name.as_slice(), s.rtype, s.key), s))
                .collect()
        })
        .unwrap_or_default();
    if let (Some(d), Some(s)) = (signed, signing.as_mut()) {
        if s.made.window != (d.inception, d.expiration) {
            s.made.window = (d.inception, d.expiration);
            s.made.made.clear();
        }
    }
    let mut records = Vec::with_capacity(zone.rrsets.len() * 2);
    let mut soa = None;
    for set in &zone.rrsets {
        let Some((rdata, ttl)) = answer_of(zone, &index, set, bitmap) else {
            continue;
        };
        if set.rtype == dns_type::SOA && set.name == zone.origin {
            soa = Some((rdata.first().cloned().unwrap_or_default(), ttl));
            continue;
        }
        for one in &rdata {
            records.push(record(&set.name, set.rtype, ttl, one).into_boxed_slice());
        }
        if signed.is_none() {
            continue;
        }
        let key = answer_key(rdata.iter().map(Vec::as_slice), ttl);
        let rrsigs: Option<Vec<Vec<u8>>> = match sigs.get(&(set.name.as_slice(), set.rtype, key)) {
            Some(sig) => Some(sig.rdata.clone()),
            None if set.policy.is_some() => Some(sign(zone, signing.as_mut(), (&set.name, set.rtype), ttl, &rdata)?),
            // Not signed for the edges: a delegation's NS, glue.
            None => None,
        };
        for rrsig in rrsigs.into_iter().flatten() {
            records.push(record(&set.name, dns_type::RRSIG, ttl, &rrsig).into_boxed_slice());
        }
    }
    let (soa_rdata, soa_ttl) = soa.ok_or("the zone has no SOA")?;
    records.sort_unstable();
    records.dedup();
    let mut digest = qdns_zone::dnssec::AnswerKey::default();
    for r in &records {
        digest.add_rdata(r);
    }
    let mut without_serial = soa_rdata.clone();
    let at = without_serial.len().saturating_sub(20);
    if let Some(serial) = without_serial.get_mut(at..at + 4) {
        serial.fill(0);
    }
    digest.add_rdata(&without_serial);
    digest.add_rdata(&soa_ttl.to_be_bytes());
    Ok(View {
        soa_rdata,
        soa_ttl,
        records,
        digest: digest.finish(),
    })
}

/// The SOA RR with `serial`, and for a signed zone its RRSIG RRs.
pub fn soa_records(
    zone: &Zone,
    view: &View,
    serial: u32,
    signing: Option<Signing<'_>>,
) -> Result<Vec<Vec<u8>>, String> {
    let mut rdata = view.soa_rdata.clone();
    let at = rdata.len().saturating_sub(20);
    if let Some(field) = rdata.get_mut(at..at + 4) {
        field.copy_from_slice(&serial.to_be_bytes());
    }
    let mut out = vec![record(&zone.origin, dns_type::SOA, view.soa_ttl, &rdata)];
    if let Some(d) = zone.dnssec.as_deref().filter(|d| d.is_signed()) {
        let key = answer_key([rdata.as_slice()], view.soa_ttl);
        let found = d
            .sigs
            .iter()
            .find(|s| s.name == zone.origin && s.rtype == dns_type::SOA && s.key == key);
        let rrsigs = if let Some(sig) = found {
            sig.rdata.clone()
        } else {
            let mut signing = signing;
            sign(
                zone,
                signing.as_mut(),
                (&zone.origin, dns_type::SOA),
                view.soa_ttl,
                &[rdata],
            )?
        };
        for rrsig in rrsigs {
            out.push(record(&zone.origin, dns_type::RRSIG, view.soa_ttl, &rrsig));
        }
    }
    Ok(out)
}

/// Signs one answer (kept in `signing.made` for the validity window).
fn sign(
    zone: &Zone,
    signing: Option<&mut Signing<'_>>,
    (owner, rtype): (&[u8], u16),
    ttl: u32,
    rdata: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>, String> {
    let signing = signing.ok_or("the zone is signed but its keys are not at hand")?;
    let key = answer_key(rdata.iter().map(Vec::as_slice), ttl);
    if let Some(made) = signing.made.made.get(&(owner.to_vec(), rtype, key)) {
        return Ok(made.clone());
    }
    let window = zone.dnssec.as_deref().map_or((0, 0), |d| (d.inception, d.expiration));
    let answer: Vec<&[u8]> = rdata.iter().map(Vec::as_slice).collect();
    let made = qdns_zone::dnssec::sign_answer(signing.signers, &zone.origin, window, (owner, rtype), ttl, &answer)
        .map_err(|e| e.to_string())?;
    signing.made.made.insert((owner.to_vec(), rtype, key), made.clone());
    Ok(made)
}
