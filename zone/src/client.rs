//! Client-aware answers (SPEC §10): which members a client's address selects, and over
//! which prefix that choice holds (the ECS SCOPE PREFIX-LENGTH, RFC 7871 §7.2.1).
//!
//! A set's rules — each a prefix pointing at a member, plus a `*` member for everyone
//! else — compile into [`ClientRules`]: per family a sorted list of aligned,
//! non-overlapping [`Block`]s, each carrying a *chain* (the members to try, most
//! specific match first, then each broader match, then `*`). Nested rules are split
//! apart: a `/16` rule with a `/24` rule inside becomes the maximal aligned blocks of
//! the `/16` around the `/24`, so every address inside a block has the same chain, and
//! the block's length is a scope that is right by construction. Addresses no rule
//! covers get `chains[0]` (the `*` chain); their scope is the largest aligned prefix
//! around the address that meets no block, found from the two neighbouring blocks.
//!
//! Geolocation sets compile to the same table (control turns the database into
//! prefixes), so both the user-space responder and the XDP program decide one way.
use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use serde::{Deserialize, Serialize};

/// Longest ECS SOURCE PREFIX-LENGTH used for a decision (RFC 7871 §11.1): IPv4.
pub const ECS_MAX_SOURCE_V4: u8 = 24;
/// Longest ECS SOURCE PREFIX-LENGTH used for a decision (RFC 7871 §11.1): IPv6.
pub const ECS_MAX_SOURCE_V6: u8 = 56;

/// A compiled client-aware rule table (one per set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRules {
    /// What each member matches, by member index, for explain: `COLLECTION/LOCATION`
    /// or `*`.
    pub labels: Vec<String>,
    /// IPv4 blocks, sorted by address, non-overlapping.
    pub v4: Vec<Block<u32>>,
    /// IPv6 blocks, sorted by address, non-overlapping.
    pub v6: Vec<Block<u128>>,
    /// Member chains, most specific match first; `chains[0]` is for addresses no rule
    /// covers (the `*` member alone, or nothing).
    pub chains: Vec<Vec<u8>>,
    /// Geo sets: the chain (index into `chains`) of each class of the zone's
    /// [`GeoTable`], whose blocks stand in for `v4` and `v6` (empty then). Empty for
    /// `ip` sets.
    pub classes: Vec<u32>,
    /// A first-level index over `v4` and `v6`, built where the table is used for
    /// queries ([`ClientRules::build_index`]); never in the snapshot.
    #[serde(skip)]
    pub index: Option<Box<BlockIndex>>,
}

/// The geolocation classes of a zone (SPEC §10): the database's networks reduced to the
/// locations the zone's geo sets name, aligned neighbours of one class merged. Each
/// block's `chain` is a class index; addresses in no block have no named location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoTable {
    /// IPv4 blocks, sorted, non-overlapping; `chain` = class.
    pub v4: Vec<Block<u32>>,
    /// IPv6 blocks, sorted, non-overlapping; `chain` = class.
    pub v6: Vec<Block<u128>>,
    /// Each class: the named locations its networks are in, most specific first
    /// (`DE-BY`, `DE`, `EU`).
    pub classes: Vec<Vec<String>>,
    /// A first-level index over the blocks ([`GeoTable::build_index`]); never in the
    /// snapshot.
    #[serde(skip)]
    pub index: Option<Box<BlockIndex>>,
}

impl GeoTable {
    /// Builds the first-level index for queries (large tables only).
    pub fn build_index(&mut self) {
        self.index = BlockIndex::of(&self.v4, &self.v6);
    }
}

/// Where each 16-bit bucket of the address space starts in a family's sorted blocks: a
/// lookup then searches the few blocks of its bucket, not all of them (a table of
/// 100,000 blocks took 17 mispredicted steps per query; see BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockIndex {
    /// 65,537 entries: the first IPv4 block whose start's top 16 bits are ≥ the bucket.
    v4: Vec<u32>,
    /// The same over the IPv6 blocks.
    v6: Vec<u32>,
}

/// Tables smaller than this are searched whole (an index costs 512 KiB).
const INDEX_FROM: usize = 4096;

impl BlockIndex {
    /// The index of `v4` and `v6`, or `None` when they are small.
    #[must_use]
    pub fn of(v4: &[Block<u32>], v6: &[Block<u128>]) -> Option<Box<BlockIndex>> {
        (v4.len() + v6.len() >= INDEX_FROM).then(|| {
            Box::new(BlockIndex {
                v4: buckets(v4),
                v6: buckets(v6),
            })
        })
    }
}

/// For each bucket `h` (and one past the last), the first block whose start's top 16
/// bits are ≥ `h` (the edge's XDP tables hold the same index).
#[must_use]
pub fn buckets<A: Bits>(blocks: &[Block<A>]) -> Vec<u32> {
    let mut out = Vec::with_capacity(65_537);
    let mut at = 0usize;
    for bucket in 0..=65_536usize {
        while blocks.get(at).is_some_and(|b| b.start.top16() < bucket) {
            at += 1;
        }
        out.push(at as u32);
    }
    out
}

/// An aligned prefix and the chain every address in it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block<A> {
    /// First address (host bits zero).
    pub start: A,
    /// Prefix length: the scope of every answer decided here.
    pub len: u8,
    /// Index into [`ClientRules::chains`].
    pub chain: u32,
}

/// What a client's address decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'r> {
    /// Members to try in order: the first healthy one answers; none healthy, the first.
    pub chain: &'r [u8],
    /// Prefix length around the address over which this decision holds.
    pub scope: u8,
    /// A rule's block matched (false: the `*` answer).
    pub matched: bool,
}

/// An address family's integer form.
pub trait Bits: Copy + Ord + std::fmt::Debug {
    /// Width in bits.
    const WIDTH: u8;
    /// Zero.
    const ZERO: Self;
    /// The mask of the host bits of a `/len` prefix.
    fn host_mask(len: u8) -> Self;
    /// The bit just past a `/len` prefix (the first address of its right half).
    fn half_bit(len: u8) -> Self;
    /// Bits in common from the top.
    fn common_prefix(self, other: Self) -> u8;
    /// `self | other`.
    #[must_use]
    fn or(self, other: Self) -> Self;
    /// `self & !mask`.
    #[must_use]
    fn clear(self, mask: Self) -> Self;
    /// The top 16 bits (the bucket of a [`BlockIndex`]).
    fn top16(self) -> usize;
}

macro_rules! bits {
    ($t:ty, $w:expr) => {
        impl Bits for $t {
            const WIDTH: u8 = $w;
            const ZERO: Self = 0;
            fn host_mask(len: u8) -> Self {
                if len >= $w {
                    0
                } else {
                    <$t>::MAX >> len
                }
            }
            fn half_bit(len: u8) -> Self {
                if len >= $w {
                    0
                } else {
                    1 << ($w - 1 - len)
                }
            }
            fn common_prefix(self, other: Self) -> u8 {
                (self ^ other).leading_zeros() as u8
            }
            fn or(self, other: Self) -> Self {
                self | other
            }
            fn clear(self, mask: Self) -> Self {
                self & !mask
            }
            fn top16(self) -> usize {
                (self >> ($w - 16)) as usize
            }
        }
    };
}
bits!(u32, 32);
bits!(u128, 128);

/// One rule: a prefix and the member it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule<A> {
    /// First address (host bits zero).
    pub start: A,
    /// Prefix length.
    pub len: u8,
    /// Member index.
    pub member: u8,
}

/// Why rules could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesError {
    /// The same prefix selects two members.
    Conflict {
        /// The prefix, as text.
        prefix: String,
        /// The two members.
        members: (u8, u8),
    },
}

/// Parses `ADDRESS/LEN` (or a bare address, a host prefix) with no bits set past LEN.
pub fn parse_prefix(text: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => (addr, Some(len)),
        None => (text, None),
    };
    let addr: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not an IPv4 or IPv6 prefix (ADDRESS/LEN)"))?;
    let width = match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    let len = match len {
        Some(len) => len
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= width)
            .ok_or_else(|| format!("{text:?}: the prefix length must be 0..={width}"))?,
        None => width,
    };
    let clean = match addr {
        IpAddr::V4(a) => u32::from(a) & u32::host_mask(len) == 0,
        IpAddr::V6(a) => u128::from(a) & u128::host_mask(len) == 0,
    };
    if !clean {
        return Err(format!("{text:?} has bits set past /{len}"));
    }
    Ok((addr, len))
}

/// Builds the table for members labelled `labels`, from `rules` and the `*` member.
pub fn compile(
    labels: Vec<String>,
    mut v4: Vec<Rule<u32>>,
    mut v6: Vec<Rule<u128>>,
    star: Option<u8>,
) -> Result<ClientRules, RulesError> {
    let root: Vec<u8> = star.into_iter().collect();
    let mut chains = Chains::new(root.clone());
    let v4 = family(&mut v4, &root, &mut chains, |a| Ipv4Addr::from(a).to_string())?;
    let v6 = family(&mut v6, &root, &mut chains, |a| Ipv6Addr::from(a).to_string())?;
    Ok(ClientRules {
        labels,
        v4,
        v6,
        chains: chains.list,
        classes: Vec::new(),
        index: None,
    })
}

/// Sorted blocks from disjoint prefixes that each carry an id (a geolocation class),
/// aligned neighbours with one id merged into their parent.
#[must_use]
pub fn merge_blocks<A: Bits>(mut prefixes: Vec<(A, u8, u32)>) -> Vec<Block<A>> {
    prefixes.sort_unstable_by_key(|p| (p.0, p.1));
    prefixes.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    let mut out: Vec<Block<A>> = Vec::with_capacity(prefixes.len());
    for (start, len, chain) in prefixes {
        let mut block = Block { start, len, chain };
        // While the block is the right half of a sibling pair whose left half is the
        // last block out, with one id: the two are their parent.
        while block.len > 0 {
            let parent = block.len - 1;
            let left = block.start.clear(A::host_mask(parent));
            let Some(last) = out.last().copied() else { break };
            if left == block.start || last.start != left || last.len != block.len || last.chain != block.chain {
                break;
            }
            out.pop();
            block = Block {
                start: left,
                len: parent,
                chain: block.chain,
            };
        }
        out.push(block);
    }
    out
}

/// The rules of a geo set whose member `i` is named by `keys[i]` (a location text, or
/// `None` for `*`), over the zone's `table`: one chain per class.
#[must_use]
pub fn compile_classes(labels: Vec<String>, keys: &[Option<&str>], table: &GeoTable) -> ClientRules {
    let star = keys.iter().position(Option::is_none).and_then(|i| u8::try_from(i).ok());
    let root: Vec<u8> = star.into_iter().collect();
    let mut chains = Chains::new(root.clone());
    let classes = table
        .classes
        .iter()
        .map(|locations| {
            let mut chain: Vec<u8> = Vec::with_capacity(4);
            for location in locations {
                if let Some(m) = keys.iter().position(|k| *k == Some(location.as_str())) {
                    let m = u8::try_from(m).unwrap_or(u8::MAX);
                    if !chain.contains(&m) {
                        chain.push(m);
                    }
                }
            }
            if let Some(s) = star {
                if !chain.contains(&s) {
                    chain.push(s);
                }
            }
            chains.id(&chain)
        })
        .collect();
    ClientRules {
        labels,
        v4: Vec::new(),
        v6: Vec::new(),
        chains: chains.list,
        classes,
        index: None,
    }
}

/// Chains, each stored once.
struct Chains {
    list: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, u32>,
}

impl Chains {
    fn new(root: Vec<u8>) -> Chains {
        let mut index = HashMap::new();
        index.insert(root.clone(), 0);
        Chains {
            list: vec![root],
            index,
        }
    }

    fn id(&mut self, chain: &[u8]) -> u32 {
        if let Some(&id) = self.index.get(chain) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(chain.to_vec());
        self.index.insert(chain.to_vec(), id);
        id
    }
}

/// One family's blocks.
fn family<A: Bits>(
    rules: &mut Vec<Rule<A>>,
    root: &[u8],
    chains: &mut Chains,
    text: impl Fn(A) -> String,
) -> Result<Vec<Block<A>>, RulesError> {
    rules.sort_unstable();
    rules.dedup();
    for pair in rules.windows(2) {
        if let [a, b] = pair {
            if a.start == b.start && a.len == b.len {
                return Err(RulesError::Conflict {
                    prefix: format!("{}/{}", text(a.start), a.len),
                    members: (a.member, b.member),
                });
            }
        }
    }
    let mut out = Vec::new();
    let mut chain = root.to_vec();
    // A /0 rule is the root itself.
    let inner: &[Rule<A>] = match rules.first() {
        Some(first) if first.len == 0 => {
            prepend(&mut chain, first.member);
            rules.get(1..).unwrap_or_default()
        }
        _ => rules,
    };
    split(A::ZERO, 0, &chain, inner, root, chains, &mut out);
    Ok(out)
}

/// Moves `member` to the front of `chain`.
fn prepend(chain: &mut Vec<u8>, member: u8) {
    chain.retain(|&m| m != member);
    chain.insert(0, member);
}

/// Emits the blocks of the prefix `start/len`, whose own chain is `chain`, with
/// `rules` (sorted) strictly inside it. A prefix every inner rule leaves unchanged is
/// one block; otherwise each half is done on its own and two equal halves are merged.
fn split<A: Bits>(
    start: A,
    len: u8,
    chain: &[u8],
    rules: &[Rule<A>],
    root: &[u8],
    chains: &mut Chains,
    out: &mut Vec<Block<A>>,
) {
    if len >= A::WIDTH || rules.iter().all(|r| chain.first() == Some(&r.member)) {
        if chain != root {
            out.push(Block {
                start,
                len,
                chain: chains.id(chain),
            });
        }
        return;
    }
    let half = len + 1;
    let right = start.or(A::half_bit(len));
    let cut = rules.partition_point(|r| r.start < right);
    let before = out.len();
    for (at, inside) in [(start, rules.get(..cut)), (right, rules.get(cut..))] {
        let inside = inside.unwrap_or_default();
        let mut own = chain.to_vec();
        let exact = inside.partition_point(|r| r.start == at && r.len == half);
        // Sorted by (start, len): the rule equal to this half, if any, comes first.
        for rule in inside.get(..exact).unwrap_or_default() {
            prepend(&mut own, rule.member);
        }
        split(
            at,
            half,
            &own,
            inside.get(exact..).unwrap_or_default(),
            root,
            chains,
            out,
        );
    }
    // Both halves one block each with one chain: the prefix is that block.
    if out.len() == before + 2 {
        if let (Some(a), Some(b)) = (out.get(before), out.get(before + 1)) {
            if a.len == half && b.len == half && a.chain == b.chain {
                let chain = a.chain;
                out.truncate(before);
                out.push(Block { start, len, chain });
            }
        }
    }
}

impl ClientRules {
    /// The decision for the client prefix `addr/source` (the ECS address with zero bits
    /// past SOURCE, or a packet's source address with its full length), for a set of a
    /// zone whose geo classes are `geo` (see [`crate::Zone::geo`]).
    #[must_use]
    pub fn decide_in_zone(&self, geo: Option<&GeoTable>, addr: IpAddr) -> Decision<'_> {
        match geo.filter(|_| !self.classes.is_empty()) {
            Some(table) => self.decide_by_class(table, addr),
            None => self.decide(addr),
        }
    }

    /// The decision of an `ip` set (its own blocks) for `addr`.
    #[must_use]
    pub fn decide(&self, addr: IpAddr) -> Decision<'_> {
        let (found, scope) = match addr {
            IpAddr::V4(a) => find(&self.v4, self.index.as_ref().map(|i| &i.v4[..]), u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                // An IPv4-mapped source (a dual-stack socket) is the IPv4 client.
                Some(v4) => find(&self.v4, self.index.as_ref().map(|i| &i.v4[..]), u32::from(v4)),
                None => find(&self.v6, self.index.as_ref().map(|i| &i.v6[..]), u128::from(a)),
            },
        };
        self.chain_decision(found, scope)
    }

    /// A geo set's decision: the class of the zone's block around `addr`, then this
    /// set's chain for the class.
    fn decide_by_class(&self, table: &GeoTable, addr: IpAddr) -> Decision<'_> {
        let (class, scope) = match addr {
            IpAddr::V4(a) => find(&table.v4, table.index.as_ref().map(|i| &i.v4[..]), u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => find(&table.v4, table.index.as_ref().map(|i| &i.v4[..]), u32::from(v4)),
                None => find(&table.v6, table.index.as_ref().map(|i| &i.v6[..]), u128::from(a)),
            },
        };
        let chain = class.and_then(|c| self.classes.get(c as usize).copied());
        let decision = self.chain_decision(chain, scope);
        // A class whose chain is `*` alone answers as no location does.
        Decision {
            matched: decision.matched && chain != Some(0),
            ..decision
        }
    }

    /// The decision for chain `chain` (`None`: no block, the `*` chain) over `scope`.
    fn chain_decision(&self, chain: Option<u32>, scope: u8) -> Decision<'_> {
        Decision {
            chain: self
                .chains
                .get(chain.unwrap_or(0) as usize)
                .map_or(&[][..], Vec::as_slice),
            scope,
            matched: chain.is_some(),
        }
    }

    /// The `*` decision, with no address to match (ECS SOURCE 0 is answered from the
    /// packet's source; this is for callers that have none).
    #[must_use]
    pub fn default_decision(&self) -> Decision<'_> {
        Decision {
            chain: self.chains.first().map_or(&[][..], Vec::as_slice),
            scope: 0,
            matched: false,
        }
    }

    /// Builds the first-level index for queries (large tables only).
    pub fn build_index(&mut self) {
        self.index = BlockIndex::of(&self.v4, &self.v6);
    }

    /// Blocks over both families (for sizing and metrics).
    #[must_use]
    pub fn block_count(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// The block around `addr` (its `chain` field) and its length; or, in no block, `None`
/// and the largest aligned prefix around `addr` that meets no block — found from the
/// nearest block on each side (blocks are aligned and do not overlap).
fn find<A: Bits>(blocks: &[Block<A>], buckets: Option<&[u32]>, addr: A) -> (Option<u32>, u8) {
    // With an index: every block before the bucket's first starts before `addr`, every
    // block from the next bucket's first after it, so the partition point is in between.
    let (lo, hi) = buckets
        .and_then(|b| Some((*b.get(addr.top16())? as usize, *b.get(addr.top16() + 1)? as usize)))
        .filter(|&(lo, hi)| lo <= hi && hi <= blocks.len())
        .unwrap_or((0, blocks.len()));
    let at = lo
        + blocks
            .get(lo..hi)
            .unwrap_or_default()
            .partition_point(|b| b.start <= addr);
    let prev = at.checked_sub(1).and_then(|i| blocks.get(i));
    if let Some(block) = prev.filter(|b| addr.clear(A::host_mask(b.len)) == b.start) {
        return (Some(block.chain), block.len);
    }
    let mut scope = 0;
    if let Some(prev) = prev {
        let last = prev.start.or(A::host_mask(prev.len));
        scope = scope.max(addr.common_prefix(last) + 1);
    }
    if let Some(next) = blocks.get(at) {
        scope = scope.max(addr.common_prefix(next.start) + 1);
    }
    (None, scope.min(A::WIDTH))
}

/// The longest ECS SOURCE used for a decision in `family` (1: IPv4, 2: IPv6).
#[must_use]
pub fn ecs_cap(family: u16) -> u8 {
    if family == 1 {
        ECS_MAX_SOURCE_V4
    } else {
        ECS_MAX_SOURCE_V6
    }
}

/// The client address a query is decided by, and whether a SCOPE is echoed: the ECS
/// prefix (SOURCE capped at /24 and /56, bits past it cleared) when the query carries
/// one with SOURCE > 0, else the packet's `source` (RFC 7871 §7.1.2: SOURCE 0 asks that
/// no client address be used; the server answers for the address it sees, scope 0).
#[must_use]
pub fn client_prefix(ecs: Option<(IpAddr, u8)>, source: IpAddr) -> IpAddr {
    match ecs {
        Some((IpAddr::V4(a), len)) if len > 0 => {
            let len = len.min(ECS_MAX_SOURCE_V4);
            IpAddr::V4(Ipv4Addr::from(u32::from(a).clear(u32::host_mask(len))))
        }
        Some((IpAddr::V6(a), len)) if len > 0 => {
            let len = len.min(ECS_MAX_SOURCE_V6);
            IpAddr::V6(Ipv6Addr::from(u128::from(a).clear(u128::host_mask(len))))
        }
        _ => source,
    }
}

#[cfg(test)]
mod tests;
