//! The question name as 64-bit words: how the XDP program builds the right-aligned
//! lowercase name of [`crate::answer::AnswerValue::name`], its hash (the key) and the
//! checksum sum of the name without a loop over octets.
//!
//! Two widths: [`NAME_WORDS`] (eight words, 64 octets: the answer path every name of up
//! to 64 octets takes) and [`LONG_WORDS`] (32 words: the long-name stage, names up to
//! 255 octets). A name's hash is the same at either width (the fill words in front are
//! zero and the multipliers are aligned to the end), so one slot table serves both.
//!
//! Why by words: the per-octet loop (one bounds check, one load, one case fold and one
//! store per octet) was the largest single cost of the program. Eight unaligned loads
//! that each end on a known octet of the name, a SWAR case fold and a masked store do the
//! same work in a fixed number of steps the verifier walks once.
//!
//! Word `j` of a `W`-word key holds the name octets that end `8 * (W - 1 - j)` octets
//! before the end of the name ([`word_end`]); the program reads the eight packet octets ending there
//! (the ones before the name start belong to the DNS header, which is always in the
//! packet) and keeps the last [`word_end`] of them ([`keep_last`]). Words are handled as
//! little-endian loads: the first octet in memory is the low byte.
use crate::answer::{fold, LONG_NAME_MAX, NAME_MAX};

/// Words of a key name on the answer path (the window a record holds).
pub const NAME_WORDS: usize = NAME_MAX / 8;
/// Words of a name on the long-name stage.
pub const LONG_WORDS: usize = LONG_NAME_MAX / 8;
/// Words in front of a long name's window (see [`crate::answer::LongName`]).
pub const FRONT_WORDS: usize = LONG_WORDS - NAME_WORDS;

/// Where the name octets of word `word` of a `W`-word key end, counted from the start
/// of a name of `qlen` octets, or `None` when the word lies wholly in the zero fill in
/// front.
#[inline(always)]
#[must_use]
pub const fn word_end<const W: usize>(word: usize, qlen: usize) -> Option<usize> {
    let back = 8 * (W - 1 - word);
    if qlen > back {
        Some(qlen - back)
    } else {
        None
    }
}

/// Keeps the last `end` octets (all when `end >= 8`) of a little-endian word read from
/// the eight octets ending `end` octets into the name; the ones in front are zeroed.
#[inline(always)]
#[must_use]
pub const fn keep_last(raw: u64, end: usize) -> u64 {
    if end >= 8 {
        raw
    } else {
        raw & (u64::MAX << (8 * (8 - end)))
    }
}

/// ASCII lowercase of every octet of a word (SWAR: an octet gets 0x20 exactly when it is
/// in `A..=Z`). Label length octets are at most 63, below `A`, so they stay.
#[inline(always)]
#[must_use]
pub const fn lowercase_word(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = word & LOW7;
    // The high bit of each octet: set when the low seven bits are ≥ 'A' (0x41) ...
    let at_least_a = low + 0x3f3f_3f3f_3f3f_3f3f;
    // ... and when they are > 'Z' (0x5a).
    let above_z = low + 0x2525_2525_2525_2525;
    let upper = (at_least_a & !above_z) & !word & HIGH;
    word | (upper >> 2)
}

/// Odd multipliers of [`name_hash`], one per word of a [`LONG_WORDS`] key: the last
/// eight are the answer path's, the 24 in front are splitmix64 outputs made odd.
const HASH_MULTIPLIERS: [u64; LONG_WORDS] = multipliers();

const fn multipliers() -> [u64; LONG_WORDS] {
    let mut all = [0u64; LONG_WORDS];
    let mut state = 0x5eed_f00d_d05e_0001u64;
    let mut j = 0;
    while j < FRONT_WORDS {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        all[j] = (z ^ (z >> 31)) | 1;
        j += 1;
    }
    let mut k = 0;
    while k < NAME_WORDS {
        all[FRONT_WORDS + k] = WINDOW_MULTIPLIERS[k];
        k += 1;
    }
    all
}

/// The multipliers of the eight window words.
const WINDOW_MULTIPLIERS: [u64; NAME_WORDS] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
];

/// The 64-bit hash of a name's words that keys [`crate::answer::AnswerKey`]: a sum of
/// independent products (no dependency chain: a few cycles in the program). Two names
/// differing in one word never collide (the multipliers are odd, so invertible); the
/// loader finds any other collision among a generation's names and leaves those names to
/// user space, and the program checks the name in the value, so a query that only shares
/// the hash is never answered as another name.
#[inline(always)]
#[must_use]
pub const fn name_hash<const W: usize>(words: &[u64; W]) -> u64 {
    let mut hash = 0u64;
    let mut j = 0;
    while j < W {
        hash = hash.wrapping_add(words[j].wrapping_mul(HASH_MULTIPLIERS[LONG_WORDS - W + j]));
        j += 1;
    }
    hash
}

/// The words of a lowercase wire name of at most `8 * W` octets, right-aligned as the
/// program builds them (`None` when longer).
#[must_use]
pub fn words_of<const W: usize>(name: &[u8]) -> Option<[u64; W]> {
    let start = (8 * W).checked_sub(name.len())?;
    let mut words = [0u64; W];
    for (i, &octet) in name.iter().enumerate() {
        let at = start + i;
        words[at / 8] |= u64::from(octet) << (8 * (at % 8));
    }
    Some(words)
}

/// Adds a word to a sum of 16-bit words (in the word's little-endian order).
#[inline(always)]
#[must_use]
pub const fn add_word(acc: u64, word: u64) -> u64 {
    acc + (word & 0xffff_ffff) + (word >> 32)
}

/// The one's-complement sum of a `qlen`-octet name as big-endian 16-bit words from its
/// first octet (an even offset in the datagram), from `acc`, the [`add_word`] sum of
/// its right-aligned key words: little-endian words sum to the byte-swapped figure
/// (RFC 1071 §2(B)), and an odd fill in front shifts the name by one octet, which swaps
/// it back.
#[inline(always)]
#[must_use]
pub const fn name_sum(acc: u64, qlen: usize) -> u16 {
    let sum = fold(acc);
    // Both widths are even, so the fill in front is odd exactly when the name is.
    if qlen & 1 == 1 {
        sum
    } else {
        sum.swap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::sum_words;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    /// What the program does, over a buffer holding `header` octets and then the name,
    /// with `W` words.
    fn words_from<const W: usize>(buffer: &[u8], start: usize, qlen: usize) -> (Vec<u8>, u16) {
        let mut key = vec![0u8; 8 * W];
        let mut acc = 0;
        for j in 0..W {
            if let Some(end) = word_end::<W>(j, qlen) {
                // The program reads the eight octets ending there; octets before the
                // buffer (a long name's first word) count as the DNS header's zeros.
                let mut eight = [0u8; 8];
                for (k, slot) in eight.iter_mut().enumerate() {
                    if let Some(at) = (start + end + k).checked_sub(8) {
                        *slot = buffer[at];
                    }
                }
                let word = keep_last(u64::from_le_bytes(eight), end);
                acc = add_word(acc, word);
                key[j * 8..j * 8 + 8].copy_from_slice(&lowercase_word(word).to_le_bytes());
            }
        }
        (key, name_sum(acc, qlen))
    }

    fn name_strategy(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..=63), 0..=8).prop_map(move |labels| {
            let mut wire = Vec::new();
            for label in labels {
                if wire.len() + label.len() + 2 > max {
                    break;
                }
                wire.push(label.len() as u8);
                wire.extend(label);
            }
            wire.push(0);
            wire
        })
    }

    fn check_width<const W: usize>(name: &[u8], header: &[u8]) -> Result<(), TestCaseError> {
        let mut buffer = header.to_vec();
        buffer.extend(name);
        buffer.extend([0, 1, 0, 1]);
        let (key, sum) = words_from::<W>(&buffer, header.len(), name.len());
        let mut expected = vec![0u8; 8 * W];
        let fill = 8 * W - name.len();
        for (slot, byte) in expected[fill..].iter_mut().zip(name) {
            *slot = byte.to_ascii_lowercase();
        }
        prop_assert_eq!(&key, &expected);
        prop_assert_eq!(sum, fold(sum_words(name, 0)));
        // The loader's words of the lowercase name are the program's.
        let lower: Vec<u8> = name.iter().map(u8::to_ascii_lowercase).collect();
        let words = words_of::<W>(&lower).unwrap();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        prop_assert_eq!(bytes.as_slice(), &key[..]);
        Ok(())
    }

    proptest! {
        #[test]
        fn words_match_the_octet_loop(name in name_strategy(NAME_MAX), header in prop::collection::vec(any::<u8>(), 12)) {
            check_width::<NAME_WORDS>(&name, &header)?;
            check_width::<LONG_WORDS>(&name, &header)?;
        }

        #[test]
        fn long_words_match_the_octet_loop(name in name_strategy(255), header in prop::collection::vec(any::<u8>(), 12)) {
            check_width::<LONG_WORDS>(&name, &header)?;
        }

        #[test]
        fn lowercase_matches_ascii(word in any::<u64>()) {
            let expected = u64::from_le_bytes(word.to_le_bytes().map(|b| b.to_ascii_lowercase()));
            prop_assert_eq!(lowercase_word(word), expected);
        }
    }

    #[test]
    fn names_one_word_apart_never_collide() {
        let a = words_of::<NAME_WORDS>(b"\x05host1\x05bench\x04test\x00").unwrap();
        for j in 0..NAME_WORDS {
            for bit in 0..64 {
                let mut b = a;
                b[j] ^= 1 << bit;
                assert_ne!(name_hash(&a), name_hash(&b), "word {j} bit {bit}");
            }
        }
    }

    #[test]
    fn a_name_hashes_alike_at_both_widths() {
        let short = b"\x05host1\x05bench\x04test\x00";
        let narrow = words_of::<NAME_WORDS>(short).unwrap();
        let wide = words_of::<LONG_WORDS>(short).unwrap();
        assert_eq!(&wide[FRONT_WORDS..], &narrow[..]);
        assert!(wide[..FRONT_WORDS].iter().all(|&w| w == 0));
        assert_eq!(name_hash(&narrow), name_hash(&wide));
        // A long name: every front word counts, one bit apart never collides.
        let mut long = std::vec::Vec::new();
        for _ in 0..4 {
            long.push(60);
            long.extend([b'a'; 60]);
        }
        long.push(0);
        assert_eq!(long.len(), 245);
        assert!(words_of::<NAME_WORDS>(&long).is_none());
        let a = words_of::<LONG_WORDS>(&long).unwrap();
        for j in 0..LONG_WORDS {
            let mut b = a;
            b[j] ^= 1 << 17;
            assert_ne!(name_hash(&a), name_hash(&b), "word {j}");
        }
        assert!(HASH_MULTIPLIERS.iter().all(|m| m & 1 == 1));
    }

    #[test]
    fn every_octet_folds_like_ascii() {
        for byte in 0..=255u8 {
            let word = u64::from_le_bytes([byte; 8]);
            assert_eq!(
                lowercase_word(word).to_le_bytes(),
                [byte.to_ascii_lowercase(); 8],
                "{byte:#x}"
            );
        }
    }
}
