//! Snapshot deltas on the control↔edge link (issue 32): a reload ships each edge the
//! record sets that changed, a restarted control ships nothing an edge already serves,
//! a delta an edge cannot apply falls back to the whole snapshot, and an edge from
//! before deltas keeps getting whole snapshots. Real control, real edge answering DNS
//! over UDP, its link counters read from its `/metrics`; light edges
//! (`qdns_testkit::link_client`) where a test needs to see the frames themselves.
mod common;

use std::{fmt::Write as _, fs, time::Duration};

use common::{scrape, Location};
use hickory_proto::rr::RecordType;
use qdns_link::schema::{SCHEMA, UNNUMBERED};
use qdns_testkit::{
    fixtures::{free_port, sample},
    link_client::{LinkClient, Received},
    netns::Netns,
    require_root,
};

/// Record sets of the large zone.
const SETS: u32 = 50_000;

/// `big.example`: SETS A sets in a master file.
fn write_big_zone(dir: &std::path::Path) {
    // The `[zone]` table takes the include (the head ends with its sub-tables).
    let head = qdns_testkit::fixtures::zone_head("big.example.");
    let toml = head.replacen("[zone]\n", "[zone]\ninclude = \"big.example.zone\"\n", 1);
    fs::write(dir.join("big.example.toml"), toml).unwrap();
    let mut body = String::new();
    for i in 0..SETS {
        let _ = writeln!(body, "h{i} IN A 10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
    }
    fs::write(dir.join("big.example.zone"), body).unwrap();
}

/// Changes host `i`'s address in the large zone.
fn edit_big_zone(dir: &std::path::Path, i: u32, to: &str) {
    let path = dir.join("big.example.zone");
    let text = fs::read_to_string(&path).unwrap();
    let old = format!("h{i} IN A 10.{}.{}.{}\n", i >> 16, (i >> 8) & 255, i & 255);
    assert!(text.contains(&old));
    fs::write(&path, text.replace(&old, &format!("h{i} IN A {to}\n"))).unwrap();
}

/// The edge's link counter `name` (`qdns_edge_NAME_total`).
fn counter(metrics: u16, name: &str) -> u64 {
    let body = scrape(&format!("127.0.0.1:{metrics}"));
    sample(&body, &format!("qdns_edge_{name}_total")).unwrap_or_else(|| panic!("{name} in {body}"))
}

#[test]
fn a_reload_ships_the_changed_sets_and_a_control_restart_ships_nothing_served() {
    let mut loc = Location::prepared();
    write_big_zone(&loc.zones());
    loc.start_control();
    let metrics = free_port();
    loc.start_edge_with(&[], &["--metrics", &format!("127.0.0.1:{metrics}")]);
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    loc.wait_edges_current();
    let whole = counter(metrics, "link_received_bytes");
    assert!(whole > 1_000_000, "the first snapshot comes whole: {whole} octets");
    assert_eq!(loc.values("h12345.big.example.", RecordType::A), ["10.0.48.57"]);

    // One record edited: the edge gets that set, not the zone.
    edit_big_zone(&loc.zones(), 12_345, "192.0.2.99");
    let before = counter(metrics, "link_received_bytes");
    loc.ctl_json(&["reload"]);
    loc.wait_edges_current();
    assert_eq!(loc.values("h12345.big.example.", RecordType::A), ["192.0.2.99"]);
    let shipped = counter(metrics, "link_received_bytes") - before;
    assert!(
        shipped < 64 * 1024,
        "a one-record reload shipped {shipped} octets (the snapshot is {whole})"
    );
    assert_eq!(counter(metrics, "link_deltas_applied"), 1);
    println!("one-record reload: {shipped} octets on the link; whole snapshot {whole}");

    // Control restarted: a new snapshot version with the same zones. The edge says
    // what it serves and keeps all of it, without compiling anything.
    loc.control.as_mut().unwrap().term();
    let before = counter(metrics, "link_received_bytes");
    loc.start_control();
    let line = loc.edge.as_ref().unwrap().wait_for("recompiled=false");
    assert!(line.contains("snapshot applied") && line.contains("delta"), "{line}");
    loc.wait_edges_current();
    let resumed = counter(metrics, "link_received_bytes") - before;
    assert!(resumed < 64 * 1024, "a control restart shipped {resumed} octets");
    assert_eq!(loc.values("h12345.big.example.", RecordType::A), ["192.0.2.99"]);
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"]
    );

    // The edge's copy of what it serves is damaged: the next delta is refused and the
    // snapshot comes whole; nothing wrong is served in between. (The edge persists what
    // it serves right after acknowledging it: wait for that first.)
    let version = loc.ctl_json(&["status"])["snapshot_version"].as_u64().unwrap();
    let zones_file = loc.dir.path().join("edge-state/zones.bin");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while qdns_link::protocol::load::<qdns_link::protocol::PersistedZones>(&zones_file)
        .ok()
        .flatten()
        .is_none_or(|saved| saved.version != version)
    {
        assert!(std::time::Instant::now() < deadline, "the edge persisted {version}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let persisted = loc.dir.path().join("edge-state/snapshot.bin");
    let mut data = fs::read(&persisted).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    fs::write(&persisted, data).unwrap();
    edit_big_zone(&loc.zones(), 7, "192.0.2.7");
    let before = counter(metrics, "link_received_bytes");
    loc.ctl_json(&["reload"]);
    loc.wait_edges_current();
    assert_eq!(counter(metrics, "link_deltas_refused"), 1);
    assert!(counter(metrics, "link_received_bytes") - before > whole / 2);
    assert_eq!(loc.values("h7.big.example.", RecordType::A), ["192.0.2.7"]);
    assert_eq!(loc.values("h12345.big.example.", RecordType::A), ["192.0.2.99"]);
}

#[test]
fn edges_from_before_deltas_get_whole_snapshots_and_the_others_the_same_zones_as_deltas() {
    let loc = Location::control_only();
    let socket = loc.edge_socket();
    // An edge of hello version 2 (before deltas) and one from before extensions.
    let mut v2 = LinkClient::connect(
        &socket,
        "old-edge",
        None,
        Some(qdns_link::protocol::HelloExtension {
            version: 2,
            ..LinkClient::takes_deltas(None)
        }),
    );
    let mut bare = LinkClient::connect(&socket, "older-edge", None, None);
    let mut new = LinkClient::connect(&socket, "new-edge", None, Some(LinkClient::takes_deltas(None)));
    for client in [&mut v2, &mut bare, &mut new] {
        assert_eq!(
            client.read_frame(),
            Received::Whole,
            "serving nothing: the snapshot whole"
        );
    }
    // Each in the newest link schema it reads: the older two in frames without a number.
    let schemas = [v2.schema, bare.schema, new.schema];
    assert_eq!(schemas, [UNNUMBERED, UNNUMBERED, SCHEMA]);
    // A light edge that already serves the zones: a delta keeping them all.
    let served = new.snapshot.clone();
    let mut resumed = LinkClient::connect(
        &socket,
        "resumed-edge",
        served.as_ref(),
        Some(LinkClient::takes_deltas(served.as_ref())),
    );
    assert_eq!(resumed.read_frame(), Received::Delta);
    assert!(resumed.received < 1024, "{} octets to resume", resumed.received);
    assert_eq!(resumed.snapshot, new.snapshot);

    let zone = loc.zones().join("example.com.toml");
    let text = fs::read_to_string(&zone).unwrap();
    fs::write(&zone, text.replace("\"192.0.2.10\", \"192.0.2.11\"", "\"192.0.2.12\"")).unwrap();
    loc.ctl_json(&["reload"]);
    assert_eq!(*v2.until(Received::Whole).last().unwrap(), Received::Whole);
    assert_eq!(*bare.until(Received::Whole).last().unwrap(), Received::Whole);
    assert_eq!(*new.until(Received::Delta).last().unwrap(), Received::Delta);
    assert_eq!(*resumed.until(Received::Delta).last().unwrap(), Received::Delta);
    // Every form makes the same snapshot.
    assert!(v2.snapshot.is_some());
    assert_eq!(new.snapshot, v2.snapshot);
    assert_eq!(bare.snapshot, v2.snapshot);
    assert_eq!(resumed.snapshot, v2.snapshot);
    // And health deltas follow each form alike.
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    for client in [&mut v2, &mut bare, &mut new, &mut resumed] {
        client.until(Received::Health);
    }
    assert_eq!(new.snapshot, v2.snapshot);
    assert_eq!(resumed.snapshot, v2.snapshot);
    std::thread::sleep(Duration::from_millis(100));
}

/// `answered_plain` in the XDP report the edge last sent control (0 before one came).
fn xdp_plain_answers(loc: &Location) -> u64 {
    qdns_testkit::fixtures::edge_xdp_counter(&loc.ctl_json(&["status"]), "test-edge", "answered_plain")
}

/// A delta reaches the XDP program's answers (needs root, as CI has): an edge inside a
/// network namespace this test creates, with the program on that namespace's loopback,
/// takes a reload as a delta, compiles it, patches the tables, and the program answers
/// the new value.
#[test]
fn a_reload_taken_as_a_delta_reaches_the_xdp_answers() {
    require_root("network namespaces, XDP");
    let ns = Netns::new("qdns-delta-xdp");
    let mut loc = Location::control_only();
    loc.start_edge_with(
        &["ip", "netns", "exec", &ns.0],
        &["--xdp", "lo", "--xdp-mode", "generic"],
    );
    let edge = loc.edge.as_ref().unwrap();
    edge.wait_for("snapshot applied");
    edge.wait_for("XDP tables installed");
    let dns = loc.dns.unwrap();
    let before: &'static [&'static str] = &["192.0.2.10", "192.0.2.11"];
    assert_eq!(common::ns_values_until(&ns, dns, "www.example.com.", before), before);

    let zone = loc.zones().join("example.com.toml");
    let text = fs::read_to_string(&zone).unwrap();
    fs::write(&zone, text.replace("\"192.0.2.10\", \"192.0.2.11\"", "\"192.0.2.12\"")).unwrap();
    loc.ctl_json(&["reload"]);
    let line = edge.wait_for("snapshot applied");
    assert!(line.contains("delta") && line.contains("recompiled=true"), "{line}");
    // One address edited: the tables are patched, not built whole (xdp::patch).
    edge.wait_for("XDP tables patched");
    let answered = xdp_plain_answers(&loc);
    assert_eq!(
        common::ns_values_until(&ns, dns, "www.example.com.", &["192.0.2.12"]),
        ["192.0.2.12"]
    );
    for _ in 0..20 {
        assert_eq!(
            common::ns_values_until(&ns, dns, "www.example.com.", &["192.0.2.12"]),
            ["192.0.2.12"]
        );
    }
    // The program gave them (its counters reach control every 2 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while xdp_plain_answers(&loc) < answered + 20 {
        assert!(std::time::Instant::now() < deadline, "the new answers came from XDP");
        std::thread::sleep(Duration::from_millis(200));
    }
}
