//! `sites` (SPEC §10): a member exists only at the locations it names; loaded for
//! another location it is absent (not unhealthy) — the set answers from the others —
//! and every mistake names its file, line and key.
use std::fs;

use qdns_testkit::fixtures::ZONE_HEAD;
use qdns_zone::{load_dir_from, Sources, Zone};

fn load(body: &str, location: Option<&str>) -> Result<Zone, String> {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
    load_dir_from(
        dir.path(),
        1,
        Sources {
            geoip_db: None,
            location,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .map(|mut s| s.zones.remove(0))
    .map_err(|e| e.to_string())
}

fn ids(zone: &Zone, owner: &str) -> Vec<String> {
    let set = zone
        .rrsets
        .iter()
        .find(|s| qdns_zone::name::to_text(&s.name) == owner)
        .unwrap();
    set.policy
        .as_ref()
        .unwrap()
        .members
        .iter()
        .map(|m| m.id.clone())
        .collect()
}

const SETS: &str = r#"
[[cidr_collection]]
id = "c"
[cidr_collection.locations]
eu = ["198.51.100.0/24"]
us = ["203.0.113.0/24"]

[[rrset]]
name = "w"
type = "A"
policy = "weighted"
members = [
  { id = "fra", weight = 1, values = ["10.0.0.1"], sites = ["fra"] },
  { id = "ams", weight = 1, values = ["10.0.0.2"], sites = ["ams", "lhr"] },
  { id = "all", weight = 1, values = ["10.0.0.3"] },
]

[[rrset]]
name = "f"
type = "A"
policy = "failover"
members = [
  { id = "p", role = "primary", values = ["10.0.1.1"], sites = ["fra"] },
  { id = "s", role = "secondary", values = ["10.0.1.2"] },
]

[[rrset]]
name = "near"
type = "A"
policy = "ip"
members = [
  { id = "eu", cidr = "c/eu", values = ["10.0.2.1"], sites = ["fra", "ams"] },
  { id = "us", cidr = "c/us", values = ["10.0.2.2"] },
  { id = "rest", cidr = "*", values = ["10.0.2.9"] },
]
"#;

#[test]
fn members_exist_only_at_their_sites() {
    let fra = load(SETS, Some("fra")).unwrap();
    assert_eq!(ids(&fra, "w.t.example."), ["fra", "all"]);
    assert_eq!(ids(&fra, "f.t.example."), ["p", "s"]);
    assert_eq!(ids(&fra, "near.t.example."), ["eu", "us", "rest"]);
    let lhr = load(SETS, Some("lhr")).unwrap();
    assert_eq!(ids(&lhr, "w.t.example."), ["ams", "all"]);
    // The primary is absent: the secondary is the set's first member, so it answers.
    assert_eq!(ids(&lhr, "f.t.example."), ["s"]);
    // The eu member is absent: its clients get `*`; the chains follow the new indices.
    assert_eq!(ids(&lhr, "near.t.example."), ["us", "rest"]);
    let near = lhr
        .rrsets
        .iter()
        .find_map(|s| s.policy.as_deref().filter(|p| p.client.is_some()))
        .unwrap();
    let rules = near.client.as_deref().unwrap();
    assert_eq!(rules.labels, ["c/us", "*"]);
    let chain_of = |client: &str| -> Vec<String> {
        rules
            .decide(client.parse().unwrap())
            .chain
            .iter()
            .map(|&m| near.members[m as usize].id.clone())
            .collect()
    };
    assert_eq!(chain_of("198.51.100.7"), ["rest"]);
    assert_eq!(chain_of("203.0.113.7"), ["us", "rest"]);
    // No location (a checker, a standalone edge without --location): every member.
    let anywhere = load(SETS, None).unwrap();
    assert_eq!(ids(&anywhere, "w.t.example."), ["fra", "ams", "all"]);
}

#[test]
fn sites_mistakes_name_the_file_line_and_key() {
    let all_absent = SETS.replace(
        r#"{ id = "s", role = "secondary", values = ["10.0.1.2"] }"#,
        r#"{ id = "s", role = "secondary", values = ["10.0.1.2"], sites = ["fra"] }"#,
    );
    let star_absent = SETS.replace(
        r#"{ id = "rest", cidr = "*", values = ["10.0.2.9"] }"#,
        r#"{ id = "rest", cidr = "*", values = ["10.0.2.9"], sites = ["fra"] }"#,
    );
    for (body, location, want) in [
        (
            all_absent.as_str(),
            "lhr",
            "every member of f.t.example. is absent at location \"lhr\" (sites)",
        ),
        (
            star_absent.as_str(),
            "lhr",
            "the \"*\" member of near.t.example. must exist at every location",
        ),
        (
            &SETS.replace("[\"ams\", \"lhr\"]", "[]"),
            "fra",
            "rrset[0].members[1].sites: sites names at least one location",
        ),
        (
            &SETS.replace("[\"ams\", \"lhr\"]", "[\"ams lhr\"]"),
            "fra",
            "rrset[0].members[1].sites: site \"ams lhr\": use a location name",
        ),
    ] {
        let err = load(body, Some(location)).unwrap_err();
        assert!(err.contains(want) && err.contains("t.toml:"), "want {want:?} in {err}");
    }
    // The same file is fine where every set keeps a member.
    assert!(load(&all_absent, Some("fra")).is_ok());
}

#[test]
fn a_geo_sets_star_must_exist_everywhere_and_absent_members_do_not_count_for_alias_health() {
    let dir = tempfile::tempdir().unwrap();
    let geo = r#"
[[rrset]]
name = "g"
type = "A"
policy = "geo"
members = [
  { id = "de", location = "DE", values = ["10.0.0.1"] },
  { id = "rest", location = "*", values = ["10.0.0.9"], sites = ["fra"] },
]
"#;
    fs::write(dir.path().join("t.toml"), format!("{ZONE_HEAD}{geo}")).unwrap();
    let empty = qdns_zone::geo::GeoDb::empty();
    let at = |location| qdns_zone::LoadContext {
        geo: Some(&empty),
        location: Some(location),
        secondary_dir: None,
        dynamic_dir: None,
    };
    let err = qdns_zone::load_dir_with(dir.path(), 1, &at("ams"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the \"*\" member of g.t.example. must exist at every location"),
        "{err}"
    );
    assert!(qdns_zone::load_dir_with(dir.path(), 1, &at("fra")).is_ok());

    // www aliases pool with evaluate_target_health; pool's primary exists only at ams.
    let alias = r#"
[[health_check]]
id = "p-up"
type = "external"

[[health_check]]
id = "s-up"
type = "external"

[[rrset]]
name = "pool"
type = "A"
policy = "failover"
members = [
  { id = "p", role = "primary", values = ["10.0.1.1"], health_check = "p-up", sites = ["ams"] },
  { id = "s", role = "secondary", values = ["10.0.1.2"], health_check = "s-up" },
]

[[rrset]]
name = "www"
type = "A"
policy = "weighted"
members = [
  { id = "a", weight = 1, alias = "pool", evaluate_target_health = true },
  { id = "b", weight = 1, values = ["10.0.2.1"] },
]
"#;
    for (location, target_members) in [("fra", 1), ("ams", 2)] {
        let zone = load(alias, Some(location)).unwrap();
        let slot = zone
            .slots
            .iter()
            .find(|s| matches!(s.rule, qdns_zone::SlotRule::AliasTarget { .. }))
            .unwrap();
        let qdns_zone::SlotRule::AliasTarget { members } = &slot.rule else {
            unreachable!()
        };
        assert_eq!(members.len(), target_members, "at {location}: {members:?}");
    }
}

/// A latency set composes with `sites` (a member absent at a location gets no choice
/// slot there) and is an alias target of an `ip` set: the alias's health follows the
/// latency members' choice slots, so the ip set falls back when none is chosen.
#[test]
fn a_latency_set_takes_sites_and_is_an_alias_target_of_an_ip_set() {
    use qdns_zone::SlotRule;
    let body = r#"
[[cidr_collection]]
id = "c"
[cidr_collection.locations]
eu = ["198.51.100.0/24"]

[[rrset]]
name = "app"
type = "A"
policy = "latency"
members = [
  { id = "fra", values = ["10.0.3.1"], sites = ["fra"] },
  { id = "iad", values = ["10.0.3.2"] },
  { id = "sin", values = ["10.0.3.3"], sites = ["sin"] },
]

[[rrset]]
name = "edge"
type = "A"
policy = "ip"
members = [
  { id = "eu", cidr = "c/eu", alias = "app", evaluate_target_health = true },
  { id = "rest", cidr = "*", values = ["10.0.4.9"] },
]
"#;
    let fra = load(body, Some("fra")).unwrap();
    assert_eq!(ids(&fra, "app.t.example."), ["fra", "iad"]);
    let app = fra
        .rrsets
        .iter()
        .find(|s| qdns_zone::name::to_text(&s.name) == "app.t.example.")
        .unwrap();
    let choice_slots: Vec<u32> = app.policy.as_ref().unwrap().members.iter().map(|m| m.slot).collect();
    for &slot in &choice_slots {
        assert!(matches!(fra.slots[slot as usize].rule, SlotRule::Latency { .. }));
    }
    let edge = fra
        .rrsets
        .iter()
        .find(|s| qdns_zone::name::to_text(&s.name) == "edge.t.example.")
        .unwrap();
    let eu = &edge.policy.as_ref().unwrap().members[0];
    let SlotRule::AliasTarget { members } = &fra.slots[eu.slot as usize].rule else {
        panic!("{:?}", fra.slots[eu.slot as usize].rule);
    };
    assert_eq!(
        members, &choice_slots,
        "the alias is healthy iff the latency set chose a member"
    );
    let sin = load(body, Some("sin")).unwrap();
    assert_eq!(ids(&sin, "app.t.example."), ["iad", "sin"]);
}
