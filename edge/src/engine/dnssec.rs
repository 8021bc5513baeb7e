//! Signed answers (RFC 4035 §3.1): the RRSIGs control made for every answer a set can
//! give, found by the (node, type, answer key) of the records written, and the NSEC
//! records that prove a name or type absent. The edge signs nothing and holds no key.
use std::collections::HashMap;

use qdns_zone::dnssec::{canonical_cmp, rtype as dtype, AnswerKey};

use super::{compile::EngineError, NodeId, ZoneData};
use crate::wire::{builder::NameRef, Builder, Full};

/// Most octets of a name (RFC 1035 §3.1).
const MAX_NAME: usize = 255;

/// A signed zone's signatures and NSEC chain, compiled.
pub(super) struct Signed {
    /// RRSIG records after their owner (TYPE CLASS TTL RDLENGTH RDATA), back to back.
    blob: Vec<u8>,
    /// (owner node, type covered, answer key) → (start, end, count) in `blob`.
    sigs: HashMap<(NodeId, u16, u64), (u32, u32, u16), foldhash::fast::FixedState>,
    /// Nodes with an NSEC record, in canonical order.
    chain: Vec<NodeId>,
    /// When the first signature expires (seconds since the epoch).
    pub(super) expiration: u64,
    /// When the signatures became valid (control backdates them an hour).
    pub(super) inception: u64,
    /// The apex node and the key of its SOA (negative answers carry its RRSIG).
    apex: NodeId,
    soa: AnswerKey,
    /// DO=1 answers written without their RRSIG because control signed no such answer
    /// (validators fail them): should stay 0.
    pub(super) unsigned: std::sync::atomic::AtomicU64,
}

/// Compiles `zone`'s signatures against its compiled names; `None` for an unsigned zone.
pub(super) fn compile(zone: &qdns_zone::Zone, data: &ZoneData) -> Result<Option<Signed>, EngineError> {
    let Some(sigs) = zone.dnssec.as_deref() else {
        return Ok(None);
    };
    let text = || qdns_zone::name::to_text(&zone.origin);
    if !sigs.is_signed() {
        return Err(EngineError::Unsigned { zone: text() });
    }
    let apex = data.names.get(&zone.origin).unwrap_or(NodeId::MAX);
    let mut signed = Signed {
        blob: Vec::new(),
        sigs: HashMap::with_capacity_and_hasher(sigs.sigs.len(), foldhash::fast::FixedState::default()),
        chain: Vec::new(),
        expiration: sigs.expiration,
        inception: sigs.inception,
        apex,
        soa: data
            .node(apex)
            .and_then(|apex| apex.rrset(qdns_zone::dnssec::rtype::SOA))
            .map(key_of)
            .unwrap_or_default(),
        unsigned: std::sync::atomic::AtomicU64::new(0),
    };
    for sig in &sigs.sigs {
        let Some(node) = data.names.get(&sig.name) else {
            return Err(EngineError::Unsigned { zone: text() });
        };
        let start = signed.blob.len();
        for rdata in &sig.rdata {
            super::compile::push_record(&mut signed.blob, dtype::RRSIG, sig.ttl, rdata)
                .ok_or_else(|| EngineError::Unsigned { zone: text() })?;
        }
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(signed.blob.len())) else {
            return Err(EngineError::Unsigned { zone: text() });
        };
        signed
            .sigs
            .insert((node, sig.rtype, sig.key), (start, end, sig.rdata.len() as u16));
    }
    signed.chain = zone
        .rrsets
        .iter()
        .filter(|s| s.rtype == dtype::NSEC)
        .filter_map(|s| data.names.get(&s.name))
        .collect();
    signed
        .chain
        .sort_by(|&a, &b| canonical_cmp(data.names.name(a), data.names.name(b)));
    signed.blob.shrink_to_fit();
    Ok(Some(signed))
}

impl Signed {
    /// The NSEC owner at or just before `name` in canonical order: its NSEC matches or
    /// covers `name` (the chain wraps, so the last name covers what sorts after it).
    pub(super) fn cover(&self, zone: &ZoneData, name: &[u8]) -> Option<NodeId> {
        let after = self
            .chain
            .partition_point(|&id| canonical_cmp(zone.names.name(id), name).is_le());
        self.chain
            .get(after.checked_sub(1).unwrap_or(self.chain.len().saturating_sub(1)))
            .copied()
    }

    /// Writes the RRSIGs of the answer of `rtype` at `node` whose records made `key`,
    /// owned by `owner`. None known (an answer control did not foresee): nothing, and
    /// a validator will fail the answer — counted by the caller.
    pub(super) fn put_rrsig(
        &self,
        b: &mut Builder<'_>,
        mut owner: NameRef<'_>,
        node: NodeId,
        rtype: u16,
        key: AnswerKey,
    ) -> Result<u16, Full> {
        let Some(&(start, end, count)) = self.sigs.get(&(node, rtype, key.finish())) else {
            self.unsigned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(0);
        };
        let records = self.blob.get(start as usize..end as usize).unwrap_or_default();
        for (_, record) in super::policy::records(records) {
            owner = b.put_name(owner)?;
            b.put(record)?;
        }
        Ok(count)
    }

    /// Writes the apex SOA's RRSIG, owned by `apex`.
    pub(super) fn put_soa_rrsig(&self, b: &mut Builder<'_>, apex: NameRef<'_>) -> Result<u16, Full> {
        self.put_rrsig(b, apex, self.apex, dtype::SOA, self.soa)
    }

    /// Writes `node`'s NSEC record and its RRSIG (owner compressed against
    /// `question`); the record count.
    pub(super) fn put_nsec(
        &self,
        zone: &ZoneData,
        b: &mut Builder<'_>,
        node: NodeId,
        question: NameRef<'_>,
    ) -> Result<u16, Full> {
        let Some(set) = zone.node(node).and_then(|n| n.rrset(dtype::NSEC)) else {
            return Ok(0);
        };
        let owner = b.put_rdata_name(zone.names.name(node), question)?;
        let mut key = AnswerKey::default();
        let mut first = true;
        let mut written = 0;
        for (_, record) in set.each_record() {
            if !first {
                b.put_name(owner)?;
            }
            first = false;
            b.put(record)?;
            key.add_record(record);
            written += 1;
        }
        Ok(written + self.put_rrsig(b, owner, node, dtype::NSEC, key)?)
    }
}

impl ZoneData {
    /// The closest encloser of a name that does not exist (RFC 4592 §3.3.1): its
    /// nearest ancestor that does.
    pub(super) fn closest_encloser(&self, name: &[u8]) -> Option<NodeId> {
        crate::wire::name::label_starts(name)
            .skip(1)
            .find_map(|start| self.names.get(name.get(start..)?))
    }
}

/// `*.` and `encloser` in one buffer: the wildcard whose absence an NXDOMAIN proves.
pub(super) fn wildcard_of(encloser: &[u8], buf: &mut [u8; MAX_NAME + 2]) -> Option<usize> {
    let len = 2 + encloser.len();
    if len > MAX_NAME {
        return None;
    }
    buf[0] = 1;
    buf[1] = b'*';
    buf.get_mut(2..len)?.copy_from_slice(encloser);
    Some(len)
}

/// The key of a plain set's answer (all its records).
pub(super) fn key_of(set: super::SetRef<'_>) -> AnswerKey {
    let mut key = AnswerKey::default();
    for (_, record) in set.each_record() {
        key.add_record(record);
    }
    key
}
