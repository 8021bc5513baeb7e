//! Policy record sets and health checks: loading, every validation error of SPEC §2,
//! slot order, and health evaluation (calculated, inverted, disabled, alias, AZ, shifts).
use std::{fs, path::Path};

use qdns_abi::health::{slot_healthy, ALWAYS_HEALTHY};
use qdns_zone::{
    evaluate::{evaluate, Inputs},
    load_dir, load_zone_file, Answer, PolicyKind, SlotRule, Zone,
};

fn example() -> Zone {
    load_zone_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones/shop.example.toml")).unwrap()
}

use qdns_testkit::fixtures::ZONE_HEAD as HEAD;

fn error(body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.toml");
    fs::write(&path, format!("{HEAD}{body}")).unwrap();
    let msg = load_zone_file(&path).unwrap_err().to_string();
    assert!(msg.contains("t.toml"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    msg
}

const CHECK: &str = "[[health_check]]\nid = \"c1\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = 1\n";

#[test]
fn example_zone_loads_every_policy() {
    let zone = example();
    let kinds: Vec<_> = zone
        .rrsets
        .iter()
        .filter_map(|s| s.policy.as_ref().map(|p| p.kind))
        .collect();
    for kind in [
        PolicyKind::Weighted,
        PolicyKind::Failover,
        PolicyKind::Multivalue,
        PolicyKind::Zonal,
    ] {
        assert!(kinds.contains(&kind), "{kind:?}");
    }
    // Every derived slot comes after the slots it reads.
    for (i, slot) in zone.slots.iter().enumerate() {
        let reads: Vec<u32> = match &slot.rule {
            SlotRule::Check { .. } => vec![],
            SlotRule::Calculated { children, .. } => children.clone(),
            SlotRule::AliasTarget { members } => members.clone(),
            SlotRule::Az { targets, .. } => targets.iter().map(|t| t.2).collect(),
            SlotRule::Latency { health, .. } => health.clone(),
        };
        assert!(
            reads.iter().all(|&r| r == ALWAYS_HEALTHY || (r as usize) < i),
            "{} reads a later slot",
            slot.name
        );
    }
    let app = zone
        .rrsets
        .iter()
        .find(|s| s.name == b"\x03app\x04shop\x07example\x00")
        .unwrap();
    let policy = app.policy.as_ref().unwrap();
    assert_eq!(policy.members[0].id, "p", "primary first");
    assert!(
        matches!(&policy.members[0].answer, Answer::Alias { target } if target == b"\x02lb\x04shop\x07example\x00")
    );
    assert!(matches!(
        zone.slots[policy.members[0].slot as usize].rule,
        SlotRule::AliasTarget { .. }
    ));
}

#[test]
fn spec_validation_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = 1, values = [\"192.0.2.1\"], health_check = \"nope\" }]\n",
            "unknown health check id \"nope\"",
        ),
        (
            "[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = -1, values = [\"192.0.2.1\"] }]\n",
            "rrset[0].members[0].weight: weight -1 is outside 0..=255",
        ),
        (
            "[[rrset]]\nname = \"f\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [{ id = \"a\", role = \"primary\", values = [\"192.0.2.1\"] }, { id = \"b\", role = \"primary\", values = [\"192.0.2.2\"] }]\n",
            "two primaries",
        ),
        (
            "[[rrset]]\nname = \"x\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [{ id = \"p\", role = \"primary\", alias = \"y\" }]\n[[rrset]]\nname = \"y\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [{ id = \"p\", role = \"primary\", alias = \"x\" }]\n",
            "alias loop",
        ),
        (
            "[[rrset]]\nname = \"x\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [{ id = \"p\", role = \"primary\", alias = \"t\" }]\n[[rrset]]\nname = \"t\"\ntype = \"AAAA\"\nvalues = [\"2001:db8::1\"]\n",
            "another type",
        ),
        (
            "[[rrset]]\nname = \"w.other.\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = 1, values = [\"192.0.2.1\"] }]\n",
            "outside the zone",
        ),
        (
            "[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = 1, values = [\"192.0.2.999\"] }]\n",
            "rrset[0].members[0].values[0]: invalid A value",
        ),
        ("[[health_check]]\nid = \"h\"\ntype = \"http\"\nip = \"127.0.0.1\"\ninterval = 20\n", "interval 20 must be 10 or 30"),
        ("[[health_check]]\nid = \"h\"\ntype = \"http\"\nip = \"127.0.0.300\"\n", "health_check[1].ip: bad address"),
        ("[[health_check]]\nid = \"h\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\n", "a tcp check needs a port"),
        ("[[health_check]]\nid = \"h\"\ntype = \"http\"\nip = \"127.0.0.1\"\nfailure_threshold = 11\n", "11 is outside 1..=10"),
        (
            "[[health_check]]\nid = \"x\"\ntype = \"calculated\"\nchildren = [\"y\"]\nhealthy_threshold = 1\n[[health_check]]\nid = \"y\"\ntype = \"calculated\"\nchildren = [\"x\"]\nhealthy_threshold = 1\n",
            "cycle",
        ),
        (
            "[[health_check]]\nid = \"x\"\ntype = \"calculated\"\nchildren = [\"c1\"]\nhealthy_threshold = 2\n",
            "2 is outside 0..=1",
        ),
        ("[[health_check]]\nid = \"e\"\ntype = \"external\"\nip = \"127.0.0.1\"\n", "ip is not used by external checks"),
        (
            "[[rrset]]\nname = \"m\"\ntype = \"A\"\npolicy = \"multivalue\"\nmembers = [{ id = \"a\", values = [\"192.0.2.1\", \"192.0.2.2\"] }]\n",
            "exactly one value",
        ),
        (
            "[[rrset]]\nname = \"z\"\ntype = \"A\"\npolicy = \"zonal\"\nzones = [{ az = \"a\", values = [\"192.0.2.1\"], targets = { A = [\"missing\"] } }]\n",
            "unknown health check id \"missing\"",
        ),
        ("[[rrset]]\nname = \"w\"\ntype = \"A\"\npolicy = \"roundrobin\"\nmembers = []\n", "unknown policy"),
    ];
    for (body, expected) in cases {
        let msg = error(&format!("{CHECK}{body}"));
        assert!(msg.contains(expected), "expected {expected:?} in {msg}");
    }
}

/// Global slot of the check or derived slot named `name`.
fn slot(zone: &Zone, name: &str) -> u32 {
    zone.slot_base
        + zone
            .slots
            .iter()
            .position(|s| s.name == name)
            .unwrap_or_else(|| panic!("no slot {name}")) as u32
}

#[test]
fn evaluation_of_derived_health() {
    let dir = tempfile::tempdir().unwrap();
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones/shop.example.toml"),
        dir.path().join("shop.toml"),
    )
    .unwrap();
    let snapshot = load_dir(dir.path(), 1).unwrap();
    let zone = &snapshot.zones[0];
    // Standalone: everything healthy.
    assert!(zone
        .slots
        .iter()
        .enumerate()
        .all(|(i, _)| slot_healthy(&snapshot.bitmap, i as u32)));

    let down = |names: &[&str]| -> Vec<u32> { names.iter().map(|n| slot(zone, n)).collect() };
    let run = |unhealthy: Vec<u32>, shifted: Option<&str>| {
        let measured = move |s: u32| Some(!unhealthy.contains(&s));
        evaluate(
            &snapshot.zones,
            &Inputs {
                measured: &measured,
                forced: &|_| None,
                shifted: &|_, _, az| Some(az) == shifted,
                latency: &|_, _, healthy| qdns_zone::evaluate::first_healthy(healthy),
            },
        )
    };
    // Calculated: web-any needs one of web-1/web-2.
    let b = run(down(&["web-1"]), None);
    assert!(slot_healthy(&b, slot(zone, "web-any")));
    let b = run(down(&["web-1", "web-2"]), None);
    assert!(!slot_healthy(&b, slot(zone, "web-any")));
    // SPEC zonal scenario: A1 down → az1 unhealthy, az2 healthy (cross-zone off).
    let b = run(down(&["a1"]), None);
    assert!(!slot_healthy(&b, slot(zone, "lb.shop.example.@az1")));
    assert!(slot_healthy(&b, slot(zone, "lb.shop.example.@az2")));
    // A shift takes az2 away too; the alias (app → lb) then has no healthy candidate.
    let b = run(down(&["a1"]), Some("az2"));
    assert!(!slot_healthy(&b, slot(zone, "lb.shop.example.@az2")));
    assert!(!slot_healthy(&b, slot(zone, "app.shop.example./lb.shop.example.")));
    let b = run(vec![], None);
    assert!(slot_healthy(&b, slot(zone, "app.shop.example./lb.shop.example.")));
}

/// `policy = "latency"`: each member gets a choice slot after the checks it reads, set
/// for the member the location's chooser names among the healthy ones; alias members,
/// weights and roles are refused.
#[test]
fn latency_sets_get_a_choice_slot_per_member() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "{CHECK}{}[[rrset]]\nname = \"l\"\ntype = \"A\"\npolicy = \"latency\"\nmembers = [\n\
         {{ id = \"a\", values = [\"192.0.2.1\"], health_check = \"c1\" }},\n\
         {{ id = \"b\", values = [\"192.0.2.2\"], health_check = \"c2\" }},\n\
         {{ id = \"c\", values = [\"192.0.2.3\"] }},\n]\n",
        CHECK.replace("c1", "c2")
    );
    fs::write(dir.path().join("t.toml"), format!("{HEAD}{body}")).unwrap();
    let snapshot = load_dir(dir.path(), 1).unwrap();
    let zone = &snapshot.zones[0];
    let set = zone.rrsets.iter().find(|s| s.policy.is_some()).unwrap();
    let policy = set.policy.as_deref().unwrap();
    assert_eq!(policy.kind, PolicyKind::Latency);
    let (c1, c2) = (slot(zone, "c1"), slot(zone, "c2"));
    for (i, m) in policy.members.iter().enumerate() {
        let SlotRule::Latency { member, health, .. } = &zone.slots[m.slot as usize].rule else {
            panic!("{} has no choice slot", m.id);
        };
        assert_eq!((*member as usize, health.clone()), (i, vec![c1, c2, ALWAYS_HEALTHY]));
        assert!(m.slot > c1 && m.slot > c2);
    }
    let run = |down: Vec<u32>, prefer_last: bool| {
        evaluate(
            &snapshot.zones,
            &Inputs {
                measured: &|s| Some(!down.contains(&s)),
                forced: &|_| None,
                shifted: &|_, _, _| false,
                latency: &|_, _, healthy| {
                    if prefer_last {
                        healthy.iter().rposition(|&h| h).map(|i| i as u32)
                    } else {
                        qdns_zone::evaluate::first_healthy(healthy)
                    }
                },
            },
        )
    };
    let chosen = |b: &[u64]| -> Vec<bool> { policy.members.iter().map(|m| slot_healthy(b, m.slot)).collect() };
    assert_eq!(chosen(&run(vec![], false)), [true, false, false]);
    assert_eq!(chosen(&run(vec![c1], false)), [false, true, false]);
    assert_eq!(chosen(&run(vec![], true)), [false, false, true]);
    for (member, why) in [
        (
            "{ id = \"a\", alias = \"x\" }",
            "latency members answer values, not aliases",
        ),
        (
            "{ id = \"a\", weight = 1, values = [\"192.0.2.1\"] }",
            "weight belongs to weighted sets",
        ),
        (
            "{ id = \"a\", role = \"primary\", values = [\"192.0.2.1\"] }",
            "role belongs to failover sets",
        ),
    ] {
        let msg = error(&format!(
            "[[rrset]]\nname = \"x\"\ntype = \"A\"\nvalues = [\"192.0.2.9\"]\n[[rrset]]\nname = \"l\"\ntype = \"A\"\npolicy = \"latency\"\nmembers = [{member}]\n"
        ));
        assert!(msg.contains(why), "{msg}");
    }
}

#[test]
fn inverted_and_disabled_checks() {
    let dir = tempfile::tempdir().unwrap();
    let body = "[[health_check]]\nid = \"inv\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = 1\ninverted = true\n[[health_check]]\nid = \"off\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = 2\ndisabled = true\n";
    fs::write(dir.path().join("t.toml"), format!("{HEAD}{body}")).unwrap();
    let snapshot = load_dir(dir.path(), 1).unwrap();
    let zone = &snapshot.zones[0];
    let b = evaluate(
        &snapshot.zones,
        &Inputs {
            measured: &|_| None,
            forced: &|_| None,
            shifted: &|_, _, _| false,
            latency: &|_, _, healthy| qdns_zone::evaluate::first_healthy(healthy),
        },
    );
    assert!(
        !slot_healthy(&b, slot(zone, "inv")),
        "a new inverted check starts unhealthy"
    );
    let b = evaluate(
        &snapshot.zones,
        &Inputs {
            measured: &|_| Some(false),
            forced: &|_| None,
            shifted: &|_, _, _| false,
            latency: &|_, _, healthy| qdns_zone::evaluate::first_healthy(healthy),
        },
    );
    assert!(slot_healthy(&b, slot(zone, "inv")));
    assert!(
        slot_healthy(&b, slot(zone, "off")),
        "disabled is healthy whatever it measures"
    );
    let b = evaluate(
        &snapshot.zones,
        &Inputs {
            measured: &|_| Some(true),
            forced: &|_| Some(false),
            shifted: &|_, _, _| false,
            latency: &|_, _, healthy| qdns_zone::evaluate::first_healthy(healthy),
        },
    );
    assert!(!slot_healthy(&b, slot(zone, "off")), "an override wins");
}
