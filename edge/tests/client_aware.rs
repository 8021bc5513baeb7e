//! Client-aware answers (`policy = "ip"`, SPEC §10) through the real edge: the client is
//! the ECS prefix when the query has one (SOURCE capped at /24 and /56), else the
//! packet's source; the echoed SCOPE is the prefix the answer holds for. Real sockets
//! bound to loopback addresses stand for clients, dig and kdig send ECS.
mod common;

use std::{
    fmt::Write as _,
    fs,
    net::{IpAddr, SocketAddr, TcpStream, UdpSocket},
    process::Command,
    time::Duration,
};

use common::{parse_response, query, read_framed, write_framed, Ask, Edge};
use hickory_proto::rr::{RData, RecordType};
use qdns_testkit::fixtures::ZONE_HEAD;

/// A zone whose `ip` set tells loopback sources apart.
fn loopback_zone(dir: &std::path::Path) {
    let body = r#"
[[cidr_collection]]
id = "lo"
[cidr_collection.locations]
two = ["127.0.0.2/32"]
three = ["127.0.0.3/32", "2001:db8:3::/48"]
wide = ["127.0.0.0/16"]

[[rrset]]
name = "near"
type = "A"
policy = "ip"
members = [
  { id = "two", cidr = "lo/two", values = ["10.0.0.2"] },
  { id = "three", cidr = "lo/three", values = ["10.0.0.3"] },
  { id = "wide", cidr = "lo/wide", values = ["10.0.0.16"] },
  { id = "rest", cidr = "*", values = ["10.0.0.99"] },
]

[[rrset]]
name = "plain"
type = "A"
values = ["10.1.1.1"]
"#;
    fs::write(dir.join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
}

/// A query with `options` in its OPT record.
fn with_options(name: &str, options: &[u8]) -> Vec<u8> {
    let mut q = query(name, RecordType::A, Ask::default());
    let rdlen_at = q.len() - 2;
    q[rdlen_at..].copy_from_slice(&(options.len() as u16).to_be_bytes());
    q.extend_from_slice(options);
    q
}

/// An ECS option (RFC 7871 §6) for `addr/source`.
fn ecs(addr: &str, source: u8) -> Vec<u8> {
    let addr: IpAddr = addr.parse().unwrap();
    let (family, octets): (u16, Vec<u8>) = match addr {
        IpAddr::V4(a) => (1, a.octets().to_vec()),
        IpAddr::V6(a) => (2, a.octets().to_vec()),
    };
    let sent = &octets[..usize::from(source).div_ceil(8)];
    let mut option = vec![0, 8];
    option.extend_from_slice(&((4 + sent.len()) as u16).to_be_bytes());
    option.extend_from_slice(&family.to_be_bytes());
    option.extend_from_slice(&[source, 0]);
    option.extend_from_slice(sent);
    option
}

/// Sends `q` over UDP from `source` to `to`.
fn udp_from(source: IpAddr, to: SocketAddr, q: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        socket.send_to(q, to).unwrap();
        if let Ok((len, _)) = socket.recv_from(&mut buf) {
            buf.truncate(len);
            return buf;
        }
    }
    panic!("no answer from {to} to {source}");
}

/// Sends `q` over TCP from `source` to `to`.
fn tcp_from(source: IpAddr, to: SocketAddr, q: &[u8]) -> Vec<u8> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    socket.bind(&SocketAddr::new(source, 0).into()).unwrap();
    socket.connect_timeout(&to.into(), Duration::from_secs(3)).unwrap();
    let mut stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write_framed(&mut stream, q);
    read_framed(&mut stream)
}

/// The A records of a response.
fn addresses(q: &[u8], raw: &[u8]) -> Vec<String> {
    parse_response(q, raw)
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.to_string()),
            _ => None,
        })
        .collect()
}

/// The echoed ECS option's SCOPE, or `None` when the response has none.
fn echoed_scope(raw: &[u8], option: &[u8]) -> Option<u8> {
    // Our OPT is the last record; an echoed ECS option is its last option.
    if option.is_empty() || !raw.ends_with(&option[8..]) {
        return None;
    }
    let at = raw.len() - option.len();
    (raw[at..at + 7] == option[..7]).then(|| raw[at + 7])
}

#[test]
fn the_packet_source_decides_when_there_is_no_client_subnet() {
    let dir = tempfile::tempdir().unwrap();
    loopback_zone(dir.path());
    let edge = Edge::start_with(dir.path(), &[]);
    let q = with_options("near.t.example.", &[]);
    for (source, want) in [
        ("127.0.0.2", "10.0.0.2"),
        ("127.0.0.3", "10.0.0.3"),
        ("127.0.0.4", "10.0.0.16"),
        ("127.0.1.9", "10.0.0.16"),
        ("127.1.0.1", "10.0.0.99"),
    ] {
        let source: IpAddr = source.parse().unwrap();
        for (via, raw) in [
            ("udp", udp_from(source, edge.v4, &q)),
            ("tcp", tcp_from(source, edge.v4, &q)),
        ] {
            assert_eq!(addresses(&q, &raw), [want], "{via} from {source}");
            // No ECS asked, none given: the OPT record has no options.
            assert!(raw.ends_with(&[0, 0]), "{via} from {source}: {raw:02x?}");
        }
    }
    let raw = udp_from("::1".parse().unwrap(), edge.v6, &q);
    assert_eq!(addresses(&q, &raw), ["10.0.0.99"], "::1 is in no rule");
}

#[test]
fn a_client_subnet_decides_and_comes_back_with_the_scope_of_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    loopback_zone(dir.path());
    let edge = Edge::start_with(dir.path(), &[]);
    // (ECS prefix, answer, scope); the query always comes from 127.0.0.1.
    let cases = [
        // SOURCE over /24 is used as /24 (RFC 7871 §11.1): 127.0.0.2/32 is decided as
        // 127.0.0.0/24, inside "wide" — and echoed with scope 24, not the /31 around .0:
        // the resolver applies the scope around the address it sent (.2, "two"'s).
        ("127.0.0.2", 32, "10.0.0.16", 24),
        ("127.0.0.0", 24, "10.0.0.16", 31),
        // The /16 minus its holes: 127.0.128.0/17 is all "wide".
        ("127.0.200.0", 24, "10.0.0.16", 17),
        // Outside every rule: "*", over the largest prefix meeting no rule.
        ("10.9.0.0", 16, "10.0.0.99", 2),
        ("127.1.0.0", 24, "10.0.0.99", 16),
        // IPv6 SOURCE over /56 is used as /56; the rule is a /48 (within the cap).
        ("2001:db8:3:ff::1", 128, "10.0.0.3", 48),
        ("2001:db8:4::", 48, "10.0.0.99", 46),
    ];
    for (addr, source, want, scope) in cases {
        let option = ecs(addr, source);
        let q = with_options("near.t.example.", &option);
        for (via, raw) in [
            ("udp", udp_from("127.0.0.1".parse().unwrap(), edge.v4, &q)),
            ("tcp", tcp_from("127.0.0.1".parse().unwrap(), edge.v4, &q)),
        ] {
            assert_eq!(addresses(&q, &raw), [want], "{via} {addr}/{source}");
            assert_eq!(
                echoed_scope(&raw, &option),
                Some(scope),
                "{via} {addr}/{source}: {raw:02x?}"
            );
        }
    }
    // SOURCE 0: no client address to use (RFC 7871 §7.1.2); the packet's source
    // decides and the scope is 0.
    let option = ecs("0.0.0.0", 0);
    let q = with_options("near.t.example.", &option);
    let raw = udp_from("127.0.0.3".parse().unwrap(), edge.v4, &q);
    assert_eq!(addresses(&q, &raw), ["10.0.0.3"]);
    assert_eq!(echoed_scope(&raw, &option), Some(0));
    // A name whose answer is the same for every client: scope 0.
    let option = ecs("127.0.0.0", 24);
    let q = with_options("plain.t.example.", &option);
    let raw = udp_from("127.0.0.1".parse().unwrap(), edge.v4, &q);
    assert_eq!(echoed_scope(&raw, &option), Some(0));
}

fn run(tool: &str, args: &[String]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} is required (scripts/setup installs it): {e}"));
    assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The example zone's `near.shop.example`: dig and kdig with `+subnet` get each
/// location's answer (the `us` member is an alias to the weighted `www`) and its scope.
#[test]
fn dig_and_kdig_get_each_locations_answer_and_scope_from_the_example_zone() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        for (subnet, values, echoed) in [
            ("198.51.100.0/24", &["192.0.2.41"][..], "198.51.100.0/24/24"),
            ("2001:db8:e:1::/64", &["192.0.2.41"][..], "2001:db8:e::/56/48"),
            (
                "203.0.113.77/32",
                &["192.0.2.10", "192.0.2.11", "192.0.2.12"][..],
                "203.0.113.77/32/24",
            ),
            ("192.0.2.0/24", &["192.0.2.43"][..], "192.0.2.0/24/6"),
        ] {
            let out = run(
                "dig",
                &[
                    format!("@{}", addr.ip()),
                    "-p".into(),
                    addr.port().to_string(),
                    format!("+subnet={subnet}"),
                    "near.shop.example".into(),
                    "A".into(),
                ],
            );
            assert!(out.contains("status: NOERROR"), "{out}");
            assert!(values.iter().any(|v| out.contains(v)), "{subnet}: {out}");
            if subnet.starts_with("2001") {
                // dig sends the /64 as asked; we decide by its /56 and echo it as sent.
                assert!(out.contains("CLIENT-SUBNET: 2001:db8:e:1::/64/48"), "{out}");
            } else {
                assert!(out.contains(&format!("CLIENT-SUBNET: {echoed}")), "{out}");
            }
        }
        let out = run(
            "kdig",
            &[
                format!("@{}", addr.ip()),
                "-p".into(),
                addr.port().to_string(),
                "+subnet=198.51.100.0/24".into(),
                "near.shop.example".into(),
                "A".into(),
            ],
        );
        assert!(out.contains("192.0.2.41"), "{out}");
        assert!(out.contains("CLIENT-SUBNET: 198.51.100.0/24/24"), "{out}");
    }
}

/// A standalone edge compiles `policy = "geo"` sets from `--geoip-db` itself and
/// re-reads the database on SIGHUP; a database that cannot be read leaves the running
/// zones serving.
#[test]
fn a_standalone_edge_reads_its_geoip_db_and_rereads_it_on_sighup() {
    use qdns_testkit::mmdb::{write, GeoNet};
    let dir = tempfile::tempdir().unwrap();
    let zones = dir.path().join("zones");
    fs::create_dir(&zones).unwrap();
    let db = dir.path().join("geo.mmdb");
    let net = |net, country| GeoNet {
        net,
        continent: "EU",
        country,
        subdivisions: &[],
    };
    write(&db, &[net("127.0.2.0/24", "DE")]);
    let body = r#"
[[rrset]]
name = "geo"
type = "A"
policy = "geo"
members = [
  { id = "de", location = "DE", values = ["10.0.0.1"] },
  { id = "rest", location = "*", values = ["10.0.0.9"] },
]
"#;
    fs::write(zones.join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
    let edge = Edge::start_with(&zones, &["--geoip-db", db.to_str().unwrap()]);
    let q = with_options("geo.t.example.", &[]);
    let from = |source: &str| addresses(&q, &udp_from(source.parse().unwrap(), edge.v4, &q));
    assert_eq!(from("127.0.2.9"), ["10.0.0.1"]);
    assert_eq!(from("127.0.3.9"), ["10.0.0.9"]);
    // The database moves the network elsewhere: after SIGHUP, `*`.
    write(&db, &[net("127.0.3.0/24", "DE")]);
    edge.signal("HUP");
    edge.wait_for_log("zones reloaded", Duration::from_secs(20));
    assert_eq!(from("127.0.2.9"), ["10.0.0.9"]);
    assert_eq!(from("127.0.3.9"), ["10.0.0.1"]);
    fs::write(&db, b"not a database").unwrap();
    edge.signal("HUP");
    let line = edge.wait_for_log("reload rejected", Duration::from_secs(20));
    assert!(line.contains("geo.mmdb"), "{line}");
    assert_eq!(from("127.0.3.9"), ["10.0.0.1"]);
}

/// The scope property through the real edge (issue 29): for random nested rules and
/// random clients, every address inside the echoed scope — its first, its last and
/// random ones, each asked as its own /24 — gets the same answer and the same scope.
#[test]
fn every_address_inside_the_echoed_scope_gets_the_same_answer() {
    let mut rng = qdns_testkit::Rng(0x5c0_9e29);
    let mut locations = String::new();
    let mut members = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..40 {
        let len = [8u32, 10, 12, 14, 16, 18, 20, 22, 24][rng.below(9)];
        let raw = 0x0a00_0000u32 | ((rng.next() as u32) & 0x00ff_ffff);
        let net = raw & (u32::MAX << (32 - len));
        if !seen.insert((net, len)) {
            continue;
        }
        let _ = writeln!(locations, "r{i} = [\"{}/{len}\"]", std::net::Ipv4Addr::from(net));
        let _ = writeln!(
            members,
            "  {{ id = \"r{i}\", cidr = \"g/r{i}\", values = [\"10.255.{i}.1\"] }},"
        );
    }
    let body = format!(
        "\n[[cidr_collection]]\nid = \"g\"\n[cidr_collection.locations]\n{locations}\n\
         [[rrset]]\nname = \"geo\"\ntype = \"A\"\npolicy = \"ip\"\nmembers = [\n{members}  \
         {{ id = \"rest\", cidr = \"*\", values = [\"192.0.2.99\"] }},\n]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
    let edge = Edge::start_with(dir.path(), &[]);
    let ask = |net: u32| {
        let addr = std::net::Ipv4Addr::from(net & 0xffff_ff00).to_string();
        let option = ecs(&addr, 24);
        let q = with_options("geo.t.example.", &option);
        let raw = udp_from("127.0.0.1".parse().unwrap(), edge.v4, &q);
        (addresses(&q, &raw), echoed_scope(&raw, &option).expect("a scope"))
    };
    for _ in 0..150 {
        let client = if rng.chance(80) {
            0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff)
        } else {
            rng.next() as u32
        };
        let (answer, scope) = ask(client);
        assert!(scope <= 24, "rules are /24 or shorter: {scope}");
        let mask = u32::MAX.checked_shl(32 - u32::from(scope)).unwrap_or(0);
        let (first, last) = (client & mask, client | !mask);
        for inside in [
            first,
            last,
            first | (rng.next() as u32 & !mask),
            first | (rng.next() as u32 & !mask),
        ] {
            assert_eq!(
                ask(inside),
                (answer.clone(), scope),
                "{} is inside {}/{scope} around {}",
                std::net::Ipv4Addr::from(inside),
                std::net::Ipv4Addr::from(first),
                std::net::Ipv4Addr::from(client)
            );
        }
    }
}
