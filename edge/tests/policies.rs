//! SPEC §3 answer selection observed in DNS responses: the example policy zone
//! (examples/zones/shop.example.toml), health driven through the same evaluation the
//! control plane uses, answers parsed by hickory-proto. Random policies are measured over
//! an exact grid of draws (`respond_with_draw`), so shares are exact, not sampled.
mod common;

use std::{collections::BTreeMap, fs, path::Path};

use common::{query, Ask};
use hickory_proto::{
    op::Message,
    rr::{RData, RecordType},
};
use qdns_edge::{Engine, Transport};
use qdns_zone::{
    evaluate::{evaluate, Inputs},
    load_dir, Snapshot,
};

struct Fixture {
    snapshot: Snapshot,
    engine: Engine,
}

fn fixture_with(edit: impl Fn(String) -> String) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let text =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones/shop.example.toml")).unwrap();
    fs::write(dir.path().join("shop.toml"), edit(text)).unwrap();
    let snapshot = load_dir(dir.path(), 1).unwrap();
    let engine = Engine::compile(&snapshot).unwrap();
    Fixture { snapshot, engine }
}

fn fixture() -> Fixture {
    fixture_with(|t| t)
}

impl Fixture {
    /// Sets health: the named checks measured unhealthy, `forced` overrides, `shifted` AZs.
    fn health(&self, down: &[&str], forced: &[(&str, bool)], shifted: &[&str]) {
        let zone = &self.snapshot.zones[0];
        let slot = |name: &str| {
            zone.slot_base
                + zone
                    .slots
                    .iter()
                    .position(|s| s.name == name)
                    .unwrap_or_else(|| panic!("no slot {name}")) as u32
        };
        let down: Vec<u32> = down.iter().map(|n| slot(n)).collect();
        let forced: Vec<(u32, bool)> = forced.iter().map(|(n, h)| (slot(n), *h)).collect();
        let bitmap = evaluate(
            &self.snapshot.zones,
            &Inputs {
                measured: &|s| Some(!down.contains(&s)),
                forced: &|s| forced.iter().find(|f| f.0 == s).map(|f| f.1),
                shifted: &|_, _, az| shifted.contains(&az),
                latency: &|_, _, healthy| qdns_zone::evaluate::first_healthy(healthy),
            },
        );
        self.engine.set_health(bitmap);
    }

    fn ask(&self, name: &str, qtype: RecordType, draw: u32) -> Message {
        let q = query(name, qtype, Ask::default());
        let mut out = vec![0u8; 65_535];
        let outcome = self
            .engine
            .respond_with_draw(&q, &mut out, Transport::Udp, draw)
            .unwrap();
        Message::from_vec(&out[..outcome.len]).unwrap()
    }

    /// Sorted answer values (addresses, CNAME targets).
    fn values(&self, name: &str, qtype: RecordType, draw: u32) -> Vec<String> {
        let mut v: Vec<String> = self
            .ask(name, qtype, draw)
            .answers
            .iter()
            .map(|r| match &r.data {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(a) => a.0.to_string(),
                RData::CNAME(c) => c.0.to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        v.sort();
        v
    }

    /// Share of each answer over 4096 evenly spaced draws.
    fn shares(&self, name: &str) -> BTreeMap<String, f64> {
        let mut counts = BTreeMap::new();
        for k in 0u32..4096 {
            *counts
                .entry(self.values(name, RecordType::A, k << 20).join(","))
                .or_insert(0u32) += 1;
        }
        counts.into_iter().map(|(k, c)| (k, f64::from(c) / 4096.0)).collect()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 2.0 / 4096.0
}

#[test]
fn weighted_shares_follow_weights_of_healthy_members() {
    let f = fixture();
    f.health(&[], &[], &[]);
    let s = f.shares("www.shop.example.");
    assert!(
        close(s["192.0.2.10"], 0.2) && close(s["192.0.2.11"], 0.4) && close(s["192.0.2.12"], 0.4),
        "{s:?}"
    );
    // web-2 down: a 10/30, c 20/30.
    f.health(&["web-2"], &[], &[]);
    let s = f.shares("www.shop.example.");
    assert!(
        close(s["192.0.2.10"], 1.0 / 3.0) && close(s["192.0.2.12"], 2.0 / 3.0) && !s.contains_key("192.0.2.11"),
        "{s:?}"
    );
}

#[test]
fn weight_zero_member_only_when_positive_ones_are_down() {
    let f = fixture();
    f.health(&[], &[], &[]);
    assert_eq!(
        f.values("shop.shop.example.", RecordType::CNAME, 7),
        ["www.shop.example."]
    );
    f.health(&["web-1", "web-2"], &[], &[]); // web-any (calculated, ≥ 1 of 2) goes down
    assert_eq!(
        f.values("shop.shop.example.", RecordType::CNAME, 7),
        ["static.shop.example."]
    );
}

#[test]
fn failover_in_all_four_states() {
    let f = fixture();
    for (down, expected) in [
        (vec![], "192.0.2.20"),
        (vec!["api-2"], "192.0.2.20"),
        (vec!["api-1"], "198.51.100.20"),
        (vec!["api-1", "api-2"], "192.0.2.20"), // fail-open: primary
    ] {
        f.health(&down, &[], &[]);
        assert_eq!(
            f.values("api.shop.example.", RecordType::A, 1),
            [expected],
            "down {down:?}"
        );
    }
}

#[test]
fn multivalue_healthy_members_and_fail_open_below() {
    let f = fixture();
    f.health(&["m-1"], &[], &[]);
    assert_eq!(
        f.values("mv.shop.example.", RecordType::AAAA, 3),
        ["2001:db8::2", "2001:db8::3"]
    );
    // 1 of 3 healthy (33 %) is above fail_open_below = 0.25: only m3.
    f.health(&["m-1", "m-2"], &[], &[]);
    assert_eq!(f.values("mv.shop.example.", RecordType::AAAA, 3), ["2001:db8::3"]);
    // With fail_open_below = 0.5, 1 of 3 healthy is below it: fail open, all three.
    let f = fixture_with(|t| t.replace("fail_open_below = 0.25", "fail_open_below = 0.5"));
    f.health(&["m-1", "m-2"], &[], &[]);
    assert_eq!(
        f.values("mv.shop.example.", RecordType::AAAA, 3),
        ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
    );
}

#[test]
fn zonal_spec_scenario_cross_zone_off_and_on() {
    // AZ1 {A1 unhealthy, B1 healthy}, AZ2 {A2, B2 healthy}.
    let off = fixture();
    off.health(&["a1"], &[], &[]);
    assert_eq!(off.values("lb.shop.example.", RecordType::A, 0), ["192.0.2.32"]);
    let on = fixture_with(|t| t.replace("cross_zone = false", "cross_zone = true"));
    on.health(&["a1"], &[], &[]);
    assert_eq!(
        on.values("lb.shop.example.", RecordType::A, 0),
        ["192.0.2.31", "192.0.2.32"]
    );
    // Cross-zone on, B1 and B2 unhealthy: no AZ healthy → fail-open, both.
    on.health(&["b1", "b2"], &[], &[]);
    assert_eq!(
        on.values("lb.shop.example.", RecordType::A, 0),
        ["192.0.2.31", "192.0.2.32"]
    );
}

#[test]
fn zonal_shift_moves_traffic_unless_it_would_empty_the_answer() {
    let f = fixture();
    f.health(&[], &[], &["az1"]);
    assert_eq!(f.values("lb.shop.example.", RecordType::A, 0), ["192.0.2.32"]);
    f.health(&["a2"], &[], &["az1"]); // az2 unhealthy, az1 shifted: fail-open, the shift moves nothing
    assert_eq!(
        f.values("lb.shop.example.", RecordType::A, 0),
        ["192.0.2.31", "192.0.2.32"]
    );
}

#[test]
fn alias_with_evaluate_target_health() {
    let f = fixture();
    f.health(&[], &[], &[]);
    assert_eq!(
        f.values("app.shop.example.", RecordType::A, 0),
        ["192.0.2.31", "192.0.2.32"],
        "primary: the alias answers lb's records"
    );
    let msg = f.ask("app.shop.example.", RecordType::A, 0);
    assert!(
        msg.answers.iter().all(|r| r.name.to_ascii() == "app.shop.example."),
        "alias records carry the queried name"
    );
    // lb has no healthy AZ → the alias is unhealthy → the secondary.
    f.health(&["a1", "a2"], &[], &[]);
    assert_eq!(f.values("app.shop.example.", RecordType::A, 0), ["203.0.113.9"]);
    // The secondary's external check set unhealthy too: fail-open to the primary, whose
    // target fails open itself.
    f.health(&["a1", "a2"], &[("change-freeze", false)], &[]);
    assert_eq!(
        f.values("app.shop.example.", RecordType::A, 0),
        ["192.0.2.31", "192.0.2.32"]
    );
}

#[test]
fn fail_open_for_each_policy_never_empties_an_answer() {
    let f = fixture();
    let all = ["web-1", "web-2", "api-1", "api-2", "m-1", "m-2", "a1", "b1", "a2", "b2"];
    f.health(&all, &[("change-freeze", false)], &["az1", "az2"]);
    for (name, qtype) in [
        ("www.shop.example.", RecordType::A),
        ("api.shop.example.", RecordType::A),
        ("mv.shop.example.", RecordType::AAAA),
        ("lb.shop.example.", RecordType::A),
        ("app.shop.example.", RecordType::A),
        ("shop.shop.example.", RecordType::CNAME),
    ] {
        for draw in [0, 1 << 31, u32::MAX] {
            assert!(
                !f.values(name, qtype, draw).is_empty(),
                "{name} answered while failing open"
            );
        }
    }
    // www does not even fail open: member c has no check, so it stays healthy and takes all.
    let s = f.shares("www.shop.example.");
    assert_eq!(s.len(), 1, "{s:?}");
}

#[test]
fn degraded_ttl_while_any_candidate_is_unhealthy() {
    let f = fixture();
    f.health(&[], &[], &[]);
    assert!(f
        .ask("www.shop.example.", RecordType::A, 0)
        .answers
        .iter()
        .all(|r| r.ttl == 30));
    f.health(&["web-1"], &[], &[]);
    assert!(f
        .ask("www.shop.example.", RecordType::A, 0)
        .answers
        .iter()
        .all(|r| r.ttl == 10));
}
