//! Zone transfer out (SPEC §10): knotd, NSD and BIND 9 as secondaries of control with
//! TSIG, following health by NOTIFY and IXFR; a signed zone's transfer validated by
//! `dnssec-verify`; refusals (no key, a wrong key, a bad MAC, an address outside
//! `transfer_allow`, a malformed request) answered and counted with the served copy
//! untouched.
mod common;

use std::{
    net::SocketAddr,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{free_port, scrape, values, Location};
use hickory_proto::rr::RecordType;
use qdns_testkit::{
    fixtures::zone_head,
    secondaries::{Secondary, Server, TsigKey},
};

/// The secret of the test key (32 octets, base64).
const SECRET: &str = "8Qu0x5o6yRUCdlWrlHvqYpUBIJbBcXKHDz5dkSwPFh0=";

fn key() -> TsigKey {
    TsigKey {
        name: "xfr-key".to_owned(),
        algorithm: "hmac-sha256".to_owned(),
        secret: SECRET.to_owned(),
    }
}

/// A zone with a failover set on an external check, allowed to 127.0.0.0/8 with the
/// test key, notifying `notify`.
fn zone_file(origin: &str, notify: &[SocketAddr], extra: &str) -> String {
    let head = zone_head(origin).replace(
        "[zone.soa]",
        &format!(
            "transfer_allow = [\"127.0.0.0/8\"]\ntransfer_tsig = \"xfr-key\"\nnotify = [{}]\n{extra}[zone.soa]",
            notify.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ")
        ),
    );
    format!(
        r#"{head}
[[health_check]]
id = "p"
type = "external"
[[rrset]]
name = "www"
type = "A"
policy = "failover"
members = [
  {{ id = "p", role = "primary", values = ["192.0.2.1"], health_check = "p" }},
  {{ id = "s", role = "secondary", values = ["192.0.2.2"] }},
]
[[rrset]]
name = "pool"
type = "A"
policy = "weighted"
members = [
  {{ id = "a", weight = 1, values = ["198.51.100.1"], health_check = "p" }},
  {{ id = "b", weight = 1, values = ["198.51.100.2"] }},
]
[[rrset]]
name = "static"
type = "TXT"
values = ["\"kept\""]
"#
    )
}

/// A location with control only, serving `zones` (name, text) for transfer on a free
/// port; returns it and the transfer address.
fn control(zones: &[(&str, String)]) -> (Location, SocketAddr) {
    let mut location = Location::prepared();
    for (name, text) in zones {
        std::fs::write(location.zones().join(name), text).unwrap();
    }
    let key_file = location.dir.path().join("xfr.key");
    std::fs::write(
        &key_file,
        format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{SECRET}\";\n}};\n"),
    )
    .unwrap();
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics = format!("127.0.0.1:{}", free_port());
    location.start_control_with(&[
        "--no-embedded-checker",
        "--transfer-listen",
        &transfer.to_string(),
        "--tsig-keys",
        &format!("name=xfr-key,algorithm=hmac-sha256,secret_file={}", key_file.display()),
        "--metrics",
        &metrics,
    ]);
    assert!(location.control.as_ref().unwrap().history_has("serving zone transfers"));
    std::fs::write(location.dir.path().join("metrics-addr"), &metrics).unwrap();
    (location, transfer)
}

fn metrics_of(location: &Location) -> String {
    scrape(&std::fs::read_to_string(location.dir.path().join("metrics-addr")).unwrap())
}

/// The counter `qdns_control_transfers_total{outcome="OUTCOME"}`.
fn transfers(location: &Location, outcome: &str) -> u64 {
    let needle = format!("qdns_control_transfers_total{{outcome=\"{outcome}\"}} ");
    metrics_of(location)
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (at most `limit`) until `server` answers `name A` with `want`; how long it took.
fn wait_answer(server: &Secondary, name: &str, want: &[&str], limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let got = common::ask(server.addr, name, RecordType::A, Duration::from_millis(300), 1)
            .map(|m| values(&m))
            .unwrap_or_default();
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{:?} answers {name} A with {got:?}, not {want:?}, after {limit:?}:\n{}",
            server.server,
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// knotd, NSD and BIND take the zone by AXFR with TSIG, and after a health change each
/// serves the new answer within 5 s, by IXFR after NOTIFY (their SOA refresh is an
/// hour away), without a reload; the weighted set carries every member a query could get.
#[test]
fn knot_nsd_and_bind_follow_health_by_notify_and_ixfr() {
    let ports = [free_port(), free_port(), free_port()];
    let notify: Vec<SocketAddr> = ports.iter().map(|&p| SocketAddr::from(([127, 0, 0, 1], p))).collect();
    let mut text = zone_file("xfr.example.", &notify, "");
    text = text.replace(
        "refresh = 1\nretry = 1\nexpire = 1",
        "refresh = 3600\nretry = 3600\nexpire = 604800",
    );
    let (location, primary) = control(&[("xfr.example.toml", text)]);
    let dir = location.dir.path();
    let servers: Vec<Secondary> = [Server::Knot, Server::Nsd, Server::Bind]
        .into_iter()
        .zip(ports)
        .map(|(server, port)| {
            Secondary::start(
                server,
                &dir.join(format!("{server:?}")),
                "xfr.example",
                primary,
                &key(),
                port,
            )
        })
        .collect();
    for server in &servers {
        wait_answer(server, "www.xfr.example.", &["192.0.2.1"], Duration::from_secs(20));
        wait_answer(
            server,
            "pool.xfr.example.",
            &["198.51.100.1", "198.51.100.2"],
            Duration::from_secs(5),
        );
    }
    assert!(transfers(&location, "axfr") >= 3, "{}", metrics_of(&location));
    let before = transfers(&location, "ixfr");
    assert!(location
        .ctl(&["external", "xfr.example./p", "unhealthy"])
        .status
        .success());
    for server in &servers {
        let took = wait_answer(server, "www.xfr.example.", &["192.0.2.2"], Duration::from_secs(5));
        eprintln!(
            "{:?} serves the new answer {took:?} after the health change",
            server.server
        );
        wait_answer(server, "pool.xfr.example.", &["198.51.100.2"], Duration::from_secs(2));
    }
    assert!(
        transfers(&location, "ixfr") >= before + 3,
        "each secondary took the change by IXFR:\n{}",
        metrics_of(&location)
    );
    // The NOTIFYs of serial 1 went out before the secondaries listened; those of the
    // change were each answered.
    assert!(transfers(&location, "notify_acked") >= 3, "{}", metrics_of(&location));
    // And back: a second change chains in the journal.
    assert!(location
        .ctl(&["external", "xfr.example./p", "healthy"])
        .status
        .success());
    for server in &servers {
        wait_answer(server, "www.xfr.example.", &["192.0.2.1"], Duration::from_secs(5));
    }
}

/// Runs `kdig` with `args`; its output (a refused transfer is told on stderr).
fn kdig(args: &[&str]) -> String {
    let out = Command::new("kdig").args(args).output().expect("kdig (knot-dnsutils)");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn key_arg() -> String {
    format!("hmac-sha256:xfr-key:{SECRET}")
}

/// The AXFR of a signed zone (before and after a health change that puts together a
/// weighted answer no edge gives) verifies with BIND's `dnssec-verify`: every RRSIG,
/// the NSEC chain, the SOA signed with the transfer's own serial.
#[test]
fn a_signed_zone_transfers_with_signatures_that_verify() {
    let text = zone_file("signed.example.", &[], "dnssec = true\n");
    let (location, primary) = control(&[("signed.example.toml", text)]);
    let at = format!("@{}", primary.ip());
    let port = primary.port().to_string();
    let verify = |dir: &Path, tag: &str| {
        let axfr = kdig(&[
            &at,
            "-p",
            &port,
            "-y",
            &key_arg(),
            "AXFR",
            "signed.example.",
            "+nocomments",
        ]);
        assert!(axfr.contains("RRSIG") && axfr.contains("NSEC"), "{axfr}");
        let file = dir.join(format!("signed-{tag}.zone"));
        let records: String = axfr
            .lines()
            .filter(|l| !l.starts_with(';') && !l.trim().is_empty() && !l.contains("TSIG"))
            .flat_map(|l| [l, "\n"])
            .collect();
        std::fs::write(&file, &records).unwrap();
        let out = Command::new("dnssec-verify")
            // -z: the zone's one key is a CSK (KSK flag set, signing everything).
            .args(["-z", "-o", "signed.example."])
            .arg(&file)
            .output()
            .expect("dnssec-verify (bind9-utils)");
        assert!(
            out.status.success(),
            "{tag}: {}{}\n{records}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        records
    };
    let dir = location.dir.path();
    let first = verify(dir, "healthy");
    assert!(first.contains("198.51.100.1") && first.contains("198.51.100.2"));
    assert!(location
        .ctl(&["external", "signed.example./p", "unhealthy"])
        .status
        .success());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let soa = kdig(&[&at, "-p", &port, "-y", &key_arg(), "SOA", "signed.example.", "+short"]);
        if soa.split_whitespace().nth(2) == Some("2") {
            break;
        }
        assert!(Instant::now() < deadline, "the serial did not move: {soa}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = verify(dir, "degraded");
    assert!(
        !second.contains("198.51.100.1") && second.contains("198.51.100.2"),
        "{second}"
    );
}

/// Requests without the key, with an unknown key, with a wrong secret, from outside
/// `transfer_allow`, and malformed: refused and counted; the zone still transfers.
#[test]
fn bad_requests_are_refused_and_counted() {
    let allow_one = zone_file("one.example.", &[], "")
        .replace("transfer_allow = [\"127.0.0.0/8\"]", "transfer_allow = [\"127.0.0.2\"]");
    let (location, primary) = control(&[("one.example.toml", allow_one)]);
    let at = format!("@{}", primary.ip());
    let port = primary.port().to_string();
    let axfr = |extra: &[&str]| {
        let mut args = vec![at.as_str(), "-p", port.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["AXFR", "one.example."]);
        kdig(&args)
    };
    let good = key_arg();
    // From 127.0.0.2 with the key: the whole zone.
    let whole = axfr(&["-b", "127.0.0.2", "-y", &good]);
    assert!(whole.contains("192.0.2.1") && whole.contains("kept"), "{whole}");
    // From 127.0.0.1, outside transfer_allow.
    let refused = |out: String| assert!(out.contains("REFUSED"), "{out}");
    refused(axfr(&["-y", &good]));
    // Without a key.
    refused(axfr(&["-b", "127.0.0.2"]));
    // A key control does not know, and the right name with another secret.
    let unknown = format!("hmac-sha256:other-key:{SECRET}");
    // NOTAUTH with the TSIG error, which kdig reports.
    let out = axfr(&["-b", "127.0.0.2", "-y", &unknown]);
    assert!(out.contains("BADKEY"), "{out}");
    let wrong = "hmac-sha256:xfr-key:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let out = axfr(&["-b", "127.0.0.2", "-y", wrong]);
    assert!(out.contains("BADSIG"), "{out}");
    // A request cut short inside its question, over TCP: FORMERR, then closed.
    let mut stream = std::net::TcpStream::connect(primary).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    qdns_testkit::dns::write_framed(&mut stream, &[0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'o', b'n']);
    let answer = qdns_testkit::dns::read_framed(&mut stream);
    assert_eq!((answer[0], answer[1], answer[3] & 0xf), (0x12, 0x34, 1), "{answer:?}");
    assert_eq!(transfers(&location, "refused_acl"), 1);
    assert_eq!(transfers(&location, "refused_tsig"), 3);
    assert_eq!(transfers(&location, "malformed"), 1);
    assert_eq!(transfers(&location, "axfr"), 1);
    // Nothing of it touched the served copy.
    let again = axfr(&["-b", "127.0.0.2", "-y", &good]);
    assert_eq!(strip_timing(&again), strip_timing(&whole));
}

/// kdig's output without the lines that differ from run to run (times, TSIG MACs).
fn strip_timing(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with(';') && !l.contains("TSIG"))
        .collect::<Vec<_>>()
        .join("\n")
}
