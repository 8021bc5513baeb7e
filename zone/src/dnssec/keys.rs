//! Signing keys: generation, the DNSKEY and DS records, signing with ring — or, for
//! ECDSA P-256 where every control of a deployment must make the same octets for the
//! same data and key ([`Nonces::Deterministic`]), with the `p256` crate (RFC 6979).
//!
//! qdns uses one combined signing key (CSK, flags 257) per zone rather than a KSK/ZSK
//! pair: one DS at the parent, one key to roll, and a rollover is the double-signature
//! method (RFC 6781 §4.1.1.2, §4.1.2): the new key signs beside the old one until the
//! operator has put its DS at the parent, then the old one goes. ZSK pre-publication
//! exists to spare re-signing work; control signs every answer at compile anyway.
use p256::{ecdsa::signature::Signer as _, pkcs8::DecodePrivateKey as _};
use ring::{
    rand::SystemRandom,
    signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING},
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::key_tag;

/// DNSSEC algorithms control signs with (RFC 8624 §3.1: both MUST/RECOMMENDED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Algorithm {
    /// 13, ECDSA P-256 with SHA-256 (RFC 6605): the default.
    EcdsaP256Sha256,
    /// 15, Ed25519 (RFC 8080).
    Ed25519,
}

impl Algorithm {
    /// The algorithm number (IANA).
    #[must_use]
    pub fn number(self) -> u8 {
        match self {
            Algorithm::EcdsaP256Sha256 => 13,
            Algorithm::Ed25519 => 15,
        }
    }

    /// Its mnemonic, as the zone file names it.
    #[must_use]
    pub fn mnemonic(self) -> &'static str {
        match self {
            Algorithm::EcdsaP256Sha256 => "ECDSAP256SHA256",
            Algorithm::Ed25519 => "ED25519",
        }
    }

    /// From a zone file's `dnssec_algorithm` (case-insensitive mnemonic or number).
    #[must_use]
    pub fn parse(text: &str) -> Option<Algorithm> {
        match text.to_ascii_uppercase().as_str() {
            "ECDSAP256SHA256" | "13" => Some(Algorithm::EcdsaP256Sha256),
            "ED25519" | "15" => Some(Algorithm::Ed25519),
            _ => None,
        }
    }
}

/// Where a key is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyState {
    /// In the DNSKEY set and signing.
    Active,
    /// In the DNSKEY set and signing, the successor of an [`KeyState::Active`] key in
    /// a rollover: its DS goes to the parent before the old key is retired.
    Incoming,
}

/// One key of a zone, private part included (it lives in control's state dir only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneKey {
    /// Algorithm.
    pub algorithm: Algorithm,
    /// DNSKEY flags (257: zone key, secure entry point).
    pub flags: u16,
    /// Life state.
    pub state: KeyState,
    /// Seconds since the epoch it was made.
    pub created: u64,
    /// PKCS#8 private key (ring's document).
    pub pkcs8: Vec<u8>,
}

impl std::fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneKey")
            .field("algorithm", &self.algorithm)
            .field("flags", &self.flags)
            .field("state", &self.state)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// A key that cannot be made or read.
#[derive(Debug, thiserror::Error)]
#[error("DNSSEC key: {0}")]
pub struct KeyError(pub String);

/// A loaded key, ready to sign.
pub struct Signer {
    algorithm: Algorithm,
    /// DNSKEY RDATA.
    pub dnskey: Vec<u8>,
    /// Its key tag.
    pub tag: u16,
    pair: Pair,
}

/// How ECDSA nonces are made (Ed25519 signatures are deterministic either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Nonces {
    /// At random (ring): the fastest here, ≈ 12 µs a signature on two cores.
    #[default]
    Random,
    /// From the key and the data (RFC 6979, the `p256` crate): the same signature
    /// wherever it is made — what controls sharing a deployment's keys need to serve the
    /// same zones (issue 54 §2); ≈ 7× ring's time here (docs/BENCHMARKS.md).
    Deterministic,
}

enum Pair {
    /// ring's ECDSA: a random nonce each time.
    Ecdsa(EcdsaKeyPair, SystemRandom),
    /// RFC 6979: the nonce derived from the key and the data.
    EcdsaDeterministic(Box<p256::ecdsa::SigningKey>),
    Ed25519(Ed25519KeyPair),
}

impl ZoneKey {
    /// A new CSK.
    pub fn generate(algorithm: Algorithm, state: KeyState, now: u64) -> Result<ZoneKey, KeyError> {
        let rng = SystemRandom::new();
        let doc = match algorithm {
            Algorithm::EcdsaP256Sha256 => EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng),
            Algorithm::Ed25519 => Ed25519KeyPair::generate_pkcs8(&rng),
        }
        .map_err(|_| KeyError("the key generator failed".to_owned()))?;
        Ok(ZoneKey {
            algorithm,
            flags: 257,
            state,
            created: now,
            pkcs8: doc.as_ref().to_vec(),
        })
    }

    /// Loads the key for signing, ECDSA nonces at random.
    pub fn signer(&self) -> Result<Signer, KeyError> {
        self.signer_with(Nonces::Random)
    }

    /// Loads the key for signing, ECDSA nonces made as `nonces` says.
    pub fn signer_with(&self, nonces: Nonces) -> Result<Signer, KeyError> {
        let ecdsa = |e: &dyn std::fmt::Display| KeyError(format!("unreadable ECDSA key: {e}"));
        let (pair, public) = match (self.algorithm, nonces) {
            (Algorithm::EcdsaP256Sha256, Nonces::Random) => {
                let rng = SystemRandom::new();
                let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &self.pkcs8, &rng)
                    .map_err(|e| ecdsa(&e))?;
                // ring gives the uncompressed point 0x04 || X || Y; DNSSEC wants X || Y
                // (RFC 6605 §4).
                let public = pair.public_key().as_ref().get(1..).unwrap_or_default().to_vec();
                (Pair::Ecdsa(pair, rng), public)
            }
            (Algorithm::EcdsaP256Sha256, Nonces::Deterministic) => {
                let key = p256::ecdsa::SigningKey::from_pkcs8_der(&self.pkcs8).map_err(|e| ecdsa(&e))?;
                let point = key.verifying_key().to_encoded_point(false);
                let public = point.as_bytes().get(1..).unwrap_or_default().to_vec();
                (Pair::EcdsaDeterministic(Box::new(key)), public)
            }
            (Algorithm::Ed25519, _) => {
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&self.pkcs8)
                    .map_err(|e| KeyError(format!("unreadable Ed25519 key: {e}")))?;
                let public = pair.public_key().as_ref().to_vec();
                (Pair::Ed25519(pair), public)
            }
        };
        let mut dnskey = Vec::with_capacity(4 + public.len());
        dnskey.extend_from_slice(&self.flags.to_be_bytes());
        dnskey.push(3);
        dnskey.push(self.algorithm.number());
        dnskey.extend_from_slice(&public);
        let tag = key_tag(&dnskey);
        Ok(Signer {
            algorithm: self.algorithm,
            dnskey,
            tag,
            pair,
        })
    }
}

impl Signer {
    /// The algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Signs `data`: 64 octets for both algorithms (ECDSA r || s, RFC 6605 §4); the
    /// same octets for the same key and data unless ECDSA nonces are random.
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.pair {
            Pair::Ecdsa(p, rng) => p
                .sign(rng, data)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| KeyError("ECDSA signing failed".to_owned())),
            Pair::EcdsaDeterministic(key) => key
                .try_sign(data)
                .map(|s: p256::ecdsa::Signature| s.to_bytes().to_vec())
                .map_err(|e| KeyError(format!("ECDSA signing failed: {e}"))),
            Pair::Ed25519(p) => Ok(p.sign(data).as_ref().to_vec()),
        }
    }

    /// The DS RDATA (SHA-256, digest type 2) for the key at `owner` (wire).
    #[must_use]
    pub fn ds(&self, owner: &[u8]) -> Vec<u8> {
        let mut hash = Sha256::new();
        hash.update(owner);
        hash.update(&self.dnskey);
        let mut ds = Vec::with_capacity(36);
        ds.extend_from_slice(&self.tag.to_be_bytes());
        ds.push(self.algorithm.number());
        ds.push(2);
        ds.extend_from_slice(&hash.finalize());
        ds
    }

    /// The DS in presentation form: `TAG ALG 2 HEX`.
    #[must_use]
    pub fn ds_text(&self, owner: &[u8]) -> String {
        use std::fmt::Write as _;
        let ds = self.ds(owner);
        let mut hex = String::with_capacity(64);
        for byte in ds.get(4..).unwrap_or_default() {
            let _ = write!(hex, "{byte:02X}");
        }
        format!("{} {} 2 {hex}", self.tag, self.algorithm.number())
    }

    /// The DNSKEY in presentation form: `FLAGS 3 ALG BASE64`.
    #[must_use]
    pub fn dnskey_text(&self) -> String {
        use base64::Engine as _;
        let flags = u16::from_be_bytes([self.dnskey[0], self.dnskey[1]]);
        let key = base64::engine::general_purpose::STANDARD.encode(self.dnskey.get(4..).unwrap_or_default());
        format!("{flags} 3 {} {key}", self.algorithm.number())
    }
}
