//! Two controls at one location (issue 54 §1, SPEC §11 "Several controls at one
//! location"): an edge given `--control` twice follows the first, moves to the second
//! at once when the first dies (SIGKILL), answers a health change made after the kill,
//! and goes back to the first once it answers again. Both controls follow one intent in a real etcd
//! and make the same zones (a signed one too), so the switch recompiles nothing.
mod common;

use std::time::{Duration, Instant};

use common::{
    deployment::{answers, example_zones, in_timeline, publish, secret_put},
    free_port, transfers_counted, values, Location,
};
use hickory_proto::rr::RecordType;
use qdns_testkit::{
    etcd::Etcd,
    transfer_peers::{Secondary, Server, TsigKey},
};

const API: &str = "api.shop.example.";
const PRIMARY: &[&str] = &["192.0.2.20"];
const SECONDARY: &[&str] = &["198.51.100.20"];

const FLAGS: [&str; 3] = ["--no-embedded-checker", "--location", "fra"];
/// The two controls' names (`--checker-id`; on two hosts, their host names).
const FIRST: [&str; 5] = ["--no-embedded-checker", "--location", "fra", "--checker-id", "fra-a"];
const SECOND: [&str; 5] = ["--no-embedded-checker", "--location", "fra", "--checker-id", "fra-b"];

/// Two controls of fra following one intent in etcd, and one edge on both (the first
/// is the location's own: `start_edge` gives it; `edge_extra` after the second).
/// Fields drop in order: the edge and controls before the store and the directory.
struct Fra {
    edge: qdns_testkit::daemon::Daemon,
    first: Location,
    second: Location,
    url: String,
    etcd: Etcd,
    _dir: tempfile::TempDir,
}

fn two_controls_of_fra(prefix: &str, edge_extra: &[&str]) -> Fra {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url(prefix);
    // example.net signed: two controls sign it into the same octets (issue 54 §2).
    let zones = example_zones(dir.path(), true);
    let net = zones.join("example.net.toml");
    let text = std::fs::read_to_string(&net).unwrap();
    std::fs::write(&net, text.replacen("[zone]\n", "[zone]\ndnssec = true\n", 1)).unwrap();
    publish(&zones, &url);
    let mut first = Location::prepared();
    first.start_control_following(&url, &FIRST);
    let mut second = Location::prepared();
    second.start_control_following(&url, &SECOND);
    let second_socket = second.edge_socket();
    let edge_args = [&["--control", second_socket.to_str().unwrap()][..], edge_extra].concat();
    first.start_edge_with(&[], &edge_args);
    let edge = first.edge.take().unwrap();
    edge.wait_for("snapshot applied");
    Fra {
        edge,
        first,
        second,
        url,
        etcd,
        _dir: dir,
    }
}

#[test]
fn an_edge_follows_the_next_control_of_its_location_when_one_dies_and_goes_back() {
    let Fra {
        edge,
        mut first,
        mut second,
        url,
        etcd,
        _dir,
    } = two_controls_of_fra("qdns/two", &[]);
    answers(&first, API, PRIMARY);
    // `qdnsctl fleet` lists both controls of fra, the edge under the first.
    fleet_becomes(&url, &[("fra-a", Some(true), 1), ("fra-b", Some(true), 0)]);

    // The first control dies: the edge is on the second at once — which makes the same
    // zones, signatures included, so the edge keeps its compiled zones and only
    // relabels them (issue 54 §2) — and a change made after the kill reaches its answers.
    first.control.as_mut().unwrap().kill9();
    edge.wait_for("trying the next control of the location");
    let applied = edge.wait_for("snapshot applied");
    assert!(
        applied.contains("from=\"delta\"") && applied.contains("recompiled=false"),
        "{applied}"
    );
    second.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    answers(&first, API, SECONDARY);
    // The fleet has the edge under the second (the first's record holds its last word,
    // heard from until its lease ends).
    fleet_becomes(&url, &[("fra-a", None, 1), ("fra-b", Some(true), 1)]);

    // The first control back: the edge returns to it (within the 5 s it asks at), and
    // follows it when the second is gone.
    first.start_control_following(&url, &FIRST);
    let started = Instant::now();
    edge.wait_for("an earlier control of the location answers again");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    // Restarted, it signed again — on the same grid, into the same octets: nothing to
    // compile on the way back either.
    let applied = edge.wait_for("snapshot applied");
    assert!(applied.contains("recompiled=false"), "{applied}");
    second.control.as_mut().unwrap().kill9();
    first.ctl_json(&["override", "clear", "api-1"]);
    in_timeline(&first, "api-1");
    answers(&first, API, PRIMARY);
    drop(etcd);
}

/// Waits (at most 20 s) until `qdnsctl fleet` lists fra's controls as `want`: name,
/// heard from (`None`: either), edges.
fn fleet_becomes(url: &str, want: &[(&str, Option<bool>, usize)]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, fleet, err) = common::deployment::qdnsctl_json(&["fleet"], url);
        assert!(ok, "{err}");
        let rows: Vec<&serde_json::Value> = fleet
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["location"] == "fra")
            .collect();
        let matches = rows.len() == want.len()
            && rows.iter().zip(want).all(|(row, &(control, alive, edges))| {
                row["control"] == control
                    && alive.is_none_or(|a| row["alive"] == a)
                    && row["edges"].as_array().is_some_and(|e| e.len() == edges)
            });
        if matches {
            return;
        }
        assert!(Instant::now() < deadline, "fleet: {fleet}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// An earlier control that accepts connections but does not serve (stopped: its kernel
/// still completes connects) is not switched to every few seconds: each switch back that
/// brings no snapshot doubles the time before the edge asks again, and the edge serves
/// from the control that works in between.
#[test]
fn an_earlier_control_that_accepts_but_does_not_serve_is_asked_less_and_less_often() {
    let Fra {
        edge,
        first,
        second: _second,
        url: _,
        etcd,
        _dir,
    } = two_controls_of_fra("qdns/hung", &["--control-timeout", "2", "--control-keepalive", "1"]);

    first.control.as_ref().unwrap().signal("STOP");
    edge.wait_for("trying the next control of the location");
    edge.wait_for("snapshot applied");
    let before = edge.count("an earlier control of the location answers again");
    std::thread::sleep(Duration::from_secs(40));
    let switches = edge.count("an earlier control of the location answers again") - before;
    // Asked after 5 s, then 10 s, then 20 s (each switch failing 2 s later): three at
    // most in 40 s; every 5 s it would be five or six.
    assert!((1..=3).contains(&switches), "{switches} switches back in 40 s");
    answers(&first, API, PRIMARY);
    first.control.as_ref().unwrap().signal("CONT");
    drop(edge);
    drop(etcd);
}

/// The TSIG key the secondary and both controls use (the deployment's).
const XFR_SECRET: &str = "8Qu0x5o6yRUCdlWrlHvqYpUBIJbBcXKHDz5dkSwPFh0=";

/// A zone for transfer to 127.0.0.0/8 with the key, notifying `secondary`: `www`
/// fails over on the external check `p`.
fn transfer_zone(secondary: std::net::SocketAddr) -> String {
    format!(
        "[zone]\norigin = \"xfr.example.\"\nttl = 60\ntransfer_allow = [\"127.0.0.0/8\"]\n\
         transfer_tsig = \"xfr-key\"\nnotify = [\"{secondary}\"]\n[zone.soa]\nmname = \"ns1.xfr.example.\"\n\
         rname = \"hostmaster.xfr.example.\"\nserial = 1\nrefresh = 3600\nretry = 3600\n\
         expire = 604800\nminimum = 60\n[zone.ns]\nnames = [\"ns1.xfr.example.\"]\n\
         [[health_check]]\nid = \"p\"\ntype = \"external\"\n\
         [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
         {{ id = \"p\", role = \"primary\", values = [\"192.0.2.1\"], health_check = \"p\" }},\n\
         {{ id = \"s\", role = \"secondary\", values = [\"192.0.2.2\"] }},\n]\n"
    )
}

/// A control of fra following `url` that serves transfers on `transfer` and metrics
/// on `metrics`.
fn transfer_control(url: &str, transfer: std::net::SocketAddr, metrics: &str) -> Location {
    let mut location = Location::prepared();
    let transfer = transfer.to_string();
    location.start_control_following(
        url,
        &[&FLAGS[..], &["--transfer-listen", &transfer, "--metrics", metrics]].concat(),
    );
    location
}

/// The serial control's status says transfers carry for xfr.example. (0: none yet).
fn transfer_serial(location: &Location) -> u64 {
    common::transfer_serial(location, "xfr.example.")
}

/// Waits (at most `limit`) until `check` holds.
fn within(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The transfer serials are the location's (issue 54 §2): a second control of fra
/// started (with an empty state directory) after the first moved the serial twice
/// serves the serial the secondary holds for the same content — not its zone file's —
/// and when the first dies, a knotd secondary listing both takes the next change from
/// the second by IXFR (the second's journal starts at the serial knotd has), never by
/// a whole transfer. Fails with each control counting serials on its own (the second
/// would serve serial 1, which knotd, at 3, ignores).
#[test]
fn a_secondary_moved_to_the_other_control_of_the_location_goes_on_by_ixfr() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let url = etcd.url("qdns/xfr");
    let zones = example_zones(dir.path(), false);
    let knot_port = free_port();
    let knot_addr = std::net::SocketAddr::from(([127, 0, 0, 1], knot_port));
    std::fs::write(zones.join("xfr.example.toml"), transfer_zone(knot_addr)).unwrap();
    let key_file = dir.path().join("tsig.conf");
    let key_text = format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{XFR_SECRET}\";\n}};\n");
    qdns_link::protocol::write_private(&key_file, key_text.as_bytes()).unwrap();
    secret_put("tsig-keys", &key_file, &url);
    publish(&zones, &url);
    let addr = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (first_xfr, second_xfr) = (addr(free_port()), addr(free_port()));
    let (first_metrics, second_metrics) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut first = transfer_control(&url, first_xfr, &first_metrics);
    let key = TsigKey {
        name: "xfr-key".to_owned(),
        algorithm: "hmac-sha256".to_owned(),
        secret: XFR_SECRET.to_owned(),
    };
    let knot = Secondary::start_following(
        Server::Knot,
        &dir.path().join("knot"),
        "xfr.example",
        &[first_xfr, second_xfr],
        &key,
        knot_port,
    );
    let answers = |want: &[&str]| {
        within(Duration::from_secs(20), &format!("knotd answers {want:?}"), || {
            common::ask(
                knot.addr,
                "www.xfr.example.",
                RecordType::A,
                Duration::from_millis(300),
                1,
            )
            .is_some_and(|m| values(&m) == want)
        });
    };
    answers(&["192.0.2.1"]);
    // Two changes at the first control: serials 2 and 3, each taken by knotd.
    let serial = transfer_serial(&first);
    for (state, want) in [("unhealthy", "192.0.2.2"), ("healthy", "192.0.2.1")] {
        assert!(first.ctl(&["external", "xfr.example./p", state]).status.success());
        answers(&[want]);
    }
    let serial = serial + 2;
    assert_eq!(transfer_serial(&first), serial, "{}", knot.log_text());

    // The second control, started now with nothing of its own: the same serial for the
    // same content.
    let second = transfer_control(&url, second_xfr, &second_metrics);
    within(
        Duration::from_secs(20),
        "the second control serves the first's serial",
        || transfer_serial(&second) == serial,
    );

    // The first dies; a change at the second reaches knotd by IXFR from the second.
    first.control.as_mut().unwrap().kill9();
    assert!(second
        .ctl(&["external", "xfr.example./p", "unhealthy"])
        .status
        .success());
    answers(&["192.0.2.2"]);
    assert_eq!(transfer_serial(&second), serial + 1);
    assert_eq!(transfers_counted(&second_metrics, "ixfr"), 1, "{}", knot.log_text());
    assert_eq!(transfers_counted(&second_metrics, "axfr"), 0, "{}", knot.log_text());
    assert_eq!(
        transfers_counted(&second_metrics, "ixfr_whole_zone"),
        0,
        "{}",
        knot.log_text()
    );
    drop(knot);
    drop(etcd);
}
