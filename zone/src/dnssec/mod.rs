//! DNSSEC (RFC 4033–4035, RFC 6840): what a signed zone carries in the snapshot, the
//! canonical name order, and the key every possible answer's signature is found by.
//!
//! Control signs (see [`sign`]); the edge only copies signatures. Health never changes
//! which *names* exist, only which of a set's precomputed answers is given, so control
//! signs every answer a policy set can give ([`answers`]) and the NSEC chain once; the
//! edge finds an answer's RRSIG by the (owner, type, [`answer_key`]) of the records it
//! wrote.
use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

pub mod answers;
pub mod keys;
pub mod sign;
#[cfg(test)]
mod tests;

pub use keys::{Algorithm, KeyState, Nonces, ZoneKey};
pub use sign::{sign_answer, sign_zone, sign_zone_reusing, SignError, SignOptions};

/// RR type codes used here.
pub mod rtype {
    /// SOA.
    pub const SOA: u16 = 6;
    /// NS.
    pub const NS: u16 = 2;
    /// CNAME.
    pub const CNAME: u16 = 5;
    /// DS.
    pub const DS: u16 = 43;
    /// RRSIG.
    pub const RRSIG: u16 = 46;
    /// NSEC.
    pub const NSEC: u16 = 47;
    /// DNSKEY.
    pub const DNSKEY: u16 = 48;
    /// NSEC3.
    pub const NSEC3: u16 = 50;
    /// NSEC3PARAM.
    pub const NSEC3PARAM: u16 = 51;
}

/// A zone's signing request and, once control signed it, its signatures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signatures {
    /// The algorithm the zone file asked for.
    pub algorithm: Algorithm,
    /// Seconds since the epoch the signatures are valid from (0: not signed yet).
    pub inception: u64,
    /// Seconds since the epoch the first of them expires (0: not signed yet). Edges
    /// warn well before it and report it as a metric.
    pub expiration: u64,
    /// Every RRSIG set: one per (owner, type, answer).
    pub sigs: Vec<Signature>,
}

impl Signatures {
    /// A zone that asks to be signed with `algorithm` and is not yet.
    #[must_use]
    pub fn requested(algorithm: Algorithm) -> Signatures {
        Signatures {
            algorithm,
            inception: 0,
            expiration: 0,
            sigs: Vec::new(),
        }
    }

    /// True once control signed the zone.
    #[must_use]
    pub fn is_signed(&self) -> bool {
        self.expiration != 0
    }
}

/// The RRSIG records of one answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// Owner of the signed set (wire, lowercase; `*.` for a wildcard).
    pub name: Vec<u8>,
    /// Type covered.
    pub rtype: u16,
    /// [`answer_key`] of the records the answer holds.
    pub key: u64,
    /// TTL the RRSIG records go out with (the set's).
    pub ttl: u32,
    /// RRSIG RDATA, one per signing key.
    pub rdata: Vec<Vec<u8>>,
}

/// The key of an answer: a hash of its records' RDATA, independent of their order (a
/// multivalue or zonal answer lists its members in health's order), and of the TTL it
/// goes out with (a set with a `degraded_ttl` is signed for both: the RRSIG's original
/// TTL must be the set's). The edge computes it over the records it wrote, control
/// over each answer it signs; both come here. Not a defence against collisions chosen
/// by an attacker: the zone's owner chooses the records.
#[must_use]
pub fn answer_key<'a>(rdatas: impl IntoIterator<Item = &'a [u8]>, ttl: u32) -> u64 {
    let mut key = AnswerKey {
        ttl: Some(ttl),
        ..AnswerKey::default()
    };
    for rdata in rdatas {
        key.add_rdata(rdata);
    }
    key.finish()
}

/// [`answer_key`] built one record at a time (the edge, as it writes them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerKey {
    sum: u64,
    count: u64,
    /// The TTL of the first record.
    ttl: Option<u32>,
}

impl AnswerKey {
    /// Adds one record as the engine stores it (TYPE CLASS TTL RDLENGTH RDATA).
    pub fn add_record(&mut self, record: &[u8]) {
        if self.ttl.is_none() {
            self.ttl = record.get(4..8).map(|t| u32::from_be_bytes([t[0], t[1], t[2], t[3]]));
        }
        self.add_rdata(record.get(10..).unwrap_or_default());
    }

    /// Adds one record's RDATA.
    pub fn add_rdata(&mut self, rdata: &[u8]) {
        // FNV-1a over the octets, then a SplitMix64 finaliser so sums of records do not
        // cancel; summed so the order of records does not matter.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &byte in rdata {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= rdata.len() as u64;
        self.sum = self.sum.wrapping_add(mix(h));
        self.count += 1;
    }

    /// Adds the records another part of the answer made (an alias member's).
    pub fn merge(&mut self, other: AnswerKey) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.count += other.count;
        self.ttl = self.ttl.or(other.ttl);
    }

    /// The key.
    #[must_use]
    pub fn finish(self) -> u64 {
        mix(self.sum ^ self.count.rotate_left(32) ^ u64::from(self.ttl.unwrap_or(0)).rotate_left(48))
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Most labels a name has (255 octets: 127 one-octet labels and the root).
const MAX_LABELS: usize = 128;

/// Where each label of a wire name starts, and how many there are (root excluded).
fn label_starts(name: &[u8]) -> ([u8; MAX_LABELS], usize) {
    let mut starts = [0u8; MAX_LABELS];
    let (mut pos, mut count) = (0usize, 0usize);
    while let Some(&len) = name.get(pos) {
        if len == 0 || count == MAX_LABELS {
            break;
        }
        starts[count] = pos as u8;
        count += 1;
        pos += 1 + usize::from(len);
    }
    (starts, count)
}

fn label(name: &[u8], at: u8) -> &[u8] {
    let at = usize::from(at);
    let len = usize::from(name.get(at).copied().unwrap_or(0));
    name.get(at + 1..at + 1 + len).unwrap_or_default()
}

/// Labels of a wire name, the root not counted.
#[must_use]
pub fn label_count(name: &[u8]) -> usize {
    label_starts(name).1
}

/// RFC 4034 §6.1 canonical order of two lowercase wire names: label by label from the
/// rightmost, each label compared as an octet string. Allocation-free (the edge calls
/// it per DO=1 negative answer).
#[must_use]
pub fn canonical_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (sa, na) = label_starts(a);
    let (sb, nb) = label_starts(b);
    for i in 1..=na.min(nb) {
        let order = label(a, sa[na - i]).cmp(label(b, sb[nb - i]));
        if order != Ordering::Equal {
            return order;
        }
    }
    na.cmp(&nb)
}

/// RFC 4034 Appendix B key tag of a DNSKEY RDATA.
#[must_use]
pub fn key_tag(dnskey_rdata: &[u8]) -> u16 {
    let mut ac: u32 = 0;
    for (i, &byte) in dnskey_rdata.iter().enumerate() {
        ac += if i & 1 == 1 {
            u32::from(byte)
        } else {
            u32::from(byte) << 8
        };
    }
    ac += (ac >> 16) & 0xffff;
    (ac & 0xffff) as u16
}
