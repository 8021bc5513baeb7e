use std::cmp::Ordering;

use super::*;

fn wire(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in text.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

#[test]
fn canonical_order_is_rfc_4034_section_6_1() {
    // The RFC's own example, in its order (names lowercased as the zone holds them).
    let names = [
        "example.",
        "a.example.",
        "yljkjljk.a.example.",
        "z.a.example.",
        "zabc.a.example.",
        "z.example.",
        "\u{1}.z.example.",
        "*.z.example.",
    ];
    let mut wires: Vec<Vec<u8>> = names.iter().map(|n| wire(n)).collect();
    // "\001" stands for the octet 1.
    wires[6] = [vec![1, 1], wire("z.example.")].concat();
    let expected = wires.clone();
    wires.reverse();
    wires.sort_by(|a, b| canonical_cmp(a, b));
    // The RFC lists \200.z.example. last; with \001 the order of the last two is
    // "\001" < "*" (0x01 < 0x2a).
    assert_eq!(wires, expected);
    assert_eq!(canonical_cmp(&wire("b.a."), &wire("a.b.")), Ordering::Less);
    assert_eq!(canonical_cmp(&wire("a."), &wire("a.")), Ordering::Equal);
}

#[test]
fn answer_key_ignores_order_and_sees_every_record() {
    let (a, b, c) = (&[192, 0, 2, 1][..], &[192, 0, 2, 2][..], &[192, 0, 2, 3][..]);
    assert_eq!(answer_key([a, b, c], 60), answer_key([c, a, b], 60));
    assert_ne!(answer_key([a, b], 60), answer_key([a, b, c], 60));
    assert_ne!(answer_key([a, b], 60), answer_key([a, c], 60));
    assert_ne!(answer_key([a], 60), answer_key([a, a], 60));
    assert_ne!(answer_key([a], 60), answer_key([a], 10));
    // The edge's way, from stored records, gives the same key.
    let record = |rdata: &[u8], ttl: u32| [&[0, 1, 0, 1][..], &ttl.to_be_bytes(), &[0, 4], rdata].concat();
    let mut key = AnswerKey::default();
    key.add_record(&record(b, 10));
    key.add_record(&record(a, 10));
    assert_eq!(key.finish(), answer_key([a, b], 10));
}

#[test]
fn key_tag_and_ds_match_a_published_key() {
    // RFC 4034 §5.4's example key (RSA/SHA-1, tag 60485) and the DNSKEY's tag from its
    // RDATA: the tag function is algorithm-independent.
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD
        .decode(
            "AQOeiiR0GOMYkDshWoSKz9XzfwJr1AYtsmx3TGkJaNXVbfi/2pHm822aJ5iI9BMzNXxeYCmZDRD99WYwYqUSdjMmmAphXdvxegXd/M5+X7OrzKBaMbCVdFLUUh6DhweJBjEVv5f2wwjM9XzcnOf+EPbtG9DMBmADjFDc2w/rljwvFw==",
        )
        .expect("base64");
    let mut rdata = vec![1, 0, 3, 5];
    rdata.extend_from_slice(&key);
    assert_eq!(key_tag(&rdata), 60485);
}

#[test]
fn signatures_verify_with_the_published_key() {
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ED25519};
    for algorithm in [Algorithm::EcdsaP256Sha256, Algorithm::Ed25519] {
        let key = ZoneKey::generate(algorithm, KeyState::Active, 1).expect("key");
        let signer = key.signer().expect("signer");
        assert_eq!(signer.dnskey[3], algorithm.number());
        let sig = signer.sign(b"data").expect("sign");
        assert_eq!(sig.len(), 64);
        let public = match algorithm {
            Algorithm::EcdsaP256Sha256 => [&[4u8][..], &signer.dnskey[4..]].concat(),
            Algorithm::Ed25519 => signer.dnskey[4..].to_vec(),
        };
        let verify = match algorithm {
            Algorithm::EcdsaP256Sha256 => UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, public),
            Algorithm::Ed25519 => UnparsedPublicKey::new(&ED25519, public),
        };
        verify.verify(b"data", &sig).expect("verifies");
        assert!(verify.verify(b"other", &sig).is_err());
        // Deterministic nonces: the same key (the same DNSKEY), a signature that
        // verifies, and the same octets again — also from the key loaded elsewhere (two
        // controls of a deployment sign with one stored key, issue 54 §2).
        let same = key.signer_with(Nonces::Deterministic).expect("signer");
        assert_eq!((same.dnskey.clone(), same.tag), (signer.dnskey.clone(), signer.tag));
        let fixed = same.sign(b"data").expect("sign");
        verify.verify(b"data", &fixed).expect("verifies");
        assert_eq!(same.sign(b"data").expect("sign"), fixed);
        let elsewhere = key.clone().signer_with(Nonces::Deterministic).expect("signer");
        assert_eq!(elsewhere.sign(b"data").expect("sign"), fixed);
        assert_ne!(same.sign(b"other").expect("sign"), fixed);
        // Random nonces (ECDSA with ring): another signature each time.
        if algorithm == Algorithm::EcdsaP256Sha256 {
            assert_ne!(signer.sign(b"data").expect("sign"), sig);
        }
        let ds = signer.ds_text(&wire("example."));
        assert!(
            ds.starts_with(&format!("{} {} 2 ", signer.tag, algorithm.number())),
            "{ds}"
        );
        assert_eq!(ds.len() - ds.rfind(' ').expect("digest") - 1, 64);
    }
}

#[test]
fn type_bitmap_is_rfc_4034_section_4_3() {
    // A MX RRSIG NSEC TYPE1234 → the RFC's example bitmap.
    let types = [1u16, 15, 46, 47, 1234].into_iter().collect();
    let mut expected = vec![0x00, 0x06, 0x40, 0x01, 0x00, 0x00, 0x00, 0x03, 0x04, 0x1b];
    expected.extend_from_slice(&[0; 26]);
    expected.push(0x20);
    assert_eq!(sign::type_bitmap(&types), expected);
}

#[test]
fn every_answer_of_a_policy_set_is_signed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("z.toml"),
        r#"
[zone]
origin = "z.example."
dnssec = true
[zone.soa]
mname = "ns1"
rname = "hostmaster"
serial = 1
refresh = 3600
retry = 600
expire = 86400
minimum = 300
[zone.ns]
names = ["ns1"]
[[rrset]]
name = "ns1"
type = "A"
values = ["192.0.2.53"]
[[rrset]]
name = "mv"
type = "A"
policy = "multivalue"
members = [
  { id = "a", values = ["192.0.2.1"] },
  { id = "b", values = ["192.0.2.2"] },
  { id = "c", values = ["192.0.2.3"] },
]
"#,
    )
    .expect("write");
    let mut snapshot = crate::load_dir(dir.path(), 1).expect("loads");
    let zone = &mut snapshot.zones[0];
    assert!(zone.dnssec.as_ref().is_some_and(|d| !d.is_signed()));
    let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).expect("key");
    sign_zone(zone, &[key], SignOptions::at(1_800_000_000)).expect("signs");
    let sigs = zone.dnssec.as_ref().expect("signed");
    assert!(sigs.is_signed());
    let mv = wire("mv.z.example.");
    // Seven non-empty subsets of three members.
    assert_eq!(sigs.sigs.iter().filter(|s| s.name == mv && s.rtype == 1).count(), 7);
    // SOA, NS, DNSKEY, and an NSEC at each of the three names.
    for (owner, rtype) in [
        ("z.example.", 6),
        ("z.example.", 2),
        ("z.example.", 48),
        ("ns1.z.example.", 47),
    ] {
        assert!(
            sigs.sigs.iter().any(|s| s.name == wire(owner) && s.rtype == rtype),
            "{owner} {rtype}"
        );
    }
    let nsec = zone.rrset(&wire("z.example."), rtype::NSEC).expect("apex NSEC");
    assert!(nsec.rdata[0].starts_with(&wire("mv.z.example.")));
}

/// A zone of two A sets under `ns1` (its address `ns1`).
fn two_set_zone(dir: &std::path::Path, ns1: &str) -> crate::Snapshot {
    let text = format!(
        "[zone]\norigin = \"r.example.\"\ndnssec = true\n[zone.soa]\nmname = \"ns1\"\nrname = \"h\"\n\
         serial = 1\nrefresh = 3600\nretry = 600\nexpire = 86400\nminimum = 300\n[zone.ns]\nnames = [\"ns1\"]\n\
         [[rrset]]\nname = \"ns1\"\ntype = \"A\"\nvalues = [\"{ns1}\"]\n\
         [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.80\"]\n"
    );
    std::fs::write(dir.join("r.toml"), text).expect("write");
    crate::load_dir(dir, 1).expect("loads")
}

/// Signing again with the signatures before (a reload of a revision that changed one
/// set): the unchanged sets keep their RRSIGs octet for octet — even with random ECDSA
/// nonces, so they were not made again — and the changed set gets a new one that
/// verifies; another window or another key reuses nothing.
#[test]
fn signing_again_reuses_what_the_same_key_signed_for_the_same_answer_in_the_same_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).expect("key");
    let at = SignOptions::at(1_800_000_000);
    let mut before = two_set_zone(dir.path(), "192.0.2.53");
    sign_zone(&mut before.zones[0], std::slice::from_ref(&key), at).expect("signs");
    let old = before.zones[0].dnssec.as_deref().expect("signed");
    let rdata_of = |sigs: &Signatures, owner: &str, rtype: u16| -> Vec<Vec<u8>> {
        sigs.sigs
            .iter()
            .find(|s| s.name == wire(owner) && s.rtype == rtype)
            .map(|s| s.rdata.clone())
            .expect("a signature")
    };

    let mut after = two_set_zone(dir.path(), "192.0.2.54");
    sign_zone_reusing(&mut after.zones[0], std::slice::from_ref(&key), at, Some(old)).expect("signs");
    let new = after.zones[0].dnssec.as_deref().expect("signed");
    assert_eq!(new.sigs.len(), old.sigs.len());
    for (owner, rtype) in [("www.r.example.", 1), ("r.example.", 6), ("r.example.", 48)] {
        assert_eq!(
            rdata_of(new, owner, rtype),
            rdata_of(old, owner, rtype),
            "{owner} {rtype}"
        );
    }
    let changed = rdata_of(new, "ns1.r.example.", 1);
    assert_ne!(changed, rdata_of(old, "ns1.r.example.", 1));
    // The new one verifies over the new record.
    let signer = key.signer().expect("signer");
    let public = [&[4u8][..], &signer.dnskey[4..]].concat();
    let header_len = changed[0].len() - 64;
    let mut data = changed[0][..header_len].to_vec();
    let owner = wire("ns1.r.example.");
    data.extend_from_slice(&owner);
    data.extend_from_slice(&[0, 1, 0, 1]);
    data.extend_from_slice(&changed[0][4..8]);
    data.extend_from_slice(&[0, 4, 192, 0, 2, 54]);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, public)
        .verify(&data, &changed[0][header_len..])
        .expect("verifies");

    // Another window (a day later), or another key: everything signed afresh.
    let mut later = two_set_zone(dir.path(), "192.0.2.54");
    sign_zone_reusing(&mut later.zones[0], &[key], SignOptions::at(1_800_086_400), Some(new)).expect("signs");
    let other_key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).expect("key");
    let mut rekeyed = two_set_zone(dir.path(), "192.0.2.54");
    sign_zone_reusing(&mut rekeyed.zones[0], &[other_key], at, Some(new)).expect("signs");
    for redone in [&later, &rekeyed] {
        let sigs = redone.zones[0].dnssec.as_deref().expect("signed");
        assert_ne!(rdata_of(sigs, "www.r.example.", 1), rdata_of(new, "www.r.example.", 1));
    }
}
