//! Signed NXDOMAIN in XDP: the gaps between a closest encloser's children and the
//! pre-signed pieces their answers are made of.
//!
//! A name that does not exist in a signed zone has a closest encloser CE and, below it,
//! one child label `L` that is not a child of CE. Every such name whose child label falls
//! between the same two children of CE (in canonical order, RFC 4034 §6.1) gets the same
//! NXDOMAIN proof: the SOA and its RRSIG, the NSEC covering the name and the NSEC
//! covering `*.CE` (once when it is the same record), each with its RRSIGs. Only where
//! the question sits moves: the records' owners are compressed against the question
//! (CE or the apex, suffixes of it), so every pointer moves by the question's length.
//!
//! The compiler stores, per encloser, its gaps in [`GAPS_MAP`] (sorted by the key of the
//! child label each ends before) and the pieces in [`PIECES_MAP`]: the SOA piece (one
//! per zone), the NSEC piece of each gap and the wildcard's NSEC piece (one per
//! encloser, when it is another record). A piece's pointers into the question are stored
//! as written for a question of length 0 (the program adds the question's length), its
//! pointers into itself as written for the piece at the message's start (the program
//! adds where it lands, [`PIECE_INTERNAL`]): so a piece serves wherever it is placed.

/// Name of the gaps map (map-of-maps by bank, like the answer tables).
pub const GAPS_MAP: &str = "QDNS_GAPS_V1";
/// Name of the pieces map (map-of-maps by bank).
pub const PIECES_MAP: &str = "QDNS_PIECES_V1";
/// Octets of a piece (a power of two: the program's copy is masked to it).
pub const PIECE_MAX: usize = 256;
/// Pointers a piece may have to move.
pub const PIECE_FIXUPS: usize = 6;
/// The bit of a [`Piece`]'s fixup marking a pointer into the piece itself (written as
/// for the piece at the message's start: the program adds the piece's offset in the
/// message); others point into the question (the program adds its length).
pub const PIECE_INTERNAL: u16 = 0x8000;
/// Pieces of one answer: the SOA's, the covering NSEC's, the wildcard's NSEC's.
pub const GAP_PIECES: usize = 3;
/// A gap without a piece there (the wildcard's NSEC is the covering one).
pub const NO_PIECE: u32 = u32::MAX;
/// Most gaps of one encloser (its children and one): the search takes at most
/// [`GAP_STEPS`] steps.
pub const GAPS_PER_ENCLOSER: u32 = 1 << 20;
/// Steps of the program's binary search over an encloser's gaps.
pub const GAP_STEPS: usize = 21;
/// Most gaps and pieces in a generation.
pub const GAPS_MAX: u32 = 1 << 24;

/// An element of [`GAPS_MAP`]: the labels below one encloser before `key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gap {
    /// The [`label_key`] of the child this gap ends before (its last gap: all ones). A
    /// question whose label has this key passes (it may be that child, or share its
    /// first 16 octets).
    pub key: [u64; 2],
    /// The pieces in order (ids in [`PIECES_MAP`]); [`NO_PIECE`] for none. A gap whose
    /// first piece is [`NO_PIECE`] has no answer in the tables: its queries pass.
    pub pieces: [u32; GAP_PIECES],
    /// NSCOUNT of the answer (the records of its pieces).
    pub nscount: u16,
    /// Unused (0).
    pub pad: u16,
    /// The first gap of an encloser: how many gaps it has (others: 0).
    pub span: u32,
    /// Unused (0).
    pub pad2: u32,
}
const _: () = assert!(core::mem::size_of::<Gap>() == 40);

/// An element of [`PIECES_MAP`]: records of a signed NXDOMAIN's authority section.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Piece {
    /// The records, their compression pointers as for a question of length 0.
    pub bytes: [u8; PIECE_MAX],
    /// Offsets in `bytes` of the pointers to move, [`PIECE_INTERNAL`] set on those into
    /// the piece.
    pub fixups: [u16; PIECE_FIXUPS],
    /// Octets of `bytes` in use (1 to [`PIECE_MAX`]).
    pub len: u16,
    /// One's-complement sum of `bytes[..len]` as 16-bit words from an even offset.
    pub sum: u16,
    /// Entries of `fixups` in use.
    pub fixups_len: u16,
    /// Unused (0).
    pub pad: u16,
}
const _: () = assert!(core::mem::size_of::<Piece>() == PIECE_MAX + 2 * PIECE_FIXUPS + 8);

/// The key a label is ordered by: its first 16 octets, lowercase (the program's name
/// words are), zero-filled, as two big-endian words — so comparing keys as `(u64, u64)`
/// orders labels canonically (RFC 4034 §6.1), except that labels equal in their first
/// 16 octets (or differing only by trailing zero octets) have one key.
#[must_use]
pub fn label_key(label: &[u8]) -> [u64; 2] {
    let mut octets = [0u8; 16];
    for (slot, &octet) in octets.iter_mut().zip(label) {
        *slot = octet.to_ascii_lowercase();
    }
    let mut high = [0u8; 8];
    let mut low = [0u8; 8];
    high.copy_from_slice(&octets[..8]);
    low.copy_from_slice(&octets[8..]);
    [u64::from_be_bytes(high), u64::from_be_bytes(low)]
}

/// `a < b` as keys.
#[inline(always)]
#[must_use]
pub const fn key_less(a: [u64; 2], b: [u64; 2]) -> bool {
    a[0] < b[0] || (a[0] == b[0] && a[1] < b[1])
}

/// The key of the label whose length octet is octet `at` of the name words `name`
/// (little-endian words, see [`crate::name`]): what [`label_key`] gives for its octets.
#[inline(always)]
#[must_use]
pub fn key_at<const W: usize>(name: &[u64; W], at: usize) -> [u64; 2] {
    let len = ((name[(at / 8) & (W - 1)] >> (8 * (at & 7))) & 0xff) as usize;
    let first = at + 1;
    let high = octets_at(name, first).swap_bytes();
    let low = octets_at(name, first + 8).swap_bytes();
    // Octets past the label are zero in the key.
    let keep = |n: usize| -> u64 {
        if n >= 8 {
            u64::MAX
        } else {
            !(u64::MAX >> (8 * n as u32))
        }
    };
    [high & keep(len), low & keep(len.saturating_sub(8))]
}

/// The eight octets of `name` from octet `at` on (little-endian; octets past the last
/// word read as those of the first).
#[inline(always)]
fn octets_at<const W: usize>(name: &[u64; W], at: usize) -> u64 {
    let word = at / 8;
    let shift = 8 * (at & 7) as u32;
    let low = name[word & (W - 1)] >> shift;
    let high = if shift == 0 {
        0
    } else {
        name[(word + 1) & (W - 1)] << (64 - shift)
    };
    low | high
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::{words_of, NAME_WORDS};

    #[test]
    fn keys_read_from_name_words_are_the_labels_keys() {
        let name = b"\x03www\x13abcdefghijklmnopqrs\x01z\x07example\x03com\x00";
        let words = words_of::<NAME_WORDS>(name).unwrap();
        let start = 8 * NAME_WORDS - name.len();
        let mut at = 0;
        while name[at] != 0 {
            let len = usize::from(name[at]);
            let label = &name[at + 1..at + 1 + len];
            assert_eq!(key_at(&words, start + at), label_key(label), "{label:?}");
            at += len + 1;
        }
    }

    #[test]
    fn keys_order_labels_canonically() {
        let labels: [&[u8]; 8] = [b"\x00", b"-", b"0", b"a", b"a\x01", b"ab", b"b", b"zzzzzzzzzzzzzzzz"];
        for pair in labels.windows(2) {
            assert!(key_less(label_key(pair[0]), label_key(pair[1])), "{pair:?}");
        }
        assert_eq!(label_key(b"ABC"), label_key(b"abc"));
        assert_eq!(label_key(b"a"), label_key(b"a\x00"));
        assert_eq!(label_key(b"0123456789abcdefX"), label_key(b"0123456789abcdefY"));
    }
}
