//! Hostile input never crashes or stalls the edge (SPEC §7): garbage, truncated,
//! oversized and looping-compression datagrams, and junk TCP streams, each followed by a
//! normal query that must be answered.
mod common;

use std::{
    io::{Read, Write},
    net::{TcpStream, UdpSocket},
    time::Duration,
};

use common::{ask, parse_response, query, tcp_raw, udp_raw, Ask, Edge, Rng, Via};
use hickory_proto::{op::ResponseCode, rr::RecordType};

/// 10,000 datagrams: random bytes, mutated and truncated valid queries, pointer loops,
/// oversized packets.
fn garbage(rng: &mut Rng) -> Vec<Vec<u8>> {
    let valid = query("www.example.com.", RecordType::A, Ask::default());
    let mut out = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let packet = match i % 5 {
            0 => (0..rng.below(600)).map(|_| rng.next() as u8).collect(),
            1 => {
                let mut p = valid.clone();
                for _ in 0..=rng.below(4) {
                    let at = rng.below(p.len());
                    p[at] = rng.next() as u8;
                }
                p
            }
            2 => valid[..rng.below(valid.len())].to_vec(),
            3 => {
                // Header + question, then an additional record whose owner is a
                // compression pointer to itself (and friends).
                let mut p = valid[..33].to_vec();
                p[11] = 1;
                let here = p.len() as u16;
                p.extend((0xc000 | here).to_be_bytes());
                p.extend([0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
                p
            }
            _ => {
                let mut p = valid.clone();
                p.resize(4097 + rng.below(5000), 0xff);
                p
            }
        };
        out.push(packet);
    }
    out
}

fn still_answers(edge: &Edge) {
    for addr in edge.addrs() {
        for via in [Via::Udp, Via::Tcp] {
            let msg = ask(addr, via, "www.example.com.", RecordType::A, Ask::default());
            assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{via:?} {addr}");
            assert_eq!(msg.answers.len(), 2);
        }
    }
}

#[test]
fn ten_thousand_garbage_datagrams_then_a_normal_query() {
    let edge = Edge::start();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let packets = garbage(&mut rng);
    for addr in edge.addrs() {
        let socket = UdpSocket::bind(if addr.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" }).unwrap();
        for (i, packet) in packets.iter().enumerate() {
            // Oversized datagrams above 64 KiB cannot be sent; those above our 4 KiB
            // receive buffer are dropped and counted by the edge.
            let _ = socket.send_to(packet, addr);
            if i % 500 == 0 {
                // Drain whatever came back so the socket buffer never blocks sends.
                socket.set_nonblocking(true).unwrap();
                let mut buf = [0u8; 2048];
                while socket.recv_from(&mut buf).is_ok() {}
                socket.set_nonblocking(false).unwrap();
            }
        }
    }
    still_answers(&edge);
    // And each kind gets the answer the RFCs ask for: a pointer loop is FORMERR.
    let loop_packet = &packets[3];
    let raw = udp_raw(edge.v4, loop_packet);
    let msg = parse_response(loop_packet, &raw);
    assert_eq!(msg.metadata.response_code, ResponseCode::FormErr);
    assert_eq!(edge.stop().code(), Some(0), "clean exit after the storm");
}

#[test]
fn junk_tcp_streams_do_not_stall_the_server() {
    let edge = Edge::start_with(&common::example_zones(), &["--tcp-idle-timeout", "2"]);
    let mut rng = Rng(42);
    let mut held = Vec::new();
    for i in 0..50 {
        let mut stream = TcpStream::connect(edge.v4).unwrap();
        stream.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let junk: Vec<u8> = (0..rng.below(3000)).map(|_| rng.next() as u8).collect();
        let _ = stream.write_all(&junk);
        if i % 10 == 0 {
            // Half a length prefix, then silence: must not block other clients.
            let _ = stream.write_all(&[0x01]);
            held.push(stream);
        }
    }
    // A length prefix of zero is a FORMERR-free drop (no header), never a crash.
    let mut zero = TcpStream::connect(edge.v4).unwrap();
    zero.write_all(&[0, 0]).unwrap();
    let q = query("www.example.com.", RecordType::A, Ask::default());
    let raw = tcp_raw(edge.v4, &q);
    parse_response(&q, &raw);
    still_answers(&edge);
    // The half-open connections are closed by the idle timeout.
    std::thread::sleep(Duration::from_millis(2500));
    for mut stream in held {
        // Junk that happened to frame queries got answers; after them comes EOF (or a
        // reset), never a connection left hanging.
        stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut sink = Vec::new();
        match stream.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(e) => assert!(
                !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                "stalled connection still open"
            ),
        }
    }
}

/// The edge's resident set in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// Raises this process's open-file limit to its hard limit (the test holds thousands).
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit), 0);
    }
}

fn connect_from(source: &str, to: std::net::SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket
        .bind(&format!("{source}:0").parse::<std::net::SocketAddr>().ok()?.into())
        .ok()?;
    socket.connect_timeout(&to.into(), Duration::from_secs(2)).ok()?;
    Some(socket.into())
}

/// Whether the server closed `stream` (EOF or reset; a stream still open times out).
fn closed(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 64];
    !matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut)
}

/// Issue 14: 2,000 idle and 2,000 slowloris connections to the metrics listener. Memory
/// stays bounded, a scraper from another address is served throughout, and every one of
/// them is closed: those over the caps at once, the rest when their request head has
/// not arrived within 10 s.
#[test]
fn idle_and_slowloris_connections_do_not_hold_the_metrics_listener() {
    raise_fd_limit();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let edge = Edge::start_with(&common::example_zones(), &["--metrics", &metrics.to_string()]);
    let scrape = || {
        let mut conn = connect_from("127.0.0.2", metrics).expect("the scraper connects");
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        assert!(
            text.contains("qdns_edge_snapshot_version"),
            "scrape failed: {text:.200}"
        );
    };
    scrape();
    let before = rss_kib(edge.pid());
    let mut idle: Vec<TcpStream> = (0..2000).filter_map(|_| connect_from("127.0.0.1", metrics)).collect();
    let mut slow: Vec<TcpStream> = (0..2000).filter_map(|_| connect_from("127.0.0.3", metrics)).collect();
    assert!(
        idle.len() > 1900 && slow.len() > 1900,
        "{} idle, {} slow connected",
        idle.len(),
        slow.len()
    );
    for s in &mut slow {
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
    }
    // Slowloris: one header octet per connection every half second, for 6 s.
    for round in 0..12 {
        for s in &mut slow {
            let _ = s.write_all(b"X");
        }
        if round % 4 == 0 {
            scrape();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let during = rss_kib(edge.pid());
    eprintln!("edge RSS {before} KiB before, {during} KiB with 4,000 hostile connections");
    assert!(during < before + 32 * 1024, "RSS grew from {before} to {during} KiB");
    // Past the head timeout every hostile connection is closed.
    std::thread::sleep(Duration::from_secs(6));
    let open_idle = idle.iter_mut().map(closed).filter(|c| !c).count();
    let open_slow = slow.iter_mut().map(closed).filter(|c| !c).count();
    assert_eq!((open_idle, open_slow), (0, 0), "connections still open");
    scrape();
}
