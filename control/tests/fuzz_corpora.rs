//! Replays the fuzz corpora of every parser that reads bytes from outside (fuzz/corpus/:
//! zone TOML, master files, checker report frames, control↔edge link frames, control
//! requests) with the targets' own checks (fuzz/checks.rs), plus seeds built here from
//! the real encoders, so what a fuzzer once found stays a regression test and every
//! target's checks run in CI.
#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::Path;

use qdns_control::report;
use qdns_link::protocol::{HealthDelta, ToEdge};

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect();
    inputs.sort();
    inputs
}

fn replay(target: &str, check: fn(&[u8]), seeds: &[Vec<u8>], at_least: usize) {
    let inputs = corpus(target);
    assert!(
        inputs.len() >= at_least,
        "fuzz/corpus/{target} has {} inputs, fewer than {at_least}: seed it (fuzz/README.md)",
        inputs.len()
    );
    for (name, data) in &inputs {
        // A panic names the input that caused it.
        assert!(std::panic::catch_unwind(|| check(data)).is_ok(), "{target}: {name}");
    }
    for seed in seeds {
        check(seed);
    }
}

use qdns_testkit::fixtures::example_zones;

#[test]
fn zone_toml_corpus() {
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(example_zones())
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    replay("zone_toml", checks::zone_toml, &seeds, 10);
}

#[test]
fn master_file_corpus() {
    let snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    let seeds: Vec<Vec<u8>> = snapshot
        .zones
        .iter()
        .map(|z| qdns_zone::master::zone_text(z).into_bytes())
        .collect();
    replay("master_file", checks::master_file, &seeds, 10);
}

#[test]
fn report_frames_corpus() {
    let report = report::Report {
        checker: "c1".to_owned(),
        region: "eu".to_owned(),
        location: "fra".to_owned(),
        seq: 1,
        sent_at: 1_000,
        observations: Vec::new(),
    };
    let signed = report::sign(&report, &checks::CHECKER_KEY).unwrap();
    let mut behind_the_mac = vec![0xFF];
    behind_the_mac.extend_from_slice(&signed.body);
    replay(
        "report_frames",
        checks::report_frames,
        &[signed.frame().unwrap(), behind_the_mac],
        10,
    );
}

#[test]
fn link_frame_corpus() {
    let snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    let body = |msg: &ToEdge| qdns_link::protocol::encode(msg).unwrap()[4..].to_vec();
    let seeds = vec![
        body(&ToEdge::Snapshot {
            snapshot: Box::new(snapshot),
            seq: 0,
        }),
        body(&ToEdge::Health(HealthDelta {
            snapshot: 1,
            seq: 1,
            words: vec![(0, 5), (u32::MAX, 1)],
        })),
    ];
    replay("link_frame", checks::link_frame, &seeds, 10);
}

#[test]
fn control_request_corpus() {
    let seeds: Vec<Vec<u8>> = [
        r#"{"cmd":"status"}"#,
        r#"{"cmd":"explain","name":"www.shop.example","rtype":"A"}"#,
        r#"{"cmd":"shift_start","rrset":"lb.shop.example","az":"az1","expires":"1h","comment":"x"}"#,
        r#"{"cmd":"events","limit":3}"#,
        r#"{"cmd":"bogus"}"#,
        // The two a security review found: an unknown field on a command without
        // arguments (it reloaded), an expiry ending inside a UTF-8 character (a panic).
        r#"{"cmd":"reload","dry_run":true}"#,
        r#"{"cmd":"override_set","check":"web-1","healthy":true,"expires":"1é"}"#,
        r#"{"cmd":"override_set","check":"web-1","healthy":true,"expires":"30m"}"#,
        r#"{"cmd":"dnssec_ds","zone":"signed.example"}"#,
        r#"{"cmd":"reload"}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    replay("control_request", checks::control_request, &seeds, 10);
}

/// A transfer request for `name` of `qtype` (with an IXFR's SOA of serial 1).
fn transfer_query(name: &[u8], qtype: u16) -> Vec<u8> {
    let mut m = vec![0x0b, 0xad, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    if qtype == 251 {
        m[9] = 1;
        m.extend_from_slice(&[0xc0, 12, 0, 6, 0, 1, 0, 0, 0, 0, 0, 22]);
        m.extend_from_slice(&[0, 0, 0, 0, 0, 1]);
        m.extend_from_slice(&[0; 16]);
    }
    m
}

#[test]
fn transfer_request_corpus() {
    use qdns_control::transfer::tsig;
    let shop = b"\x04shop\x07example\x00";
    let com = b"\x07example\x03com\x00";
    let key = tsig::Key::new(
        "fuzz-key",
        tsig::Algorithm::HmacSha256,
        checks::FUZZ_TSIG_SECRET.to_vec(),
    )
    .unwrap();
    let mut seeds = Vec::new();
    for (name, qtype) in [
        (&com[..], 252u16),
        (com, 251),
        (com, 6),
        (shop, 252),
        (shop, 251),
        (com, 1),
    ] {
        let mut signed = transfer_query(name, qtype);
        let now = qdns_control::clock::now();
        tsig::sign(&mut signed, &key, tsig::Chain::Request, now, 0);
        for mode in 0u8..4 {
            seeds.push([&[mode][..], &transfer_query(name, qtype)].concat());
            seeds.push([&[mode][..], &signed].concat());
        }
    }
    replay("transfer_request", checks::transfer_request, &seeds, 8);
    // The signed seeds were signed now, the target checks at a fixed time: BADTIME, so
    // the TSIG-only zone was never served to them; signed at that time it is.
    let mut signed = transfer_query(shop, 252);
    tsig::sign(&mut signed, &key, tsig::Chain::Request, 1_800_000_000, 0);
    let transfers = checks::transfer_fixture();
    let (mut answer, outcome) =
        qdns_control::transfer::serve::respond(transfers, [127, 0, 0, 1].into(), &signed, true, 1_800_000_000).unwrap();
    assert_eq!(outcome, qdns_control::transfer::Outcome::Axfr);
    assert!(
        answer.next_message().is_some_and(|m| m[3].trailing_zeros() >= 4),
        "NOERROR"
    );
}

#[test]
fn update_message_corpus() {
    use qdns_control::{
        transfer::tsig,
        update::{self, apply},
    };
    replay("update_message", checks::update_message, &[], 40);
    // The seeds signed by the check at its time get past TSIG: an ACME challenge by
    // fuzz-acme is applied, the same UPDATE a second late or unsigned is not.
    let challenge =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/update_message/seed-add-txt-0"))
            .unwrap();
    let (transfers, snapshot, keys) = checks::update_fixture();
    let body = &challenge[1..];
    let mut signed = body.to_vec();
    tsig::sign(&mut signed, &keys[0], tsig::Chain::Request, checks::UPDATE_NOW, 0);
    let (read, key) = update::authenticate(transfers, &signed, checks::UPDATE_NOW).unwrap();
    let (zone, rules) = update::zone_and_rules(snapshot, &read.request.qname).unwrap();
    let records = apply::apply(
        &zone,
        &[],
        (&read.prerequisites, &read.updates),
        (&key.name, &rules),
        checks::UPDATE_NOW,
    )
    .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].rtype, 16);
    assert!(update::authenticate(transfers, &signed, checks::UPDATE_NOW + 400).is_err());
    assert!(update::authenticate(transfers, body, checks::UPDATE_NOW).is_err());
}
