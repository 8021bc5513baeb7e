//! `policy = "ip"` and `[[cidr_collection]]` (SPEC §10): loading, the compiled rule
//! table, and every validation error naming its file, line and key.
use std::{fmt::Write as _, fs, net::IpAddr};

use qdns_testkit::fixtures::ZONE_HEAD;
use qdns_zone::{load_zone_file, PolicyKind, Zone};

fn load(body: &str, files: &[(&str, &str)]) -> Result<Zone, String> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().join("t.toml");
    fs::write(&path, format!("{ZONE_HEAD}{body}")).unwrap();
    load_zone_file(&path).map_err(|e| e.to_string())
}

const COLLECTION: &str = r#"
[[cidr_collection]]
id = "edges"
[cidr_collection.locations]
eu = ["192.0.2.0/24", "2001:db8:e0::/48"]
us = ["198.51.100.0/24", "198.51.100.128/25"]
"#;

fn ip_set(members: &str) -> String {
    format!("{COLLECTION}\n[[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"ip\"\nmembers = [{members}]\n")
}

const MEMBERS: &str = r#"
  { id = "eu", cidr = "edges/eu", values = ["10.0.0.1"] },
  { id = "us", cidr = "edges/us", values = ["10.0.0.2"] },
  { id = "rest", cidr = "*", values = ["10.0.0.3"] },
"#;

fn decide(zone: &Zone, client: &str) -> (Vec<String>, u8) {
    let set = zone.rrsets.iter().find(|s| s.policy.is_some()).unwrap();
    let policy = set.policy.as_deref().unwrap();
    assert_eq!(policy.kind, PolicyKind::Ip);
    let d = policy
        .client
        .as_deref()
        .unwrap()
        .decide(client.parse::<IpAddr>().unwrap());
    let ids = d.chain.iter().map(|&m| policy.members[m as usize].id.clone()).collect();
    (ids, d.scope)
}

#[test]
fn an_ip_set_compiles_to_prefix_blocks_with_fallback_chains() {
    let zone = load(&ip_set(MEMBERS), &[]).unwrap();
    assert_eq!(decide(&zone, "192.0.2.9"), (vec!["eu".into(), "rest".into()], 24));
    assert_eq!(
        decide(&zone, "2001:db8:e0:ff::1"),
        (vec!["eu".into(), "rest".into()], 48)
    );
    // A nested prefix of the same location adds nothing: one /24.
    assert_eq!(decide(&zone, "198.51.100.200"), (vec!["us".into(), "rest".into()], 24));
    // 203.0.113.1 and 198.51.100.0/24 share 4 bits: the `*` answer holds for the /5.
    assert_eq!(decide(&zone, "203.0.113.1"), (vec!["rest".into()], 5));
    let rules = zone
        .rrsets
        .iter()
        .find_map(|s| s.policy.as_deref())
        .unwrap()
        .client
        .as_deref()
        .unwrap();
    assert_eq!(rules.labels, ["edges/eu", "edges/us", "*"]);
}

#[test]
fn a_collection_file_of_100000_prefixes_loads() {
    let mut text = String::from("# PREFIX LOCATION\n");
    for i in 0..100_000u32 {
        let net = 0x0b00_0000 + (i << 8);
        let loc = ["fra", "ams", "iad", "sjc"][(i % 4) as usize];
        writeln!(text, "{}/24 {loc}", std::net::Ipv4Addr::from(net)).unwrap();
    }
    let body = r#"
[[cidr_collection]]
id = "big"
file = "big.cidrs"

[[rrset]]
name = "www"
type = "A"
policy = "ip"
members = [
  { id = "fra", cidr = "big/fra", values = ["10.0.0.1"] },
  { id = "ams", cidr = "big/ams", values = ["10.0.0.2"] },
  { id = "other", cidr = "*", values = ["10.0.0.3"] },
]
"#;
    // How fast is measured by the zone_load benchmark (BENCHMARKS.md), not here.
    let zone = load(body, &[("big.cidrs", &text)]).unwrap();
    assert_eq!(decide(&zone, "11.0.0.77"), (vec!["fra".into(), "other".into()], 24));
    assert_eq!(decide(&zone, "11.0.1.77"), (vec!["ams".into(), "other".into()], 24));
    // iad and sjc have no member: their clients get `*`, over 11.0.2.0/23 (iad's and
    // sjc's /24 between ams's 11.0.1.0/24 and fra's 11.0.4.0/24).
    assert_eq!(decide(&zone, "11.0.2.77"), (vec!["other".into()], 23));
}

/// A zone body, extra files beside it, and what the error must say.
type Case = (String, &'static [(&'static str, &'static str)], &'static str);

#[test]
fn every_mistake_names_the_file_line_and_key() {
    let cases: &[Case] = &[
        (
            ip_set(r#"{ id = "eu", cidr = "edges/eu", values = ["10.0.0.1"] }"#),
            &[],
            "members: an ip set needs a member with cidr = \"*\"",
        ),
        (
            ip_set(r#"{ id = "eu", cidr = "edges/asia", values = ["10.0.0.1"] }, { id = "r", cidr = "*", values = ["10.0.0.3"] }"#),
            &[],
            "members[0].cidr: cidr_collection \"edges\" has no location \"asia\"",
        ),
        (
            ip_set(r#"{ id = "eu", cidr = "nope/eu", values = ["10.0.0.1"] }, { id = "r", cidr = "*", values = ["10.0.0.3"] }"#),
            &[],
            "unknown cidr_collection \"nope\"",
        ),
        (
            ip_set(r#"{ id = "eu", values = ["10.0.0.1"] }, { id = "r", cidr = "*", values = ["10.0.0.3"] }"#),
            &[],
            "members[0].cidr: an ip member needs cidr",
        ),
        (
            ip_set(r#"{ id = "a", cidr = "*", values = ["10.0.0.1"] }, { id = "b", cidr = "*", values = ["10.0.0.3"] }"#),
            &[],
            "members[1].cidr: \"*\" is already the cidr of members[0]",
        ),
        (
            format!("{COLLECTION}\n[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{{ id = \"a\", weight = 1, cidr = \"*\", values = [\"10.0.0.1\"] }}]\n"),
            &[],
            "members[0].cidr: cidr belongs to ip sets",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\n[cidr_collection.locations]\neu = [\"192.0.2.1/24\"]\n".to_owned(),
            &[],
            "cidr_collection[0].locations.eu[0]: \"192.0.2.1/24\" has bits set past /24",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\nfile = \"c.txt\"\n".to_owned(),
            &[("c.txt", "10.0.0.0/8 eu\n\n10.0.0.0/8 us\n")],
            "c.txt:3: 10.0.0.0/8 is already in location \"eu\"",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\nfile = \"c.txt\"\n".to_owned(),
            &[("c.txt", "10.0.0.0/8\n")],
            "c.txt:1: \"10.0.0.0/8\": expected PREFIX LOCATION",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\nfile = \"missing.txt\"\n".to_owned(),
            &[],
            "cidr_collection[0].file: cannot read",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\n".to_owned(),
            &[],
            "cidr_collection[0].locations: a collection needs locations or a file",
        ),
        (
            format!("{COLLECTION}[[cidr_collection]]\nid = \"edges\"\nfile = \"x\"\n"),
            &[],
            "duplicate collection id \"edges\"",
        ),
        (
            "[[cidr_collection]]\nid = \"c\"\n[cidr_collection.locations]\neu = [\"10.0.0.0/8\"]\nus = [\"10.0.0.0/8\"]\n[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"ip\"\nmembers = [{ id = \"a\", cidr = \"c/eu\", values = [\"10.0.0.1\"] }, { id = \"b\", cidr = \"c/us\", values = [\"10.0.0.2\"] }, { id = \"r\", cidr = \"*\", values = [\"10.0.0.3\"] }]\n".to_owned(),
            &[],
            "10.0.0.0/8 selects both members[0] and members[1]",
        ),
    ];
    for (body, files, want) in cases {
        let msg = load(body, files).unwrap_err();
        assert!(msg.contains(want), "want {want:?} in {msg:?}");
        assert!(msg.contains("t.toml") || msg.contains(".txt"), "{msg}");
    }
}
