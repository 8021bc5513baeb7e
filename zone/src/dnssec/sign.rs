//! Signing a zone in control (RFC 4034 §3.1.8.1, RFC 4035 §2): the DNSKEY set, the
//! NSEC chain over the zone's names, and an RRSIG for every answer each set can give.
use std::collections::BTreeSet;

use super::{
    answers::{possible, SetIndex},
    canonical_cmp,
    keys::{KeyError, Nonces, Signer},
    label_count, rtype, Signature, Signatures, ZoneKey,
};
use crate::{name, RecordSet, Zone};

/// How long signatures live, and when they start.
#[derive(Debug, Clone, Copy)]
pub struct SignOptions {
    /// Seconds since the epoch, now.
    pub now: u64,
    /// Seconds each signature is valid for, from `now`.
    pub validity: u64,
    /// Seconds of clock skew allowed before `now` (inception = now − this).
    pub backdate: u64,
    /// How ECDSA nonces are made: [`Nonces::Deterministic`] where several signers must
    /// agree octet for octet.
    pub nonces: Nonces,
}

impl SignOptions {
    /// Fourteen days of validity, an hour of backdating (knotd's and BIND's defaults
    /// are of this order).
    #[must_use]
    pub fn at(now: u64) -> SignOptions {
        SignOptions {
            now,
            validity: 14 * 86_400,
            backdate: 3600,
            nonces: Nonces::Random,
        }
    }
}

/// A zone that cannot be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The zone holds records only a signer may make, or a set it cannot sign.
    #[error("{zone}: {reason}")]
    Zone {
        /// The zone's origin.
        zone: String,
        /// Why.
        reason: String,
    },
    /// A key failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Signs `zone` with `keys` (every one signs): adds the DNSKEY and NSEC sets to its
/// record sets and fills `zone.dnssec` with the signatures.
pub fn sign_zone(zone: &mut Zone, keys: &[ZoneKey], options: SignOptions) -> Result<(), SignError> {
    sign_zone_reusing(zone, keys, options, None)
}

/// [`sign_zone`], taking from `previous` (the zone's signatures before, e.g. of the
/// snapshot a reload replaces) every RRSIG that the same key made for the same answer in
/// the same window — only what changed is signed again. Signing is the cost (≈ 12 µs a
/// signature with random ECDSA nonces, ≈ 80 µs with deterministic ones on this VM's two
/// cores), so a revision that changes a few sets of a large signed zone signs a few.
pub fn sign_zone_reusing(
    zone: &mut Zone,
    keys: &[ZoneKey],
    options: SignOptions,
    previous: Option<&Signatures>,
) -> Result<(), SignError> {
    let origin = name::to_text(&zone.origin);
    let fail = |reason: String| SignError::Zone {
        zone: origin.clone(),
        reason,
    };
    let Some(request) = zone.dnssec.as_deref() else {
        return Err(fail("the zone does not ask to be signed".to_owned()));
    };
    let algorithm = request.algorithm;
    if keys.is_empty() {
        return Err(fail("no keys".to_owned()));
    }
    if let Some(set) = zone.rrsets.iter().find(|s| {
        matches!(
            s.rtype,
            rtype::DNSKEY | rtype::RRSIG | rtype::NSEC | rtype::NSEC3 | rtype::NSEC3PARAM
        )
    }) {
        return Err(fail(format!(
            "{} type {} is made by the signer; remove it from the zone file",
            name::to_text(&set.name),
            set.rtype
        )));
    }
    let signers = keys
        .iter()
        .map(|key| key.signer_with(options.nonces))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(other) = signers.iter().find(|s| s.algorithm() != algorithm) {
        return Err(fail(format!(
            "key {} is {} but the zone asks for {}; an algorithm change is not supported",
            other.tag,
            other.algorithm().mnemonic(),
            algorithm.mnemonic()
        )));
    }
    let soa_ttl = zone
        .rrset(&zone.origin, rtype::SOA)
        .map_or(zone.negative_ttl, |s| s.ttl);
    let mut dnskeys: Vec<Vec<u8>> = signers.iter().map(|s| s.dnskey.clone()).collect();
    dnskeys.sort();
    dnskeys.dedup();
    zone.rrsets.push(RecordSet {
        name: zone.origin.clone(),
        rtype: rtype::DNSKEY,
        ttl: soa_ttl,
        rdata: dnskeys,
        policy: None,
    });
    let nsec = nsec_chain(zone);
    zone.rrsets.extend(nsec);
    zone.rrsets
        .sort_by(|a, b| a.name.cmp(&b.name).then(a.rtype.cmp(&b.rtype)));

    let inception = options.now.saturating_sub(options.backdate);
    let expiration = options.now + options.validity;
    let cuts = cuts(zone);
    let index = SetIndex::new(&zone.rrsets);
    let sets: Vec<&RecordSet> = zone.rrsets.iter().filter(|set| is_signed(zone, &cuts, set)).collect();
    // Signing is the cost (≈ 20 µs a signature): the sets are split over the cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .clamp(1, 16);
    let chunk = sets.len().div_ceil(threads).max(1);
    let window = Window {
        signer_name: &zone.origin,
        inception,
        expiration,
    };
    let parts: Vec<Result<Vec<Signature>, SignError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sets
            .chunks(chunk)
            .map(|part| scope.spawn(|| sign_sets(&index, &signers, part, (window, previous))))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(fail("a signing thread failed".to_owned())))
            })
            .collect()
    });
    let mut sigs = Vec::new();
    for part in parts {
        sigs.extend(part.map_err(|e| match e {
            SignError::Zone { reason, .. } => fail(reason),
            SignError::Key(key) => SignError::Key(key),
        })?);
    }
    zone.dnssec = Some(Box::new(Signatures {
        algorithm,
        inception,
        expiration,
        sigs,
    }));
    Ok(())
}

/// Who signs and for how long.
#[derive(Clone, Copy)]
struct Window<'z> {
    signer_name: &'z [u8],
    inception: u64,
    expiration: u64,
}

/// The signatures of every answer of `sets` (zone named by the caller on error), those
/// `previous` holds for the same answer, key and window taken from it.
fn sign_sets(
    index: &SetIndex<'_>,
    signers: &[Signer],
    sets: &[&RecordSet],
    (window, previous): (Window<'_>, Option<&Signatures>),
) -> Result<Vec<Signature>, SignError> {
    let mut sigs = Vec::with_capacity(sets.len());
    for set in sets {
        let answers = possible(index, set).map_err(|reason| SignError::Zone {
            zone: String::new(),
            reason: format!(
                "{} {}: {reason}",
                name::to_text(&set.name),
                crate::master::type_name(set.rtype)
            ),
        })?;
        let ttls = super::answers::ttls(index, set);
        let before = previous.map_or(&[][..], |p| signed_before(p, set));
        for answer in answers {
            for &ttl in &ttls {
                let key = super::answer_key(answer.iter().copied(), ttl);
                let made = before.iter().find(|s| s.key == key && s.ttl == ttl);
                let mut rdata = Vec::with_capacity(signers.len());
                for signer in signers {
                    let header = rrsig_header(signer, window, set, ttl);
                    let kept = made.and_then(|s| s.rdata.iter().find(|r| r.starts_with(&header)));
                    rdata.push(match kept {
                        Some(kept) => kept.clone(),
                        None => rrsig(signer, header, set, ttl, &answer)?,
                    });
                }
                sigs.push(Signature {
                    name: set.name.clone(),
                    rtype: set.rtype,
                    key,
                    ttl,
                    rdata,
                });
            }
        }
    }
    Ok(sigs)
}

/// Delegation points: owners of NS sets below the apex.
fn cuts(zone: &Zone) -> Vec<&[u8]> {
    zone.rrsets
        .iter()
        .filter(|s| s.rtype == rtype::NS && s.name != zone.origin)
        .map(|s| s.name.as_slice())
        .collect()
}

/// True for names strictly below a delegation point (glue, occluded data).
fn occluded(cuts: &[&[u8]], owner: &[u8]) -> bool {
    cuts.iter()
        .any(|cut| owner.len() > cut.len() && name::is_at_or_below(owner, cut))
}

/// Signed: authoritative data — not below a cut, and at a cut only DS and NSEC
/// (RFC 4035 §2.2).
fn is_signed(zone: &Zone, cuts: &[&[u8]], set: &RecordSet) -> bool {
    if occluded(cuts, &set.name) {
        return false;
    }
    let at_cut = set.name != zone.origin && cuts.contains(&set.name.as_slice());
    !at_cut || matches!(set.rtype, rtype::DS | rtype::NSEC)
}

/// The NSEC set of every authoritative name (RFC 4034 §4, RFC 4035 §2.3), in canonical
/// order, the last pointing back at the apex. Names without records of their own
/// (empty non-terminals) have none: a covering NSEC proves them.
fn nsec_chain(zone: &Zone) -> Vec<RecordSet> {
    let cuts = cuts(zone);
    // Each owner's types, in one pass over the sets.
    let mut types_at: std::collections::HashMap<&[u8], BTreeSet<u16>> = std::collections::HashMap::new();
    for set in &zone.rrsets {
        if !occluded(&cuts, &set.name) {
            types_at.entry(set.name.as_slice()).or_default().insert(set.rtype);
        }
    }
    let mut names: Vec<&[u8]> = types_at.keys().copied().collect();
    names.sort_by(|a, b| canonical_cmp(a, b));
    let mut out = Vec::with_capacity(names.len());
    for (i, owner) in names.iter().enumerate() {
        let next = names.get(i + 1).copied().unwrap_or(&zone.origin);
        let at_cut = *owner != zone.origin.as_slice() && cuts.contains(owner);
        let mut types: BTreeSet<u16> = types_at
            .get(owner)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&t| !at_cut || t == rtype::NS || t == rtype::DS)
            .collect();
        types.insert(rtype::RRSIG);
        types.insert(rtype::NSEC);
        let mut rdata = next.to_vec();
        rdata.extend_from_slice(&type_bitmap(&types));
        out.push(RecordSet {
            name: owner.to_vec(),
            rtype: rtype::NSEC,
            ttl: zone.negative_ttl,
            rdata: vec![rdata],
            policy: None,
        });
    }
    out
}

/// RFC 4034 §4.1.2 type bit maps.
#[must_use]
pub fn type_bitmap(types: &BTreeSet<u16>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut window: Option<(u8, [u8; 32], usize)> = None;
    let flush = |out: &mut Vec<u8>, w: (u8, [u8; 32], usize)| {
        out.push(w.0);
        out.push(w.2 as u8);
        out.extend_from_slice(&w.1[..w.2]);
    };
    for &t in types {
        let (hi, lo) = ((t >> 8) as u8, (t & 0xff) as usize);
        match &mut window {
            Some(w) if w.0 == hi => {}
            _ => {
                if let Some(w) = window.take() {
                    flush(&mut out, w);
                }
                window = Some((hi, [0; 32], 0));
            }
        }
        if let Some(w) = &mut window {
            w.1[lo / 8] |= 0x80 >> (lo % 8);
            w.2 = w.2.max(lo / 8 + 1);
        }
    }
    if let Some(w) = window {
        flush(&mut out, w);
    }
    out
}

/// One RRSIG RDATA over `answer` (the records of `set`'s owner and type).
/// The signatures `previous` holds for the owner and type of `set`: a run of them, as
/// signatures are made in the zone's (name, type) order.
fn signed_before<'p>(previous: &'p Signatures, set: &RecordSet) -> &'p [Signature] {
    let sigs = &previous.sigs;
    let start = sigs.partition_point(|s| (s.name.as_slice(), s.rtype) < (set.name.as_slice(), set.rtype));
    let rest = sigs.get(start..).unwrap_or_default();
    let len = rest
        .iter()
        .take_while(|s| s.name == set.name && s.rtype == set.rtype)
        .count();
    rest.get(..len).unwrap_or_default()
}

/// The RRSIG RDATA up to its signature (RFC 4034 §3.1): what a signature made by
/// `signer` in `window` for `set` at `ttl` starts with.
fn rrsig_header(signer: &Signer, window: Window<'_>, set: &RecordSet, ttl: u32) -> Vec<u8> {
    let (signer_name, inception, expiration) = (window.signer_name, window.inception, window.expiration);
    let wildcard = set.name.get(..2) == Some(&[1, b'*'][..]);
    let labels = label_count(&set.name) - usize::from(wildcard);
    let mut rdata = Vec::with_capacity(18 + signer_name.len() + 64);
    rdata.extend_from_slice(&set.rtype.to_be_bytes());
    rdata.push(signer.algorithm().number());
    rdata.push(labels as u8);
    rdata.extend_from_slice(&ttl.to_be_bytes());
    rdata.extend_from_slice(&(expiration as u32).to_be_bytes());
    rdata.extend_from_slice(&(inception as u32).to_be_bytes());
    rdata.extend_from_slice(&signer.tag.to_be_bytes());
    rdata.extend_from_slice(signer_name);
    rdata
}

/// The RRSIG RDATA `header` (see [`rrsig_header`]) followed by `signer`'s signature
/// over it and `answer`.
fn rrsig(signer: &Signer, header: Vec<u8>, set: &RecordSet, ttl: u32, answer: &[&[u8]]) -> Result<Vec<u8>, KeyError> {
    let mut rdata = header;
    // RFC 4034 §6.3: records in canonical RDATA order, duplicates once.
    let mut records: Vec<&[u8]> = answer.to_vec();
    records.sort_unstable();
    records.dedup();
    let mut data = rdata.clone();
    for record in records {
        data.extend_from_slice(&set.name);
        data.extend_from_slice(&set.rtype.to_be_bytes());
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&ttl.to_be_bytes());
        data.extend_from_slice(&(record.len() as u16).to_be_bytes());
        data.extend_from_slice(record);
    }
    rdata.extend_from_slice(&signer.sign(&data)?);
    Ok(rdata)
}

/// The RRSIG RDATA (one per signer) over `answer`, the records of `owner` and `rtype`
/// at `ttl`, valid over `validity` (inception, expiration): for record sets made after
/// the zone was signed — the SOA a zone transfer carries with its own serial, a policy
/// set's transfer answer (every healthy member at once).
pub fn sign_answer(
    signers: &[Signer],
    signer_name: &[u8],
    validity: (u64, u64),
    (owner, rtype): (&[u8], u16),
    ttl: u32,
    answer: &[&[u8]],
) -> Result<Vec<Vec<u8>>, KeyError> {
    let set = RecordSet {
        name: owner.to_vec(),
        rtype,
        ttl,
        rdata: Vec::new(),
        policy: None,
    };
    let window = Window {
        signer_name,
        inception: validity.0,
        expiration: validity.1,
    };
    signers
        .iter()
        .map(|signer| rrsig(signer, rrsig_header(signer, window, &set, ttl), &set, ttl, answer))
        .collect()
}
