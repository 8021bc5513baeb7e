//! Partition quorum across checker processes (SPEC §4): five real checkers (the
//! `qdns-control checker` role) probe one HTTP target from different loopback source
//! addresses; the target answers 200 to two of them and 503 to the others, as if the
//! network between it and three checkers were broken. Locations decide by the share of
//! the checkers they can reach; reports are signed and replay-protected.
mod common;

use qdns_testkit::fixtures::zone_head;
use qdns_testkit::Rng;
use std::{
    fmt::Write as _,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    time::{Duration, Instant},
};

use base64::Engine as _;
use common::{free_port, Proc};
use qdns_control::report::{sign, Report, Signed};

/// An HTTP target that answers 200 to sources in `healthy_for`, 503 to the rest.
fn target(healthy_for: &'static [&'static str]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let peer = stream.peer_addr().unwrap().ip().to_string();
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let mut request = Vec::new();
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let status = if healthy_for.contains(&peer.as_str()) {
                    "200 OK"
                } else {
                    "503 Unavailable"
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            });
        }
    });
    port
}

fn key(i: u8) -> Vec<u8> {
    (0..32).map(|b| b ^ i.wrapping_mul(37)).collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let target = target(&["127.0.0.11", "127.0.0.12"]);
        std::fs::create_dir(dir.path().join("zones")).unwrap();
        std::fs::write(
            dir.path().join("zones/q.toml"),
            format!(
                "{}[[health_check]]\nid = \"t\"\ntype = \"http\"\nip = \"127.0.0.1\"\nport = {target}\ninterval = 10\nfailure_threshold = 1\n",
                zone_head("q.example.")
            ),
        )
        .unwrap();
        let mut keys = String::new();
        for i in 1..=5u8 {
            let _ = writeln!(
                keys,
                "[[checker]]\nid = \"c{i}\"\nregion = \"r{i}\"\nkey = \"{}\"",
                b64(&key(i))
            );
            qdns_testkit::write_secret(&dir.path().join(format!("c{i}.key")), b64(&key(i)));
        }
        qdns_testkit::write_secret(&dir.path().join("keys.toml"), keys);
        World { dir }
    }

    fn location(&self, name: &str) -> (Proc, u16) {
        self.location_with(name, None, &[])
    }

    /// A location with every listener on loopback TCP: returns it and its report,
    /// edge-link (`tcp://`) and metrics ports.
    fn exposed_location(&self, name: &str) -> (Proc, u16, u16, u16) {
        let (edge_port, metrics) = (free_port(), free_port());
        let (location, port) = self.location_with(
            name,
            Some(&format!("tcp://127.0.0.1:{edge_port}")),
            &["--metrics", &format!("127.0.0.1:{metrics}")],
        );
        (location, port, edge_port, metrics)
    }

    /// A location whose edge socket is `edge_socket` (default: a Unix socket in the
    /// world's directory), with `extra` arguments.
    fn location_with(&self, name: &str, edge_socket: Option<&str>, extra: &[&str]) -> (Proc, u16) {
        let port = free_port();
        let d = self.dir.path();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"));
        cmd.arg("--zones")
            .arg(d.join("zones"))
            .arg("--socket")
            .arg(d.join(format!("{name}.sock")));
        cmd.arg("--state-dir")
            .arg(d.join(format!("{name}-state")))
            .arg("--edge-socket")
            .arg(edge_socket.map_or_else(|| d.join(format!("{name}-edge.sock")), std::path::PathBuf::from));
        cmd.args(extra);
        cmd.args([
            "--location",
            name,
            "--no-embedded-checker",
            "--checker-listen",
            &format!("127.0.0.1:{port}"),
            "--checker-keys",
        ])
        .arg(d.join("keys.toml"));
        let proc = Proc::spawn("location", cmd);
        proc.wait_for("accepting checker reports");
        (proc, port)
    }

    fn checker(&self, i: u8, locations: &[(&str, u16)]) -> Proc {
        let d = self.dir.path();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"));
        cmd.args([
            "checker",
            "--id",
            &format!("c{i}"),
            "--region",
            &format!("r{i}"),
            "--zones",
        ])
        .arg(d.join("zones"));
        cmd.arg("--key-file")
            .arg(d.join(format!("c{i}.key")))
            .args(["--source-ip", &format!("127.0.0.{}", 10 + i)]);
        for (location, port) in locations {
            cmd.args(["--report-to", &format!("{location}=127.0.0.1:{port}")]);
        }
        let proc = Proc::spawn("checker", cmd);
        proc.wait_for("checker running");
        proc
    }

    fn ctl(&self, name: &str, args: &[&str]) -> serde_json::Value {
        common::ctl_json_at(&self.dir.path().join(format!("{name}.sock")), args)
    }

    fn health(&self, name: &str) -> serde_json::Value {
        self.ctl(name, &["health", "t"])[0].clone()
    }

    fn status(&self, name: &str) -> serde_json::Value {
        self.ctl(name, &["status"])
    }

    /// Waits until location `name` decides `healthy` with `why` containing `text`.
    fn wait(&self, name: &str, healthy: bool, text: &str, limit: Duration) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let h = self.health(name);
            if h["healthy"] == healthy && h["why"].as_str().unwrap_or("").contains(text) {
                return h;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: wanted healthy={healthy} with {text:?}; have {h}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

#[test]
fn decisions_follow_the_share_of_reachable_checkers() {
    let world = World::new();
    let (_a, port_a) = world.location("a");
    let (_b, port_b) = world.location("b");
    // c1, c2 see the target healthy; c3..c5 see 503. A hears all five; B only c3..c5.
    let mut c1 = world.checker(1, &[("a", port_a)]);
    let mut c2 = world.checker(2, &[("a", port_a)]);
    let mut rest: Vec<Proc> = (3..=5)
        .map(|i| world.checker(i, &[("a", port_a), ("b", port_b)]))
        .collect();
    // A: 2 of 5 healthy = 0.4 > 0.18 → healthy. B: 0 of 3 → unhealthy. They disagree.
    world.wait(
        "a",
        true,
        "2 of 5 reachable checkers report healthy",
        Duration::from_secs(40),
    );
    world.wait(
        "b",
        false,
        "0 of 3 reachable checkers report healthy",
        Duration::from_secs(40),
    );
    let observations = world.health("a")["observations"].as_array().unwrap().len();
    assert_eq!(observations, 5, "one observation per checker, each with its region");
    // Every checker gone: once their reports are stale (3 × 10 s + 5 s) the last
    // decisions are kept, flagged stale, at both locations. (Losing some checkers and
    // deciding from the rest is played over real links in partition.rs, and the rule's
    // every case on an injected clock in quorum.rs and observations.rs.)
    for c in [&mut c1, &mut c2].into_iter().chain(rest.iter_mut()) {
        c.kill9();
    }
    // (At A the reports go stale one by one, so its last decision is whatever the last
    // ones said; B heard only checkers that saw 503.)
    let h = world.wait("b", false, "no checker reachable", Duration::from_secs(60));
    assert!(h["why"].as_str().unwrap().contains("stale"), "{h}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !world.health("a")["why"]
        .as_str()
        .unwrap()
        .contains("no checker reachable")
    {
        assert!(Instant::now() < deadline, "{}", world.health("a"));
        std::thread::sleep(Duration::from_millis(300));
    }
    // status's count and the events come from the once-a-second re-evaluation.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let gone = world
            .ctl("a", &["events"])
            .to_string()
            .contains("checker c1 (r1) is unreachable");
        if gone && world.status("b")["checkers"]["reachable"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{}", world.status("b"));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A report for location `a`, sent now, of check `t` failing (`status 503`).
fn unhealthy_report(seq: u64, checker: &str) -> Report {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let observation = serde_json::json!({
        "check": "q.example./t", "healthy": false, "success": false, "reason": "status 503",
        "at": now, "checker": "c1", "region": "r1"
    });
    Report {
        checker: checker.to_owned(),
        region: "r1".to_owned(),
        location: "a".to_owned(),
        seq,
        sent_at: now,
        observations: vec![serde_json::from_value(observation).unwrap()],
    }
}

#[test]
fn forged_replayed_and_unknown_reports_are_dropped_and_counted() {
    let world = World::new();
    let (_a, port) = world.location("a");
    let report = unhealthy_report;
    let send = |signed: &Signed| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(&signed.frame().unwrap()).unwrap();
    };
    // A valid report is applied (the check turns unhealthy: 0 of 1).
    let valid = sign(&report(5, "c1"), &key(1)).unwrap();
    send(&valid);
    world.wait("a", false, "0 of 1 reachable checkers", Duration::from_secs(5));
    // The same report again: a replay.
    send(&valid);
    // Wrong key, tampered MAC, unknown checker, garbage.
    send(&sign(&report(6, "c1"), &key(2)).unwrap());
    let mut tampered = sign(&report(7, "c1"), &key(1)).unwrap();
    tampered.mac[3] ^= 0x40;
    send(&tampered);
    send(&sign(&report(8, "intruder"), &key(1)).unwrap());
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(&[0, 0, 0, 4, 1, 2, 3, 4]).unwrap();
    // Each connection is handled on its own: wait until all six are counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = world.status("a");
        let c = &status["checkers"];
        let counted = c["reports_accepted"].as_u64().unwrap()
            + c["reports_rejected"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum::<u64>();
        if counted >= 6 {
            break status;
        }
        assert!(Instant::now() < deadline, "not all counted: {status}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let rejected = &status["checkers"]["reports_rejected"];
    assert_eq!(rejected["replayed"], 1, "{status}");
    assert_eq!(rejected["bad_signature"], 2, "{status}");
    assert_eq!(rejected["unknown_checker"], 1, "{status}");
    assert_eq!(rejected["malformed"], 1, "{status}");
    assert_eq!(status["checkers"]["reports_accepted"], 1, "{status}");
}

/// A report names its location and its sequence outlives a restart: captured on its
/// way to one location, it is refused by another, and by the same one restarted.
#[test]
fn a_report_is_refused_by_another_location_and_after_a_restart() {
    let world = World::new();
    let (a, port_a) = world.location("a");
    let (_b, port_b) = world.location("b");
    let frame = sign(&unhealthy_report(5, "c1"), &key(1)).unwrap().frame().unwrap();
    let send = |port: u16| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(&frame).unwrap();
    };
    let rejected = |name: &str, reason: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = world.status(name);
            if status["checkers"]["reports_rejected"][reason].as_u64() == Some(1) {
                return status;
            }
            assert!(Instant::now() < deadline, "no {reason} at {name}: {status}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    send(port_a);
    world.wait("a", false, "0 of 1 reachable checkers", Duration::from_secs(5));
    send(port_b);
    let status = rejected("b", "wrong_location");
    assert_eq!(status["checkers"]["reports_accepted"], 0, "{status}");
    drop(a);
    let (_a, port_a) = world.location("a");
    send(port_a);
    let status = rejected("a", "replayed");
    assert_eq!(status["checkers"]["reports_accepted"], 0, "{status}");
}

#[test]
fn special_use_targets_are_rejected_when_denied() {
    let world = World::new();
    let d = world.dir.path();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .arg("--zones")
        .arg(d.join("zones"))
        .arg("--socket")
        .arg(d.join("x.sock"))
        .arg("--state-dir")
        .arg(d.join("x"))
        .arg("--edge-socket")
        .arg(d.join("x-edge.sock"))
        .args(["--no-embedded-checker", "--deny-special-use-targets"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("q.toml") && stderr.contains("health_check \"t\"") && stderr.contains("loopback"),
        "{stderr}"
    );
}

#[test]
fn a_checker_reloads_its_zones_on_sighup() {
    let world = World::new();
    let (_a, port) = world.location("a");
    let checker = world.checker(1, &[("a", port)]);
    world.wait(
        "a",
        true,
        "1 of 1 reachable checkers report healthy",
        Duration::from_secs(40),
    );
    // A new check "u", at the location (qdnsctl reload) and at the checker (SIGHUP).
    let zone = world.dir.path().join("zones/q.toml");
    let text = std::fs::read_to_string(&zone).unwrap();
    let target_port = text.split("port = ").nth(1).unwrap().lines().next().unwrap().to_owned();
    let added = format!(
        "{text}[[health_check]]\nid = \"u\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = {target_port}\ninterval = 10\nfailure_threshold = 1\n"
    );
    std::fs::write(&zone, &added).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("--socket")
        .arg(world.dir.path().join("a.sock"))
        .args(["reload"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pid = checker.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-s", "HUP", &pid])
        .status()
        .unwrap()
        .success());
    checker.wait_for("zones reloaded");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
            .arg("--socket")
            .arg(world.dir.path().join("a.sock"))
            .args(["--json", "health", "u"])
            .output()
            .unwrap();
        let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if h[0]["observations"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["checker"] == "c1"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no observation of the new check: {h}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // An invalid zone on SIGHUP is rejected; the checker keeps probing.
    std::fs::write(&zone, added.replace("interval = 10", "interval = 20")).unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-s", "HUP", &pid])
        .status()
        .unwrap()
        .success());
    checker.wait_for("reload rejected");
    let mut checker = checker;
    assert!(checker.child.try_wait().unwrap().is_none(), "the checker still runs");
}

/// The checker-report listener bounds what a peer that has not authenticated can cost:
/// a giant length is refused on the length alone, a stranger before its body, and a
/// connection beyond the per-source cap takes the place of that address's oldest idle
/// one — each counted.
#[test]
fn the_report_listener_refuses_giants_strangers_and_crowds_before_reading_bodies() {
    let world = World::new();
    let (_a, port) = world.location("a");
    let closed = |stream: &mut TcpStream| {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 1];
        matches!(stream.read(&mut buf), Ok(0))
            || matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    };
    // A 16 MiB frame: closed after its four length octets.
    let mut giant = TcpStream::connect(("127.0.0.1", port)).unwrap();
    giant.write_all(&(16u32 << 20).to_be_bytes()).unwrap();
    assert!(closed(&mut giant), "a 16 MiB length is refused");
    // A stranger claiming a 4 MiB body: closed after its id, the body never read.
    let mut stranger = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut head = ((4u32 << 20) - 64).to_be_bytes().to_vec();
    head.push(8);
    head.extend_from_slice(b"intruder");
    stranger.write_all(&head).unwrap();
    assert!(closed(&mut stranger), "an unknown checker is refused before its body");
    // Idle connections up to the per-source cap stay open; one more from the same
    // address takes the place of its oldest (never another address's).
    let mut idle: Vec<TcpStream> = (0..qdns_control::report_listener::MAX_PER_SOURCE)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut over = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(
        closed(&mut idle[0]),
        "the oldest idle connection of the address is evicted"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!qdns_testkit::closed(&mut over), "the newcomer is kept");
    assert!(
        idle[1..].iter_mut().all(|s| !qdns_testkit::closed(s)),
        "the others are kept"
    );
    let status = world.status("a");
    let rejected = &status["checkers"]["reports_rejected"];
    assert_eq!(rejected["too_large"], 1, "{status}");
    assert_eq!(rejected["unknown_checker"], 1, "{status}");
    assert_eq!(rejected["evicted"], 1, "{status}");
    drop(idle);
}

/// Frame `i` of the report flood: random octets, a well-formed header around random
/// MAC and body, a genuine signed report cut short, or one with a bit flipped.
fn hostile_report(noise: &mut Rng, i: u64) -> Vec<u8> {
    let genuine = || {
        let report = Report {
            checker: "c1".to_owned(),
            region: "r1".to_owned(),
            location: "a".to_owned(),
            seq: i + 1,
            sent_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            observations: Vec::new(),
        };
        sign(&report, &key(1)).unwrap().frame().unwrap()
    };
    match i % 4 {
        0 => {
            let n = 1 + noise.below(48);
            noise.bytes(n)
        }
        1 => {
            let id: Vec<u8> = if noise.below(2) == 0 {
                format!("c{}", 1 + noise.below(5)).into_bytes()
            } else {
                let n = 1 + noise.below(12);
                noise.bytes(n)
            };
            let body_len = noise.below(200);
            let mut frame = ((1 + id.len() + 32 + body_len) as u32).to_be_bytes().to_vec();
            frame.push(id.len() as u8);
            frame.extend_from_slice(&id);
            frame.extend(noise.bytes(32 + body_len));
            frame
        }
        2 => {
            let mut frame = genuine();
            let cut = 1 + noise.below(frame.len() - 1);
            frame.truncate(cut);
            frame
        }
        _ => {
            let mut frame = genuine();
            let at = 5 + 2 + noise.below(frame.len() - 7);
            frame[at] ^= 1 << noise.below(8);
            frame
        }
    }
}

/// Frame `i` of the edge-link flood: a random body that is not a hello (its first
/// octet, the message tag, is not 0), random octets, or a genuine hello cut short.
fn hostile_link_frame(noise: &mut Rng, i: u64) -> Vec<u8> {
    match i % 3 {
        0 => {
            let n = noise.below(64);
            let mut body = noise.bytes(n);
            // One octet, 1..=127: a tag that is not Hello's 0 in any varint spelling.
            body.insert(0, 1 + noise.below(127) as u8);
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend(body);
            frame
        }
        1 => {
            let n = 1 + noise.below(48);
            let mut frame = noise.bytes(n);
            // Not a 4-octet length of a hello: either cut before the length ends or
            // announcing more than follows.
            frame.truncate(3.min(frame.len()));
            frame
        }
        _ => {
            let hello = qdns_link::protocol::encode(&qdns_link::protocol::ToControl::Hello {
                edge: format!("edge-{i}"),
                serving: None,
            })
            .unwrap();
            let cut = 1 + noise.below(hello.len() - 1);
            hello[..cut].to_vec()
        }
    }
}

/// Sends `count` hostile frames to `port`, one connection each, from `threads`
/// threads: each frame is written, the write side closed, and the connection read to
/// its end. Returns the octets the listener sent back in all (it must send nothing).
fn flood(port: u16, count: u64, threads: u64, frame: fn(&mut Rng, u64) -> Vec<u8>) -> usize {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut noise = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1) ^ u64::from(port) << 32);
                let mut received = 0;
                for i in (t..count).step_by(threads as usize) {
                    let bytes = frame(&mut noise, i);
                    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                    // The listener may close as soon as it has seen enough to refuse.
                    let _ = stream.write_all(&bytes);
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    let mut back = Vec::new();
                    let _ = stream.read_to_end(&mut back);
                    received += back.len();
                }
                received
            })
        })
        .collect();
    workers.into_iter().map(|w| w.join().unwrap()).sum()
}

/// 50,000 random, malformed and truncated frames — 25,000 at the checker-report listener
/// and 25,000 at the edge link — cost nothing but a counter each: every one is
/// rejected and counted by reason, none is applied (no report accepted, no edge
/// registered, not an octet of zone data sent back), and control keeps working.
#[test]
fn fifty_thousand_hostile_frames_are_each_rejected_counted_and_never_applied() {
    const EACH: u64 = 25_000;
    let world = World::new();
    let (location, port, edge_port, metrics) = world.exposed_location("a");
    let started = Instant::now();
    let reports_back = flood(port, EACH, 4, hostile_report);
    let link_back = flood(edge_port, EACH, 4, hostile_link_frame);
    eprintln!("flood of {} frames took {:?}", 2 * EACH, started.elapsed());
    assert_eq!(reports_back, 0, "the report listener never answers");
    assert_eq!(link_back, 0, "no snapshot to a peer without a hello");

    let status = world.status("a");
    let checkers = &status["checkers"];
    assert_eq!(checkers["reports_accepted"], 0, "{status}");
    let rejected: u64 = checkers["reports_rejected"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(reason, _)| reason.as_str() != "connection_limit")
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert_eq!(rejected, EACH, "every report frame rejected once: {status}");
    for reason in ["malformed", "bad_signature", "unknown_checker"] {
        assert!(
            checkers["reports_rejected"][reason].as_u64().unwrap_or(0) > 0,
            "{reason}: {status}"
        );
    }
    assert_eq!(status["edges"], serde_json::json!([]), "{status}");
    let health = world.health("a");
    assert_eq!(health["observations"], serde_json::json!([]), "{health}");
    let body = common::scrape(&format!("127.0.0.1:{metrics}"));
    let refused: u64 = body
        .lines()
        .filter(|l| l.starts_with("qdns_edge_links_refused_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(refused, EACH, "every link frame refused once:\n{body}");
    // Still deciding, still answering its socket.
    assert!(world.status("a")["snapshot_version"].as_u64().is_some());
    drop(location);
}

/// Issue 14: 2,000 idle and 2,000 slowloris connections at once to each of control's
/// listeners — checker reports, the edge link, `/metrics` (TCP, from 500 addresses: each
/// under its per-source cap, so only eviction makes room) and the control socket (Unix).
/// Meanwhile a real checker's reports are applied, an edge that says hello gets its
/// snapshot, `qdnsctl` is answered and a scraper scrapes; memory stays bounded; and the
/// crowds are closed: evicted by newer connections, the rest at their timeouts.
#[test]
#[expect(clippy::too_many_lines, reason = "one scenario across four listeners, step by step")]
fn idle_and_slowloris_crowds_lock_out_no_checker_edge_operator_or_scraper() {
    use std::{net::SocketAddr, os::unix::net::UnixStream};

    use qdns_testkit::{attacker_sources, connect_from, raise_fd_limit, rss_kib, Crowd};
    raise_fd_limit();
    let world = World::new();
    let (location, port, edge_port, metrics) = world.exposed_location("a");
    let before = rss_kib(location.child.id());
    let sources = attacker_sources(500);
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let started = Instant::now();
    let mut reports = Crowd::open(at(port), 2000, 2000, &sources, &[0, 0]);
    let mut links = Crowd::open(at(edge_port), 2000, 2000, &sources, &[0, 0]);
    let mut scrapes = Crowd::open(at(metrics), 2000, 2000, &sources, b"GET /metrics HTTP/1.1\r\n");
    let socket = world.dir.path().join("a.sock");
    let unix_idle: Vec<UnixStream> = (0..2000).filter_map(|_| UnixStream::connect(&socket).ok()).collect();
    let mut unix_slow: Vec<UnixStream> = (0..2000).filter_map(|_| UnixStream::connect(&socket).ok()).collect();
    for s in &mut unix_slow {
        let _ = s.write_all(b"{\"cmd\":");
    }
    for crowd in [&reports, &links, &scrapes] {
        assert!(crowd.len() > 3900, "{} connected", crowd.len());
    }
    assert!(unix_idle.len() + unix_slow.len() > 3900);
    // The kernel completed every handshake; control takes them in at its pace, each
    // newcomer past the caps evicting the oldest unproven connection.
    let limit = Duration::from_secs(30);
    assert!(reports.settle(64, limit) <= 64, "report listener holds more than 64");
    assert!(links.settle(1024, limit) <= 1024, "edge link holds more than 1,024");
    assert!(scrapes.settle(64, limit) <= 64, "metrics listener holds more than 64");
    let mut unix_all: Vec<UnixStream> = unix_idle.into_iter().collect();
    let slow_at = unix_all.len();
    unix_all.append(&mut unix_slow);
    assert!(
        qdns_testkit::settle(&mut unix_all, 64, limit) <= 64,
        "control socket holds more than 64"
    );
    let mut unix_slow = unix_all.split_off(slow_at);
    let unix_idle = unix_all;
    eprintln!("16,000 hostile connections taken in after {:?}", started.elapsed());

    let edge_hello = || {
        let mut edge = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 3), at(edge_port)).expect("the edge connects");
        edge.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let hello = qdns_link::protocol::encode(&qdns_link::protocol::ToControl::Hello {
            edge: "legit".to_owned(),
            serving: None,
        })
        .unwrap();
        edge.write_all(&hello).unwrap();
        let mut prefix = [0u8; 4];
        edge.read_exact(&mut prefix).expect("the edge gets its snapshot");
        assert!(u32::from_be_bytes(prefix) > 100, "a snapshot frame");
    };
    let scrape = || {
        let text = common::scrape_from("127.0.0.4", &format!("127.0.0.1:{metrics}"));
        assert!(text.contains("qdns_snapshot_version"), "{text:.300}");
    };
    let mut checker = world.checker(1, &[("a", port)]);
    for round in 0..16 {
        reports.trickle(1);
        links.trickle(1);
        scrapes.trickle(b'X');
        for s in &mut unix_slow {
            let _ = s.write(b" ");
        }
        assert!(
            world.status("a")["snapshot_version"].as_u64().is_some(),
            "qdnsctl answered"
        );
        if round % 4 == 0 {
            edge_hello();
            scrape();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // The checker probes first at a random point of its 10 s interval.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = world.health("a");
        if health["observations"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["checker"] == "c1"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the real checker's reports were not applied: {health}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let during = rss_kib(location.child.id());
    eprintln!("control RSS {before} KiB before, {during} KiB with 16,000 hostile connections");
    assert!(during < before + 64 * 1024, "RSS grew from {before} to {during} KiB");
    // Past the hello and header timeouts (10 s) no link or scrape crowd is left; the
    // report listener and the control socket keep at most their 64 places.
    assert_eq!(
        links.settle(0, Duration::from_secs(15)),
        0,
        "edge-link connections still open"
    );
    assert_eq!(
        scrapes.settle(0, Duration::from_secs(15)),
        0,
        "metrics connections still open"
    );
    let (idle, slow) = reports.still_open();
    assert!(idle + slow <= 64, "{idle} + {slow} report connections open");
    let status = world.status("a");
    assert!(
        status["checkers"]["reports_rejected"]["evicted"].as_u64().unwrap_or(0) > 3000,
        "{status}"
    );
    edge_hello();
    scrape();
    assert!(checker.child.try_wait().unwrap().is_none());
    checker.term();
    drop((unix_idle, unix_slow));
}

/// A checker whose clock is 28 s behind (inside the 30 s skew a report may have), on a
/// check probed every 10 s whose observations are fresh for 35 s: its observation
/// counts for 35 s from the moment it arrives, in this location's clock — not for the
/// 7 s its own timestamp would leave, which made such a checker unreachable for 3 s of
/// every 10.
#[test]
fn a_checker_with_a_slow_clock_stays_reachable() {
    let world = World::new();
    let (_a, port) = world.location("a");
    let behind = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 28;
    let report = Report {
        checker: "c1".to_owned(),
        region: "r1".to_owned(),
        location: "a".to_owned(),
        seq: 1,
        sent_at: behind,
        observations: vec![qdns_control::checker::Observation {
            check: "q.example./t".to_owned(),
            healthy: false,
            success: false,
            reason: "connection refused".to_owned(),
            at: behind,
            checker: "c1".to_owned(),
            region: "r1".to_owned(),
            timing: None,
            load_milli: None,
        }],
    };
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(&sign(&report, &key(1)).unwrap().frame().unwrap())
        .unwrap();
    let h = world.wait("a", false, "0 of 1 reachable checkers", Duration::from_secs(10));
    let at = h["observations"][0]["at"].as_u64().unwrap();
    assert!(
        at > behind + 20,
        "the observation's time is in the location's clock: {h}"
    );
}
