//! The name table of a compiled zone: every owner name stored once, back to back, and
//! a hash index that holds node ids only — the key of an entry is the name in the
//! table, so no name is copied into the index.
//!
//! Why not `HashMap<Box<[u8]>, NodeId>`: at 1,000,000 names that map kept every owner
//! twice (the node's copy and the key's), one heap block per key, and 24-octet slots;
//! here a name costs its own octets, a 4-octet start and a ~5-octet index slot
//! (docs/BENCHMARKS.md, "Memory with 1,000,000 records"). hashbrown's `HashTable` is
//! the index because it lets the table compare entries against bytes it does not own.
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::NodeId;

/// Owner names (lowercase wire form) by node id, and the index that finds them.
pub(super) struct Names {
    /// Every name, back to back, in id order.
    bytes: Vec<u8>,
    /// Where each name ends in `bytes` (name `i` spans `ends[i - 1]..ends[i]`).
    ends: Vec<u32>,
    /// Node ids, hashed by their name. Seeded per process (foldhash): a name crafted
    /// to collide cannot be aimed at it.
    index: HashTable<NodeId>,
    hasher: foldhash::fast::RandomState,
}

impl Names {
    /// An empty table with room for `names` names of `octets` octets in all.
    pub(super) fn with_capacity(names: usize, octets: usize) -> Names {
        Names {
            bytes: Vec::with_capacity(octets),
            ends: Vec::with_capacity(names),
            index: HashTable::with_capacity(names),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The id of `name`, if the table holds it.
    #[inline]
    pub(super) fn get(&self, name: &[u8]) -> Option<NodeId> {
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |&id| name_of(&self.bytes, &self.ends, id) == name)
            .copied()
    }

    /// The id of `name`, added if new; `None` when the table is full (4 GiB of names or
    /// 2³² names: far past any zone the loader accepts).
    pub(super) fn intern(&mut self, name: &[u8]) -> Option<NodeId> {
        let hash = self.hasher.hash_one(name);
        let Names {
            bytes,
            ends,
            index,
            hasher,
        } = self;
        if let Some(&id) = index.find(hash, |&id| name_of(bytes, ends, id) == name) {
            return Some(id);
        }
        let id = NodeId::try_from(ends.len()).ok().filter(|&id| id != NodeId::MAX)?;
        let end = u32::try_from(bytes.len() + name.len()).ok()?;
        bytes.extend_from_slice(name);
        ends.push(end);
        index.insert_unique(hash, id, |&id| hasher.hash_one(name_of(bytes, ends, id)));
        Some(id)
    }

    /// The name with id `id` (empty for an unknown id).
    #[inline]
    pub(super) fn name(&self, id: NodeId) -> &[u8] {
        name_of(&self.bytes, &self.ends, id)
    }

    /// Number of names.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Gives back the room reserved while the table was built.
    pub(super) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
        let hasher = &self.hasher;
        let (bytes, ends) = (&self.bytes, &self.ends);
        self.index
            .shrink_to_fit(|&id| hasher.hash_one(name_of(bytes, ends, id)));
    }
}

/// Name `id` of a table's parts.
#[inline]
fn name_of<'a>(bytes: &'a [u8], ends: &[u32], id: NodeId) -> &'a [u8] {
    let i = id as usize;
    let start = match i.checked_sub(1) {
        Some(before) => ends.get(before).copied().unwrap_or(0),
        None => 0,
    };
    let end = ends.get(i).copied().unwrap_or(start);
    bytes.get(start as usize..end as usize).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stored_once_and_found_by_their_bytes() {
        let mut names = Names::with_capacity(4, 64);
        let apex = b"\x07example\x03com\x00";
        let www = b"\x03www\x07example\x03com\x00";
        assert_eq!(names.intern(apex), Some(0));
        assert_eq!(names.intern(www), Some(1));
        assert_eq!(names.intern(apex), Some(0), "interned twice");
        assert_eq!(names.len(), 2);
        assert_eq!(names.get(www), Some(1));
        assert_eq!(names.get(b"\x03ftp\x07example\x03com\x00"), None);
        assert_eq!(names.name(0), apex);
        assert_eq!(names.name(1), www);
        assert_eq!(names.name(7), b"", "unknown id");
        names.shrink_to_fit();
        assert_eq!(names.get(apex), Some(0));
        assert_eq!(names.bytes.len(), apex.len() + www.len());
    }

    #[test]
    fn many_names_survive_growth() {
        let mut names = Names::with_capacity(0, 0);
        let wire = |i: u32| {
            let label = format!("h{i}");
            let mut w = vec![label.len() as u8];
            w.extend(label.as_bytes());
            w.extend(b"\x04test\x00");
            w
        };
        for i in 0..10_000 {
            assert_eq!(names.intern(&wire(i)), Some(i));
        }
        for i in (0..10_000).rev() {
            assert_eq!(names.get(&wire(i)), Some(i));
            assert_eq!(names.name(i), wire(i));
        }
    }
}
