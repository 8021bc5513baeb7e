//! Operator changes in a deployment (issue 52 §4, SPEC §11): an override, external
//! status or shift given to any location's control is written to the intent store
//! (a real etcd) before the command answers, and every location's edges answer by it;
//! `--only-location` scopes one to one location; a location cut off from the store
//! refuses changes within 5 s, naming the store, and serves on; a single host moving in
//! keeps what it had set.
mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{
    deployment::{
        answers, example_zones, heard_from, in_timeline, location, publish, published, qdnsctl_json, secret_put,
        statuses,
    },
    Location,
};
use hickory_proto::rr::RecordType;
use qdns_testkit::etcd::Etcd;

const API: &str = "api.shop.example.";
const PRIMARY: &[&str] = &["192.0.2.20"];
const SECONDARY: &[&str] = &["198.51.100.20"];

#[test]
fn an_operator_change_at_one_location_is_in_force_at_every_location_unless_scoped_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/operator");
    let zones = example_zones(dir.path(), true);
    publish(&zones, &url);
    let fra = location(&url, "fra");
    let mut ams = location(&url, "ams");
    for loc in [&fra, &ams] {
        answers(loc, API, PRIMARY);
    }

    // Given at fra, in force at both.
    fra.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    for loc in [&fra, &ams] {
        answers(loc, API, SECONDARY);
    }
    in_timeline(&ams, "shop.example./api-1 forced unhealthy for 30m at every location");
    in_timeline(&ams, "from fra");
    // Both say which operator state they serve, and that the store is heard.
    let status = ams.ctl_json(&["status"]);
    assert!(status["intent_operator_revision"].as_u64().unwrap() > 0, "{status}");
    assert!(status["intent_heard_s"].as_u64().unwrap() <= 15, "{status}");
    // The end is the deployment's: both count down to the same wall time.
    let ends = |loc: &Location| loc.ctl_json(&["health", "api-1"]).to_string();
    assert!(ends(&ams).contains("override"), "{}", ends(&ams));

    // Scoped to ams, given at fra: ams answers by it, fra by the deployment's.
    fra.ctl_json(&[
        "override",
        "set",
        "api-1",
        "healthy",
        "--expires",
        "30m",
        "--only-location",
        "ams",
    ]);
    answers(&ams, API, PRIMARY);
    answers(&fra, API, SECONDARY);
    // A location the deployment does not know: refused, nothing kept for it.
    let out = fra.ctl(&["override", "clear", "api-1", "--only-location", "amsterdam"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no such location"), "{err}");

    // A shift given at ams moves traffic at fra.
    ams.ctl_json(&[
        "shift",
        "start",
        "--rrset",
        "lb.shop.example.",
        "--az",
        "az1",
        "--expires",
        "2h",
    ]);
    answers(&fra, "lb.shop.example.", &["192.0.2.32"]);
    let shifts = fra.ctl_json(&["shift", "list"]);
    let left = shifts[0]["expires_in_s"].as_u64().unwrap();
    assert!(left > 2 * 3600 - 30 && left <= 2 * 3600, "{shifts}");

    // A restarted location takes the deployment's state, its own part included.
    ams.control.take().unwrap().term();
    ams.start_control_following(&url, &["--no-embedded-checker", "--location", "ams"]);
    answers(&ams, API, PRIMARY);
    answers(&ams, "lb.shop.example.", &["192.0.2.32"]);

    // Cleared at ams (the deployment's part): fra answers the primary again; ams's own
    // override is its own to clear.
    ams.ctl_json(&["override", "clear", "api-1"]);
    answers(&fra, API, PRIMARY);
    let out = fra.ctl(&["override", "clear", "api-1"]);
    assert!(!out.status.success(), "nothing left to clear in the deployment's part");
    ams.ctl_json(&["override", "clear", "api-1", "--only-location", "ams"]);
    ams.ctl_json(&["shift", "cancel", "--rrset", "lb.shop.example.", "--az", "az1"]);
    answers(&fra, "lb.shop.example.", &["192.0.2.31", "192.0.2.32"]);
    drop(etcd);
}

#[test]
fn a_location_cut_off_from_the_store_refuses_changes_within_5s_and_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/cut-change");
    let zones = example_zones(dir.path(), true);
    publish(&zones, &url);
    let fra = location(&url, "fra");
    answers(&fra, API, PRIMARY);

    etcd.kill();
    let started = Instant::now();
    let out = fra.ctl(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a change without the store is refused");
    assert!(took < Duration::from_secs(7), "refused after {took:?}");
    assert!(
        err.contains("nothing was changed") && err.contains("intent store 127.0.0.1:"),
        "{err}"
    );
    // Not made, here or anywhere: the location serves on as before.
    answers(&fra, API, PRIMARY);
    assert!(!fra.ctl_json(&["health", "api-1"]).to_string().contains("override"));

    etcd.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = fra.ctl(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    answers(&fra, API, SECONDARY);
}

#[test]
fn a_single_host_moving_in_keeps_its_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/move-in");
    let mut host = Location::prepared();
    host.start_control();
    host.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    host.control.take().unwrap().term();

    publish(&host.zones(), &url);
    host.start_control_following(&url, &["--no-embedded-checker", "--location", "fra"]);
    host.start_edge();
    answers(&host, API, SECONDARY);
    // Its override is the deployment's now: a new location answers by it too.
    let ams = location(&url, "ams");
    answers(&ams, API, SECONDARY);
    in_timeline(&ams, "operator state of the deployment taken");
    drop(etcd);
}

/// The DS records `qdnsctl dnssec ds example.net.` gives at `loc`.
fn ds_records(loc: &Location) -> Vec<String> {
    let keys = loc.ctl_json(&["dnssec", "ds", "example.net."]);
    let mut ds: Vec<String> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["ds"].as_str().unwrap().to_owned())
        .collect();
    ds.sort();
    ds
}

/// Waits until `loc`'s edge answers example.net. DNSKEY with `count` keys.
fn dnskeys(loc: &Location, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = loc.values("example.net.", RecordType::DNSKEY);
        if got.len() == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "example.net. DNSKEY is {got:?}, not {count} keys"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_rollover_step_given_at_one_location_moves_every_location() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/rollover");
    let zones = example_zones(dir.path(), true);
    let path = zones.join("example.net.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("[zone]\n", "[zone]\ndnssec = true\n", 1)).unwrap();
    publish(&zones, &url);
    let fra = location(&url, "fra");
    let ams = location(&url, "ams");
    let first = ds_records(&fra);
    assert_eq!(first.len(), 1);
    assert_eq!(ds_records(&ams), first);

    // Started at fra: both sign with the old and the incoming key.
    let started = fra.ctl_json(&["dnssec", "rollover", "example.net."]);
    assert_eq!(started.as_array().unwrap().len(), 2, "{started}");
    for loc in [&fra, &ams] {
        dnskeys(loc, 2);
    }
    let both = ds_records(&fra);
    assert_eq!(ds_records(&ams), both);
    // Completed at ams: both keep the new key only.
    ams.ctl_json(&["dnssec", "rollover", "example.net.", "--complete"]);
    for loc in [&fra, &ams] {
        dnskeys(loc, 1);
    }
    let last = ds_records(&ams);
    assert_eq!(ds_records(&fra), last);
    assert_eq!(last.len(), 1);
    assert_ne!(last, first, "the new key, not the old");
    assert!(both.contains(&last[0]));
    drop(etcd);
}

#[test]
fn qdnsctl_change_says_which_locations_answer_by_a_change_and_which_refused_it() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/change");
    let zones = example_zones(dir.path(), false);
    let first = published(&zones, &url);
    let _fra = location(&url, "fra");
    // ams refuses checks of special-use targets (shop.example's probe loopback).
    let mut ams = Location::prepared();
    ams.start_control_following(
        &url,
        &[
            "--no-embedded-checker",
            "--location",
            "ams",
            "--deny-special-use-targets",
        ],
    );
    ams.start_edge();
    let (ok, change, err) = qdnsctl_json(&["change", &first.to_string(), "--wait", "--timeout", "30"], &url);
    assert!(ok, "{err}{change}");
    assert_eq!(
        statuses(&change),
        [
            ("ams".to_owned(), "INSYNC".to_owned()),
            ("fra".to_owned(), "INSYNC".to_owned())
        ]
    );
    for row in change["locations"].as_array().unwrap() {
        assert_eq!(row["serving"]["applied"], first, "{row}");
        assert_eq!(row["edges"], 1, "{row}");
    }

    // shop.example added: fra takes it, ams refuses it; --wait ends at once, failing.
    qdns_testkit::fixtures::copy_examples(&zones);
    let second = published(&zones, &url);
    let (ok, change, err) = qdnsctl_json(&["change", &second.to_string(), "--wait", "--timeout", "30"], &url);
    assert!(!ok && err.contains("ams REFUSED"), "{err}{change}");
    assert_eq!(
        statuses(&change),
        [
            ("ams".to_owned(), "REFUSED".to_owned()),
            ("fra".to_owned(), "INSYNC".to_owned())
        ]
    );
    // The fleet: both heard from, ams on the first revision and saying why.
    let (ok, fleet, err) = qdnsctl_json(&["fleet"], &url);
    assert!(ok, "{err}");
    let ams_row = fleet
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["location"] == "ams")
        .unwrap();
    assert_eq!(ams_row["alive"], true);
    assert_eq!(ams_row["applied"], first);
    assert_eq!(ams_row["refused"][0]["revision"], second, "{ams_row}");
    drop(etcd);
}

#[test]
fn a_location_the_store_stops_hearing_from_is_cut_off_and_does_not_hold_a_change_up() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/cut-off");
    let zones = example_zones(dir.path(), true);
    published(&zones, &url);
    let fra = location(&url, "fra");
    let ams = location(&url, "ams");
    // ams's control stops (as cut off): after its lease, the store says so.
    ams.control.as_ref().unwrap().signal("STOP");
    heard_from(&url, "ams", false);
    // An operator change given at fra: in force at fra; the cut-off ams does not hold
    // the wait up.
    fra.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    let (ok, change, err) = qdnsctl_json(&["change", "--wait", "--timeout", "30"], &url);
    assert!(ok, "{err}{change}");
    assert_eq!(
        statuses(&change),
        [
            ("ams".to_owned(), "CUT OFF".to_owned()),
            ("fra".to_owned(), "INSYNC".to_owned())
        ]
    );
    assert!(change["wants"]["operator"].as_u64().unwrap() > 0, "{change}");
    // Back: ams is heard from again, catches up, and its edge answers by the change.
    ams.control.as_ref().unwrap().signal("CONT");
    heard_from(&url, "ams", true);
    let (ok, change, err) = qdnsctl_json(&["change", "--wait", "--timeout", "30"], &url);
    assert!(ok, "{err}{change}");
    assert_eq!(
        statuses(&change),
        [
            ("ams".to_owned(), "INSYNC".to_owned()),
            ("fra".to_owned(), "INSYNC".to_owned())
        ]
    );
    answers(&ams, API, SECONDARY);
    drop(etcd);
}

/// A remote checker `c1` following `url`, reporting to `fra` at `port`, its state in
/// `dir`.
fn checker_following(dir: &Path, url: &str, port: u16) -> qdns_testkit::daemon::Daemon {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    cmd.args(["checker", "--id", "c1", "--region", "r1", "--intent", url])
        .arg("--state-dir")
        .arg(dir.join("checker-state"))
        .arg("--key-file")
        .arg(dir.join("c1.key"))
        .args(["--report-to", &format!("fra=127.0.0.1:{port}")]);
    qdns_testkit::daemon::Daemon::spawn("checker", cmd)
}

#[test]
fn a_checker_following_the_intent_probes_the_published_checks_also_when_the_store_is_down() {
    // (and the location takes the list of checkers it accepts from the intent too)
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/checker");
    let zones = example_zones(dir.path(), false);
    published(&zones, &url);
    // The checker's key, and the location's list of checkers.
    let key = "c2VjcmV0LWtleS1vZi1jaGVja2VyLWMx";
    qdns_link::protocol::write_private(&dir.path().join("c1.key"), key.as_bytes()).unwrap();
    let keys = dir.path().join("keys.toml");
    let list = format!("[[checker]]\nid = \"c1\"\nregion = \"r1\"\nkey = \"{key}\"\n");
    qdns_link::protocol::write_private(&keys, list.as_bytes()).unwrap();
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut fra = Location::prepared();
    fra.start_control_following(
        &url,
        &[
            "--no-embedded-checker",
            "--location",
            "fra",
            "--checker-listen",
            &listen,
        ],
    );
    // The checkers every location accepts are the deployment's: no file at fra.
    secret_put("checker-keys", &keys, &url);
    in_timeline(&fra, "the deployment's checker keys taken: 1 checkers");
    let mut checker = checker_following(dir.path(), &url, port);
    checker.wait_for("checker running checks=0");

    // shop.example published: the checker probes its checks, and fra hears of them.
    qdns_testkit::fixtures::copy_examples(&zones);
    let second = published(&zones, &url);
    checker.wait_for(&format!("revision={second}"));
    let observed_by_c1 = |fra: &Location| fra.ctl_json(&["health", "api-1"]).to_string().contains("\"c1\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !observed_by_c1(&fra) {
        assert!(Instant::now() < deadline, "{}", fra.ctl_json(&["health", "api-1"]));
        std::thread::sleep(Duration::from_millis(200));
    }

    // Restarted while the store is down: it probes the revision it followed.
    checker.term();
    etcd.kill();
    let checker = checker_following(dir.path(), &url, port);
    checker.wait_for("probing the revision followed before");
    let line = checker.wait_for("checker running");
    assert!(!line.contains("checks=0"), "{line}");
}

/// The TSIG key of the transfer test, in tsig-keygen's form.
const XFR_SECRET: &str = "c2VjcmV0LW9mLXRoZS14ZnIta2V5LWluLXRoZS1zdG9yZQ==";

#[test]
fn the_tsig_keys_are_the_deployments_and_a_revision_waiting_for_one_is_applied_once_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/tsig");
    let zones = example_zones(dir.path(), false);
    published(&zones, &url);
    let transfer = format!("127.0.0.1:{}", common::free_port());
    let mut fra = Location::prepared();
    fra.start_control_following(
        &url,
        &[
            "--no-embedded-checker",
            "--location",
            "fra",
            "--transfer-listen",
            &transfer,
        ],
    );
    // A zone for transfer with the key: no location has the key yet, fra refuses it.
    let zone = "[zone]\norigin = \"xfr.test.\"\nttl = 60\ntransfer_allow = [\"127.0.0.0/8\"]\n\
                transfer_tsig = \"xfr-key\"\n[zone.soa]\nmname = \"ns1.xfr.test.\"\n\
                rname = \"hostmaster.xfr.test.\"\nserial = 7\nrefresh = 7200\nretry = 900\n\
                expire = 1209600\nminimum = 60\n[zone.ns]\nnames = [\"ns1.xfr.test.\"]\n\
                [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.7\"]\n";
    std::fs::write(zones.join("xfr.test.toml"), zone).unwrap();
    let waiting = published(&zones, &url);
    in_timeline(&fra, &format!("intent revision {waiting} refused here"));
    // The key put once for the deployment: fra takes it and applies the waiting revision.
    let key_file = dir.path().join("tsig.conf");
    let key = format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{XFR_SECRET}\";\n}};\n");
    qdns_link::protocol::write_private(&key_file, key.as_bytes()).unwrap();
    secret_put("tsig-keys", &key_file, &url);
    in_timeline(&fra, "the deployment's TSIG keys taken: 1 keys");
    in_timeline(&fra, &format!("intent revision {waiting} applied"));
    let (host, port) = transfer.split_once(':').unwrap();
    let axfr = |extra: &[&str]| {
        let out = Command::new("kdig")
            .args([&format!("@{host}"), "-p", port])
            .args(extra)
            .args(["AXFR", "xfr.test."])
            .output()
            .expect("kdig (knot-dnsutils)");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    // Transfers rebuild their copy of the zones a moment after the snapshot is installed.
    let tsig = format!("hmac-sha256:xfr-key:{XFR_SECRET}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut signed = axfr(&["-y", &tsig]);
    while !signed.contains("192.0.2.7") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        signed = axfr(&["-y", &tsig]);
    }
    assert!(signed.contains("192.0.2.7"), "{signed}");
    let unsigned = axfr(&[]);
    assert!(!unsigned.contains("192.0.2.7"), "{unsigned}");
}
