//! Zone transfer (SPEC §10). Out: knotd, NSD and BIND 9 as secondaries of control with
//! TSIG, following health by NOTIFY and IXFR; a signed zone's transfer validated by
//! `dnssec-verify`; refusals (no key, a wrong key, a bad MAC, an address outside
//! `transfer_allow`, a malformed request) answered and counted with the served copy
//! untouched. In: knotd and BIND 9 as hidden primaries of control, a dynamic update on
//! them reaching the edge's answers after NOTIFY, with control's policy sets on top.
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
    transfer_peers::{Primary, Secondary, Server, TsigKey},
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
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    start_control(&mut location, transfer, "bind");
    (location, transfer)
}

/// Starts control with the test key (its file in tsig-keygen's form, or `bare`: the
/// secret alone), transfers on `transfer`, metrics on a free port.
fn start_control(location: &mut Location, transfer: SocketAddr, form: &str) {
    let key_file = location.dir.path().join("xfr.key");
    let text = if form == "bind" {
        format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{SECRET}\";\n}};\n")
    } else {
        format!("{SECRET}\n")
    };
    qdns_testkit::write_secret(&key_file, text);
    let metrics = format!("127.0.0.1:{}", free_port());
    std::fs::write(location.dir.path().join("metrics-addr"), &metrics).unwrap();
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
}

fn metrics_of(location: &Location) -> String {
    scrape(&std::fs::read_to_string(location.dir.path().join("metrics-addr")).unwrap())
}

/// The counter `qdns_control_transfers_total{outcome="OUTCOME"}`.
fn transfers(location: &Location, outcome: &str) -> u64 {
    let metrics = std::fs::read_to_string(location.dir.path().join("metrics-addr")).unwrap();
    common::transfers_counted(&metrics, outcome)
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
    let status = location.ctl_json(&["status"]);
    let zone = status["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == "xfr.example.")
        .unwrap();
    assert_eq!(zone["transfer"]["serial"], 2, "{zone}");
    let text = String::from_utf8(location.ctl(&["status"]).stdout).unwrap();
    assert!(text.contains("transfer: secondaries get serial 2"), "{text}");
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
/// `transfer_allow`, for a zone not served, and malformed: refused and counted; the
/// zone still transfers.
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
    // A zone not served is refused as a served one is to a peer outside its ACL: the
    // answers do not list the zones served.
    let not_served = kdig(&[at.as_str(), "-p", port.as_str(), "AXFR", "nothere.example."]);
    refused(not_served);
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

/// The hidden primary's zone file.
const PRIMARY_ZONE: &str = "$ORIGIN in.example.\n$TTL 60\n\
@ SOA ns.in.example. h.in.example. 1 3600 600 86400 5\n\
@ NS ns.in.example.\n\
ns A 192.0.2.53\n\
static TXT \"first\"\n\
mail MX 10 mx.in.example.\n";

/// Control's file for the zone: the records come from the primary, a health check and
/// a failover set are added on top.
fn secondary_zone_file(primary: SocketAddr) -> String {
    format!(
        r#"[zone]
origin = "in.example."
primary = "{primary}"
primary_tsig = "xfr-key"
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
"#
    )
}

/// The TXT strings the edge answers for `name`.
fn txt(location: &Location, name: &str) -> String {
    common::ask(
        location.dns.unwrap(),
        name,
        RecordType::TXT,
        Duration::from_millis(500),
        2,
    )
    .map(|m| {
        m.answers
            .iter()
            .map(|r| r.data.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    })
    .unwrap_or_default()
}

/// Waits (at most `limit`) until `probe()` holds; how long it took.
fn within(limit: Duration, what: &str, probe: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !probe() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// Knot and BIND as hidden primaries: control takes the zone at start, the edge answers
/// its records with control's failover set on top; a dynamic update on the primary
/// reaches the edge's answer within 5 s (NOTIFY, AXFR, reload); health still steers the
/// set on top; a NOTIFY from elsewhere is refused; with the primary gone the copy keeps
/// serving.
#[test]
fn knot_and_bind_primaries_feed_control_and_its_edges() {
    for server in [Server::Knot, Server::Bind] {
        let mut location = Location::prepared();
        let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let primary = Primary::start(
            server,
            &location.dir.path().join(format!("{server:?}")),
            &[("in.example", PRIMARY_ZONE)],
            &key(),
            transfer,
        );
        std::fs::write(
            location.zones().join("in.example.toml"),
            secondary_zone_file(primary.addr),
        )
        .unwrap();
        start_control(&mut location, transfer, "bare");
        location.start_edge();
        within(Duration::from_secs(10), "the first copy on the edge", || {
            txt(&location, "static.in.example.").contains("first")
        });
        assert_eq!(location.values("www.in.example.", RecordType::A), ["192.0.2.1"]);
        primary.update(
            "in.example",
            &key(),
            &[
                "update delete static.in.example. TXT",
                "update add static.in.example. 60 TXT \"changed\"",
            ],
        );
        let took = within(Duration::from_secs(5), "the update on the edge", || {
            txt(&location, "static.in.example.").contains("changed")
        });
        eprintln!("{server:?}: the update answers at the edge {took:?} after it was sent");
        assert!(transfers(&location, "notify_in") >= 1, "{}", metrics_of(&location));
        assert!(transfers(&location, "in_transferred") >= 1, "{}", metrics_of(&location));
        assert!(
            transfers(&location, "in_incremental") >= 1,
            "the update came by IXFR: {}",
            metrics_of(&location)
        );
        assert!(location
            .ctl(&["external", "in.example./p", "unhealthy"])
            .status
            .success());
        within(Duration::from_secs(5), "health on top of the copy", || {
            location.values("www.in.example.", RecordType::A) == ["192.0.2.2"]
        });
        // A NOTIFY from an address that is not the primary's: refused.
        let mut notify = vec![0x77, 0x77, 0x20, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        notify.extend_from_slice(b"\x02in\x07example\x00\x00\x06\x00\x01");
        let socket = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        socket.send_to(&notify, transfer).unwrap();
        let mut buf = [0u8; 512];
        let (len, _) = socket.recv_from(&mut buf).unwrap();
        assert_eq!(
            (buf[0], buf[1], buf[3] & 0xf),
            (0x77, 0x77, 5),
            "REFUSED: {:?}",
            &buf[..len]
        );
        assert!(transfers(&location, "notify_in_refused") >= 1);
        // The primary gone: the copy keeps serving.
        drop(primary);
        std::thread::sleep(Duration::from_millis(300));
        assert!(txt(&location, "static.in.example.").contains("changed"));
    }
}

/// What the hand-made primary serves: its serial, how many TXT records (`tN`, value
/// `vSERIAL-N`), and whether it cuts the AXFR short.
#[derive(Clone, Copy, Default)]
struct Serving {
    serial: u32,
    records: usize,
    cut: bool,
    /// Milliseconds between the messages of a transfer.
    drip_ms: u64,
    /// After the first message of a transfer, empty messages, one a second.
    empty: bool,
}

/// A primary written here, to send what no real server sends: an AXFR cut short, one
/// larger than control accepts. Unsigned, for `bad.example.`.
struct FakePrimary {
    addr: SocketAddr,
    serving: std::sync::Arc<std::sync::Mutex<Serving>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Connections accepted (each refresh is one or two: the SOA check, the transfer).
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

const BAD: &[u8] = b"\x03bad\x07example\x00";

fn record(owner: &[u8], rtype: u16, rdata: &[u8]) -> Vec<u8> {
    let mut r = owner.to_vec();
    r.extend_from_slice(&rtype.to_be_bytes());
    r.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
    r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    r.extend_from_slice(rdata);
    r
}

fn soa(serial: u32) -> Vec<u8> {
    let mut rdata = b"\x02ns\x03bad\x07example\x00\x01h\x03bad\x07example\x00".to_vec();
    for field in [serial, 3600, 5, 86_400, 5] {
        rdata.extend_from_slice(&field.to_be_bytes());
    }
    record(BAD, 6, &rdata)
}

/// A response to `query` carrying `records` (question copied when `question`).
fn response(query: &[u8], records: &[Vec<u8>], question: bool) -> Vec<u8> {
    let qlen = query.len() - 12;
    let mut m = vec![query[0], query[1], 0x84, 0, 0, u8::from(question), 0, 0, 0, 0, 0, 0];
    m[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
    if question {
        m.extend_from_slice(&query[12..12 + qlen]);
    }
    for r in records {
        m.extend_from_slice(r);
    }
    m
}

impl FakePrimary {
    fn start(serving: Serving) -> FakePrimary {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = std::sync::Arc::new(std::sync::Mutex::new(serving));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (state, done, count) = (serving.clone(), stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                Self::serve(&mut stream, *state.lock().unwrap());
            }
        });
        FakePrimary {
            addr,
            serving,
            stop,
            accepted,
        }
    }

    fn serve(stream: &mut std::net::TcpStream, now: Serving) {
        use std::io::{Read, Write};
        for _ in 0..2 {
            let mut len = [0u8; 2];
            if stream.read_exact(&mut len).is_err() {
                return;
            }
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if stream.read_exact(&mut query).is_err() {
                return;
            }
            // The question is bad.example. (an IXFR carries an SOA after it).
            let at = 12 + BAD.len();
            let qtype = u16::from_be_bytes([query[at], query[at + 1]]);
            let mut messages = Vec::new();
            if qtype == 6 {
                messages.push(response(&query, &[soa(now.serial)], true));
            } else {
                let txt: Vec<Vec<u8>> = (0..now.records)
                    .map(|i| {
                        // tD.NNNNN.bad.example. (D: the last digit of N)
                        let number = format!("{i:05}");
                        let owner = [&[2u8, b't', b'0' + (i % 10) as u8, 5][..], number.as_bytes(), BAD].concat();
                        let value = format!("v{}-{i}", now.serial);
                        record(&owner, 16, &[&[value.len() as u8][..], value.as_bytes()].concat())
                    })
                    .collect();
                let mut all = vec![soa(now.serial), record(BAD, 2, b"\x02ns\x03bad\x07example\x00")];
                all.extend(txt);
                for (n, chunk) in all.chunks(200).enumerate() {
                    messages.push(response(&query, chunk, n == 0));
                }
                if now.cut {
                    messages.truncate(1);
                } else {
                    messages.push(response(&query, &[soa(now.serial)], false));
                }
            }
            if now.empty && qtype != 6 {
                // The first message, then empty ones, one a second, while it reads.
                messages.truncate(1);
                for _ in 0..30 {
                    messages.push(response(&query, &[], false));
                }
            }
            for (n, m) in messages.iter().enumerate() {
                let mut framed = (m.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(m);
                if stream.write_all(&framed).is_err() {
                    return;
                }
                if qtype != 6 && n + 1 < messages.len() {
                    let pause = if now.empty { 1000 } else { now.drip_ms };
                    std::thread::sleep(Duration::from_millis(pause));
                }
            }
            if now.cut && qtype != 6 {
                return;
            }
        }
    }

    fn set(&self, serving: Serving) {
        *self.serving.lock().unwrap() = serving;
    }
}

impl Drop for FakePrimary {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Control taking `bad.example.` from `primary`, with `extra` arguments, transfers on
/// a free port and metrics served (for [`transfers`]); returns it and the transfer
/// address.
fn following(primary: &FakePrimary, extra: &[&str]) -> (Location, SocketAddr) {
    let mut location = Location::prepared();
    std::fs::write(
        location.zones().join("bad.example.toml"),
        format!("[zone]\norigin = \"bad.example.\"\nprimary = \"{}\"\n", primary.addr),
    )
    .unwrap();
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics = format!("127.0.0.1:{}", free_port());
    std::fs::write(location.dir.path().join("metrics-addr"), &metrics).unwrap();
    let transfer_arg = transfer.to_string();
    let mut args = vec![
        "--no-embedded-checker",
        "--transfer-listen",
        &transfer_arg,
        "--metrics",
        &metrics,
    ];
    args.extend_from_slice(extra);
    location.start_control_with(&args);
    (location, transfer)
}

/// A NOTIFY for `bad.example.` from 127.0.0.1 (the fake primary's address) to control's
/// transfer listener at `transfer`; the RCODE of its answer.
fn notify_bad(transfer: SocketAddr) -> u8 {
    let mut m = vec![0x55, 0x55, 0x20, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(BAD);
    m.extend_from_slice(&[0, 6, 0, 1]);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    socket.send_to(&m, transfer).unwrap();
    let mut buf = [0u8; 512];
    socket.recv_from(&mut buf).expect("the NOTIFY answered");
    buf[3] & 0xf
}

/// An AXFR cut short and one over `--transfer-in-max-bytes` are refused and counted
/// (`in_failed`); the copy served stays, and the next good transfer is taken.
#[test]
fn a_cut_or_oversized_transfer_in_leaves_the_copy_served() {
    let primary = FakePrimary::start(Serving {
        serial: 1,
        records: 3,
        cut: false,
        ..Serving::default()
    });
    let (mut location, transfer) = following(&primary, &["--transfer-in-max-bytes", "65536"]);
    location.start_edge();
    let name = "t1.00001.bad.example.";
    within(Duration::from_secs(10), "the first copy", || {
        txt(&location, name).contains("v1-1")
    });
    let notify = || {
        assert_eq!(
            notify_bad(transfer),
            0,
            "the NOTIFY from the primary's address is accepted"
        );
    };
    for (n, bad) in [
        Serving {
            serial: 2,
            records: 3,
            cut: true,
            ..Serving::default()
        },
        Serving {
            serial: 3,
            records: 3000,
            cut: false,
            ..Serving::default()
        },
    ]
    .into_iter()
    .enumerate()
    {
        primary.set(bad);
        notify();
        within(Duration::from_secs(5), "the failure counted", || {
            transfers(&location, "in_failed") > n as u64
        });
        assert!(txt(&location, name).contains("v1-1"), "the copy served stays");
    }
    primary.set(Serving {
        serial: 4,
        records: 3,
        cut: false,
        ..Serving::default()
    });
    notify();
    within(Duration::from_secs(5), "the next good copy", || {
        txt(&location, name).contains("v4-1")
    });
    assert_eq!(transfers(&location, "in_transferred"), 2);
}

/// A catalog zone (RFC 9432) on Knot lists member zones; control serves each member
/// the catalog lists (taken from the same primary), adds one when a dynamic update
/// lists it and drops one when it leaves the catalog, without an operator's reload.
#[test]
fn a_catalog_zone_on_knot_adds_and_removes_zones() {
    let member = |name: &str, value: &str| {
        format!(
            "$ORIGIN {name}.\n$TTL 60\n@ SOA ns.{name}. h.{name}. 1 3600 600 86400 5\n@ NS ns.{name}.\nns A 192.0.2.53\nid TXT \"{value}\"\n"
        )
    };
    let catalog = "$ORIGIN cat.example.\n$TTL 0\n@ SOA invalid. invalid. 1 3600 600 86400 0\n@ NS invalid.\n\
                   version TXT \"2\"\nm1.zones PTR m1.example.\n";
    let mut location = Location::prepared();
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (m1, m2) = (member("m1.example", "one"), member("m2.example", "two"));
    let primary = Primary::start(
        Server::Knot,
        &location.dir.path().join("knot"),
        &[("cat.example", catalog), ("m1.example", &m1), ("m2.example", &m2)],
        &key(),
        transfer,
    );
    std::fs::write(
        location.zones().join("cat.example.toml"),
        format!(
            "[zone]\norigin = \"cat.example.\"\nprimary = \"{}\"\nprimary_tsig = \"xfr-key\"\ncatalog = true\n",
            primary.addr
        ),
    )
    .unwrap();
    start_control(&mut location, transfer, "bare");
    location.start_edge();
    within(Duration::from_secs(10), "the member m1 on the edge", || {
        txt(&location, "id.m1.example.").contains("one")
    });
    assert!(
        txt(&location, "id.m2.example.").is_empty(),
        "m2 is not in the catalog yet"
    );
    assert!(
        txt(&location, "version.cat.example.").is_empty(),
        "the catalog itself is not served"
    );
    primary.update(
        "cat.example",
        &key(),
        &["update add m2.zones.cat.example. 0 PTR m2.example."],
    );
    let took = within(Duration::from_secs(5), "the member m2 on the edge", || {
        txt(&location, "id.m2.example.").contains("two")
    });
    eprintln!("a zone added to the catalog answers at the edge {took:?} after the update");
    primary.update("cat.example", &key(), &["update delete m1.zones.cat.example. PTR"]);
    within(Duration::from_secs(5), "m1 gone from the edge", || {
        txt(&location, "id.m1.example.").is_empty()
    });
    assert!(txt(&location, "id.m2.example.").contains("two"));
}

/// The XDP path: a change on a Knot primary reaches the answer the edge's XDP program
/// sends (edge in a network namespace this test creates, XDP on its loopback; control
/// and Knot on the host, the edge following control's Unix socket).
#[test]
fn a_change_on_the_primary_reaches_the_xdp_answer() {
    qdns_testkit::require_root("network namespaces, XDP");
    let ns = qdns_testkit::netns::Netns::new("qdns-xfr-xdp");
    let mut location = Location::prepared();
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let zone = format!("{PRIMARY_ZONE}web A 192.0.2.10\n");
    let primary = Primary::start(
        Server::Knot,
        &location.dir.path().join("knot"),
        &[("in.example", &zone)],
        &key(),
        transfer,
    );
    std::fs::write(
        location.zones().join("in.example.toml"),
        secondary_zone_file(primary.addr),
    )
    .unwrap();
    start_control(&mut location, transfer, "bare");
    location.start_edge_with(
        &["ip", "netns", "exec", &ns.0],
        &["--xdp", "lo", "--xdp-mode", "generic"],
    );
    let dns = location.dns.unwrap();
    let web = move || {
        common::ask(dns, "web.in.example.", RecordType::A, Duration::from_secs(1), 3)
            .map(|m| values(&m))
            .unwrap_or_default()
    };
    let wait_for = |want: &'static str| {
        ns.run(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let got = web();
                if got == [want] || Instant::now() > deadline {
                    return got;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    assert_eq!(wait_for("192.0.2.10"), ["192.0.2.10"]);
    primary.update(
        "in.example",
        &key(),
        &[
            "update delete web.in.example. A",
            "update add web.in.example. 60 A 192.0.2.11",
        ],
    );
    assert_eq!(
        wait_for("192.0.2.11"),
        ["192.0.2.11"],
        "the primary's change in the XDP answer"
    );
    // Asked again a few times: the program's plain answers are counted.
    ns.run(move || {
        for _ in 0..5 {
            assert_eq!(web(), ["192.0.2.11"]);
        }
    });
    let edge = location.edge.as_mut().unwrap();
    assert!(edge.term().success());
    let detach = edge.seen("detaching XDP");
    let plain = qdns_testkit::fixtures::logged_count(&detach, "answered_plain");
    assert!(plain >= 5, "the XDP program gave the answers: {detach}");
}

/// A secondary that refuses the NOTIFY (Knot answers an unsigned NOTAUTH when its ACL
/// lacks the key) is named in control's log with what it answered, not as "an answer
/// without a valid TSIG" (issue 53 §8). The secondary here is a socket that answers
/// every NOTIFY so.
#[test]
fn a_secondary_refusing_the_notify_is_logged_with_its_answer() {
    let secondary = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    secondary.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let addr = secondary.local_addr().unwrap();
    let (location, _) = control(&[("refusing.example.toml", zone_file("refusing.example.", &[addr], ""))]);
    let mut buf = [0u8; 4096];
    let (len, from) = secondary.recv_from(&mut buf).expect("a NOTIFY from control");
    let request = &buf[..len];
    assert_eq!(request[2] & 0x78, 4 << 3, "opcode NOTIFY");
    // The header (same id, QR, opcode NOTIFY, NOTAUTH), the question echoed, no TSIG.
    let question_end = 12 + request[12..].iter().position(|&b| b == 0).unwrap() + 1 + 4;
    let mut answer = vec![request[0], request[1], 0x80 | (4 << 3), 9, 0, 1, 0, 0, 0, 0, 0, 0];
    answer.extend_from_slice(&request[12..question_end]);
    secondary.send_to(&answer, from).unwrap();
    let said = location
        .control
        .as_ref()
        .unwrap()
        .wait_for("the secondary's NOTIFY answer does not verify");
    assert!(said.contains("NOTAUTH") && said.contains("unsigned"), "{said}");
    assert!(said.contains(&addr.to_string()), "{said}");
}

/// NOTIFYs from the primary's address (spoofable when unsigned) refresh at once, but
/// a flood of them costs one refresh per floor (2 s), not one each (issue 53 §8).
#[test]
fn a_notify_flood_costs_one_refresh_per_floor() {
    let primary = FakePrimary::start(Serving {
        serial: 1,
        records: 3,
        cut: false,
        ..Serving::default()
    });
    let (_location, transfer) = following(&primary, &[]);
    let accepted = || primary.accepted.load(std::sync::atomic::Ordering::Relaxed);
    within(Duration::from_secs(10), "the first copy", || accepted() >= 1);
    // Past the floor of that first refresh.
    std::thread::sleep(Duration::from_secs(3));
    let before = accepted();
    let started = Instant::now();
    for _ in 0..30 {
        assert_eq!(notify_bad(transfer), 0, "accepted: it comes from the primary's address");
        std::thread::sleep(Duration::from_millis(50));
    }
    // 30 NOTIFYs over about 1.5 s, then up to 3 s from the first: a refresh at once and
    // one at the floor, the rest folded into them.
    std::thread::sleep(Duration::from_secs(3).saturating_sub(started.elapsed()));
    let refreshes = accepted() - before;
    assert!(
        (1..=2).contains(&refreshes),
        "{refreshes} refreshes for 30 NOTIFYs in {:?}",
        started.elapsed()
    );
}

/// One host cannot hold every transfer place (issue 53 §1): 64 idle connections from
/// 127.0.0.2 (allowed) and 64 from 127.0.0.9 (outside every ACL, which gets places of
/// its own) leave a secondary at 127.0.0.3 its transfer — it got no answer while one
/// host could take all 64 places for 10 s each.
#[test]
fn idle_connections_from_one_host_leave_a_secondary_its_transfer() {
    let zone = zone_file("one.example.", &[], "").replace(
        "transfer_allow = [\"127.0.0.0/8\"]",
        "transfer_allow = [\"127.0.0.2\", \"127.0.0.3\"]",
    );
    let (location, primary) = control(&[("one.example.toml", zone)]);
    let mut idle = Vec::new();
    for source in [2, 9] {
        for _ in 0..64 {
            if let Some(stream) = qdns_testkit::connect_from(std::net::Ipv4Addr::new(127, 0, 0, source), primary) {
                idle.push(stream);
            }
        }
    }
    assert!(idle.len() >= 64, "the kernel took the connections: {}", idle.len());
    let started = Instant::now();
    let out = kdig(&[
        &format!("@{}", primary.ip()),
        "-p",
        &primary.port().to_string(),
        "-b",
        "127.0.0.3",
        "-y",
        &key_arg(),
        "+retry=0",
        "+time=3",
        "AXFR",
        "one.example.",
    ]);
    assert!(out.contains("192.0.2.1") && out.contains("kept"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // The outsiders were refused places of their own; the crowd evicted its own.
    assert!(transfers(&location, "dropped") > 0);
    drop(idle);
}

/// A primary that sends empty messages, or drips its messages (each within the read
/// timeout), is cut off — the first at once, the second at `--transfer-in-deadline` —
/// counted (`in_failed`), the copy served kept (issue 53 §3): it held the refresh of
/// every zone for as long as it liked.
#[test]
fn a_primary_that_drips_or_sends_empty_messages_is_cut_off() {
    let primary = FakePrimary::start(Serving {
        serial: 1,
        records: 3,
        ..Serving::default()
    });
    let (location, transfer) = following(&primary, &["--transfer-in-deadline", "3"]);
    within(Duration::from_secs(10), "the first copy", || {
        transfers(&location, "in_transferred") == 1
    });
    let notify = || notify_bad(transfer);
    primary.set(Serving {
        serial: 2,
        records: 3,
        empty: true,
        ..Serving::default()
    });
    notify();
    within(Duration::from_secs(5), "the empty message refused", || {
        transfers(&location, "in_failed") == 1
    });
    assert!(location
        .control
        .as_ref()
        .unwrap()
        .history_has("an empty message from the primary"));
    // 2,000 records in 11 messages, one a second: past the 3 s deadline.
    primary.set(Serving {
        serial: 3,
        records: 2000,
        drip_ms: 1000,
        ..Serving::default()
    });
    let started = Instant::now();
    notify();
    within(Duration::from_secs(8), "the dripping transfer cut off", || {
        transfers(&location, "in_failed") == 2
    });
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(location.control.as_ref().unwrap().history_has("--transfer-in-deadline"));
    assert_eq!(
        transfers(&location, "in_transferred"),
        1,
        "the first copy is the one served"
    );
}

/// Every TSIG algorithm of RFC 8945 §6 signs what real secondaries take (issue 55 §2:
/// hmac-md5 is certbot's and cert-manager's default): a zone for each, each with a key
/// of its algorithm and a secondary of knotd, NSD or BIND in turn. Each takes its zone
/// by AXFR signed with its key, and a health change by IXFR after the NOTIFY control
/// signs with it. (Before, control refused every key but hmac-sha256 and hmac-sha512.)
#[test]
fn every_tsig_algorithm_signs_transfers_and_notifies_real_secondaries_take() {
    let algorithms = ["hmac-md5", "hmac-sha1", "hmac-sha224", "hmac-sha384", "hmac-sha512"];
    let servers = [Server::Knot, Server::Nsd, Server::Bind, Server::Knot, Server::Nsd];
    let ports: Vec<u16> = algorithms.iter().map(|_| free_port()).collect();
    let mut location = Location::prepared();
    let mut flags = vec!["--no-embedded-checker".to_owned(), "--transfer-listen".to_owned()];
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    flags.push(transfer.to_string());
    let metrics = format!("127.0.0.1:{}", free_port());
    std::fs::write(location.dir.path().join("metrics-addr"), &metrics).unwrap();
    flags.extend(["--metrics".to_owned(), metrics]);
    let keys: Vec<TsigKey> = algorithms
        .iter()
        .map(|algorithm| TsigKey {
            name: format!("{algorithm}-key"),
            algorithm: (*algorithm).to_owned(),
            secret: SECRET.to_owned(),
        })
        .collect();
    for (n, (key, port)) in keys.iter().zip(&ports).enumerate() {
        let notify = SocketAddr::from(([127, 0, 0, 1], *port));
        let text = zone_file(&format!("a{n}.example."), &[notify], "")
            .replace(
                "transfer_tsig = \"xfr-key\"",
                &format!("transfer_tsig = \"{}\"", key.name),
            )
            .replace(
                "refresh = 1\nretry = 1\nexpire = 1",
                "refresh = 3600\nretry = 3600\nexpire = 604800",
            );
        std::fs::write(location.zones().join(format!("a{n}.example.toml")), text).unwrap();
        let file = location.dir.path().join(format!("{}.key", key.name));
        qdns_testkit::write_secret(&file, format!("{SECRET}\n"));
        flags.extend([
            "--tsig-keys".to_owned(),
            format!(
                "name={},algorithm={},secret_file={}",
                key.name,
                key.algorithm,
                file.display()
            ),
        ]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    location.start_control_with(&flags);
    let secondaries: Vec<Secondary> = servers
        .iter()
        .zip(&keys)
        .zip(&ports)
        .enumerate()
        .map(|(n, ((&server, key), &port))| {
            let dir = location.dir.path().join(format!("secondary-{n}"));
            Secondary::start(server, &dir, &format!("a{n}.example"), transfer, key, port)
        })
        .collect();
    for (n, secondary) in secondaries.iter().enumerate() {
        wait_answer(
            secondary,
            &format!("www.a{n}.example."),
            &["192.0.2.1"],
            Duration::from_secs(20),
        );
    }
    let ixfr = transfers(&location, "ixfr");
    for n in 0..secondaries.len() {
        let check = format!("a{n}.example./p");
        assert!(location.ctl(&["external", &check, "unhealthy"]).status.success());
    }
    for (n, secondary) in secondaries.iter().enumerate() {
        wait_answer(
            secondary,
            &format!("www.a{n}.example."),
            &["192.0.2.2"],
            Duration::from_secs(10),
        );
    }
    assert!(
        transfers(&location, "ixfr") >= ixfr + 5,
        "each took the change by IXFR:\n{}",
        metrics_of(&location)
    );
}
