//! Snapshot deltas: a new snapshot version as changes to one an edge serves, per zone
//! and inside a zone per record set and per signature, so one edited record in a
//! million-record zone ships kilobytes rather than the zone.
//!
//! A delta names the version it applies to (`base`). Each zone of the new version is
//! kept from the base as it is, sent whole, or patched: its record sets (and
//! signatures) written as runs copied from the base's, in order, and the sets that are
//! new. A patched zone carries the digest of the zone it makes, so an edge that built
//! something else (it never should) notices and takes a full snapshot instead of
//! serving it. The digest is SHA-256 over the zone's link encoding, truncated to 64
//! bits: the link is authenticated, so it guards against mistakes, not forgery.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use qdns_zone::{dnssec::Signature, RecordSet, Snapshot, Zone};

/// A new snapshot version as changes to `base`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDelta {
    /// The version it applies to: an edge serving another one cannot use it.
    pub base: u64,
    /// The version it makes.
    pub version: u64,
    /// Health deltas already folded into `bitmap` (the next one is `seq + 1`).
    pub seq: u64,
    /// The new version's health bitmap, whole (a bit a slot: small beside any zone).
    pub bitmap: Vec<u64>,
    /// The new version's [`Snapshot::intent_revision`].
    pub intent_revision: u64,
    /// The new version's zones, in its order.
    pub zones: Vec<ZoneChange>,
}

/// One zone of the new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZoneChange {
    /// The base's zone of this origin, as it is.
    Keep {
        /// Its apex (wire).
        origin: Vec<u8>,
    },
    /// A zone sent whole (new, or changed too much to patch).
    Whole(Box<Zone>),
    /// The base's zone of the patch's origin, changed in places.
    Patch(Box<ZonePatch>),
}

/// A zone as changes to the base's zone of the same origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZonePatch {
    /// The zone but for its record sets, its signatures and (when `same_geo`) its geo
    /// table, which are empty here.
    pub head: Zone,
    /// The geo table is the base's (`head.geo` is then empty).
    pub same_geo: bool,
    /// The record sets, in order.
    pub rrsets: Vec<Run<RecordSet>>,
    /// The signatures, in order (the base's when the base zone has any).
    pub sigs: Vec<Run<Signature>>,
    /// [`zone_digest`] of the zone the patch makes.
    pub digest: u64,
}

/// A stretch of a sequence: elements copied from the base's, or new ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Run<T> {
    /// The base's elements `from .. from + len`.
    Copy {
        /// First index in the base.
        from: u32,
        /// How many.
        len: u32,
    },
    /// New elements.
    Insert(Vec<T>),
}

/// Why a delta could not be applied (the edge then asks for a full snapshot).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeltaError {
    /// The delta is for another version than the one served.
    #[error("delta for snapshot {wanted}, serving {have}")]
    WrongBase {
        /// The delta's base.
        wanted: u64,
        /// The version served.
        have: u64,
    },
    /// A kept or patched zone the base does not have (or has been used already).
    #[error("delta names zone {0} the base does not have")]
    MissingZone(String),
    /// A copy run reaching outside the base's sequence, or taking an element twice.
    #[error("delta copies elements {from}..{end} of zone {zone}'s {what}, which it does not have")]
    BadRun {
        /// The zone.
        zone: String,
        /// `record sets` or `signatures`.
        what: &'static str,
        /// First index.
        from: u64,
        /// End index.
        end: u64,
    },
    /// The patched zone is not the one control has.
    #[error("patched zone {0} does not match control's digest")]
    Digest(String),
}

/// The digest of a zone as the link encodes it (see the module's documentation).
#[must_use]
pub fn zone_digest(zone: &Zone) -> u64 {
    // Streamed through a small buffer into the hash: no copy of the zone's encoding.
    // A zone always encodes (it is what the link sends); if not, 0, which no patch
    // matches, makes the edge take the zone whole.
    postcard::serialize_with_flavor::<Zone, Hashing, u64>(zone, Hashing::default()).unwrap_or_default()
}

/// The digest of every zone of `snapshot`, in order.
#[must_use]
pub fn zone_digests(snapshot: &Snapshot) -> Vec<u64> {
    snapshot.zones.iter().map(zone_digest).collect()
}

/// A postcard output that hashes what is written.
#[derive(Default)]
struct Hashing {
    hasher: sha2::Sha256,
    buffer: Vec<u8>,
}

impl postcard::ser_flavors::Flavor for Hashing {
    type Output = u64;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.buffer.push(data);
        if self.buffer.len() >= 8192 {
            self.hasher.update(&self.buffer);
            self.buffer.clear();
        }
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if self.buffer.len() + data.len() > 8192 {
            self.hasher.update(&self.buffer);
            self.buffer.clear();
            self.hasher.update(data);
        } else {
            self.buffer.extend_from_slice(data);
        }
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<u64> {
        self.hasher.update(&self.buffer);
        let out = self.hasher.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        Ok(u64::from_be_bytes(first))
    }
}

/// The delta from `old` to `new` (whose zone digests are `digests`, in order), at health
/// delta `seq`. Zones unchanged are kept; changed ones patched, or sent whole when new
/// or when more than half of their sets changed.
#[must_use]
pub fn between(old: &Snapshot, new: &Snapshot, digests: &[u64], seq: u64) -> SnapshotDelta {
    let by_origin: HashMap<&[u8], &Zone> = old.zones.iter().map(|z| (z.origin.as_slice(), z)).collect();
    let zones = new
        .zones
        .iter()
        .enumerate()
        .map(|(i, zone)| match by_origin.get(zone.origin.as_slice()) {
            Some(before) => change(before, zone, digests.get(i).copied().unwrap_or(0)),
            None => ZoneChange::Whole(Box::new(zone.clone())),
        })
        .collect();
    SnapshotDelta {
        base: old.version,
        version: new.version,
        seq,
        bitmap: new.bitmap.clone(),
        intent_revision: new.intent_revision,
        zones,
    }
}

/// The delta that brings an edge serving `base` (version, and each zone's origin and
/// digest, as its hello says) to `current`: zones whose digest matches are kept, the
/// others sent whole — or `None` when those hold more than a quarter of the record sets
/// (the whole snapshot, encoded once for every edge, is then as good). Counted before
/// anything is copied.
#[must_use]
pub fn resume(
    base: u64,
    have: &[(Vec<u8>, u64)],
    current: &Snapshot,
    digests: &[u64],
    seq: u64,
) -> Option<SnapshotDelta> {
    let have: HashMap<&[u8], u64> = have.iter().map(|(origin, d)| (origin.as_slice(), *d)).collect();
    let kept: Vec<bool> = current
        .zones
        .iter()
        .enumerate()
        .map(|(i, zone)| {
            have.get(zone.origin.as_slice())
                .is_some_and(|d| digests.get(i) == Some(d))
        })
        .collect();
    let sets = |keep: bool| -> usize {
        current
            .zones
            .iter()
            .zip(&kept)
            .filter(|(_, k)| keep || !**k)
            .map(|(z, _)| z.rrsets.len())
            .sum()
    };
    if sets(false) * 4 > sets(true) {
        return None;
    }
    let zones = current
        .zones
        .iter()
        .zip(&kept)
        .map(|(zone, kept)| match kept {
            true => ZoneChange::Keep {
                origin: zone.origin.clone(),
            },
            false => ZoneChange::Whole(Box::new(zone.clone())),
        })
        .collect();
    Some(SnapshotDelta {
        base,
        version: current.version,
        seq,
        bitmap: current.bitmap.clone(),
        intent_revision: current.intent_revision,
        zones,
    })
}

/// How `before` became `after` (whose digest is `digest`).
fn change(before: &Zone, after: &Zone, digest: u64) -> ZoneChange {
    let rrsets = runs(&before.rrsets, &after.rrsets, |s| (s.name.as_slice(), s.rtype));
    let sigs = runs(sigs_of(before), sigs_of(after), |s| (s.name.as_slice(), s.rtype, s.key));
    let head = head_of(after);
    let same_geo = before.geo == after.geo;
    if head == head_of(before)
        && same_geo
        && unchanged(&rrsets, before.rrsets.len())
        && unchanged(&sigs, sigs_of(before).len())
    {
        return ZoneChange::Keep {
            origin: after.origin.clone(),
        };
    }
    if inserted(&rrsets) * 2 > after.rrsets.len().max(1) {
        return ZoneChange::Whole(Box::new(after.clone()));
    }
    let mut head = head;
    if !same_geo {
        head.geo.clone_from(&after.geo);
    }
    ZoneChange::Patch(Box::new(ZonePatch {
        head,
        same_geo,
        rrsets: materialize(rrsets, &after.rrsets),
        sigs: materialize(sigs, sigs_of(after)),
        digest,
    }))
}

/// `plan` (inserts naming positions in `new`) with the inserted elements copied in:
/// done only once the zone is known to go as a patch.
fn materialize<T: Clone>(plan: Vec<Run<usize>>, new: &[T]) -> Vec<Run<T>> {
    plan.into_iter()
        .map(|run| match run {
            Run::Copy { from, len } => Run::Copy { from, len },
            Run::Insert(at) => Run::Insert(at.into_iter().filter_map(|i| new.get(i).cloned()).collect()),
        })
        .collect()
}

/// `zone` without its record sets, its signatures and its geo table.
fn head_of(zone: &Zone) -> Zone {
    Zone {
        origin: zone.origin.clone(),
        source: zone.source.clone(),
        serial: zone.serial,
        negative_ttl: zone.negative_ttl,
        rrsets: Vec::new(),
        slot_base: zone.slot_base,
        slots: zone.slots.clone(),
        dnssec: zone.dnssec.as_ref().map(|d| {
            Box::new(qdns_zone::dnssec::Signatures {
                algorithm: d.algorithm,
                inception: d.inception,
                expiration: d.expiration,
                sigs: Vec::new(),
            })
        }),
        geo: None,
        transfer: None,
    }
}

/// The zone's signatures (none when unsigned).
fn sigs_of(zone: &Zone) -> &[Signature] {
    zone.dnssec.as_ref().map_or(&[], |d| d.sigs.as_slice())
}

/// True when `runs` copy a base of `len` elements as it is.
fn unchanged<T>(runs: &[Run<T>], len: usize) -> bool {
    match runs {
        [] => len == 0,
        [Run::Copy { from: 0, len: n }] => *n as usize == len,
        _ => false,
    }
}

/// Elements the runs send rather than copy.
fn inserted<T>(runs: &[Run<T>]) -> usize {
    runs.iter()
        .map(|run| match run {
            Run::Insert(items) => items.len(),
            Run::Copy { .. } => 0,
        })
        .sum()
}

/// `new` as runs over `old`: the common start and end copied as they are, and in
/// between each element copied from where `old` has it (found by `key`) when it is
/// the same there, else sent (named by its position in `new`). Each element of `old` is
/// copied at most once.
fn runs<'a, T, K>(old: &'a [T], new: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<Run<usize>>
where
    T: PartialEq,
    K: std::hash::Hash + Eq,
{
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_end, new_end) = (old.len() - suffix, new.len() - suffix);
    let mut out = Runs::default();
    out.copy(0, prefix);
    let index: HashMap<K, usize> = (prefix..old_end).map(|i| (key(&old[i]), i)).collect();
    let mut used = vec![false; old_end - prefix];
    for (position, item) in new.iter().enumerate().take(new_end).skip(prefix) {
        match index.get(&key(item)) {
            Some(&at) if !used[at - prefix] && old[at] == *item => {
                used[at - prefix] = true;
                out.copy(at, 1);
            }
            _ => out.insert(position),
        }
    }
    out.copy(old_end, suffix);
    out.runs
}

/// Runs being built: adjacent copies and inserts merged.
struct Runs<T> {
    runs: Vec<Run<T>>,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Runs { runs: Vec::new() }
    }
}

impl<T> Runs<T> {
    fn copy(&mut self, from: usize, len: usize) {
        if len == 0 {
            return;
        }
        let (from, len) = (from as u32, len as u32);
        if let Some(Run::Copy { from: f, len: l }) = self.runs.last_mut() {
            if *f + *l == from {
                *l += len;
                return;
            }
        }
        self.runs.push(Run::Copy { from, len });
    }

    fn insert(&mut self, item: T) {
        if let Some(Run::Insert(items)) = self.runs.last_mut() {
            items.push(item);
            return;
        }
        self.runs.push(Run::Insert(vec![item]));
    }
}

/// Applies `delta` to `base` (the snapshot the edge serves): the new snapshot, every
/// patched zone checked against its digest.
///
/// # Errors
/// When the delta is for another version, names a zone the base lacks, copies what
/// the base does not have, or makes a zone other than control's.
pub fn apply(base: Snapshot, delta: SnapshotDelta) -> Result<Snapshot, DeltaError> {
    if base.version != delta.base {
        return Err(DeltaError::WrongBase {
            wanted: delta.base,
            have: base.version,
        });
    }
    let mut old: HashMap<Vec<u8>, Zone> = base.zones.into_iter().map(|z| (z.origin.clone(), z)).collect();
    let mut take = |origin: &[u8]| {
        old.remove(origin)
            .ok_or_else(|| DeltaError::MissingZone(qdns_zone::name::to_text(origin)))
    };
    let mut zones = Vec::with_capacity(delta.zones.len());
    for change in delta.zones {
        zones.push(match change {
            ZoneChange::Keep { origin } => take(&origin)?,
            ZoneChange::Whole(zone) => *zone,
            ZoneChange::Patch(patch) => {
                let before = take(&patch.head.origin)?;
                patched(before, *patch)?
            }
        });
    }
    Ok(Snapshot {
        version: delta.version,
        zones,
        bitmap: delta.bitmap,
        intent_revision: delta.intent_revision,
    })
}

/// The owner names whose record sets `delta` changes in `base` — every set a patch
/// inserts and every base set no run copies — each once, with the origin of its zone;
/// `None` when it does more than that to some zone: sends one whole, changes its
/// signatures, DNSSEC or geo table, or adds or drops a zone. (An edge patches its XDP
/// tables from these.)
#[must_use]
pub fn changed_names(base: &Snapshot, delta: &SnapshotDelta) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if delta.base != base.version || delta.zones.len() != base.zones.len() {
        return None;
    }
    let by_origin: HashMap<&[u8], &Zone> = base.zones.iter().map(|z| (&z.origin[..], z)).collect();
    let mut names: std::collections::HashSet<(&[u8], &[u8])> = std::collections::HashSet::new();
    for change in &delta.zones {
        match change {
            ZoneChange::Keep { origin } => {
                by_origin.get(&origin[..])?;
            }
            ZoneChange::Whole(_) => return None,
            ZoneChange::Patch(patch) => {
                let before = by_origin.get(&patch.head.origin[..])?;
                if before.dnssec.is_some() || patch.head.dnssec.is_some() || !patch.sigs.is_empty() || !patch.same_geo {
                    return None;
                }
                // The negative SOA's TTL: with the SOA set it is the apex's change.
                let origin = &before.origin[..];
                if patch.head.negative_ttl != before.negative_ttl {
                    names.insert((origin, origin));
                }
                let mut copied = vec![false; before.rrsets.len()];
                for run in &patch.rrsets {
                    match run {
                        Run::Insert(sets) => names.extend(sets.iter().map(|set| (origin, &set.name[..]))),
                        Run::Copy { from, len } => {
                            let start = *from as usize;
                            let end = start.checked_add(*len as usize)?;
                            copied.get_mut(start..end)?.fill(true);
                        }
                    }
                }
                names.extend(
                    before
                        .rrsets
                        .iter()
                        .zip(&copied)
                        .filter(|(_, &kept)| !kept)
                        .map(|(set, _)| (origin, &set.name[..])),
                );
            }
        }
    }
    Some(
        names
            .into_iter()
            .map(|(origin, name)| (origin.to_vec(), name.to_vec()))
            .collect(),
    )
}

/// `before` with `patch` applied, checked against the patch's digest.
fn patched(before: Zone, patch: ZonePatch) -> Result<Zone, DeltaError> {
    let name = qdns_zone::name::to_text(&patch.head.origin);
    let mut zone = patch.head;
    zone.rrsets = replay(before.rrsets, patch.rrsets).map_err(|(from, end)| DeltaError::BadRun {
        zone: name.clone(),
        what: "record sets",
        from,
        end,
    })?;
    if let Some(signatures) = zone.dnssec.as_mut() {
        let old = before.dnssec.map(|d| d.sigs).unwrap_or_default();
        signatures.sigs = replay(old, patch.sigs).map_err(|(from, end)| DeltaError::BadRun {
            zone: name.clone(),
            what: "signatures",
            from,
            end,
        })?;
    }
    if patch.same_geo {
        zone.geo = before.geo;
    }
    if zone_digest(&zone) != patch.digest {
        return Err(DeltaError::Digest(name));
    }
    Ok(zone)
}

/// `runs` over `base`, each base element moved at most once; the bad run's range when
/// one reaches past the base or takes an element again.
fn replay<T>(base: Vec<T>, runs: Vec<Run<T>>) -> Result<Vec<T>, (u64, u64)> {
    let mut base: Vec<Option<T>> = base.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(base.len());
    for run in runs {
        match run {
            Run::Insert(items) => out.extend(items),
            Run::Copy { from, len } => {
                let (start, end) = (u64::from(from), u64::from(from) + u64::from(len));
                let taken = base
                    .get_mut(from as usize..end.min(usize::MAX as u64) as usize)
                    .ok_or((start, end))?;
                for slot in taken {
                    out.push(slot.take().ok_or((start, end))?);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
