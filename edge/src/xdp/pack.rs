//! Packing a compiled [`Table`]'s entries into one generation's slot and record arrays
//! (layout and lookup rule in `qdns_abi::slots`).
//!
//! The slot table has a power-of-two number of eight-slot buckets, at most a quarter of
//! the slots in use. Each entry goes to its home bucket; one that finds it full, or its tag
//! taken there by another entry, gets no slot and marks the bucket crowded, so its
//! queries (and any other miss in that bucket) go to user space — never on to a node
//! entry that would answer NXDOMAIN for a name that exists.
use qdns_abi::{
    answer::{AnswerKey, AnswerValue, RECORDS_MAX},
    slots::{home, slot_hash, tag, Bucket, BUCKETS_MAX, BUCKET_SLOTS, CROWDED},
};

use super::table::Table;

/// One generation's slot and record arrays.
pub struct Packed {
    /// The slot table; its length is a power of two.
    pub buckets: Vec<Bucket>,
    /// The records; record 0 is the empty one no slot points at.
    pub records: Vec<AnswerValue>,
    /// Entries left without a slot (their queries go to user space).
    pub crowded: usize,
}

impl Packed {
    /// The bucket mask the program indexes the slot table with.
    #[must_use]
    pub fn mask(&self) -> u32 {
        (self.buckets.len() - 1) as u32
    }
}

/// Why a table cannot be packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    /// More records than one generation holds.
    #[error("{records} answer records; at most {} fit one generation", RECORDS_MAX - 1)]
    TooManyRecords {
        /// Records needed.
        records: usize,
    },
}

/// The slot and record arrays of `table`'s answers. Keys must be distinct (the compiler
/// leaves colliding names to user space).
pub fn pack(table: &Table) -> Result<Packed, PackError> {
    let entries = &table.answers;
    if entries.len() >= RECORDS_MAX as usize {
        return Err(PackError::TooManyRecords { records: entries.len() });
    }
    // Identical records once: a name's ANY entry is its one set's answer, so the two
    // slots share a record (a third of a plain name's records).
    let mut records = Vec::with_capacity(entries.len() + 1);
    records.push(empty_record());
    let mut dedup = RecordDedup::new(records, 0, entries.len());
    let record_of: Vec<u32> = entries.iter().map(|(_, value)| dedup.index_of(value)).collect();
    let records = dedup.records;
    // A quarter of the slots: two entries per eight-slot bucket on average, where an
    // overfull bucket (more than eight) holds about one entry in 10^5.
    let buckets = entries
        .len()
        .div_ceil(2)
        .max(1)
        .next_power_of_two()
        .min(BUCKETS_MAX as usize);
    let mask = (buckets - 1) as u32;
    let mut table = vec![Bucket::default(); buckets];
    let mut crowded = 0;
    for (i, (key, _)) in entries.iter().enumerate() {
        let hash = hash_of(key);
        // The record index fits RECORD_BITS: checked against RECORDS_MAX above.
        if !slot_in(&mut table[home(hash, mask) as usize], hash, record_of[i]) {
            crowded += 1;
        }
    }
    // An entry whose tag another one holds in its bucket needs no eviction: its queries
    // find the other record, whose name differs (for one name the tag fixes the type),
    // and pass.
    if crowded > 0 {
        tracing::debug!(
            crowded,
            buckets,
            "XDP slot table: entries without a slot go to user space"
        );
    }
    Ok(Packed {
        buckets: table,
        records,
        crowded,
    })
}

/// Records, each distinct value once, numbered from `offset` (record 0, the empty one,
/// is never matched: a value equal to it gets an index of its own).
pub(super) struct RecordDedup<'a> {
    // foldhash, not SipHash: hashing two million values of 128 octets was a third of
    // the pack.
    index: foldhash::HashMap<&'a AnswerValue, u32>,
    /// The records, the first at index `offset`.
    pub(super) records: Vec<AnswerValue>,
    offset: usize,
}

impl<'a> RecordDedup<'a> {
    /// After `records` (numbered from `offset`), room for `capacity` distinct values.
    pub(super) fn new(records: Vec<AnswerValue>, offset: usize, capacity: usize) -> RecordDedup<'a> {
        RecordDedup {
            index: foldhash::HashMap::with_capacity_and_hasher(capacity, foldhash::fast::RandomState::default()),
            records,
            offset,
        }
    }

    /// The index of `value`'s record, added when it is new.
    pub(super) fn index_of(&mut self, value: &'a AnswerValue) -> u32 {
        let records = &mut self.records;
        let offset = self.offset;
        *self.index.entry(value).or_insert_with(|| {
            records.push(*value);
            (offset + records.len() - 1) as u32
        })
    }
}

/// Puts `record` (below 2^`RECORD_BITS`) in a free slot of its home `bucket` under the
/// tag of `hash`; when the bucket is full or the tag taken there, marks the bucket
/// crowded instead and returns false.
pub(super) fn slot_in(bucket: &mut Bucket, hash: u64, record: u32) -> bool {
    let free = bucket.record.iter().position(|&r| r & !CROWDED == 0);
    let taken = bucket
        .tag
        .iter()
        .zip(&bucket.record)
        .any(|(&t, &r)| r & !CROWDED != 0 && t == tag(hash));
    match free {
        Some(slot) if !taken => {
            bucket.tag[slot] = tag(hash);
            bucket.record[slot] |= record;
            true
        }
        _ => {
            bucket.record[BUCKET_SLOTS - 1] |= CROWDED;
            false
        }
    }
}

/// The slot hash of a compiler key.
#[must_use]
pub fn hash_of(key: &AnswerKey) -> u64 {
    slot_hash(key.hash, key.qtype)
}

/// Record 0: no name, kind PASS.
fn empty_record() -> AnswerValue {
    super::table::pass(qdns_abi::answer::KIND_PASS)
}

#[cfg(test)]
mod tests {
    use qdns_abi::{
        answer::QTYPE_NODE,
        slots::{CROWDED, RECORD_BITS},
    };

    use super::*;

    fn table_of(keys: &[(u16, u64)]) -> Table {
        let mut table = Table::default();
        for (i, &(qtype, hash)) in keys.iter().enumerate() {
            let key = AnswerKey {
                generation: 7,
                qtype,
                pad: 0,
                hash,
            };
            // Distinct records (identical ones would share one).
            let value = AnswerValue {
                policy: i as u32,
                ..empty_record()
            };
            table.answers.push((key, value));
        }
        table
    }

    #[test]
    fn identical_records_are_stored_once() {
        let mut table = table_of(&[(1, 11), (255, 11), (0, 11)]);
        // The ANY entry answers as the set does: the same record.
        table.answers[1].1 = table.answers[0].1;
        let packed = pack(&table).expect("packs");
        assert_eq!(packed.records.len(), 3, "record 0, the shared one, the node's");
        let a = lookup(&packed, slot_hash(11, 1)).unwrap().unwrap();
        let any = lookup(&packed, slot_hash(11, 255)).unwrap().unwrap();
        let node = lookup(&packed, slot_hash(11, 0)).unwrap().unwrap();
        assert_eq!(a, any);
        assert_ne!(a, node);
        assert_eq!(packed.records[node as usize].policy, 2);
    }

    /// The program's lookup: `Ok(Some(record))`, `Ok(None)` for a miss, `Err(())` for
    /// a miss in a crowded bucket (user space answers).
    fn lookup(packed: &Packed, hash: u64) -> Result<Option<u32>, ()> {
        let b = &packed.buckets[home(hash, packed.mask()) as usize];
        let mut record = 0;
        for i in 0..BUCKET_SLOTS {
            if b.tag[i] == tag(hash) {
                record |= b.record[i];
            }
        }
        match record & ((1 << RECORD_BITS) - 1) {
            0 if b.record[BUCKET_SLOTS - 1] & CROWDED != 0 => Err(()),
            0 => Ok(None),
            r => Ok(Some(r)),
        }
    }

    #[test]
    fn every_entry_is_found_or_left_to_user_space_and_misses_are_not_found() {
        let keys: Vec<(u16, u64)> = (0..30_000u64)
            .map(|i| {
                (
                    if i % 3 == 0 { QTYPE_NODE } else { 1 },
                    i.wrapping_mul(0x2545_f491_4f6c_dd1d),
                )
            })
            .collect();
        let packed = pack(&table_of(&keys)).expect("packs");
        assert!(packed.buckets.len().is_power_of_two());
        assert!(packed.buckets.len() * 2 >= keys.len());
        assert_eq!(packed.records.len(), keys.len() + 1);
        assert_eq!(packed.records[0], empty_record());
        let mut passed = 0;
        for (i, &(qtype, hash)) in keys.iter().enumerate() {
            match lookup(&packed, slot_hash(hash, qtype)) {
                Ok(found) => assert_eq!(found, Some(i as u32 + 1), "entry {i}"),
                Err(()) => passed += 1,
            }
        }
        assert_eq!(passed, packed.crowded);
        // Under 0.1 % of the entries lack a slot at a quarter's load.
        assert!(packed.crowded * 1000 < keys.len(), "{} crowded", packed.crowded);
        assert!(matches!(lookup(&packed, slot_hash(12_345, 28)), Ok(None) | Err(())));
    }

    /// The name hash whose slot hash for type 0 is `slot` (the mix undone).
    fn unmix(slot: u64) -> u64 {
        const C: u64 = 0xd6e8_feb8_6659_fd93;
        // The inverse of C modulo 2^64 by Newton's iteration.
        let mut inverse = C;
        for _ in 0..6 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(C.wrapping_mul(inverse)));
        }
        let mut x = slot;
        x ^= x >> 32;
        x = x.wrapping_mul(inverse);
        x ^ (x >> 32)
    }

    #[test]
    fn a_full_home_bucket_sends_its_misses_to_user_space() {
        // Ten entries with one home bucket and distinct tags: eight get slots, two do
        // not, and a miss there is not a plain miss.
        let keys: Vec<(u16, u64)> = (1..=10u64).map(|i| (QTYPE_NODE, unmix(i))).collect();
        let packed = pack(&table_of(&keys)).expect("packs");
        assert_eq!(home(1, packed.mask()), 0);
        assert_eq!(packed.crowded, 2);
        for (i, &(qtype, hash)) in keys.iter().enumerate().take(8) {
            assert_eq!(lookup(&packed, slot_hash(hash, qtype)), Ok(Some(i as u32 + 1)));
        }
        assert_eq!(lookup(&packed, slot_hash(keys[8].1, QTYPE_NODE)), Err(()));
        assert_eq!(lookup(&packed, 99), Err(()));
    }

    #[test]
    fn a_taken_tag_finds_the_other_record() {
        // Same tag, same home, different names: the second gets no slot and its query
        // reaches the first record, whose name the program finds differs.
        let keys = [(QTYPE_NODE, unmix(5)), (QTYPE_NODE, unmix(5 | 1 << 40))];
        assert_eq!(slot_hash(keys[1].1, QTYPE_NODE), 5 | 1 << 40);
        let packed = pack(&table_of(&keys)).expect("packs");
        assert_eq!(packed.mask(), 0);
        assert_eq!(packed.crowded, 1);
        assert_eq!(lookup(&packed, 5 | 1 << 40), Ok(Some(1)));
    }
}
