//! Tails over [`qdns_abi::answer::TAIL_MAX`] octets: the compiler's form of them ([`Tail`]), the large and
//! medium tables they go to, sharing identical ones, and the pointer fix-ups that let one
//! tail serve every question below a name.
use qdns_abi::answer::{
    AnswerValue, LargeTail, MediumTail, PolicyKey, SmallTail, FIXUPS_MAX, KIND_PLAIN, KIND_REFERRAL, LARGE_TAIL_MAX,
    MEDIUM_MAX, MEDIUM_TAIL_MAX, PLAIN_LARGE, PLAIN_MEDIUM, SMALL_MAX, SMALL_TAIL_MAX, WIRE_NAME_MAX,
};

use super::{engine_answer, engine_answer_signed, Answer, Table, HEADER_LEN};
use crate::engine::Engine;

/// The small table being compiled: tails of [`qdns_abi::answer::TAIL_MAX`] + 1 to
/// [`SMALL_TAIL_MAX`] octets, each stored once — identical answers under many names
/// share one tail — and each zone's negative SOA, which all its node entries carry: one
/// entry of its own per zone, never shared with another zone or an answer, so a serial
/// change is one entry rewritten in place (a table patch, `xdp::patch`, does just that).
#[derive(Default)]
pub(super) struct SmallTails {
    /// The tails, by id (less [`SmallTails::first`]).
    pub(super) tails: Vec<(PolicyKey, Tail)>,
    /// Each answer tail's id.
    index: foldhash::HashMap<Vec<u8>, u32>,
    /// Each zone's negative SOA (by apex): its id and bytes.
    pub(super) negatives: Negatives,
    /// Negative SOA ids whose bytes changed from the ones [`SmallTails::seeded`] was given.
    pub(super) rewritten: Vec<u32>,
    /// The id of `tails[0]`: 0 for a generation; for a patch, the installed one's length.
    first: u32,
}

/// Each zone's negative SOA entry in the small table, by apex: its id and bytes.
pub type Negatives = std::collections::HashMap<Box<[u8]>, (u32, Vec<u8>)>;

impl SmallTails {
    /// A small table that continues one of `first` entries whose zones' negative SOAs
    /// are `negatives`: new tails get ids from `first` on.
    pub(super) fn seeded(first: u32, negatives: Negatives) -> SmallTails {
        SmallTails {
            negatives,
            first,
            ..SmallTails::default()
        }
    }

    /// The id of answer tail `bytes` (at most [`SMALL_TAIL_MAX`] octets), added when
    /// new; `None` when too long or the table is full (the entry passes).
    pub(super) fn id(&mut self, generation: u32, bytes: &[u8]) -> Option<u32> {
        if bytes.len() > SMALL_TAIL_MAX {
            return None;
        }
        if let Some(&id) = self.index.get(bytes) {
            return Some(id);
        }
        let id = self.push(generation, bytes)?;
        self.index.insert(bytes.to_vec(), id);
        Some(id)
    }

    /// The id of the negative SOA `bytes` of the zone at `apex`: the zone's entry, its
    /// bytes replaced (and the id noted in [`SmallTails::rewritten`]) when they differ.
    pub(super) fn negative(&mut self, generation: u32, apex: &[u8], bytes: &[u8]) -> Option<u32> {
        if bytes.len() > SMALL_TAIL_MAX {
            return None;
        }
        if let Some((id, held)) = self.negatives.get_mut(apex) {
            if held != bytes {
                *held = bytes.to_vec();
                self.rewritten.push(*id);
            }
            return Some(*id);
        }
        let id = self.push(generation, bytes)?;
        self.negatives.insert(apex.into(), (id, bytes.to_vec()));
        Some(id)
    }

    fn push(&mut self, generation: u32, bytes: &[u8]) -> Option<u32> {
        let id = u32::try_from(self.tails.len())
            .ok()
            .and_then(|n| n.checked_add(self.first))
            .filter(|&n| n < SMALL_MAX)?;
        self.tails.push((PolicyKey { generation, id }, large_tail(bytes, &[])));
        Some(id)
    }
}

/// Identical large tails once (a name's ANY answer and its set's, the same set under
/// several names): records point at the first, and records left identical by that are
/// shared in turn by `pack`.
pub(super) fn share_large_tails(table: &mut Table, generation: u32) {
    let mut remap = Vec::with_capacity(table.large.len());
    let mut kept: Vec<usize> = Vec::new();
    {
        let mut first: foldhash::HashMap<&Tail, u32> = foldhash::HashMap::default();
        for (at, (_, tail)) in table.large.iter().enumerate() {
            let id = *first.entry(tail).or_insert_with(|| {
                kept.push(at);
                (kept.len() - 1) as u32
            });
            remap.push(id);
        }
    }
    if kept.len() == table.large.len() {
        return;
    }
    let mut old: Vec<Option<Tail>> = std::mem::take(&mut table.large)
        .into_iter()
        .map(|(_, tail)| Some(tail))
        .collect();
    table.large = kept
        .iter()
        .enumerate()
        .filter_map(|(id, &at)| {
            let tail = old.get_mut(at)?.take()?;
            Some((
                PolicyKey {
                    generation,
                    id: id as u32,
                },
                tail,
            ))
        })
        .collect();
    for (_, value) in &mut table.answers {
        let uses_large = value.node_flags & PLAIN_LARGE != 0 && matches!(value.kind, KIND_PLAIN | KIND_REFERRAL);
        if let (true, Some(&id)) = (uses_large, remap.get(value.policy as usize)) {
            value.policy = id;
        }
    }
}

/// Moves the large tails a medium entry holds — at most `MEDIUM_TAIL_MAX` octets, no
/// pointer to relocate, used by plain answers only — to the medium table, a quarter of
/// the memory each: most of a signed zone's answers (an AAAA and its RRSIG, an A under
/// a zone name over ~18 octets) are just over the 128 octets a small-table entry holds.
/// Runs after `share_large_tails`, so identical tails are one entry here too.
pub(super) fn split_medium_tails(table: &mut Table, generation: u32) {
    let uses_large = |v: &AnswerValue| v.node_flags & PLAIN_LARGE != 0 && matches!(v.kind, KIND_PLAIN | KIND_REFERRAL);
    // Per large tail: its length (from the entries using it: identical tails, one
    // length), and whether anything but a plain answer uses it.
    let mut fits = vec![true; table.large.len()];
    let mut lens = vec![0usize; table.large.len()];
    for (_, value) in table.answers.iter().filter(|(_, v)| uses_large(v)) {
        let id = value.policy as usize;
        if let (Some(fit), Some(len)) = (fits.get_mut(id), lens.get_mut(id)) {
            *len = (*len).max(usize::from(value.tail_len));
            *fit &= value.kind == KIND_PLAIN;
        }
    }
    let mut remap: Vec<Option<(bool, u32)>> = vec![None; table.large.len()];
    let mut large = Vec::with_capacity(table.large.len());
    let mut medium = Vec::new();
    for (id, (_, tail)) in std::mem::take(&mut table.large).into_iter().enumerate() {
        let len = lens[id];
        let to_medium = fits[id]
            && tail.fixups.is_empty()
            && (1..=MEDIUM_TAIL_MAX).contains(&len)
            && tail.bytes.len() <= MEDIUM_TAIL_MAX
            && medium.len() < MEDIUM_MAX as usize;
        if to_medium {
            let at = medium.len() as u32;
            remap[id] = Some((true, at));
            medium.push((PolicyKey { generation, id: at }, tail));
        } else {
            let at = large.len() as u32;
            remap[id] = Some((false, at));
            large.push((PolicyKey { generation, id: at }, tail));
        }
    }
    table.large = large;
    table.medium = medium;
    for (_, value) in &mut table.answers {
        if !uses_large(value) {
            continue;
        }
        if let Some(Some((to_medium, at))) = remap.get(value.policy as usize).copied() {
            value.policy = at;
            if to_medium {
                value.node_flags = value.node_flags & !PLAIN_LARGE | PLAIN_MEDIUM;
            }
        }
    }
}

/// A tail over [`qdns_abi::answer::TAIL_MAX`] octets as the compiler keeps it: its bytes and the offsets
/// of its relocatable pointers, not the 2 KiB (or 512-octet) array of the kernel's
/// entry — a signed zone has one or more per name, and the compiler holds them all.
/// The loader makes the entries ([`Tail::large`], [`Tail::medium`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tail {
    /// The tail (≤ [`LARGE_TAIL_MAX`] octets).
    pub bytes: Vec<u8>,
    /// Offsets of its relocatable pointers (≤ [`FIXUPS_MAX`]).
    pub fixups: Vec<u16>,
}

impl Tail {
    /// The large-table entry.
    #[must_use]
    pub fn large(&self) -> LargeTail {
        let mut big = LargeTail {
            tail: [0; LARGE_TAIL_MAX],
            fixups: [0; FIXUPS_MAX],
            fixups_len: self.fixups.len().min(FIXUPS_MAX) as u16,
            fixups_odd: self.fixups.iter().take(FIXUPS_MAX).filter(|&&at| at % 2 == 1).count() as u16,
            pad: 0,
        };
        let len = self.bytes.len().min(LARGE_TAIL_MAX);
        big.tail[..len].copy_from_slice(&self.bytes[..len]);
        let pointers = self.fixups.len().min(FIXUPS_MAX);
        big.fixups[..pointers].copy_from_slice(&self.fixups[..pointers]);
        big
    }

    /// The small-table entry.
    #[must_use]
    pub fn small(&self) -> SmallTail {
        SmallTail { tail: self.padded() }
    }

    /// The medium-table entry (its pointers, which a medium tail never has, dropped).
    #[must_use]
    pub fn medium(&self) -> MediumTail {
        MediumTail { tail: self.padded() }
    }

    /// The bytes in an `N`-octet array, zero-filled (cut at `N`: callers chose the
    /// class by length).
    fn padded<const N: usize>(&self) -> [u8; N] {
        let mut out = [0; N];
        let len = self.bytes.len().min(N);
        out[..len].copy_from_slice(&self.bytes[..len]);
        out
    }
}

/// A large tail holding `tail` (≤ [`LARGE_TAIL_MAX`]) and the offsets of its
/// relocatable pointers (≤ [`FIXUPS_MAX`]; callers check both).
pub(super) fn large_tail(tail: &[u8], fixups: &[u16]) -> Tail {
    Tail {
        bytes: tail.to_vec(),
        fixups: fixups.to_vec(),
    }
}

/// The id of the next large-tail entry (its index in the generation's array), while
/// the table has room for it.
pub(super) fn large_id(large: &[(PolicyKey, Tail)]) -> Option<u32> {
    u32::try_from(large.len())
        .ok()
        .filter(|&n| n < qdns_abi::answer::LARGE_MAX)
}

/// An answer that serves every question below a name once its compression pointers are
/// moved by the question's extra length.
pub(super) struct Relocatable {
    /// The engine's response to the name itself (without our OPT).
    pub(super) message: Vec<u8>,
    /// Its sections after the question.
    pub(super) tail: Vec<u8>,
    /// Where in the tail the pointers that move start (at most [`FIXUPS_MAX`]).
    pub(super) fixups: Vec<u16>,
}

/// The engine's answer for `name` and `rtype` as a [`Relocatable`], found by comparing
/// it with its answers for the names `prefixes` (2 and, when given, 7 octets longer than
/// `name`'s own first labels) put in front of `below`: each pointer moves by exactly
/// that much and nothing else changes (checked for both), or `None`. The first alone
/// already finds every pointer and requires every other octet equal; the second checks
/// the move again at another length. `signed`: the DO=1 answers of a signed zone.
pub(super) fn relocatable(
    engine: &Engine,
    (name, rtype, signed): (&[u8], u16, bool),
    below: &[u8],
    prefixes: (&[u8], Option<&[u8]>),
    out: &mut [u8],
) -> Option<Relocatable> {
    let longer = [prefixes.0, below].concat();
    let longest = prefixes.1.map(|prefix| [prefix, below].concat());
    let too_long = longest
        .as_ref()
        .is_some_and(|n| n.len() > WIRE_NAME_MAX || n.len() != name.len() + 7);
    if too_long || longer.len() > WIRE_NAME_MAX || longer.len() != name.len() + 2 {
        return None;
    }
    let mut tails = Vec::new();
    let mut first = None;
    for name in [Some(name), Some(&longer[..]), longest.as_deref()]
        .into_iter()
        .flatten()
    {
        let answer = if signed {
            engine_answer_signed(engine, name, rtype, out, None)
        } else {
            engine_answer(engine, name, rtype, out)
        };
        let Some(Answer::Fits(message)) = answer else {
            return None;
        };
        tails.push(message.get(HEADER_LEN + name.len() + 4..)?.to_vec());
        // The header must not change with the name (flags and counts).
        match &first {
            None => first = Some(message),
            Some(m) if m.get(2..12) == message.get(2..12) => {}
            Some(_) => return None,
        }
    }
    let tail = tails[0].clone();
    if tail.len() > LARGE_TAIL_MAX {
        return None;
    }
    let fixups = pointer_moves(&tail, &tails[1], 2)?;
    if fixups.len() > FIXUPS_MAX {
        return None;
    }
    if let Some(longest) = tails.get(2) {
        let mut moved = tail.clone();
        for &at in &fixups {
            let at = usize::from(at);
            let pointer = u16::from_be_bytes([moved[at], moved[at + 1]]) + 7;
            moved[at..at + 2].copy_from_slice(&pointer.to_be_bytes());
        }
        if moved != *longest {
            return None;
        }
    }
    Some(Relocatable {
        message: first?,
        tail,
        fixups,
    })
}

/// Where `longer` (the same tail for a question `delta` octets longer) has a
/// compression pointer moved by `delta`: the offsets of those pointers, when nothing
/// else differs.
pub(super) fn pointer_moves(tail: &[u8], longer: &[u8], delta: u16) -> Option<Vec<u16>> {
    if tail.len() != longer.len() {
        return None;
    }
    let mut fixups = Vec::new();
    let mut at = 0;
    while at < tail.len() {
        let word = |m: &[u8]| m.get(at..at + 2).map(|w| u16::from_be_bytes([w[0], w[1]]));
        match (word(tail), word(longer)) {
            (Some(a), Some(b)) if a >= 0xc000 && a.checked_add(delta) == Some(b) => {
                fixups.push(u16::try_from(at).ok()?);
                at += 2;
            }
            _ if tail[at] == longer[at] => at += 1,
            _ => return None,
        }
    }
    Some(fixups)
}
