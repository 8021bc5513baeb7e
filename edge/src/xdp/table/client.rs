//! Client-aware sets (`ip`, `geo`; SPEC §10) in the tables (`qdns_abi::client`): each
//! set's blocks (a geo set's are its zone's class table, stored once per zone), a geo
//! set's chain per class, and each chain as a policy entry, so the program makes the
//! decision `PolicySet::pick_for_client` makes.
use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use qdns_abi::{
    answer::{PolicyKey, PolicyValue},
    client::{ClientBlock, ClientSet, BLOCKS_MAX, CLIENT_V4_LONG, CLIENT_V6_LONG, INDEX_MIN_BLOCKS, NO_INDEX},
};
use qdns_zone::client::{buckets, Bits, Block};

use super::policy::chain_value;
use crate::engine::export::PolicyView;

/// Most chains of one set the tables hold (each is a policy entry of 2 KiB); a set with
/// more passes (`pass_client_aware`).
const CHAINS_MAX: usize = 1024;

/// The client-aware part of a generation's tables.
#[derive(Default)]
pub struct ClientTables {
    /// `CLIENT_SETS`: one per set.
    pub sets: Vec<ClientSet>,
    /// `CLIENT_BLOCKS`: every set's (or zone class table's) blocks, IPv4 then IPv6.
    pub blocks: Vec<ClientBlock>,
    /// `CLASS_CHAINS`: geo sets' chain per class.
    pub class_chains: Vec<u32>,
    /// `CLIENT_INDEX`: the first-level indexes of the large block tables.
    pub index: Vec<u32>,
    /// Where each zone's class table already is (keyed by the shared table's address).
    geo: HashMap<usize, Ranges>,
}

/// Per address family of a set: its blocks (first, count), its `CLIENT_*_LONG` flag, one
/// address's step in top-aligned form, and the address of a top-aligned start.
type Family = (u32, u32, u32, u64, fn(u64) -> IpAddr);

/// A table's blocks in `blocks`: IPv4 first and count, IPv6 first and count, flags.
#[derive(Clone, Copy)]
struct Ranges {
    v4: (u32, u32),
    v6: (u32, u32),
    flags: u32,
    /// Where each family's index starts in `index` ([`NO_INDEX`]: none).
    v4_index: u32,
    v6_index: u32,
}

impl ClientTables {
    /// Octets the three arrays take in the kernel.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.sets.len().max(1) * size_of::<ClientSet>()
            + self.blocks.len().max(1) * size_of::<ClientBlock>()
            + (self.class_chains.len().max(1) + self.index.len().max(1)) * size_of::<u32>()
    }

    /// Adds the client-aware set `policy` owned by a name of `qlen` octets: its chains
    /// to `policies` (ids from `policies.len()`), its blocks here. The set's id, or
    /// `None` when it does not fit (a member over 64 octets, an alias, too many chains):
    /// then its queries pass.
    pub(super) fn add(
        &mut self,
        policies: &mut Vec<(PolicyKey, PolicyValue)>,
        generation: u32,
        policy: &PolicyView<'_>,
        qlen: usize,
    ) -> Option<u32> {
        let rules = policy.client?;
        if rules.chains.len() > CHAINS_MAX {
            return None;
        }
        let chains: Vec<PolicyValue> = rules
            .chains
            .iter()
            .map(|chain| chain_value(policy, qlen, chain))
            .collect::<Option<_>>()?;
        // A geo set decides by its zone's classes when it has both (as
        // `ClientRules::decide_in_zone` does); otherwise by its own blocks.
        let (ranges, classes) = match policy.geo.filter(|_| !rules.classes.is_empty()) {
            Some(table) => {
                let key = std::sync::Arc::as_ptr(table) as usize;
                let ranges = if let Some(&ranges) = self.geo.get(&key) {
                    ranges
                } else {
                    let ranges = self.push_blocks(&table.v4, &table.v6);
                    self.geo.insert(key, ranges);
                    ranges
                };
                (ranges, &rules.classes[..])
            }
            None => (self.push_blocks(&rules.v4, &rules.v6), &[][..]),
        };
        let id = u32::try_from(self.sets.len()).ok()?;
        let chain_first = u32::try_from(policies.len()).ok()?;
        self.sets.push(ClientSet {
            v4_first: ranges.v4.0,
            v4_count: ranges.v4.1,
            v6_first: ranges.v6.0,
            v6_count: ranges.v6.1,
            classes_first: u32::try_from(self.class_chains.len()).ok()?,
            classes: u32::try_from(classes.len()).ok()?,
            chain_first,
            chains: u32::try_from(chains.len()).ok()?,
            flags: ranges.flags,
            v4_index: ranges.v4_index,
            v6_index: ranges.v6_index,
            pad: 0,
        });
        self.class_chains.extend_from_slice(classes);
        for (i, chain) in chains.into_iter().enumerate() {
            policies.push((
                PolicyKey {
                    generation,
                    id: chain_first + i as u32,
                },
                chain,
            ));
        }
        Some(id)
    }

    /// For each chain of set `id`, a client the program decides on it (the first address
    /// of a block that gives it, or of a gap for chain 0, the `*` chain), from the
    /// families the program decides; `None` for a chain no such client reaches. A signed
    /// set's DO=1 answers are computed for these clients.
    pub(super) fn representatives(&self, id: u32) -> Vec<Option<IpAddr>> {
        let Some(set) = self.sets.get(id as usize) else {
            return Vec::new();
        };
        let mut out = vec![None; set.chains as usize];
        let classes = self
            .class_chains
            .get(set.classes_first as usize..)
            .and_then(|c| c.get(..set.classes as usize))
            .unwrap_or_default();
        let chain_of = |value: u32| {
            if set.classes == 0 {
                Some(value)
            } else {
                classes.get(value as usize).copied()
            }
        };
        let families: [Family; 2] = [
            (set.v4_first, set.v4_count, CLIENT_V4_LONG, 1 << 32, |a| {
                IpAddr::V4(Ipv4Addr::from((a >> 32) as u32))
            }),
            (set.v6_first, set.v6_count, CLIENT_V6_LONG, 1, |a| {
                IpAddr::V6(Ipv6Addr::from(u128::from(a) << 64))
            }),
        ];
        for (first, count, long, step, address) in families {
            if set.flags & long != 0 {
                continue;
            }
            let blocks = self
                .blocks
                .get(first as usize..)
                .and_then(|b| b.get(..count as usize))
                .unwrap_or_default();
            // The first address not yet covered by a block (None past the top).
            let mut next = Some(0u64);
            for block in blocks {
                if let Some(gap) = next.filter(|&n| n < block.start) {
                    if let Some(slot) = out.first_mut() {
                        slot.get_or_insert(address(gap));
                    }
                }
                if let Some(slot) = chain_of(block.value).and_then(|c| out.get_mut(c as usize)) {
                    slot.get_or_insert(address(block.start));
                }
                next = block.last.checked_add(step);
            }
            if let (Some(gap), Some(slot)) = (next, out.first_mut()) {
                slot.get_or_insert(address(gap));
            }
        }
        out
    }

    /// Appends a table's blocks, top-aligned (`qdns_abi::client`).
    fn push_blocks(&mut self, v4: &[Block<u32>], v6: &[Block<u128>]) -> Ranges {
        let v4_first = self.blocks.len() as u32;
        self.blocks.extend(v4.iter().map(|b| {
            let last = b.start | u32::MAX.checked_shr(u32::from(b.len)).unwrap_or(0);
            ClientBlock {
                start: u64::from(b.start) << 32,
                last: u64::from(last) << 32,
                value: b.chain,
                len: u32::from(b.len),
            }
        }));
        let v6_first = self.blocks.len() as u32;
        self.blocks.extend(v6.iter().map(|b| {
            let last = b.start | u128::MAX.checked_shr(u32::from(b.len)).unwrap_or(0);
            ClientBlock {
                start: (b.start >> 64) as u64,
                last: (last >> 64) as u64,
                value: b.chain,
                len: u32::from(b.len),
            }
        }));
        let mut flags = 0;
        if v6.iter().any(|b| b.len > 64) || v6.len() > BLOCKS_MAX as usize {
            flags |= CLIENT_V6_LONG;
        }
        if v4.len() > BLOCKS_MAX as usize {
            flags |= CLIENT_V4_LONG;
        }
        let v4_index = self.push_index(v4);
        let v6_index = self.push_index(v6);
        Ranges {
            v4: (v4_first, v4.len() as u32),
            v6: (v6_first, v6.len() as u32),
            flags,
            v4_index,
            v6_index,
        }
    }

    /// The first-level index of `blocks` (`qdns_zone::client::buckets`, relative to the
    /// family's first block), when they are [`INDEX_MIN_BLOCKS`] or more: where it
    /// starts in `index`, or [`NO_INDEX`].
    fn push_index<A: Bits>(&mut self, blocks: &[Block<A>]) -> u32 {
        if blocks.len() < INDEX_MIN_BLOCKS as usize {
            return NO_INDEX;
        }
        let Ok(at) = u32::try_from(self.index.len()) else {
            return NO_INDEX;
        };
        self.index.extend(buckets(blocks));
        at
    }
}
