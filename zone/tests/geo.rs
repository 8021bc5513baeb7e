//! `policy = "geo"` (SPEC §10) from a real MaxMind DB (written by MaxMind's Perl
//! writer): most specific location wins (subdivision, country, continent, `*`), the
//! zone's class table keeps only networks in a named location and is shared by its geo
//! sets, and every mistake names its file, line and key.
use std::{fs, net::IpAddr, path::Path};

use qdns_testkit::{
    fixtures::ZONE_HEAD,
    mmdb::{write, GeoNet},
};
use qdns_zone::{geo::GeoDb, load_dir_from, load_dir_with, LoadContext, PolicyKind, Sources, Zone};

fn database(path: &Path) {
    let net = |net, continent, country, subdivisions| GeoNet {
        net,
        continent,
        country,
        subdivisions,
    };
    write(
        path,
        &[
            net("198.51.100.0/25", "EU", "DE", &["BY"]),
            net("198.51.100.128/25", "EU", "DE", &["BE"]),
            net("203.0.113.0/24", "EU", "FR", &[]),
            net("192.0.2.0/25", "NA", "US", &["CA"]),
            net("192.0.2.128/26", "NA", "US", &["NY"]),
            net("192.0.2.192/26", "NA", "NA", &[]),
            net("2001:db8:e::/48", "EU", "DE", &[]),
            net("2001:db8:a::/48", "AS", "JP", &[]),
            net("100.64.0.0/10", "", "", &[]),
        ],
    );
}

const GEO_SET: &str = r#"
[[rrset]]
name = "www"
type = "A"
policy = "geo"
members = [
  { id = "bavaria", location = "DE-BY", values = ["10.0.0.1"] },
  { id = "germany", location = "DE", values = ["10.0.0.2"] },
  { id = "europe", location = "EU", values = ["10.0.0.3"] },
  { id = "california", location = "US-CA", values = ["10.0.0.4"] },
  { id = "namibia", location = "country:NA", values = ["10.0.0.5"] },
  { id = "rest", location = "*", values = ["10.0.0.9"] },
]
"#;

fn decide(zone: &Zone, client: &str) -> (String, u8) {
    let policy = zone.rrsets.iter().find_map(|s| s.policy.as_deref()).unwrap();
    assert_eq!(policy.kind, PolicyKind::Geo);
    let d = policy
        .client
        .as_deref()
        .unwrap()
        .decide_in_zone(zone.geo.as_deref(), client.parse::<IpAddr>().unwrap());
    (policy.members[d.chain[0] as usize].id.clone(), d.scope)
}

#[test]
fn the_most_specific_location_answers_over_the_databases_networks() {
    let dir = tempfile::tempdir().unwrap();
    database(&dir.path().join("geo.mmdb"));
    let zones = dir.path().join("zones");
    fs::create_dir(&zones).unwrap();
    fs::write(zones.join("t.toml"), format!("{ZONE_HEAD}{GEO_SET}")).unwrap();
    let snapshot = load_dir_from(
        &zones,
        1,
        Sources {
            geoip_db: Some(&dir.path().join("geo.mmdb")),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .unwrap();
    let zone = &snapshot.zones[0];
    for (client, member, scope) in [
        ("198.51.100.7", "bavaria", 25),
        // Berlin (DE-BE) has no member of its own: Germany.
        ("198.51.100.200", "germany", 25),
        ("203.0.113.9", "europe", 24),
        ("192.0.2.1", "california", 25),
        // New York: no member for it, its country or continent: `*`.
        ("192.0.2.130", "rest", 26),
        ("192.0.2.200", "namibia", 26),
        ("2001:db8:e:1::1", "germany", 48),
        ("2001:db8:a::1", "rest", 46),
        ("100.64.1.1", "rest", 1),
    ] {
        assert_eq!(decide(zone, client), (member.to_owned(), scope), "{client}");
    }
    // The chain falls back: Bavaria, then Germany, then Europe, then `*`.
    let policy = zone.rrsets.iter().find_map(|s| s.policy.as_deref()).unwrap();
    let rules = policy.client.as_deref().unwrap();
    let chain: Vec<&str> = rules
        .decide_in_zone(zone.geo.as_deref(), "198.51.100.7".parse().unwrap())
        .chain
        .iter()
        .map(|&m| policy.members[m as usize].id.as_str())
        .collect();
    assert_eq!(chain, ["bavaria", "germany", "europe", "rest"]);
    assert_eq!(rules.labels[4], "country:NA");
    // The zone's class table keeps only the networks in a named location.
    let table = zone.geo.as_deref().unwrap();
    assert_eq!(table.v4.len() + table.v6.len(), 6, "{table:?}");
}

#[test]
fn geo_sets_need_a_database_and_valid_locations() {
    let dir = tempfile::tempdir().unwrap();
    let write_zone = |body: &str| {
        fs::write(dir.path().join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
    };
    write_zone(GEO_SET);
    let err = qdns_zone::load_dir(dir.path(), 1).unwrap_err().to_string();
    assert!(
        err.contains("t.toml")
            && err.contains("rrset[0].policy: a geo set needs a geolocation database: give --geoip-db"),
        "{err}"
    );
    let err = load_dir_from(
        dir.path(),
        1,
        Sources {
            geoip_db: Some(&dir.path().join("missing.mmdb")),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing.mmdb") && err.contains("geoip_db"), "{err}");
    fs::write(dir.path().join("junk.mmdb"), b"not a database").unwrap();
    let err = load_dir_from(
        dir.path(),
        1,
        Sources {
            geoip_db: Some(&dir.path().join("junk.mmdb")),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("junk.mmdb"), "{err}");
    let empty = GeoDb::empty();
    for (body, want) in [
        (
            GEO_SET.replace("\"DE-BY\"", "\"Bavaria\""),
            "members[0].location: location \"Bavaria\": use a continent",
        ),
        (
            GEO_SET.replace("location = \"*\"", "location = \"DE\""),
            "members[5].location: \"DE\" is already the location of members[1]",
        ),
        (
            GEO_SET.replace(", location = \"*\"", ""),
            "members[5].location: a geo member needs location",
        ),
        (
            GEO_SET.replace("location = \"*\"", "location = \"JP\""),
            "members: a geo set needs a member with location = \"*\"",
        ),
        (
            GEO_SET.replace("policy = \"geo\"", "policy = \"multivalue\""),
            "members[0].location: location belongs to geo sets",
        ),
    ] {
        write_zone(&body);
        let err = load_dir_with(
            dir.path(),
            1,
            &LoadContext {
                geo: Some(&empty),
                location: None,
                secondary_dir: None,
                dynamic_dir: None,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(want) && err.contains("t.toml"), "want {want:?} in {err}");
    }
}

#[test]
fn the_zones_geo_sets_share_one_class_table() {
    let dir = tempfile::tempdir().unwrap();
    database(&dir.path().join("geo.mmdb"));
    let zones = dir.path().join("zones");
    fs::create_dir(&zones).unwrap();
    let second = GEO_SET.replace("name = \"www\"", "name = \"api\"").replace(
        "members = [",
        "members = [\n  { id = \"japan\", location = \"JP\", values = [\"10.0.1.1\"] },",
    );
    fs::write(zones.join("t.toml"), format!("{ZONE_HEAD}{GEO_SET}{second}")).unwrap();
    let snapshot = load_dir_from(
        &zones,
        1,
        Sources {
            geoip_db: Some(&dir.path().join("geo.mmdb")),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .unwrap();
    let zone = &snapshot.zones[0];
    let table = zone.geo.as_deref().unwrap();
    // One more network (Japan) than the first set alone needs; each set keeps only its
    // chain per class.
    assert_eq!(table.v4.len() + table.v6.len(), 7, "{table:?}");
    let decide = |owner: &str, client: &str| {
        let set = zone
            .rrsets
            .iter()
            .find(|s| qdns_zone::name::to_text(&s.name) == owner)
            .unwrap();
        let policy = set.policy.as_deref().unwrap();
        let rules = policy.client.as_deref().unwrap();
        assert!(rules.v4.is_empty() && rules.v6.is_empty() && rules.classes.len() == table.classes.len());
        let d = rules.decide_in_zone(Some(table), client.parse().unwrap());
        (policy.members[d.chain[0] as usize].id.clone(), d.scope, d.matched)
    };
    assert_eq!(decide("api.t.example.", "2001:db8:a::1"), ("japan".into(), 48, true));
    // For www, Japan's network is `*`: scope that network (exact, if not the largest).
    assert_eq!(decide("www.t.example.", "2001:db8:a::1"), ("rest".into(), 48, false));
    assert_eq!(decide("www.t.example.", "198.51.100.7"), ("bavaria".into(), 25, true));
}
