//! Client-aware sets (SPEC §10) in the XDP tables: each set's rule blocks as the zone
//! crate compiles them (aligned, non-overlapping, sorted; `qdns_zone::client`), and the
//! search both the program and its tests run over them.
//!
//! ```text
//!  RECORDS entry (KIND_CLIENT) .policy → CLIENT_SETS[bank][id]
//!  CLIENT_SETS  → its IPv4 and IPv6 block ranges in CLIENT_BLOCKS, its class chains
//!  CLIENT_BLOCKS  sorted blocks: start, last, value (chain, or a geo class), length
//!  CLASS_CHAINS   geo sets: chain of each class of the zone's table
//!  CLIENT_INDEX   large tables: per 16-bit bucket of the address, its first block
//!  POLICIES[chain_first + chain] → the chain as a policy entry (POLICY_CLIENT)
//! ```
//!
//! Addresses are 64-bit words aligned at the top: an IPv4 address in the high 32 bits,
//! an IPv6 address's first 64 bits (a set with an IPv6 block longer than /64 leaves its
//! IPv6 clients to user space, [`CLIENT_V6_LONG`]). The search is [`locate`]: the
//! block at or before the address, and from it and the next one either the block that
//! holds the address or the largest prefix around it that meets none — the scope of a
//! `*` answer — exactly as `qdns_zone::client` finds it. A family of
//! [`INDEX_MIN_BLOCKS`] blocks or more also has a first-level index: for each value of
//! the address's top 16 bits, the first block starting at or above it, so the search
//! runs over the few blocks of one bucket ([`window`]) instead of all of them — each
//! step is a map lookup, and a country-sized table is 18 steps deep.

/// Name of the client-aware set tables (array of maps: one [`ClientSet`] array per bank).
pub const CLIENT_SETS_MAP: &str = "QDNS_CLIENT_SETS_V2";
/// Name of the first-level index tables (array of maps: one `u32` array per bank).
pub const CLIENT_INDEX_MAP: &str = "QDNS_CLIENT_INDEX_V1";
/// Blocks of a family from which it gets a first-level index.
pub const INDEX_MIN_BLOCKS: u32 = 1024;
/// Leading address bits an index bucket is keyed by.
pub const INDEX_BITS: u32 = 16;
/// Entries of one family's index: one per bucket, and the block count after the last.
pub const INDEX_ENTRIES: u32 = (1 << INDEX_BITS) + 1;
/// [`ClientSet::v4_index`] / [`ClientSet::v6_index`] of a family without an index.
pub const NO_INDEX: u32 = u32::MAX;
/// Name of the block tables (array of maps: one [`ClientBlock`] array per bank).
pub const CLIENT_BLOCKS_MAP: &str = "QDNS_CLIENT_BLOCKS_V1";
/// Name of the class-chain tables (array of maps: one `u32` array per bank).
pub const CLASS_CHAINS_MAP: &str = "QDNS_CLASS_CHAINS_V1";

/// Steps of the binary search: a family of a set holds at most 2^24 blocks.
pub const SEARCH_STEPS: usize = 24;
/// Most blocks of one family of one set ([`SEARCH_STEPS`]).
pub const BLOCKS_MAX: u32 = 1 << SEARCH_STEPS;
/// [`ClientSet::flags`]: an IPv6 block is longer than /64 (or there are more than
/// [`BLOCKS_MAX`]): IPv6 clients pass.
pub const CLIENT_V6_LONG: u32 = 1;
/// [`ClientSet::flags`]: more than [`BLOCKS_MAX`] IPv4 blocks: IPv4 clients pass.
pub const CLIENT_V4_LONG: u32 = 2;
/// Longest ECS SOURCE PREFIX-LENGTH used for a decision, IPv4 (RFC 7871 §11.1; the
/// zone crate's `ECS_MAX_SOURCE_V4`).
pub const ECS_CAP_V4: u8 = 24;
/// The same for IPv6 (`ECS_MAX_SOURCE_V6`).
pub const ECS_CAP_V6: u8 = 56;

/// An element of [`CLIENT_SETS_MAP`]: one client-aware set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientSet {
    /// First IPv4 block in [`CLIENT_BLOCKS_MAP`].
    pub v4_first: u32,
    /// IPv4 blocks.
    pub v4_count: u32,
    /// First IPv6 block.
    pub v6_first: u32,
    /// IPv6 blocks.
    pub v6_count: u32,
    /// Geo sets: where the chain of each class of the zone's table starts in
    /// [`CLASS_CHAINS_MAP`] (the blocks' values are classes); `ip` sets: unused.
    pub classes_first: u32,
    /// Geo sets: classes (0: an `ip` set, whose blocks' values are chains).
    pub classes: u32,
    /// [`crate::answer::POLICIES_MAP`] id of chain 0 (the `*` chain); chain `c` is at
    /// `chain_first + c`.
    pub chain_first: u32,
    /// Chains.
    pub chains: u32,
    /// `CLIENT_*` flags.
    pub flags: u32,
    /// Where the IPv4 blocks' index starts in [`CLIENT_INDEX_MAP`] ([`NO_INDEX`]: none):
    /// [`INDEX_ENTRIES`] block numbers, relative to `v4_first`.
    pub v4_index: u32,
    /// The same for IPv6.
    pub v6_index: u32,
    /// Always 0.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<ClientSet>() == 48);

/// An element of [`CLIENT_BLOCKS_MAP`]: an aligned prefix, top-aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientBlock {
    /// First address.
    pub start: u64,
    /// Last address (within the 64 bits kept).
    pub last: u64,
    /// Chain (`ip` sets) or class (geo sets).
    pub value: u32,
    /// Prefix length: the scope of every answer decided here.
    pub len: u32,
}
const _: () = assert!(core::mem::size_of::<ClientBlock>() == 24);

/// What the search found for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// The block's value (`None`: no block holds the address).
    pub value: Option<u32>,
    /// The block's length, or the largest prefix around the address that meets no
    /// block (0 when the family has none).
    pub scope: u8,
}

/// The bucket of `addr` in a family's index.
#[inline(always)]
#[must_use]
pub const fn bucket(addr: u64) -> u32 {
    (addr >> (64 - INDEX_BITS)) as u32
}

/// The blocks (first, count; relative to the family's first) where the search for an
/// address must look, from its bucket's index entry `at` and the next one `after`, in
/// a family of `count` blocks: the last block starting before the bucket (it may hold
/// the address) and the bucket's own. At least one block when `count` is not 0.
#[inline(always)]
#[must_use]
pub fn window(at: u32, after: u32, count: u32) -> (u32, u32) {
    let first = at.saturating_sub(1).min(count.saturating_sub(1));
    let end = after.max(first + 1).min(count);
    (first, end.saturating_sub(first))
}

/// The block of `count` sorted ones from `first` (read by `block`) around `addr`, or
/// the scope of the gap it is in; `width` is the family's address width. The search
/// looks at the `window` (first, count; relative to `first`: all of them, or
/// [`window`]'s from an index). `None` when a block cannot be read, there are more
/// than [`BLOCKS_MAX`] or the window is not inside the blocks.
#[inline(always)]
pub fn locate(
    block: impl Fn(u32) -> Option<ClientBlock>,
    (first, count): (u32, u32),
    window: (u32, u32),
    addr: u64,
    width: u8,
) -> Option<Located> {
    if count == 0 {
        return Some(Located { value: None, scope: 0 });
    }
    if count > BLOCKS_MAX || window.1 == 0 || window.0 >= count || window.1 > count - window.0 {
        return None;
    }
    // The last block starting at or before `addr` is in base..base + n.
    let (mut base, mut n) = (first + window.0, window.1);
    for _ in 0..SEARCH_STEPS {
        if n <= 1 {
            break;
        }
        let half = n / 2;
        let probe = block(base + half)?;
        // Without a branch: all ones when the probe starts at or before `addr`.
        let before = u32::from(probe.start <= addr).wrapping_neg();
        base += half & before;
        n -= half;
    }
    let at = block(base)?;
    let (prev, next) = if at.start <= addr {
        if addr <= at.last {
            return Some(Located {
                value: Some(at.value),
                scope: at.len as u8,
            });
        }
        let next = if base + 1 < first + count {
            Some(block(base + 1)?.start)
        } else {
            None
        };
        (Some(at.last), next)
    } else {
        (None, Some(at.start))
    };
    let mut scope = 0;
    if let Some(last) = prev {
        scope = common_prefix(addr, last) + 1;
    }
    if let Some(start) = next {
        scope = scope.max(common_prefix(addr, start) + 1);
    }
    Some(Located {
        value: None,
        scope: scope.min(u32::from(width)) as u8,
    })
}

/// Leading bits `a` and `b` share.
#[inline(always)]
fn common_prefix(a: u64, b: u64) -> u32 {
    (a ^ b).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(blocks: &[(u32, u32, u32)]) -> std::vec::Vec<ClientBlock> {
        blocks
            .iter()
            .map(|&(start, len, value)| ClientBlock {
                start: u64::from(start) << 32,
                last: u64::from(start | (u32::MAX.checked_shr(len).unwrap_or(0))) << 32,
                value,
                len,
            })
            .collect()
    }

    #[test]
    fn finds_blocks_and_gap_scopes() {
        // 10.0.0.0/8 → 1, 10.1.0.0/16 is not a block here (nested rules are split by
        // the zone crate), 192.0.2.0/24 → 2.
        let blocks = v4(&[(0x0a00_0000, 8, 1), (0xc000_0200, 24, 2)]);
        let at = |i: u32| blocks.get(i as usize).copied();
        let all = (0, blocks.len() as u32);
        let find = |a: u32| locate(at, all, all, u64::from(a) << 32, 32).unwrap();
        assert_eq!(
            find(0x0a01_0203),
            Located {
                value: Some(1),
                scope: 8
            }
        );
        assert_eq!(
            find(0xc000_02ff),
            Located {
                value: Some(2),
                scope: 24
            }
        );
        // 11.0.0.0: the gap after 10/8 — 11.0.0.0/8 meets no block.
        assert_eq!(find(0x0b00_0000), Located { value: None, scope: 8 });
        // 0.0.0.1: before every block — 0.0.0.0/5 meets none, /4 holds 10/8.
        assert_eq!(find(1), Located { value: None, scope: 5 });
        // 255.255.255.255: after every block — 224.0.0.0/3 meets none.
        assert_eq!(find(u32::MAX), Located { value: None, scope: 3 });
        assert_eq!(
            locate(at, (0, 0), (0, 0), 0, 32),
            Some(Located { value: None, scope: 0 })
        );
        // A window outside the blocks is refused, not read past.
        assert_eq!(locate(at, all, (1, 2), 0, 32), None);
        assert_eq!(locate(at, all, (0, 0), 0, 32), None);
    }

    #[test]
    fn windows_hold_the_block_before_the_bucket_and_the_buckets_own() {
        // Bucket empty, blocks before it: the last block before it alone.
        assert_eq!(window(5, 5, 9), (4, 1));
        // Bucket with blocks 5..8: from the one before to the bucket's last.
        assert_eq!(window(5, 8, 9), (4, 4));
        // No block before the first bucket: block 0 (the search then sees the gap).
        assert_eq!(window(0, 0, 9), (0, 1));
        assert_eq!(window(0, 3, 9), (0, 3));
        // Past the last block: the last block.
        assert_eq!(window(9, 9, 9), (8, 1));
    }
}
