//! The slot table: how the program finds a (name, type)'s record in one generation.
//!
//! ```text
//!  SLOTS[bank]    buckets of 8 slots, 64 octets (one cache line) each, 2^k buckets
//!  RECORDS[bank]  AnswerValue records; record 0 is empty
//!  slot hash = mix(name_hash(name)) ^ qtype · ODD
//!  home      = (slot hash >> 32) & (buckets − 1);  tag = low 32 bits of the slot hash
//! ```
//!
//! Each generation's tables are plain arrays sized to its snapshot (created by the
//! loader, placed in a map-of-maps under the generation's bank). An array lookup costs
//! a bounds check and a multiply where the kernel hash map cost a jhash, a bucket walk
//! and a key compare. A lookup reads one bucket — one cache line — and compares its
//! eight tags without a branch; the record then holds the name, which the program
//! compares word for word. For one name the tag fixes the type (the qtype term is odd
//! times the type, a bijection modulo 2^32, and types are below 2^16), so a tag never
//! decides alone either.
//!
//! An entry that finds its home bucket full (or a tag there taken) gets no slot and the
//! bucket is marked crowded: a query that misses in a crowded bucket goes to user space
//! instead of on to the node lookup, so the missing slot can never turn into a wrong
//! NXDOMAIN. The loader sizes the table at most a quarter full, where that is about one
//! entry in 10^5.

/// Slots per bucket.
pub const BUCKET_SLOTS: usize = 8;
/// Most buckets of one generation's slot table (2^24: 128 Mi slots, 1 GiB).
pub const BUCKETS_MAX: u32 = 1 << 24;
/// Bits of a slot's record index; the bits above are flags.
pub const RECORD_BITS: u32 = 28;
/// Flag on the last slot's record: some entry whose home this is has no slot.
pub const CROWDED: u32 = 1 << 31;

/// One bucket: eight slots in one cache line. An empty slot has record 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bucket {
    /// The low 32 bits of [`slot_hash`] of each slot's name and type.
    pub tag: [u32; BUCKET_SLOTS],
    /// Index of each slot's record in the generation's record table (0 = empty), below
    /// 2^[`RECORD_BITS`]; the last one may carry [`CROWDED`].
    pub record: [u32; BUCKET_SLOTS],
}
const _: () = assert!(core::mem::size_of::<Bucket>() == 64);

/// The odd multiplier of the type term.
const QTYPE_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// The slot hash of a name (its [`crate::name::name_hash`]) and a query type. For one
/// name, distinct types give distinct tags (see the module's comment).
///
/// The name hash is mixed first: it is a sum of products, whose low bits depend only on
/// the low bits of each word, so names differing in a word's high octets (one label's
/// first letters) would share a tag. The mix (xor-shift, odd multiply, xor-shift) is a
/// bijection, so distinct name hashes stay distinct.
#[inline(always)]
#[must_use]
pub const fn slot_hash(name_hash: u64, qtype: u16) -> u64 {
    let mut x = name_hash;
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^= x >> 32;
    x ^ (qtype as u64).wrapping_mul(QTYPE_MULTIPLIER)
}

/// The home bucket of `hash` in a table of `mask + 1` buckets (a power of two).
#[inline(always)]
#[must_use]
pub const fn home(hash: u64, mask: u32) -> u32 {
    (hash >> 32) as u32 & mask
}

/// The tag of `hash`.
#[inline(always)]
#[must_use]
pub const fn tag(hash: u64) -> u32 {
    hash as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_of_one_name_never_share_a_tag() {
        let name = 0x0123_4567_89ab_cdef;
        let mut seen = std::collections::HashSet::new();
        for qtype in 0..=u16::MAX {
            assert!(seen.insert(tag(slot_hash(name, qtype))));
        }
    }

    #[test]
    fn names_differing_in_high_octets_get_distinct_tags() {
        let mut seen = std::collections::HashSet::new();
        for octet in 0..=255u64 {
            let name_hash = (octet << 56).wrapping_mul(0xa076_1d64_78bd_642f);
            assert!(seen.insert(tag(slot_hash(name_hash, 1))));
        }
    }

    #[test]
    fn home_uses_the_high_half() {
        assert_eq!(home(u64::MAX, 7), 7);
        assert_eq!(home(0x0000_0001_ffff_ffff, 7), 1);
        assert_eq!(tag(0x0000_0001_ffff_fffe), 0xffff_fffe);
    }
}
