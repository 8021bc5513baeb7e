//! The record sets of a zone being read: kept in the order they are defined, found by
//! (owner, type) through a hash index of positions whose key is the set's own owner —
//! so no owner is copied into a key.
//!
//! Why not `BTreeMap<(Vec<u8>, u16), (RecordSet, Origin)>`, as before: at 1,000,000
//! sets its half-full nodes and the owner copy in every key cost ~300 octets a set, and
//! the kernel zeroing those fresh pages was the largest part of an edge's start-up
//! (docs/BENCHMARKS.md). Sorted order, which the snapshot and validation need, is made
//! once at the end ([`SetMap::sorted`]). hashbrown's `HashTable` is the index because it
//! compares entries against data it does not own.
use std::{hash::BuildHasher, path::Path, sync::Arc};

use hashbrown::HashTable;

use super::Origin;
use crate::RecordSet;

/// The zone's record sets with where each came from.
pub(crate) struct SetMap {
    /// The sets, in the order they were added.
    entries: Vec<RecordSet>,
    /// Where each of `entries` came from (apart, so the sets are handed over at the end
    /// in their own array, not copied out of pairs).
    origins: Vec<Origin>,
    /// Positions in `entries`, hashed by (owner, type). Seeded per process.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// The files the sets came from ([`Origin::file`] is an index here): the zone file
    /// first, then any master files it includes.
    files: Vec<Arc<Path>>,
}

/// The index's hash of an (owner, type), taken once where a caller both looks a set up
/// and adds it (the master-file reader does for every record).
#[derive(Clone, Copy)]
pub(crate) struct KeyHash(u64);

impl SetMap {
    /// No sets yet, of the zone file at `zone_file`.
    pub(crate) fn new(zone_file: Arc<Path>) -> SetMap {
        SetMap {
            entries: Vec::new(),
            origins: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            files: vec![zone_file],
        }
    }

    /// The [`Origin::file`] of `path` (added when new; a zone has a few files).
    pub(crate) fn file(&mut self, path: &Arc<Path>) -> u32 {
        let known = self
            .files
            .iter()
            .rposition(|file| Arc::ptr_eq(file, path) || **file == **path);
        let at = known.unwrap_or_else(|| {
            self.files.push(Arc::clone(path));
            self.files.len() - 1
        });
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    /// The path of file `file` (an [`Origin::file`]).
    pub(crate) fn path(&self, file: u32) -> &Path {
        self.files
            .get(file as usize)
            .or_else(|| self.files.first())
            .map_or(Path::new(""), |path| path)
    }

    fn hash(hasher: &foldhash::fast::RandomState, owner: &[u8], rtype: u16) -> u64 {
        hasher.hash_one((owner, rtype))
    }

    /// The hash of (`owner`, `rtype`) for [`SetMap::get_mut_hashed`] and
    /// [`SetMap::add_hashed`].
    pub(crate) fn key_hash(&self, owner: &[u8], rtype: u16) -> KeyHash {
        KeyHash(Self::hash(&self.hasher, owner, rtype))
    }

    fn position(&self, owner: &[u8], rtype: u16) -> Option<usize> {
        self.position_hashed(self.key_hash(owner, rtype), owner, rtype)
    }

    fn position_hashed(&self, KeyHash(hash): KeyHash, owner: &[u8], rtype: u16) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |&i| {
                entries
                    .get(i as usize)
                    .is_some_and(|set| set.rtype == rtype && set.name == owner)
            })
            .map(|&i| i as usize)
    }

    /// The set of `rtype` at `owner`, with its origin.
    pub(crate) fn get(&self, owner: &[u8], rtype: u16) -> Option<(&RecordSet, Origin)> {
        self.at(u32::try_from(self.position(owner, rtype)?).ok()?)
    }

    /// The set of `rtype` at `owner`, to change; `key` is their [`SetMap::key_hash`].
    pub(crate) fn get_mut_hashed(&mut self, key: KeyHash, owner: &[u8], rtype: u16) -> Option<&mut RecordSet> {
        let at = self.position_hashed(key, owner, rtype)?;
        self.entries.get_mut(at)
    }

    /// Whether `owner` has a set of `rtype`.
    pub(crate) fn contains(&self, owner: &[u8], rtype: u16) -> bool {
        self.position(owner, rtype).is_some()
    }

    /// Adds a set whose (owner, type) is not here yet (the caller looked); `false` past
    /// 2³² sets.
    pub(crate) fn add(&mut self, set: RecordSet, origin: Origin) -> bool {
        let key = self.key_hash(&set.name, set.rtype);
        self.add_hashed(key, set, origin)
    }

    /// [`SetMap::add`] with the set's [`SetMap::key_hash`] already taken.
    pub(crate) fn add_hashed(&mut self, KeyHash(hash): KeyHash, set: RecordSet, origin: Origin) -> bool {
        let Ok(at) = u32::try_from(self.entries.len()) else {
            return false;
        };
        self.entries.push(set);
        self.origins.push(origin);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(hash, at, |&i| {
            entries
                .get(i as usize)
                .map_or(0, |set| Self::hash(hasher, &set.name, set.rtype))
        });
        true
    }

    /// Puts `set` in place of the one of its (owner, type); `false` when there is none.
    pub(crate) fn replace(&mut self, set: RecordSet, origin: Origin) -> bool {
        let Some(at) = self.position(&set.name, set.rtype) else {
            return false;
        };
        if let (Some(entry), Some(from)) = (self.entries.get_mut(at), self.origins.get_mut(at)) {
            (*entry, *from) = (set, origin);
        }
        true
    }

    /// Room for `more` sets.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.entries.reserve(more);
        self.origins.reserve(more);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.reserve(more, |&i| {
            entries
                .get(i as usize)
                .map_or(0, |set| Self::hash(hasher, &set.name, set.rtype))
        });
    }

    /// Every set with its origin, in the order they were defined.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&RecordSet, Origin)> {
        self.entries.iter().zip(self.origins.iter().copied())
    }

    /// Positions of the sets sorted by (owner octets, type): each owner's sets together.
    pub(crate) fn sorted(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.entries.len() as u32).collect();
        let key = |i: &u32| {
            self.entries
                .get(*i as usize)
                .map(|set| (set.name.as_slice(), set.rtype))
        };
        order.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        order
    }

    /// The set at position `at` (of [`SetMap::sorted`]).
    pub(crate) fn at(&self, at: u32) -> Option<(&RecordSet, Origin)> {
        Some((self.entries.get(at as usize)?, *self.origins.get(at as usize)?))
    }

    /// The sets in `order` (a permutation from [`SetMap::sorted`]), origins dropped.
    ///
    /// In place: the sets are put in order by walking each cycle of the permutation
    /// once (swaps). Collecting them into a new array beside the old one cost 64 MB at
    /// a million sets, the loader's last peak.
    pub(crate) fn into_sets(self, mut order: Vec<u32>) -> Vec<RecordSet> {
        const DONE: u32 = u32::MAX;
        drop(self.index);
        drop(self.origins);
        let mut entries = self.entries;
        for start in 0..order.len() {
            // Position k takes the entry now at order[k]; the entry it holds moves to
            // where that one was, which is the next position of the cycle.
            let mut k = start;
            while let Some(from) = order.get_mut(k).map(|from| std::mem::replace(from, DONE)) {
                let from = from as usize;
                if from == DONE as usize || from == start || from >= entries.len() {
                    break;
                }
                entries.swap(k, from);
                k = from;
            }
        }
        entries.truncate(order.len());
        entries
    }
}

#[cfg(test)]
mod tests {
    use std::{path::Path, sync::Arc};

    use super::*;

    fn set(owner: &[u8], rtype: u16) -> RecordSet {
        RecordSet {
            name: owner.to_vec(),
            rtype,
            ttl: 60,
            rdata: vec![vec![1]],
            policy: None,
        }
    }

    fn origin(line: usize) -> Origin {
        Origin::new(0, Some(line), crate::load::OriginKey::None)
    }

    #[test]
    fn sets_are_found_by_owner_and_type_and_sorted_at_the_end() {
        let mut sets = SetMap::new(Arc::from(Path::new("z")));
        sets.reserve(3);
        assert!(sets.add(set(b"\x01b\x00", 1), origin(1)));
        assert!(sets.add(set(b"\x01a\x00", 28), origin(2)));
        assert!(sets.add(set(b"\x01a\x00", 1), origin(3)));
        assert_eq!(sets.get(b"\x01a\x00", 28).and_then(|(_, o)| o.line()), Some(2));
        assert!(sets.contains(b"\x01b\x00", 1));
        assert!(!sets.contains(b"\x01b\x00", 28));
        let key = sets.key_hash(b"\x01b\x00", 1);
        if let Some(s) = sets.get_mut_hashed(key, b"\x01b\x00", 1) {
            s.ttl = 5;
        }
        let order = sets.sorted();
        let keys: Vec<(Vec<u8>, u16, u32)> = sets
            .into_sets(order)
            .into_iter()
            .map(|s| (s.name, s.rtype, s.ttl))
            .collect();
        assert_eq!(
            keys,
            vec![
                (b"\x01a\x00".to_vec(), 1, 60),
                (b"\x01a\x00".to_vec(), 28, 60),
                (b"\x01b\x00".to_vec(), 1, 5)
            ]
        );
    }

    proptest::proptest! {
        /// Sets added in any order come out sorted by (owner, type), each once: the
        /// in-place permutation walks every cycle.
        #[test]
        fn any_order_of_adding_comes_out_sorted(keys in proptest::collection::hash_set((0u8..40, 1u16..4), 0..60)) {
            let mut sets = SetMap::new(Arc::from(Path::new("z")));
            for (i, &(label, rtype)) in keys.iter().enumerate() {
                proptest::prop_assert!(sets.add(set(&[1, label, 0], rtype), origin(i)));
            }
            let order = sets.sorted();
            let out: Vec<(Vec<u8>, u16)> = sets.into_sets(order).into_iter().map(|s| (s.name, s.rtype)).collect();
            let mut want: Vec<(Vec<u8>, u16)> = keys.iter().map(|&(label, rtype)| (vec![1, label, 0], rtype)).collect();
            want.sort();
            proptest::prop_assert_eq!(out, want);
        }
    }
}
