//! Start-up, reload and shutdown of the real binary (SPEC §1, §2).
mod common;

use std::{fs, process::Command, time::Duration};

use common::{ask, copy_examples, example_zones, Ask, Edge, Via};
use hickory_proto::{op::ResponseCode, rr::RecordType};

/// Runs the binary expecting a start-up failure; returns its stderr.
fn start_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-edge"))
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "start-up must fail for {args:?}");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn invalid_zone_stops_start_up_with_one_line_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    copy_examples(dir.path());
    let path = dir.path().join("example.net.toml");
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("203.0.113.80", "203.0.113.800");
    let line = text.lines().position(|l| l.contains("203.0.113.800")).unwrap() + 1;
    fs::write(&path, text).unwrap();
    let stderr = start_fails(&["--listen", "127.0.0.1:0", "--zones", dir.path().to_str().unwrap()]);
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("qdns-edge: "), "{stderr}");
    assert!(
        last.contains(&format!("example.net.toml:{line}: rrset[0].values[0]")),
        "{last}"
    );
    assert!(last.contains("invalid A value"), "{last}");
}

#[test]
fn port_in_use_and_missing_zones_fail_clearly() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    // A plain (non-SO_REUSEPORT) holder makes the bind fail.
    let listen = format!("127.0.0.1:{port}");
    let stderr = start_fails(&["--listen", &listen, "--zones", example_zones().to_str().unwrap()]);
    assert!(stderr.contains(&format!("cannot listen on {listen} (udp)")), "{stderr}");
    let stderr = start_fails(&["--listen", "127.0.0.1:0", "--zones", "/nonexistent/zones"]);
    assert!(stderr.contains("/nonexistent/zones: cannot read"), "{stderr}");
    let stderr = start_fails(&["--zones", "/tmp"]);
    assert!(stderr.contains("--listen"), "{stderr}");
}

#[test]
fn sighup_reloads_and_a_bad_reload_keeps_the_running_zones() {
    let dir = tempfile::tempdir().unwrap();
    copy_examples(dir.path());
    let edge = Edge::start_with(dir.path(), &[]);
    let net = dir.path().join("example.net.toml");
    let original = fs::read_to_string(&net).unwrap();
    fs::write(&net, original.replace("203.0.113.80", "203.0.113.81")).unwrap();
    edge.signal("HUP");
    edge.wait_for_log("zones reloaded", Duration::from_secs(10));
    let msg = ask(edge.v4, Via::Udp, "www.example.net.", RecordType::A, Ask::default());
    assert_eq!(format!("{:?}", msg.answers[0].data), "A(A(203.0.113.81))");

    fs::write(&net, original.replace("203.0.113.80", "not-an-address")).unwrap();
    edge.signal("HUP");
    let line = edge.wait_for_log("reload rejected", Duration::from_secs(10));
    assert!(line.contains("example.net.toml"), "{line}");
    let msg = ask(edge.v4, Via::Tcp, "www.example.net.", RecordType::A, Ask::default());
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        format!("{:?}", msg.answers[0].data),
        "A(A(203.0.113.81))",
        "old data still served"
    );
}

/// A capability set of `/proc/PID/task/TID/status` (`CapEff` …), as bits.
fn capability_set(status: &str, set: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{set}:")))
        .unwrap_or_else(|| panic!("no {set} in {status}"));
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

/// Issue 28 §1: an edge without `--xdp` never keeps `CAP_BPF`, `CAP_NET_ADMIN` or
/// `CAP_PERFMON` — in no set of any of its threads — and still serves; it keeps
/// `CAP_NET_BIND_SERVICE` (held as root here) for a replacement that binds a new port.
#[test]
fn an_edge_without_xdp_holds_no_xdp_capability_in_any_thread() {
    const NET_BIND_SERVICE: u64 = 1 << 10;
    const XDP: u64 = 1 << 12 | 1 << 38 | 1 << 39; // NET_ADMIN, PERFMON, BPF
    common::netns::require_root("to start with the capabilities the unit grants");
    let edge = Edge::start();
    ask(edge.v4, Via::Udp, "www.example.com.", RecordType::A, Ask::default());
    let tasks: Vec<_> = fs::read_dir(format!("/proc/{}/task", edge.pid()))
        .unwrap()
        .map(|t| t.unwrap().path())
        .collect();
    assert!(tasks.len() > 2, "the edge's threads: {tasks:?}");
    for task in &tasks {
        let status = fs::read_to_string(task.join("status")).unwrap();
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(capability_set(&status, set) & XDP, 0, "{set} of {}", task.display());
        }
        assert_ne!(
            capability_set(&status, "CapPrm") & NET_BIND_SERVICE,
            0,
            "{}",
            task.display()
        );
    }
    assert_eq!(edge.stop().code(), Some(0));
}

#[test]
fn sigterm_stops_cleanly() {
    let edge = Edge::start();
    ask(edge.v6, Via::Udp, "www.example.com.", RecordType::A, Ask::default());
    let status = edge.stop();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn config_file_sets_flags_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.toml");
    fs::write(
        &config,
        format!(
            "zones = {:?}\nworkers = 1\nmax_udp_payload = 600\n",
            example_zones().to_str().unwrap()
        ),
    )
    .unwrap();
    let edge = Edge::start_with(
        &example_zones(),
        &["--config", config.to_str().unwrap(), "--max-udp-payload", "700"],
    );
    let msg = ask(edge.v4, Via::Udp, "www.example.com.", RecordType::A, Ask::default());
    assert_eq!(msg.edns.unwrap().max_payload(), 700);
    fs::write(&config, "listen = [\"127.0.0.1:0\"]\nbogus = 1\n").unwrap();
    let stderr = start_fails(&["--config", config.to_str().unwrap()]);
    assert!(stderr.contains("edge.toml") && stderr.contains("bogus"), "{stderr}");
}

#[test]
fn metrics_count_responses_by_transport_rcode_and_type() {
    let port = qdns_testkit::fixtures::free_port();
    let edge = Edge::start_with(&example_zones(), &["--metrics", &format!("127.0.0.1:{port}")]);
    ask(edge.v4, Via::Udp, "www.example.com.", RecordType::A, Ask::default());
    ask(edge.v4, Via::Udp, "www.example.com.", RecordType::AAAA, Ask::default());
    ask(edge.v4, Via::Udp, "nope.example.com.", RecordType::A, Ask::default());
    ask(edge.v6, Via::Tcp, "www.example.org.", RecordType::MX, Ask::default());
    // Policy sets: the failover set's primary (p) three times, over both transports;
    // the weighted set (members a, b, c) ten times.
    for via in [Via::Udp, Via::Tcp, Via::Udp] {
        ask(edge.v4, via, "api.shop.example.", RecordType::A, Ask::default());
    }
    for _ in 0..10 {
        ask(edge.v4, Via::Udp, "www.shop.example.", RecordType::A, Ask::default());
    }
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.send_to(&[1, 2, 3], edge.v4).unwrap(); // too short to answer: dropped
    std::thread::sleep(Duration::from_millis(300));
    let get = |path: &str| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(
            &mut stream,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
        text
    };
    let text = get("/metrics");
    let answers = |set: &str, member: &str| -> u64 {
        let series = format!("qdns_edge_answers_total{{rrset=\"{set}\",member=\"{member}\",path=\"user\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in\n{text}"))
    };
    assert_eq!(answers("api.shop.example. A", "p"), 3);
    assert_eq!(answers("api.shop.example. A", "s"), 0);
    let weighted: u64 = ["a", "b", "c"].iter().map(|m| answers("www.shop.example. A", m)).sum();
    assert_eq!(weighted, 10, "one member per weighted answer");
    let ready = get("/ready");
    assert!(
        ready.starts_with("HTTP/1.1 200") && ready.contains("ready: serving snapshot 1 (standalone)"),
        "{ready}"
    );
    for line in [
        "qdns_edge_responses_total{path=\"user\",transport=\"udp\",rcode=\"NOERROR\"} 14",
        "qdns_edge_responses_total{path=\"user\",transport=\"udp\",rcode=\"NXDOMAIN\"} 1",
        "qdns_edge_responses_total{path=\"user\",transport=\"tcp\",rcode=\"REFUSED\"} 1",
        "qdns_edge_responses_by_type_total{path=\"user\",qtype=\"A\"} 15",
        "qdns_edge_responses_by_type_total{path=\"user\",qtype=\"AAAA\"} 1",
        "qdns_edge_responses_by_type_total{path=\"user\",qtype=\"MX\"} 1",
        "qdns_edge_dropped_total{transport=\"udp\"} 1",
        "qdns_edge_snapshot_version 1",
        "qdns_edge_snapshot_age_seconds",
        "qdns_edge_ready 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}
