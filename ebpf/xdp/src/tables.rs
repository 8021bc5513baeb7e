//! The active generation's tables and the lookups into them: the slot table's bucket
//! (one cache line, eight tags compared without a branch), then the record and its name
//! (layouts in `qdns_abi::slots` and `qdns_abi::answer`).
use qdns_abi::{
    answer::{AnswerKey, AnswerValue, LargeTail, MediumTail, PolicyValue, SmallTail},
    name::{FRONT_WORDS, NAME_WORDS},
    slots::{home, slot_hash, tag, BUCKET_SLOTS, CROWDED, RECORD_BITS},
    Counter,
};

use crate::maps::{Gaps, Pieces, Records, Slots, GAPS, LARGE, LONG_NAMES, MEDIUM, PIECES, POLICIES, SMALL};

/// The active generation's tables, found once per packet.
pub struct Tables<'a> {
    /// Its bank in the map-of-maps.
    pub bank: u32,
    /// Bucket mask of the slot table.
    pub mask: u32,
    /// The slot table.
    pub slots: &'a Slots,
    /// The records.
    pub records: &'a Records,
    /// This CPU's scratch word for [`Tables::through`].
    pub word: *mut u64,
}

impl Tables<'_> {
    /// `value`, written to and read back from map memory: the verifier sees an unknown
    /// value in one state, whatever branches produced it.
    #[inline(always)]
    pub fn through(&self, value: u64) -> u64 {
        // SAFETY: `word` points at this CPU's scratch element (see `crate::answer::answer`), used by
        // this program run only.
        unsafe {
            core::ptr::write_volatile(self.word, value);
            core::ptr::read_volatile(self.word)
        }
    }

    /// Policy set `id` of this generation.
    #[inline(always)]
    pub fn policy_set(&self, id: u32) -> Option<&'static PolicyValue> {
        POLICIES.get(self.bank).and_then(|policies| policies.get(id))
    }

    /// Large tail `id` of this generation.
    #[inline(always)]
    pub fn large_tail(&self, id: u32) -> Option<&'static LargeTail> {
        LARGE.get(self.bank).and_then(|large| large.get(id))
    }

    /// This generation's gaps (`qdns_abi::denial`).
    #[inline(always)]
    pub fn gaps(&self) -> Option<&'static Gaps> {
        GAPS.get(self.bank)
    }

    /// This generation's pieces.
    #[inline(always)]
    pub fn pieces(&self) -> Option<&'static Pieces> {
        PIECES.get(self.bank)
    }

    /// Small tail `id` of this generation.
    #[inline(always)]
    pub fn small_tail(&self, id: u32) -> Option<&'static SmallTail> {
        SMALL.get(self.bank).and_then(|small| small.get(id))
    }

    /// Medium tail `id` of this generation.
    #[inline(always)]
    pub fn medium_tail(&self, id: u32) -> Option<&'static MediumTail> {
        MEDIUM.get(self.bank).and_then(|medium| medium.get(id))
    }
}

/// The entry of `key` (whose hash is `name`'s), if its name is `name`: the slot with
/// the key's tag in its home bucket (see `qdns_abi::slots`), then its record. A record
/// under the same tag for another name means the query only shares the hash, and a
/// miss in a crowded bucket may be an entry without a slot: user space answers both.
#[inline(always)]
pub fn find<'a, const W: usize>(
    t: &Tables<'a>,
    key: &AnswerKey,
    name: &[u64; W],
) -> Result<Option<&'a AnswerValue>, Counter> {
    match slot(t, key)? {
        0 => Ok(None),
        record => named(t, record, name).map(Some),
    }
}

/// The record index in the slot of `key` (0 for none), or why the miss cannot be
/// trusted (a crowded bucket).
#[inline(always)]
pub fn slot(t: &Tables<'_>, key: &AnswerKey) -> Result<u32, Counter> {
    let hash = slot_hash(key.hash, key.qtype);
    let Some(b) = t.slots.get(home(hash, t.mask)) else {
        return Err(Counter::PassNotLoaded);
    };
    // Arithmetic only: a compare per slot would be a branch (BPF has no conditional
    // move), each forking the verifier's walk. `nonzero` hides its operand from LLVM,
    // which would otherwise fold the arithmetic back into a compare.
    let want = u64::from(tag(hash));
    let mut record = 0u64;
    for i in 0..BUCKET_SLOTS {
        // All ones when the tags are equal, else 0.
        let hit = nonzero(u64::from(b.tag[i]) ^ want).wrapping_sub(1);
        record |= u64::from(b.record[i]) & hit;
    }
    let crowded = u64::from(b.record[BUCKET_SLOTS - 1] & CROWDED);
    // Through map memory (see `crate::answer`'s `launder`): the slots' outcomes meet in one verifier
    // state here.
    let found = t.through((record & ((1 << RECORD_BITS) - 1)) | crowded << 1);
    let record = (found & 0xffff_ffff) as u32;
    if record == 0 && found >> 32 != 0 {
        return Err(Counter::PassNotCached);
    }
    Ok(record)
}

/// Record `record` (not 0), if its name is `name`; one under the same tag for another
/// name means the query only shares the hash: user space answers it.
///
/// The record holds a name's last 64 octets. On the answer path (`W` = 8) a record of a
/// longer name (`long_name` not 0) never matches; on the long-name stage the words in
/// front are compared with the record's long-name entry (entry 0, all zeros, for
/// shorter names).
#[inline(always)]
pub fn named<'a, const W: usize>(t: &Tables<'a>, record: u32, name: &[u64; W]) -> Result<&'a AnswerValue, Counter> {
    let Some(value) = t.records.get(record) else {
        return Err(Counter::PassNotLoaded);
    };
    let front = W - NAME_WORDS;
    let mut differ = 0;
    for j in 0..NAME_WORDS {
        differ |= value.name[j] ^ name[front + j];
    }
    if W == NAME_WORDS {
        differ |= u64::from(value.long_name);
    } else {
        let Some(long) = LONG_NAMES.get(t.bank).and_then(|names| names.get(value.long_name)) else {
            return Err(Counter::PassNotLoaded);
        };
        for j in 0..front.min(FRONT_WORDS) {
            differ |= long.front[j] ^ name[j];
        }
    }
    if differ == 0 {
        Ok(value)
    } else {
        Err(Counter::PassNotCached)
    }
}

/// 1 when `x` (below 2^32) is not 0, else 0, without a branch.
#[inline(always)]
fn nonzero(x: u64) -> u64 {
    (core::hint::black_box(x) + 0xffff_ffff) >> 32
}
