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
