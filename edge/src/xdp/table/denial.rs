//! Signed NXDOMAIN answers for the program (layouts in `qdns_abi::denial`): per closest
//! encloser, the gaps between its children and, per gap, the pieces the engine's answer
//! is made of — the SOA's (one per zone), the covering NSEC's and the wildcard's NSEC's
//! (one per encloser), shared wherever their bytes are the same.
//!
//! Every name in a gap gets the same answer but for where its question sits: the NSEC
//! covering it is the same (the labels below its child label change nothing in the
//! canonical order of the zone's names), so is the wildcard's, and the engine compresses
//! the records' owners against the question's suffixes (the encloser, the apex) or the
//! piece's own names. Each gap's answer is the engine's own, asked for a representative
//! name in it and checked against names 2 and 7 octets longer below it (every pointer
//! moves by exactly that, nothing else changes); its pointers are stored as for a
//! question of length 0.
use std::collections::HashMap;

use qdns_abi::{
    answer::{fold, sum_words, NAME_MAX, WILDCARD_SALT},
    denial::{
        label_key, Gap, Piece, GAPS_MAX, GAPS_PER_ENCLOSER, GAP_PIECES, NO_PIECE, PIECE_FIXUPS, PIECE_INTERNAL,
        PIECE_MAX,
    },
};

use super::{
    key, owned_by_question, pass, relocatable, AnswerKey, AnswerValue, Compiler, Relocatable, DO_SALT, HEADER_LEN,
    KIND_PLAIN, OPT_LEN,
};

/// The NSEC type (RFC 4034 §4).
const NSEC: u16 = 47;
/// The SOA type.
const SOA: u16 = 6;
/// Longest label (RFC 1035 §2.3.4).
const LABEL_MAX: usize = 63;
/// Header flags of an authoritative NXDOMAIN: QR, AA, RCODE 3.
const NXDOMAIN_FLAGS: u16 = 0x8403;
/// Header flags of an authoritative answer: QR, AA.
const ANSWER_FLAGS: u16 = 0x8400;

/// The gaps and pieces made so far.
#[derive(Default)]
pub(super) struct Denials {
    pub(super) gaps: Vec<Gap>,
    pub(super) pieces: Vec<Piece>,
    ids: HashMap<Piece, u32>,
    /// Per encloser of a signed zone's wildcard, a type the wildcard has whose answer
    /// is static (the gaps' proofs are taken from its synthesis).
    pub(super) wildcards: HashMap<Vec<u8>, u16>,
}

/// Each name's children (their first labels, lowercase), sorted canonically: from every
/// exported name and its ancestors, so empty non-terminals and names the tables do not
/// hold count too (a question with such a label has its key and passes).
pub(super) fn children<'n>(names: impl Iterator<Item = &'n [u8]>) -> HashMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut children: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
    for name in names {
        let mut at = 0;
        while let Some(&len) = name.get(at) {
            let len = usize::from(len);
            if len == 0 || len > LABEL_MAX {
                break;
            }
            let (Some(label), Some(parent)) = (name.get(at + 1..at + 1 + len), name.get(at + 1 + len..)) else {
                break;
            };
            children
                .entry(parent.to_ascii_lowercase())
                .or_default()
                .push(label.to_ascii_lowercase());
            at += 1 + len;
        }
    }
    for labels in children.values_mut() {
        labels.sort_unstable();
        labels.dedup();
    }
    children
}

/// A label that sorts after `prev` and before `next` (RFC 4034 §6.1: octet strings, a
/// prefix first): the first one after `prev` (a zero octet added), or `None` when the gap
/// holds no label.
fn between(prev: Option<&[u8]>, next: Option<&[u8]>) -> Option<Vec<u8>> {
    let label = match prev {
        None => vec![0],
        Some(prev) if prev.len() < LABEL_MAX => [prev, &[0]].concat(),
        Some(_) => return None,
    };
    next.is_none_or(|next| label.as_slice() < next).then_some(label)
}

impl Compiler<'_> {
    /// The gaps below `encloser` (a name of a signed zone whose missing children get
    /// NXDOMAIN, or with `wildcard`, a type its `*` child has, the wildcard's answers),
    /// given its sorted child labels: the index of its first gap, or `None` when no
    /// gap's answer fits the tables (its queries pass, `pass_signed_gap`).
    pub(super) fn denial(&mut self, encloser: &[u8], children: &[Vec<u8>], wildcard: Option<u16>) -> Option<u32> {
        let gaps = u32::try_from(children.len() + 1)
            .ok()
            .filter(|&n| n <= GAPS_PER_ENCLOSER)?;
        let base = u32::try_from(self.denials.gaps.len()).ok()?;
        if u64::from(base) + u64::from(gaps) > u64::from(GAPS_MAX) {
            return None;
        }
        let mut any = false;
        for j in 0..=children.len() {
            let next = children.get(j).map(Vec::as_slice);
            let prev = j.checked_sub(1).and_then(|i| children.get(i)).map(Vec::as_slice);
            let answer = between(prev, next).and_then(|label| match wildcard {
                None => self.gap_answer(encloser, &label),
                Some(rtype) => self.gap_synthesis(encloser, &label, rtype),
            });
            any |= answer.is_some();
            let (pieces, nscount) = answer.unwrap_or(([NO_PIECE; GAP_PIECES], 0));
            self.denials.gaps.push(Gap {
                key: next.map_or([u64::MAX; 2], label_key),
                pieces,
                nscount,
                pad: 0,
                span: if j == 0 { gaps } else { 0 },
                pad2: 0,
            });
        }
        if !any {
            self.denials.gaps.truncate(base as usize);
            return None;
        }
        Some(base)
    }

    /// The pieces of the NXDOMAIN for `label` below `encloser` and its NSCOUNT.
    fn gap_answer(&mut self, encloser: &[u8], label: &[u8]) -> Option<([u32; GAP_PIECES], u16)> {
        let name = [&[u8::try_from(label.len()).ok()?][..], label, encloser].concat();
        let Relocatable { message, tail, fixups } = relocatable(
            self.engine,
            (&name, 1, true),
            &name,
            // One longer name: every pointer moves by 2 and nothing else changes, which
            // is all the relocation needs (the second check cost 0.4 of the gaps' 1.8 s
            // of table compile at 100,000 signed names, measured).
            (b"\x01x", None),
            &mut self.scratch,
        )?;
        let count = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        let flags = u16::from_be_bytes([message[2], message[3]]);
        if flags != NXDOMAIN_FLAGS || count(1) != 0 || count(3) != 0 {
            return None;
        }
        // The program answers questions of up to NAME_MAX octets.
        if HEADER_LEN + NAME_MAX + 4 + tail.len() + OPT_LEN
            > self.limits.max_message.min(qdns_abi::answer::RESPONSE_MAX)
        {
            return None;
        }
        let records = records(&tail)?;
        if records.len() != usize::from(count(2)) || records.first().map(|r| r.1) != Some(SOA) {
            return None;
        }
        // SOA and RRSIG | NSEC and RRSIGs | the wildcard's NSEC and RRSIGs.
        let mut cuts: Vec<usize> = records.iter().filter(|r| r.1 == NSEC).map(|r| r.0).collect();
        if cuts.is_empty() || cuts.len() > 2 {
            return None;
        }
        cuts.insert(0, 0);
        cuts.push(tail.len());
        let question_end = HEADER_LEN + name.len();
        let mut pieces = [NO_PIECE; GAP_PIECES];
        for (i, range) in cuts.windows(2).enumerate() {
            let (start, end) = (range[0], range[1]);
            let piece = self.piece(&tail, start..end, &fixups, (question_end, name.len()))?;
            *pieces.get_mut(i)? = piece;
        }
        Some((pieces, count(2)))
    }

    /// The piece of `tail[range]` (its pointers those of `fixups` inside it, each to the
    /// question or into the piece itself), its pointers lowered by the question length
    /// or the piece's offset: its id, shared with an identical piece.
    fn piece(
        &mut self,
        tail: &[u8],
        range: std::ops::Range<usize>,
        fixups: &[u16],
        (question_end, qlen): (usize, usize),
    ) -> Option<u32> {
        let bytes = tail.get(range.clone())?;
        if bytes.is_empty() || bytes.len() > PIECE_MAX {
            return None;
        }
        let mut piece = Piece {
            bytes: [0; PIECE_MAX],
            fixups: [0; PIECE_FIXUPS],
            len: bytes.len() as u16,
            sum: 0,
            fixups_len: 0,
            pad: 0,
        };
        piece.bytes[..bytes.len()].copy_from_slice(bytes);
        // Where the piece starts in the message.
        let at = question_end + 4 + range.start;
        for &fixup in fixups.iter().filter(|&&f| range.contains(&usize::from(f))) {
            let offset = usize::from(fixup) - range.start;
            let pointer = u16::from_be_bytes([piece.bytes[offset], piece.bytes[offset + 1]]);
            let target = usize::from(pointer & 0x3fff);
            // Into the question (lowered by its length), or into this piece (lowered by
            // where the piece is: pieces are shared and placed anywhere); nothing else.
            let (lower, class) = if (HEADER_LEN..question_end).contains(&target) {
                (qlen, 0)
            } else if (at..at + bytes.len()).contains(&target) {
                (at, PIECE_INTERNAL)
            } else {
                return None;
            };
            let slot = piece.fixups.get_mut(usize::from(piece.fixups_len))?;
            *slot = offset as u16 | class;
            piece.fixups_len += 1;
            let lowered = pointer.checked_sub(u16::try_from(lower).ok()?)?;
            piece.bytes[offset..offset + 2].copy_from_slice(&lowered.to_be_bytes());
        }
        piece.sum = fold(sum_words(&piece.bytes[..bytes.len()], 0));
        if let Some(&id) = self.denials.ids.get(&piece) {
            return Some(id);
        }
        let id = u32::try_from(self.denials.pieces.len())
            .ok()
            .filter(|&id| id < GAPS_MAX)?;
        self.denials.pieces.push(piece);
        self.denials.ids.insert(piece, id);
        Some(id)
    }
}

impl Compiler<'_> {
    /// The engine's DO=1 answer synthesised from the wildcard below `encloser` for the
    /// name `label` + `encloser` and `rtype` (a type the wildcard has), checked
    /// relocatable: the message, its tail, the pointers to move and where the answer
    /// section ends in the tail; `None` unless an authoritative answer with records, a
    /// proof (one NSEC with its RRSIGs) and no additional section.
    fn synthesis(&mut self, encloser: &[u8], label: &[u8], rtype: u16) -> Option<(Relocatable, usize)> {
        let name = [&[u8::try_from(label.len()).ok()?][..], label, encloser].concat();
        let answer = relocatable(
            self.engine,
            (&name, rtype, true),
            &name,
            (b"\x01x", None),
            &mut self.scratch,
        )?;
        let message = &answer.message;
        let count = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        let flags = u16::from_be_bytes([message[2], message[3]]);
        if flags != ANSWER_FLAGS || count(1) == 0 || count(2) == 0 || count(3) != 0 {
            return None;
        }
        if HEADER_LEN + NAME_MAX + 4 + answer.tail.len() + OPT_LEN
            > self.limits.max_message.min(qdns_abi::answer::RESPONSE_MAX)
        {
            return None;
        }
        let records = records(&answer.tail)?;
        let answers = usize::from(count(1));
        let proof = records.get(answers..)?;
        if records.len() != answers + usize::from(count(2))
            || proof.first().map(|r| r.1) != Some(NSEC)
            || proof.iter().filter(|r| r.1 == NSEC).count() != 1
        {
            return None;
        }
        let end = proof.first()?.0;
        Some((answer, end))
    }

    /// A gap's piece below a wildcard's encloser: the NSEC covering its names (for
    /// `rtype`'s answer, which any type the wildcard has would do: the proof is the
    /// name's) and NSCOUNT.
    fn gap_synthesis(&mut self, encloser: &[u8], label: &[u8], rtype: u16) -> Option<([u32; GAP_PIECES], u16)> {
        let (Relocatable { message, tail, fixups }, end) = self.synthesis(encloser, label, rtype)?;
        let qlen = 1 + label.len() + encloser.len();
        let nsec = self.piece(&tail, end..tail.len(), &fixups, (HEADER_LEN + qlen, qlen))?;
        let nscount = u16::from_be_bytes([message[8], message[9]]);
        Some(([nsec, NO_PIECE, NO_PIECE], nscount))
    }

    /// The entry of the wildcard `wildcard`'s synthesised answer for `rtype` (DO=1): its
    /// answer section as a piece (the same for every name the wildcard covers: owned by
    /// the question, no pointer that moves), under the wildcard's key with
    /// [`DO_SALT`] and [`WILDCARD_SALT`] mixed in; `None` when it is not such a section.
    pub(super) fn wildcard_answer(&mut self, wildcard: &[u8], rtype: u16) -> Option<(AnswerKey, AnswerValue)> {
        let encloser = wildcard.strip_prefix(b"\x01*")?;
        // A label no zone holds beside a wildcard (checked: the answer must be a
        // synthesis, with its proof).
        let (Relocatable { message, tail, fixups }, end) = self.synthesis(encloser, b"\x00", rtype)?;
        let count = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        let section = tail.get(..end)?;
        if fixups.iter().any(|&f| usize::from(f) < end) || !owned_by_question(section, count(1)) {
            return None;
        }
        let qlen = 2 + encloser.len();
        let id = self.piece(&tail, 0..end, &[], (HEADER_LEN + qlen, qlen))?;
        let (key, _) = key(self.generation, rtype, wildcard)?;
        let mut value = pass(KIND_PLAIN);
        value.flags = ANSWER_FLAGS;
        value.ancount = count(1);
        value.policy = id;
        Some((
            AnswerKey {
                hash: key.hash ^ DO_SALT ^ WILDCARD_SALT,
                ..key
            },
            value,
        ))
    }
}

/// Where each record of `tail` starts and its type; `None` if it is not a run of whole
/// records.
fn records(tail: &[u8]) -> Option<Vec<(usize, u16)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < tail.len() {
        let start = at;
        // The owner: labels up to the root or a pointer.
        loop {
            let len = *tail.get(at)?;
            match len {
                0 => {
                    at += 1;
                    break;
                }
                0xc0..=0xff => {
                    at += 2;
                    break;
                }
                1..=0x3f => at += 1 + usize::from(len),
                _ => return None,
            }
        }
        let fixed = tail.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        at += 10 + rdlen;
        if at > tail.len() {
            return None;
        }
        out.push((start, rtype));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_between_children_sort_between_them() {
        type Case<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
        let cases: [Case<'_>; 4] = [
            (None, Some(b"a")),
            (Some(b"a"), Some(b"b")),
            (Some(b"a"), None),
            (None, None),
        ];
        for (prev, next) in cases {
            let label = between(prev, next).unwrap();
            assert!(prev.is_none_or(|p| p < label.as_slice()), "{prev:?} {label:?}");
            assert!(next.is_none_or(|n| label.as_slice() < n), "{next:?} {label:?}");
        }
        // Nothing sorts between a label and itself with a zero octet added, or before
        // the zero octet.
        assert_eq!(between(Some(b"a"), Some(b"a\x00")), None);
        assert_eq!(between(None, Some(b"\x00")), None);
    }

    #[test]
    fn children_include_empty_non_terminals() {
        let names: [&[u8]; 2] = [b"\x01a\x01b\x07example\x00", b"\x03WWW\x07example\x00"];
        let children = children(names.into_iter());
        assert_eq!(
            children[&b"\x07example\x00".to_vec()],
            vec![b"b".to_vec(), b"www".to_vec()]
        );
        assert_eq!(children[&b"\x01b\x07example\x00".to_vec()], vec![b"a".to_vec()]);
    }
}
