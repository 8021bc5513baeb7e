//! The fast path end to end on a veth pair (needs root, as CI has): two network
//! namespaces this test creates and removes, the edge with `--xdp` on the server end, real clients (dig, kdig, a UDP socket) on the client end.
//!
//! Modes: `auto` (which must pick generic on veth) and `native`. In native mode a frame
//! the program sends with `XDP_TX` is queued on the peer's XDP ring, and the kernel wakes
//! the peer's NAPI to deliver it only when the peer end has a native XDP program of its
//! own (6.18 `veth_xdp_flush`; GRO on the peer is not enough — the frames then sit in the
//! ring until other traffic wakes it). So the native test attaches a pass-everything
//! program (qdns's own, with no service port) to the client end. Both ends are
//! single-queue with GRO on.
mod common;

use std::{
    net::{SocketAddr, UdpSocket},
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{
    copy_examples,
    netns::{require_root, run, Pair},
    Edge,
};
use qdns_edge::xdp::peer::PeerPassProgram;

const PORT: u16 = 5300;
const SERVER: &str = "10.77.0.1";
const SERVER6: &str = "fd00:77::1";

fn start_edge(pair: &Pair, zones: &std::path::Path, mode: &str) -> Edge {
    start_edge_under(&["ip", "netns", "exec", &pair.server], zones, mode, pair)
}

/// [`start_edge`] under the edge's systemd unit's system call filter, as systemd would
/// apply it (`qdns_testkit::units`).
fn start_filtered_edge(pair: &Pair, zones: &std::path::Path, mode: &str) -> Edge {
    let filtered = qdns_testkit::units::filtered(&qdns_testkit::units::shipped("qdns-edge"));
    let mut prefix = vec!["ip", "netns", "exec", &pair.server];
    prefix.extend(filtered.iter().map(String::as_str));
    start_edge_under(&prefix, zones, mode, pair)
}

fn start_edge_under(prefix: &[&str], zones: &std::path::Path, mode: &str, pair: &Pair) -> Edge {
    let v4 = format!("{SERVER}:{PORT}");
    let v6 = format!("[{SERVER6}]:{PORT}");
    Edge::start_in(
        prefix,
        zones,
        &[
            "--listen",
            &v4,
            "--listen",
            &v6,
            "--xdp",
            &pair.server_if,
            "--xdp-mode",
            mode,
        ],
    )
}

/// The counter `label` from the edge's detach log line.
fn counter(log: &[String], label: &str) -> u64 {
    let line = log.iter().find(|l| l.contains("detaching XDP")).expect("detach logged");
    qdns_testkit::fixtures::logged_count(line, label)
}

/// Also the XDP edge under its unit's system call filter (the package test runs the
/// others): the program loads and attaches, both paths answer, and no call is refused.
#[test]
fn veth_clients_get_answers_from_xdp_and_from_user_space() {
    require_root("network namespaces, XDP");
    let pair = Pair::new('a');
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let edge = start_filtered_edge(&pair, zones.path(), "auto");
    let attached = run(&["ip", "-n", &pair.server, "link", "show", &pair.server_if]);
    assert!(
        attached.contains("xdpgeneric"),
        "auto picks generic XDP on veth: {attached}"
    );
    clients_get_answers(&pair, edge);
}

#[test]
fn native_xdp_on_veth_answers_when_the_peer_has_an_xdp_program() {
    require_root("network namespaces, XDP");
    let pair = Pair::new('n');
    let peer = PeerPassProgram::attach(&pair.client, &pair.client_if).expect("peer program");
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let edge = start_edge(&pair, zones.path(), "native");
    let attached = run(&["ip", "-n", &pair.server, "link", "show", &pair.server_if]);
    assert!(
        attached.contains("xdp ") && !attached.contains("xdpgeneric"),
        "native XDP attached: {attached}"
    );
    let log = clients_get_answers(&pair, edge);
    // The IPv6 queries arrive in the sender's buffer without tailroom here: their
    // answers grew at the front.
    assert!(counter(&log, "moved_to_front") >= 1, "{log:?}");
    drop(peer);
    let client = run(&["ip", "-n", &pair.client, "link", "show", &pair.client_if]);
    assert!(!client.contains("xdp"), "peer program detached: {client}");
}

/// dig, kdig and TCP against the edge: answers from the program and from user space,
/// then the counters the edge logs when it detaches on SIGTERM; returns that log.
fn clients_get_answers(pair: &Pair, edge: Edge) -> Vec<String> {
    let port = PORT.to_string();
    let dig = |server: &str, args: &[&str]| {
        let at = format!("@{server}");
        let mut full = vec!["dig", at.as_str(), "-p", &port, "+tries=1", "+time=3"];
        full.extend_from_slice(args);
        pair.in_client(&full)
    };
    // Answered by the program.
    let out = dig(SERVER, &["WwW.ExAmPlE.CoM", "A"]);
    assert!(out.contains("status: NOERROR") && out.contains("192.0.2.10"), "{out}");
    // Over IPv6 the query often sits in a buffer without tailroom (native mode): the
    // program then grows the frame at the front.
    for _ in 0..4 {
        let out = dig(SERVER6, &["ns1.example.com", "AAAA"]);
        assert!(out.contains("2001:db8::53"), "{out}");
    }
    let out = dig(SERVER, &["no-such-name.example.com", "A"]);
    assert!(out.contains("status: NXDOMAIN") && out.contains("SOA"), "{out}");
    let out = dig(SERVER, &["api.shop.example", "A"]);
    assert!(out.contains("status: NOERROR") && out.contains("IN\tA"), "{out}");
    let out = pair.in_client(&[
        "kdig",
        &format!("@{SERVER}"),
        "-p",
        &port,
        "+retry=0",
        "www.example.com",
        "A",
    ]);
    assert!(out.contains("192.0.2.10"), "{out}");
    // Answered by the program too: DO=1 with a COOKIE, as validating resolvers send.
    let out = dig(SERVER, &["+dnssec", "+cookie", "www.example.com", "A"]);
    assert!(out.contains("192.0.2.10") && out.contains("flags: do;"), "{out}");
    // Over 512 octets: the program answers an EDNS client whole; without EDNS the
    // answer needs TC, so user space sends it (counted in pass_needs_tc).
    let out = dig(SERVER, &["+bufsize=1232", "pool.example.com", "A"]);
    assert!(out.contains("ANSWER: 30,") && !out.contains(" tc"), "{out}");
    let out = dig(SERVER, &["+noedns", "+ignore", "pool.example.com", "A"]);
    assert!(out.contains("flags: qr aa tc"), "{out}");
    // Synthesised from a wildcard by the program too (RFC 4592).
    let out = dig(SERVER, &["anything.wild.example.com", "A"]);
    assert!(out.contains("192.0.2.99"), "{out}");
    // Passed to user space: EDNS version 1 (BADVERS), TCP.
    let out = dig(SERVER, &["+edns=1", "+noednsnegotiation", "www.example.com", "A"]);
    assert!(out.contains("status: BADVERS"), "{out}");
    let out = dig(SERVER, &["+tcp", "www.example.com", "A"]);
    assert!(out.contains("192.0.2.10"), "{out}");
    // A referral with glue, relocated by the program for this name below the cut.
    let out = dig(SERVER, &["host.sub.example.com", "A"]);
    // (AA clear: read from the flags line, as a COOKIE's hex may hold " aa" too.)
    let flags = out.lines().find(|l| l.starts_with(";; flags:")).unwrap_or_default();
    assert!(out.contains("ns.sub.example.com") && !flags.contains(" aa"), "{out}");

    // Another address of the interface, where the edge does not listen: the program
    // leaves queries to it to the kernel (no socket there: port unreachable), as it
    // would a firewall's drop; the listen address still gets its answer.
    pair.in_server(&["ip", "addr", "add", "10.77.0.3/24", "dev", &pair.server_if]);
    pair.in_server(&["ip", "addr", "add", "fd00:77::3/64", "dev", &pair.server_if, "nodad"]);
    let replies = in_netns(&pair.client, || {
        [
            format!("{SERVER}:{PORT}"),
            format!("10.77.0.3:{PORT}"),
            format!("[fd00:77::3]:{PORT}"),
        ]
        .map(|server| ask_once(server.parse().unwrap()))
    })
    .join()
    .unwrap();
    assert!(replies[0].is_some(), "the listen address answers");
    assert_eq!(
        replies[1..],
        [None, None],
        "no answer from an address nothing listens on"
    );

    // No system call was refused (with a unit's filter: none outside its list is made).
    let refused = |line: &String| line.contains("Operation not permitted") || line.contains("os error 1)");
    assert!(!edge.history_has("Operation not permitted") && !edge.history_has("os error 1)"));
    let (status, log) = edge.stop_with_log();
    assert_eq!(status.code(), Some(0));
    assert!(!log.iter().any(refused), "a call was refused: {log:?}");
    assert!(counter(&log, "pass_other_address") >= 2, "{log:?}");
    assert!(counter(&log, "answered_plain") >= 7, "{log:?}");
    // Every answer found room but the 30-record one: a query from a veth peer sits in
    // the sender's small buffer (no tailroom, 256 octets of headroom), so that answer
    // cannot grow 500 octets and passes; user space sends it (a NIC driver's receive
    // buffers, 2–4 KiB, leave the room).
    assert!(counter(&log, "pass_no_room") <= 1, "{log:?}");
    assert!(counter(&log, "answered_nxdomain") >= 1, "{log:?}");
    assert!(counter(&log, "answered_failover") >= 1, "{log:?}");
    assert!(counter(&log, "answered_wildcard") >= 1, "{log:?}");
    assert!(counter(&log, "pass_edns") >= 1, "{log:?}");
    assert!(counter(&log, "answered_referral") >= 1, "{log:?}");
    let after = run(&["ip", "-n", &pair.server, "link", "show", &pair.server_if]);
    assert!(!after.contains("xdp"), "detached on SIGTERM: {after}");
    log
}

/// One query for www.example.com A from a fresh UDP socket; the reply, if one comes
/// within a second.
fn ask_once(server: SocketAddr) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut query = vec![0x51, 0x52, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    query.extend(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
    socket.send_to(&query, server).unwrap();
    let mut buf = [0u8; 1500];
    socket.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
}

/// Runs `f` on a thread that has entered the network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: setns on this thread only, with a namespace file we hold open.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        f()
    })
}

#[test]
fn zone_reload_under_load_loses_no_query_and_xdp_follows() {
    require_root("network namespaces, XDP");
    let pair = Pair::new('b');
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let edge = start_edge(&pair, zones.path(), "auto");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_load = Arc::clone(&stop);
    // mail.example.com A, 0x20-cased, ID = sequence number; one query in flight at a time.
    let load = in_netns(&pair.client, move || {
        let socket = UdpSocket::bind("10.77.0.2:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let server: SocketAddr = format!("{SERVER}:{PORT}").parse().unwrap();
        let (mut sent, mut lost, mut new_value_seen) = (0u32, 0u32, 0u32);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 512];
        while !stop_load.load(Ordering::Relaxed) && Instant::now() < deadline && sent < 5_000_000 {
            let id = sent as u16;
            let mut q = id.to_be_bytes().to_vec();
            q.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4]);
            q.extend(b"MaIl\x07example\x03com\x00\x00\x01\x00\x01");
            socket.send_to(&q, server).unwrap();
            sent += 1;
            loop {
                match socket.recv(&mut buf) {
                    Ok(n) if n >= 2 && buf[..2] == id.to_be_bytes() => {
                        if buf[..n].ends_with(&[192, 0, 2, 26]) {
                            new_value_seen += 1;
                        }
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => {
                        lost += 1;
                        break;
                    }
                }
            }
        }
        (sent, lost, new_value_seen)
    });
    std::thread::sleep(Duration::from_secs(1));
    let path = zones.path().join("example.com.zone");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("192.0.2.25", "192.0.2.26");
    std::fs::write(&path, text).unwrap();
    edge.signal("HUP");
    // The table watcher may log before or after the reload line.
    edge.wait_for_logs(&["zones reloaded", "XDP tables installed"], Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let (sent, lost, new_value_seen) = load.join().unwrap();
    eprintln!("{sent} queries, {lost} lost, {new_value_seen} with the reloaded value");
    assert!(sent > 200, "the load ran: {sent}");
    assert_eq!(lost, 0, "no query lost across the reload");
    assert!(new_value_seen > 0, "answers follow the reload");
    let (_, log) = edge.stop_with_log();
    assert!(
        counter(&log, "answered_plain") > u64::from(sent) / 2,
        "XDP answered the load: {log:?}"
    );
}

#[test]
fn one_edge_answers_from_xdp_on_two_interfaces() {
    require_root("network namespaces, XDP");
    let pair = Pair::new('t');
    let second = format!("{}x", pair.server_if);
    pair.link(&second, &format!("{}x", pair.client_if), "76");
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let metrics = "127.0.0.1:19153";
    let edge = Edge::start_in(
        &["ip", "netns", "exec", &pair.server],
        zones.path(),
        &[
            "--listen",
            &format!("{SERVER}:{PORT}"),
            "--listen",
            &format!("10.76.0.1:{PORT}"),
            "--xdp",
            &pair.server_if,
            "--xdp",
            &second,
            "--xdp-mode",
            "auto",
            "--metrics",
            metrics,
        ],
    );
    for iface in [&pair.server_if, &second] {
        let shown = run(&["ip", "-n", &pair.server, "link", "show", iface]);
        assert!(shown.contains("xdpgeneric"), "{iface}: {shown}");
    }
    let answered = || -> u64 {
        let text = pair.server_metrics(metrics);
        text.lines()
            .find(|l| l.starts_with("qdns_edge_xdp_packets_total{counter=\"answered_plain\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let port = PORT.to_string();
    let mut before = answered();
    // Each address is reached through its own link only: an answer counted after a
    // query to it came from the program on that interface.
    for server in [SERVER, "10.76.0.1"] {
        let out = pair.in_client(&[
            "dig",
            &format!("@{server}"),
            "-p",
            &port,
            "+tries=1",
            "+time=3",
            "www.example.com",
            "A",
        ]);
        assert!(out.contains("192.0.2.10"), "{server}: {out}");
        let after = answered();
        assert_eq!(after, before + 1, "{server}: answered by XDP");
        before = after;
    }
    let (status, _) = edge.stop_with_log();
    assert_eq!(status.code(), Some(0));
    for iface in [&pair.server_if, &second] {
        let shown = run(&["ip", "-n", &pair.server, "link", "show", iface]);
        assert!(!shown.contains("xdp"), "{iface} detached: {shown}");
    }
}

/// What a flood of `count` copies of `question` (wire name, type, class) from `source`
/// got back within a second of the last: `[answers, slipped (TC=1), nothing]`.
fn flood(source: &str, question: &[u8], count: u16) -> [u32; 3] {
    let socket = UdpSocket::bind(format!("{source}:0")).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let server: SocketAddr = format!("{SERVER}:{PORT}").parse().unwrap();
    for id in 0..count {
        let mut q = id.to_be_bytes().to_vec();
        q.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        q.extend(question);
        socket.send_to(&q, server).unwrap();
    }
    let mut seen = vec![0u8; usize::from(count)];
    let mut buf = [0u8; 1500];
    while let Ok(n) = socket.recv(&mut buf) {
        if n < 12 {
            continue;
        }
        let id = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
        if let Some(slot) = seen.get_mut(id) {
            *slot = if buf[2] & 0x02 != 0 { 2 } else { 1 };
        }
    }
    let mut got = [0u32; 3];
    for outcome in seen {
        got[match outcome {
            1 => 0,
            2 => 1,
            _ => 2,
        }] += 1;
    }
    got
}

/// Issue 14: with `--rrl-rate 20 --rrl-slip 2` a prefix flooding the XDP path
/// (mail.example.com A) and one flooding user space (an out-of-zone name: REFUSED) each
/// get about 20 answers, half of the rest slipped (TC=1) and half dropped; a client in
/// another /24 asking at 10 per second meanwhile gets every answer whole, in both paths.
/// The counts show in the program's counters and in user space's metrics.
#[test]
fn rate_limiting_holds_a_flooding_prefix_to_its_rate_in_both_paths() {
    require_root("network namespaces, XDP");
    let pair = Pair::new('r');
    // A second client address, in another /24.
    run(&[
        "ip",
        "-n",
        &pair.client,
        "addr",
        "add",
        "10.77.1.2/24",
        "dev",
        &pair.client_if,
    ]);
    run(&[
        "ip",
        "-n",
        &pair.server,
        "route",
        "add",
        "10.77.1.0/24",
        "dev",
        &pair.server_if,
    ]);
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let v4 = format!("{SERVER}:{PORT}");
    let edge = Edge::start_in(
        &["ip", "netns", "exec", &pair.server],
        zones.path(),
        &[
            "--listen",
            &v4,
            "--xdp",
            &pair.server_if,
            "--xdp-mode",
            "auto",
            "--rrl-rate",
            "20",
            "--rrl-slip",
            "2",
            "--metrics",
            "127.0.0.1:9199",
        ],
    );
    let in_zone = b"\x04mail\x07example\x03com\x00\x00\x01\x00\x01".to_vec();
    let outside = b"\x07nowhere\x07invalid\x00\x00\x01\x00\x01".to_vec();
    // The polite client: 10 per second for 2 s, alternating the two names.
    let (a, b) = (in_zone.clone(), outside.clone());
    let polite = in_netns(&pair.client, move || {
        let mut got = [0u32; 3];
        for i in 0..20 {
            let question = if i % 2 == 0 { &a } else { &b };
            let one = flood("10.77.1.2", question, 1);
            for (sum, n) in got.iter_mut().zip(one) {
                *sum += n;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        got
    });
    let started = Instant::now();
    let (x, u) = (in_zone.clone(), outside.clone());
    let floods = in_netns(&pair.client, move || {
        [flood("10.77.0.2", &x, 400), flood("10.77.0.2", &u, 400)]
    });
    let [xdp, user] = floods.join().unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let polite = polite.join().unwrap();
    eprintln!("in {elapsed:.1} s: XDP flood {xdp:?}, user-space flood {user:?}, polite {polite:?}");
    assert_eq!(polite, [20, 0, 0], "the other prefix is answered whole");
    let most = 20 + (started.elapsed().as_secs() as u32 + 1) * 20;
    for (path, [answered, slipped, nothing]) in [("xdp", xdp), ("user", user)] {
        assert!(
            (15..=most).contains(&answered),
            "{path}: {answered} answered (at most {most})"
        );
        let limited = 400 - answered;
        assert!(
            slipped.abs_diff(limited / 2) <= 2,
            "{path}: {slipped} of {limited} limited slipped"
        );
        assert!(
            nothing.abs_diff(limited / 2) <= 2,
            "{path}: {nothing} of {limited} limited dropped"
        );
    }
    let metrics = pair.server_metrics("127.0.0.1:9199");
    let sample = |series: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {metrics}"))
    };
    assert_eq!(
        sample("qdns_edge_rrl_total{path=\"user\",outcome=\"slipped\"}"),
        u64::from(user[1])
    );
    let log = edge.stop_with_log().1;
    assert_eq!(counter(&log, "rrl_slipped"), u64::from(xdp[1]));
    assert!(counter(&log, "rrl_dropped") >= u64::from(xdp[2]) - 2);
}
