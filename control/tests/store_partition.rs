//! The partition contract of a deployment (issue 52 §8, docs/OPERATIONS.md "What each
//! location does when the store is impaired"), with a real 3-member etcd cluster
//! (Debian's etcd-server) and three locations (control + edge each): the leader killed
//! while changes are published, quorum lost (changes refused within 5 s, every
//! location serving on), quorum back, a location cut off while the history it missed
//! is compacted. Checked by answers: two names a zone changes together never answer
//! from different revisions at any location, and every acknowledged change is applied
//! at every location, none twice.
mod common;

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use common::{
    deployment::{heard_from, location, published, published_retrying, qdnsctl_json, try_publish},
    Location,
};
use hickory_proto::rr::RecordType;
use qdns_testkit::etcd::EtcdCluster;

/// The zones: the examples, and pair.test whose `a` and `b` both hold `value`.
fn write_zones(dir: &Path, value: u8) {
    std::fs::create_dir_all(dir).unwrap();
    qdns_testkit::fixtures::copy_examples(dir);
    let zone = format!(
        "[zone]\norigin = \"pair.test.\"\nttl = 60\n\
         [zone.soa]\nmname = \"ns1.pair.test.\"\nrname = \"hostmaster.pair.test.\"\nserial = {value}\n\
         refresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 60\n\
         [zone.ns]\nnames = [\"ns1.pair.test.\"]\n\
         [[rrset]]\nname = \"a\"\ntype = \"A\"\nvalues = [\"10.0.0.{value}\"]\n\
         [[rrset]]\nname = \"b\"\ntype = \"A\"\nvalues = [\"10.0.0.{value}\"]\n"
    );
    std::fs::write(dir.join("pair.test.toml"), zone).unwrap();
}

/// What `loc` answers for a and b; they must agree (one revision, applied whole).
fn pair(loc: &Location) -> String {
    let a = loc.values("a.pair.test.", RecordType::A);
    let b = loc.values("b.pair.test.", RecordType::A);
    assert_eq!(a, b, "a and b answered from different revisions");
    a.first().cloned().unwrap_or_default()
}

/// Waits until every location answers `10.0.0.VALUE`, checking the pair each time.
fn all_answer(locations: &[&Location], value: u8) {
    let want = format!("10.0.0.{value}");
    let deadline = Instant::now() + Duration::from_secs(30);
    for loc in locations {
        while pair(loc) != want {
            assert!(Instant::now() < deadline, "{} not {want}", pair(loc));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `qdnsctl publish`, expected to fail: its error, and how long it took.
fn publish_refused(dir: &Path, url: &str) -> (String, Duration) {
    let started = Instant::now();
    let out = try_publish(dir, url);
    assert!(!out.status.success(), "published without quorum");
    (String::from_utf8_lossy(&out.stderr).into_owned(), started.elapsed())
}

/// How many times each revision was applied at `loc` (its timeline).
fn applied(loc: &Location) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for event in loc.ctl_json(&["events", "--limit", "1000"]).as_array().unwrap() {
        let text = event["message"].as_str().unwrap_or("");
        if let Some(rest) = text.strip_prefix("intent revision ") {
            if let Some((revision, _)) = rest.split_once(" applied") {
                *out.entry(revision.parse().unwrap()).or_default() += 1;
            }
        }
    }
    out
}

#[test]
fn three_locations_keep_the_partition_contract_with_a_three_member_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = EtcdCluster::start(dir.path(), 3);
    let url = store.url("qdns/partition");
    let zones = dir.path().join("zones");
    write_zones(&zones, 1);
    let mut acknowledged = vec![published(&zones, &url)];
    let fra = location(&url, "fra");
    let ams = location(&url, "ams");
    let mut par = location(&url, "par");
    let all = [&fra, &ams, &par];
    all_answer(&all, 1);

    // The leader dies while changes are published: each publish that answered is in
    // force everywhere, whole.
    let leader = store.leader().expect("a leader");
    write_zones(&zones, 2);
    acknowledged.push(published(&zones, &url));
    store.kill(leader);
    write_zones(&zones, 3);
    // The first attempts may meet the dead member or an election.
    acknowledged.push(published_retrying(&zones, &url));
    all_answer(&all, 3);

    // A second member dies: no quorum. Publishing and operator changes are refused
    // within 5 s, naming the store; every location serves on.
    let second = (0..3).find(|&n| n != leader).unwrap();
    store.kill(second);
    write_zones(&zones, 4);
    let (err, took) = publish_refused(&zones, &url);
    assert!(took < Duration::from_secs(8), "refused after {took:?}");
    assert!(err.contains("intent store 127.0.0.1:"), "{err}");
    let started = Instant::now();
    let out = fra.ctl(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    assert!(!out.status.success(), "an operator change without quorum");
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing was changed") && err.contains("intent store"),
        "{err}"
    );
    for loc in all {
        assert_eq!(pair(loc), "10.0.0.3");
        assert_eq!(loc.values("api.shop.example.", RecordType::A), ["192.0.2.20"]);
    }

    // Quorum back: a change is applied everywhere.
    store.resume(leader, false);
    store.resume(second, true);
    acknowledged.push(published_retrying(&zones, &url));
    all_answer(&all, 4);

    // par is cut off (its control stopped) while two revisions are published and the
    // history compacted: back, it reads the revision in force whole.
    par.control.as_ref().unwrap().signal("STOP");
    heard_from(&url, "par", false);
    write_zones(&zones, 5);
    acknowledged.push(published(&zones, &url));
    write_zones(&zones, 6);
    acknowledged.push(published(&zones, &url));
    store.compact_now();
    all_answer(&[&fra, &ams], 6);
    assert_eq!(pair(&par), "10.0.0.4", "a cut-off location serves what it applied");
    par.control.as_ref().unwrap().signal("CONT");
    all_answer(&all, 6);
    let last = acknowledged.last().unwrap().to_string();
    let (ok, change, err) = qdnsctl_json(&["change", &last, "--wait", "--timeout", "60"], &url);
    assert!(ok, "{err}{change}");

    // None applied twice, anywhere; every location applied the last acknowledged one.
    // (Each acknowledged change was answered everywhere above. A location whose member
    // died reconnects and reads the revision in force whole, so it may skip one that a
    // later one holds: a revision is the whole intent, not a step.)
    for loc in all {
        let seen = applied(loc);
        assert!(seen.values().all(|&n| n == 1), "{seen:?}");
        assert_eq!(seen.get(acknowledged.last().unwrap()), Some(&1), "{seen:?}");
    }
    par.control.take().unwrap().term();
}
