//! A fleet (issue 32 §2): one control serving a 1,000,000-record zone set to 500 light
//! edges (`qdns_testkit::link_client`, real mutual TLS from a location CA, each from its
//! own loopback address, acknowledging versions as edges do) and 2 real edges with the
//! XDP program. A one-record reload must reach every edge within 2 s as a delta of a
//! few hundred octets each, and the real edges' programs answer the new value; an
//! edge that stops reading delays nobody; health changes follow.
//!
//! Control and the light edges run in a network namespace of their own (the hub); each
//! real edge in its own, joined to the hub by a veth pair with the XDP program on the
//! edge's end (native mode), asked over that pair. Needs root, as CI has.
//!
//! Runs the release binaries (built here if needed): the figures are the daemons', not
//! a debug build's. `QDNS_FLEET_SETS` and `QDNS_FLEET_EDGES` change the scale; the
//! figures printed go to docs/BENCHMARKS.md ("A fleet of edges").
use std::{
    fs,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use hickory_proto::rr::{RData, RecordType};
use qdns_edge::xdp::peer::PeerPassProgram;
use qdns_link::pki::{self, Role};
use qdns_testkit::{
    daemon::Daemon,
    fixtures::{free_port, sample, scrape_from},
    link_client::{LinkClient, TlsEdge},
    netns::{self, Netns},
};

fn scale(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The release binaries' directory, built if needed (in the environment `cargo test`
/// gives this test, unchanged: clearing it once dropped `RUSTUP_*` settings and let
/// rustup try to update the toolchain under the build).
fn release_bins() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "qdns-control",
            "-p",
            "qdns-edge",
            "--bins",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo build --release");
    assert!(status.success());
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("release")
}

/// `big.example` with `sets` A sets in a master file, and the example zones.
fn write_zones(dir: &Path, sets: usize) {
    qdns_testkit::fixtures::write_big_zone(dir, sets);
    qdns_testkit::fixtures::copy_examples(dir);
}

/// Room for the light edges' sockets in this process.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit);
        }
    }
}

/// A process's resident memory (KiB).
fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `qdnsctl --json ARGS` against control's socket.
fn ctl(bins: &Path, socket: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(bins.join("qdnsctl"))
        .arg("--socket")
        .arg(socket)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qdnsctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until every edge but `stalled` acknowledged snapshot `version` at health delta
/// at least `seq` (as control's status says); how long that took.
fn wait_fleet(bins: &Path, socket: &Path, expected: usize, version: u64, seq: u64, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let status = ctl(bins, socket, &["status"]);
        let edges = status["edges"].as_array().unwrap();
        let current = edges
            .iter()
            .filter(|e| e["name"] != "stalled")
            .filter(|e| e["snapshot"].as_u64() == Some(version) && e["seq"].as_u64() >= Some(seq))
            .count();
        if current >= expected {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{current} of {expected} edges at snapshot {version} seq {seq} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `count` health changes of check `api-1` (override unhealthy, cleared, …) pipelined
/// on one control-socket connection; how long until the last was answered.
fn health_burst(socket: &Path, count: usize) -> Duration {
    use std::io::{BufRead as _, BufReader, Write as _};
    let started = Instant::now();
    let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..count {
            let line = if i % 2 == 0 {
                "{\"cmd\":\"override_clear\",\"check\":\"api-1\"}\n"
            } else {
                "{\"cmd\":\"override_set\",\"check\":\"api-1\",\"healthy\":false,\"expires\":\"30m\"}\n"
            };
            writer.write_all(line.as_bytes()).unwrap();
        }
    });
    let mut answers = BufReader::new(stream);
    let mut line = String::new();
    for _ in 0..count {
        line.clear();
        answers.read_line(&mut line).unwrap();
        assert!(line.starts_with("{\"ok\":true"), "{line}");
    }
    sender.join().unwrap();
    started.elapsed()
}

/// The light edges' shared view: per edge, the octets it read (or the folded frames).
type Received = Arc<Mutex<Vec<u64>>>;

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, step by step")]
fn a_fleet_follows_a_one_record_change_as_deltas() {
    let sets = scale("QDNS_FLEET_SETS", 1_000_000);
    let fleet = scale("QDNS_FLEET_EDGES", 500);
    let bins = release_bins();
    raise_open_files();
    let dir = tempfile::tempdir().unwrap();
    let (zones, ca) = (dir.path().join("zones"), dir.path().join("pki"));
    fs::create_dir_all(&zones).unwrap();
    write_zones(&zones, sets);
    pki::init(&ca, "fleet", 2).unwrap();
    let sans = ["127.0.0.1", "10.81.0.2", "10.82.0.2"].map(str::to_owned);
    pki::issue(&ca, "control", Role::Control, &sans, 2).unwrap();
    let names: Vec<String> = (0..fleet).map(|i| format!("light-{i}")).collect();
    for name in names.iter().map(String::as_str).chain(["real-0", "real-1", "stalled"]) {
        pki::issue(&ca, name, Role::Edge, &[], 2).unwrap();
    }

    // The hub (control, light edges) and one namespace per real edge, joined by veth
    // pairs on 10.81.0.0/24 and 10.82.0.0/24 (the edge at .1, the hub at .2).
    qdns_testkit::require_root("network namespaces, XDP");
    let hub = Netns::new("qdns-fleet-hub");
    let edge_ns: Vec<Netns> = (0..2).map(|i| Netns::new(&format!("qdns-fleet-e{i}"))).collect();
    let id = std::process::id() % 100_000;
    let links: Vec<(String, String)> = edge_ns
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let (edge_if, hub_if) = (format!("qf{i}e{id}"), format!("qf{i}h{id}"));
            netns::veth((ns.name(), &edge_if), (hub.name(), &hub_if), &format!("8{}", i + 1));
            (edge_if, format!("10.8{}.0", i + 1))
        })
        .collect();
    // The edges' programs answer natively with XDP_TX: the hub's ends need a native
    // program of their own for those frames to be delivered (edge/tests/xdp_veth.rs).
    let _hub_programs: Vec<PeerPassProgram> = (0..2)
        .map(|i| PeerPassProgram::attach(hub.name(), &format!("qf{i}h{id}")).expect("the hub end's program"))
        .collect();

    let port = free_port();
    let socket = dir.path().join("control.sock");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", hub.name()]).arg(bins.join("qdns-control"));
    cmd.arg("--zones").arg(&zones).arg("--socket").arg(&socket);
    cmd.arg("--state-dir").arg(dir.path().join("control-state"));
    cmd.args(["--edge-socket", &format!("tls://0.0.0.0:{port}")]);
    cmd.arg("--edge-tls-cert").arg(ca.join("control.pem"));
    cmd.arg("--edge-tls-key").arg(ca.join("control.key"));
    cmd.arg("--edge-tls-ca").arg(ca.join("ca.pem"));
    cmd.arg("--no-embedded-checker");
    let started = Instant::now();
    let control = Daemon::spawn("control", cmd);
    control.wait_for_within("control socket ready", Duration::from_secs(120));
    let control_start = started.elapsed();

    // Two real edges with the XDP program: the whole snapshot each, compiled, served,
    // and installed in the program's tables.
    let mut real = Vec::new();
    for (i, (ns, (edge_if, net))) in edge_ns.iter().zip(&links).enumerate() {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name()]).arg(bins.join("qdns-edge"));
        cmd.args([
            "--listen",
            &format!("{net}.1:53"),
            "--workers",
            "1",
            "--edge-id",
            &format!("real-{i}"),
        ]);
        cmd.args(["--control", &format!("tls://{net}.2:{port}")]);
        cmd.arg("--control-tls-cert").arg(ca.join(format!("real-{i}.pem")));
        cmd.arg("--control-tls-key").arg(ca.join(format!("real-{i}.key")));
        cmd.arg("--control-tls-ca").arg(ca.join("ca.pem"));
        cmd.arg("--state-dir").arg(dir.path().join(format!("real-{i}")));
        cmd.args(["--metrics", &format!("{net}.1:9100")]);
        cmd.args(["--xdp", edge_if, "--xdp-mode", "native"]);
        let edge = Daemon::spawn("edge", cmd);
        edge.wait_for_within("snapshot applied", Duration::from_secs(120));
        edge.wait_for_within("XDP tables installed", Duration::from_secs(120));
        real.push((edge, net.clone()));
    }
    let served: qdns_link::protocol::PersistedZones = qdns_link::protocol::load(&dir.path().join("real-0/zones.bin"))
        .unwrap()
        .unwrap();
    let extension = qdns_link::protocol::HelloExtension {
        zones: served.zones.clone(),
        ..LinkClient::takes_deltas(None)
    };

    let before_fleet = rss_kib(control.pid());
    // The light edges, each from its own loopback address, serving what the real ones
    // serve (as after a control restart): each gets a delta keeping every zone.
    let control_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    let source = |i: usize| IpAddr::V4(Ipv4Addr::new(127, 1, (i / 200) as u8, (i % 200 + 1) as u8));
    let received: Received = Arc::new(Mutex::new(vec![0; fleet]));
    let folded: Received = Arc::new(Mutex::new(vec![0; fleet]));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let connected = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let (ca, name, extension) = (ca.clone(), name.clone(), extension.clone());
        let (received, folded, stop) = (Arc::clone(&received), Arc::clone(&folded), Arc::clone(&stop));
        let hub = hub.path();
        threads.push(std::thread::spawn(move || {
            netns::enter(&hub);
            let edge = TlsEdge {
                pki: &ca,
                name: &name,
                control: control_addr,
                source: source(i),
            };
            let mut client = LinkClient::connect_tls(&edge, Some(served.version), extension);
            while !stop.load(Ordering::Relaxed) {
                if client.try_read_frame().is_none() {
                    return;
                }
                received.lock().unwrap()[i] = client.received;
                folded.lock().unwrap()[i] = client.folded;
            }
        }));
    }
    // One more that says hello and never reads again.
    let stalled = {
        let (ca, extension) = (ca.clone(), extension.clone());
        hub.run(move || {
            LinkClient::connect_tls(
                &TlsEdge {
                    pki: &ca,
                    name: "stalled",
                    control: control_addr,
                    source: IpAddr::V4(Ipv4Addr::new(127, 2, 0, 1)),
                },
                Some(served.version),
                extension,
            )
        })
    };
    let version = served.version;
    let all = fleet + 2;
    let status = ctl(&bins, &socket, &["status"]);
    let seq = status["health_seq"].as_u64().unwrap();
    let joined = wait_fleet(&bins, &socket, all, version, seq, Duration::from_secs(120)) + connected.elapsed();
    let resumed_max = received.lock().unwrap().iter().copied().max().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(control.pid());

    // One record edited and reloaded.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (sampling, pid) = (Arc::clone(&sampling), control.pid());
        std::thread::spawn(move || {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let path = zones.join("big.example.zone");
    let text = fs::read_to_string(&path).unwrap();
    let k = sets * 3 / 5;
    let old = format!("h{k} IN A 10.{}.{}.{}\n", k >> 16, (k >> 8) & 255, k & 255);
    assert!(text.contains(&old));
    fs::write(&path, text.replacen(&old, &format!("h{k} IN A 192.0.2.99\n"), 1)).unwrap();
    drop(text);
    let before: Vec<u64> = received.lock().unwrap().clone();
    let real_before: Vec<u64> = real.iter().map(|(_, m)| link_octets(&hub, m)).collect();
    let edited = format!("h{k}.big.example.");
    let was = format!("10.{}.{}.{}", k >> 16, (k >> 8) & 255, k & 255);
    for (_, net) in &real {
        xdp_answers(&hub, net, &edited, &was, Duration::from_secs(5));
    }
    let reload_started = Instant::now();
    let reloaded = ctl(&bins, &socket, &["reload"]);
    let reload_took = reload_started.elapsed();
    let version = reloaded["snapshot_version"].as_u64().unwrap();
    let seq = ctl(&bins, &socket, &["status"])["health_seq"].as_u64().unwrap();
    let spread = wait_fleet(&bins, &socket, all, version, seq, Duration::from_secs(60));
    // The real edges serve the new version from user space while their XDP tables are
    // patched (without the program's lock but for the flip): their metrics answer
    // meanwhile and say which version the tables hold.
    let building: Vec<u64> = real.iter().map(|(_, net)| xdp_tables_version(&hub, net)).collect();
    sampling.store(false, Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let settled = rss_kib(control.pid());
    let shipped: Vec<u64> = received
        .lock()
        .unwrap()
        .iter()
        .zip(&before)
        .map(|(now, then)| now - then)
        .collect();
    let light_max = shipped.iter().copied().max().unwrap();
    let real_shipped: Vec<u64> = real
        .iter()
        .zip(&real_before)
        .map(|((_, m), then)| link_octets(&hub, m) - then)
        .collect();
    // The real edges' XDP programs answer the new value (their tables are installed
    // after the engine is swapped and the version acknowledged), and it is the program
    // that answers: its counter, as reported to control, moves by what was asked.
    let counted: Vec<u64> = (0..2)
        .map(|i| xdp_plain_answers(&bins, &socket, &format!("real-{i}")))
        .collect();
    let mut xdp_new = Vec::new();
    for (_, net) in &real {
        xdp_answers(&hub, net, &edited, "192.0.2.99", Duration::from_secs(60));
        xdp_new.push(reload_started.elapsed().saturating_sub(reload_took));
    }
    let built: Vec<u64> = real.iter().map(|(_, net)| xdp_tables_version(&hub, net)).collect();
    assert_eq!(built, [version, version], "the XDP tables hold the new version");
    assert!(
        building.iter().all(|&v| v == served.version || v == version),
        "scraped while the tables were patched: {building:?} (old {}, new {version})",
        served.version
    );

    for (i, ((_, net), counted)) in real.iter().zip(counted).enumerate() {
        let name = format!("real-{i}");
        for _ in 0..20 {
            xdp_answers(&hub, net, &edited, "192.0.2.99", Duration::from_secs(1));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while xdp_plain_answers(&bins, &socket, &name) < counted + 20 {
            assert!(
                Instant::now() < deadline,
                "{name}'s XDP program did not answer the new value"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // A health change: every edge has it within 1 s.
    let health_started = Instant::now();
    ctl(
        &bins,
        &socket,
        &["override", "set", "api-1", "unhealthy", "--expires", "30m"],
    );
    let seq = ctl(&bins, &socket, &["status"])["health_seq"].as_u64().unwrap();
    let health = wait_fleet(&bins, &socket, all, version, seq, Duration::from_secs(10)) + health_started.elapsed();

    // A burst of health changes: 10,000 override changes of one check, pipelined on one
    // control-socket connection. Control handles what a client has already sent as one
    // group (one save, one push), so the edges see a few health deltas, each answer
    // still given only once its change is persisted. Edges that fall behind get queued
    // deltas folded into one frame.
    let burst = scale("QDNS_FLEET_BURST", 10_000);
    let burst_started = Instant::now();
    let burst_took = health_burst(&socket, burst);
    let seq = ctl(&bins, &socket, &["status"])["health_seq"].as_u64().unwrap();
    let burst_lag = wait_fleet(&bins, &socket, all, version, seq, Duration::from_secs(30));
    let burst_total = burst_started.elapsed();
    let folded_edges = folded.lock().unwrap().iter().filter(|&&n| n > 0).count();

    println!("fleet: {fleet} light edges + 2 real edges, {sets} record sets");
    println!("control start-up {control_start:.2?}; fleet joined (resume deltas) in {joined:.2?}, at most {resumed_max} octets each");
    println!(
        "one-record reload: qdnsctl reload returned after {reload_took:.2?}; every edge at the new version {spread:.2?} later"
    );
    println!("octets per edge for it: light at most {light_max}, real {real_shipped:?}");
    println!("the real edges' XDP programs answered the new value at most {xdp_new:.2?} after the reload returned");
    println!(
        "control RSS: {} MiB with the real edges only; with the fleet idle {} MiB, peak during the reload {} MiB (+{}), settled {} MiB",
        before_fleet / 1024,
        idle / 1024,
        peak / 1024,
        peak.saturating_sub(idle) / 1024,
        settled / 1024
    );
    println!("one health change at every edge within {health:.2?} (stalled edge linked throughout)");
    println!(
        "a burst of {burst} health changes: made in {burst_took:.2?}; every edge at the last one {burst_lag:.2?} after it ({burst_total:.2?} in all); {folded_edges} light edges got folded frames"
    );

    assert!(
        spread <= Duration::from_secs(2),
        "every edge at the new version after {spread:?}"
    );
    assert!(light_max < 64 * 1024, "{light_max} octets to a light edge");
    assert!(
        real_shipped.iter().all(|&n| n < 64 * 1024),
        "{real_shipped:?} octets to the real edges"
    );
    assert!(health <= Duration::from_secs(1), "a health change took {health:?}");
    assert!(
        burst_total <= Duration::from_secs(1),
        "the burst took {burst_total:?} to reach every edge ({burst_took:?} to make)"
    );
    for (edge, _) in &real {
        let line = edge.wait_for("recompiled=true");
        assert!(
            line.contains("delta"),
            "the real edges took the reload as a delta: {line}"
        );
        // … and patched it into their XDP tables, not built them whole (xdp::patch).
        edge.seen("XDP tables patched");
    }
    stop.store(true, Ordering::Relaxed);
    drop(stalled);
    drop(control);
    for thread in threads {
        let _ = thread.join();
    }
}

/// A real edge's `qdns_edge_link_received_bytes_total`.
fn link_octets(hub: &Netns, net: &str) -> u64 {
    real_metric(hub, net, "qdns_edge_link_received_bytes_total")
}

/// `qdns_edge_xdp_table_snapshot_version` of the real edge on `net`.
fn xdp_tables_version(hub: &Netns, net: &str) -> u64 {
    real_metric(hub, net, "qdns_edge_xdp_table_snapshot_version")
}

/// A sample of the real edge on `net` (its /24 without the last octet), scraped from
/// the hub over the edge's veth pair.
fn real_metric(hub: &Netns, net: &str, series: &str) -> u64 {
    let (source, metrics): (Ipv4Addr, SocketAddr) = (
        format!("{net}.2").parse().unwrap(),
        format!("{net}.1:9100").parse().unwrap(),
    );
    let body = hub.run(move || scrape_from(source, metrics));
    sample(&body, series).unwrap_or_else(|| panic!("{series} at {metrics}"))
}

/// Asks `name` A of the real edge on `net` from the hub (through its veth pair, where
/// the XDP program sits) until it answers `want`; how long that took.
fn xdp_answers(hub: &Netns, net: &str, name: &str, want: &str, limit: Duration) -> Duration {
    let server: SocketAddr = format!("{net}.1:53").parse().unwrap();
    let (name, want) = (name.to_owned(), want.to_owned());
    hub.run(move || {
        let started = Instant::now();
        loop {
            let answer = qdns_testkit::dns::ask_udp(server, &name, RecordType::A, Duration::from_secs(2), 3)
                .expect("an answer over the veth pair");
            let got: Vec<String> = answer
                .answers
                .iter()
                .map(|r| match &r.data {
                    RData::A(a) => a.0.to_string(),
                    other => format!("{other:?}"),
                })
                .collect();
            if got == [want.as_str()] {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "{name} at {server}: {got:?}, not {want} after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// The `answered_plain` counter of the XDP program of edge `name`, as it last reported
/// to control (every 2 s).
fn xdp_plain_answers(bins: &Path, socket: &Path, name: &str) -> u64 {
    qdns_testkit::fixtures::edge_xdp_counter(&ctl(bins, socket, &["status"]), name, "answered_plain")
}
