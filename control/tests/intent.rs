//! One deployment, several locations (issue 52): zones published once to the
//! deployment's intent in a real etcd (Debian's etcd-server) are served by every
//! location that follows it, each revision applied whole — or refused at a location
//! that cannot take it, where the last stays in force — and a location cut off from the
//! store keeps serving what it applied, also across a restart of its control.
mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{free_port, sample, scrape, Location};
use hickory_proto::rr::RecordType;
use qdns_testkit::etcd::Etcd;

/// `qdnsctl publish DIR --intent URL`: the revision it prints.
fn publish(dir: &Path, url: &str, message: &str) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("publish")
        .arg(dir)
        .args(["--intent", url, "--message", message])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "publish: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .strip_prefix("change ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {stdout:?}"))
}

/// The zones to publish: the example zones but shop.example (whose checks probe
/// loopback, a special-use target).
fn zones_without_shop(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    qdns_testkit::fixtures::copy_examples(dir);
    std::fs::remove_file(dir.join("shop.example.toml")).unwrap();
}

/// www.example.com's A records set to `values` (a TOML array).
fn set_www(dir: &Path, values: &str) {
    let path = dir.join("example.com.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            if line.ends_with("# www A") || line == "values = [\"192.0.2.10\", \"192.0.2.11\"]" {
                format!("values = {values} # www A")
            } else {
                line.to_owned()
            }
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Waits until `loc` answers www.example.com A with `want`.
fn answers(loc: &Location, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = loc.values("www.example.com.", RecordType::A);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "www.example.com A is {got:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `loc`'s timeline holds an event saying `needle`.
fn in_timeline(loc: &Location, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !loc.ctl_json(&["events"]).to_string().contains(needle) {
        assert!(Instant::now() < deadline, "no event saying {needle:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn intent_revision(loc: &Location) -> u64 {
    loc.ctl_json(&["status"])["intent_revision"].as_u64().unwrap()
}

#[test]
fn locations_serve_one_published_intent_and_a_revision_one_cannot_take_stays_local() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/test");
    let zones = dir.path().join("zones");
    zones_without_shop(&zones);
    let first = publish(&zones, &url, "first");
    // Unchanged files: no new revision.
    assert_eq!(publish(&zones, &url, "again"), first);

    let mut fra = Location::prepared();
    fra.start_control_following(&url, &["--no-embedded-checker", "--location", "fra"]);
    fra.start_edge();
    // ams refuses check targets in special-use ranges (loopback among them).
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
    for loc in [&fra, &ams] {
        answers(loc, &["192.0.2.10", "192.0.2.11"]);
        assert_eq!(intent_revision(loc), first);
    }

    // Revision 2 adds shop.example (checks on loopback) and changes www: fra takes it,
    // ams refuses it and keeps revision 1.
    qdns_testkit::fixtures::copy_examples(&zones);
    set_www(&zones, "[\"192.0.2.20\"]");
    let second = publish(&zones, &url, "shop and a new www");
    assert!(second > first);
    answers(&fra, &["192.0.2.20"]);
    assert_eq!(intent_revision(&fra), second);
    in_timeline(&ams, &format!("intent revision {second} refused here"));
    answers(&ams, &["192.0.2.10", "192.0.2.11"]);
    assert_eq!(intent_revision(&ams), first, "the last stays in force at ams");
    // Restarted while the store still has revision 2 in force, ams starts from the
    // revision it applied before, and refuses 2 again.
    ams.control.take().unwrap().term();
    let ams_flags = [
        "--no-embedded-checker",
        "--location",
        "ams",
        "--deny-special-use-targets",
    ];
    ams.start_control_following(&url, &ams_flags);
    answers(&ams, &["192.0.2.10", "192.0.2.11"]);
    assert_eq!(intent_revision(&ams), first);
    in_timeline(&ams, &format!("intent revision {second} refused here"));

    // Revision 3 takes shop.example out again: both apply it.
    std::fs::remove_file(zones.join("shop.example.toml")).unwrap();
    set_www(&zones, "[\"192.0.2.30\"]");
    let third = publish(&zones, &url, "www again");
    for loc in [&fra, &ams] {
        answers(loc, &["192.0.2.30"]);
        assert_eq!(intent_revision(loc), third);
    }
    drop(etcd);
}

#[test]
fn a_location_cut_off_from_the_store_serves_what_it_applied_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/cut");
    let zones = dir.path().join("zones");
    zones_without_shop(&zones);
    set_www(&zones, "[\"192.0.2.41\"]");
    let first = publish(&zones, &url, "first");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut fra = Location::prepared();
    let extra = [
        "--no-embedded-checker",
        "--location",
        "fra",
        "--metrics",
        metrics.as_str(),
    ];
    fra.start_control_following(&url, &extra);
    fra.start_edge();
    answers(&fra, &["192.0.2.41"]);
    assert_eq!(sample(&scrape(&metrics), "qdns_control_intent_revision"), Some(first));

    // The store dies: publishing fails, saying so; the location serves on.
    etcd.kill();
    set_www(&zones, "[\"192.0.2.42\"]");
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("publish")
        .arg(&zones)
        .args(["--intent", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("intent store 127.0.0.1:"), "{err}");
    answers(&fra, &["192.0.2.41"]);
    // A restart while the store is down: the revision applied before is served.
    fra.control.take().unwrap().term();
    fra.start_control_following(&url, &extra);
    answers(&fra, &["192.0.2.41"]);
    assert_eq!(intent_revision(&fra), first);
    in_timeline(&fra, "cut off from the intent store");

    // The store is back: the location catches up with what is published then.
    etcd.resume();
    let second = publish(&zones, &url, "while fra was cut off");
    answers(&fra, &["192.0.2.42"]);
    assert_eq!(intent_revision(&fra), second);
    assert_eq!(sample(&scrape(&metrics), "qdns_control_intent_revision"), Some(second));
}

/// `dnssec = true` in example.net's `[zone]`.
fn sign_example_net(dir: &Path) {
    let path = dir.join("example.net.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(path, text.replacen("[zone]\n", "[zone]\ndnssec = true\n", 1)).unwrap();
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

#[test]
fn a_signed_zone_has_one_key_in_the_deployment_and_a_host_moving_in_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/keys");
    // A single host signs example.net with its own key (its parent has that DS).
    let mut host = Location::prepared();
    sign_example_net(&host.zones());
    host.start_control();
    let before = ds_records(&host);
    assert_eq!(before.len(), 1, "{before:?}");
    host.control.take().unwrap().term();

    // It moves into the deployment first: its key becomes the deployment's.
    let zones = dir.path().join("zones");
    zones_without_shop(&zones);
    sign_example_net(&zones);
    publish(&zones, &url, "signed example.net");
    host.start_control_following(&url, &["--no-embedded-checker", "--location", "fra"]);
    assert_eq!(
        ds_records(&host),
        before,
        "the host keeps its key: the parent's DS stays valid"
    );
    // A new location signs with the same key, not one of its own.
    let mut ams = Location::prepared();
    ams.start_control_following(&url, &["--no-embedded-checker", "--location", "ams"]);
    assert_eq!(ds_records(&ams), before);
    for loc in [&mut host, &mut ams] {
        loc.start_edge();
        loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    }
    for loc in [&host, &ams] {
        let answer = loc.values("example.net.", RecordType::DNSKEY);
        assert_eq!(answer, ams.values("example.net.", RecordType::DNSKEY));
        assert_eq!(answer.len(), 1, "{answer:?}");
    }
    drop(etcd);
}

/// `qdnsctl ARGS`, as it ended: whether it succeeded, and what it said.
fn qdnsctl(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl")).args(args).output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// What `loc` answers geo.t.example A for a client in 198.51.100.0/24 (ECS).
fn geo_answer(loc: &Location) -> String {
    let dns = loc.dns.unwrap();
    let out = Command::new("dig")
        .args([
            &format!("@{}", dns.ip()),
            "-p",
            &dns.port().to_string(),
            "+short",
            "+subnet=198.51.100.0/24",
            "geo.t.example",
            "A",
        ])
        .output()
        .expect("dig");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Waits until `loc` answers geo.t.example A with `want` for that client.
fn answers_geo(loc: &Location, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while geo_answer(loc) != want {
        assert!(
            Instant::now() < deadline,
            "geo.t.example A is {:?}, not {want}",
            geo_answer(loc)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The geolocation database is intent (issue 52 §1): published with the zones, compiled
/// from at every location — which is given no file — and a refreshed database moves
/// every location's answers with the next revision. `qdnsctl intent export` gives it
/// back; a location's own `--geoip-db` beside `--intent` is refused.
#[test]
fn the_geo_database_is_published_with_the_zones_and_every_location_compiles_from_it() {
    use qdns_testkit::mmdb::{write, GeoNet};
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/geo");
    let zones = dir.path().join("zones");
    zones_without_shop(&zones);
    std::fs::write(zones.join("t.toml"), qdns_testkit::fixtures::geo_zone()).unwrap();
    let in_bavaria = dir.path().join("bavaria.mmdb");
    let in_france = dir.path().join("france.mmdb");
    let net = |country, subdivisions| GeoNet {
        net: "198.51.100.0/24",
        continent: "EU",
        country,
        subdivisions,
    };
    write(&in_bavaria, &[net("DE", &["BY"])]);
    write(&in_france, &[net("FR", &[])]);
    let publish_with = |db: Option<&Path>, from: &Path| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["publish".as_ref(), from.as_os_str(), "--intent".as_ref()];
        args.push(url.as_ref());
        if let Some(db) = db {
            args.extend(["--geoip-db".as_ref(), db.as_os_str()]);
        }
        qdnsctl(&args)
    };

    // Without a database the geo set cannot be compiled: nothing is published.
    let (ok, said) = publish_with(None, &zones);
    assert!(!ok && said.contains("geolocation database"), "{said}");
    let (ok, said) = publish_with(Some(&in_bavaria), &zones);
    assert!(ok, "{said}");

    // A location is given the store, not the file; its own --geoip-db is refused.
    let mut fra = Location::prepared();
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .args(["--intent", &url, "--geoip-db"])
        .arg(&in_bavaria)
        .arg("--socket")
        .arg(fra.socket())
        .arg("--state-dir")
        .arg(fra.dir.path().join("control-state"))
        .arg("--edge-socket")
        .arg(fra.edge_socket())
        .arg("--check-config")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("--geoip-db") && said.contains("qdnsctl publish"),
        "{said}"
    );
    fra.start_control_following(&url, &["--no-embedded-checker", "--location", "fra"]);
    fra.start_edge();
    answers_geo(&fra, "10.0.0.1");

    // A refreshed database: that network is now in France; a DIR holding another
    // geoip.mmdb than --geoip-db is refused first.
    std::fs::copy(&in_bavaria, zones.join("geoip.mmdb")).unwrap();
    let (ok, said) = publish_with(Some(&in_france), &zones);
    assert!(!ok && said.contains("remove one"), "{said}");
    std::fs::remove_file(zones.join("geoip.mmdb")).unwrap();
    let (ok, said) = publish_with(Some(&in_france), &zones);
    assert!(ok, "{said}");
    answers_geo(&fra, "10.0.0.2");
    // A location started now compiles from the same database.
    let mut ams = Location::prepared();
    ams.start_control_following(&url, &["--no-embedded-checker", "--location", "ams"]);
    ams.start_edge();
    answers_geo(&ams, "10.0.0.2");

    // Exported, the database is among the files; published back as it is, nothing moves.
    let out = dir.path().join("export");
    let (ok, said) = qdnsctl(&[
        "intent".as_ref(),
        "export".as_ref(),
        out.as_os_str(),
        "--intent".as_ref(),
        url.as_ref(),
    ]);
    assert!(ok, "{said}");
    assert_eq!(
        std::fs::read(out.join("geoip.mmdb")).unwrap(),
        std::fs::read(&in_france).unwrap()
    );
    let (ok, said) = publish_with(None, &out);
    assert!(ok && said.contains("unchanged"), "{said}");
    drop(etcd);
}
