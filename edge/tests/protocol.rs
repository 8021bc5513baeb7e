//! SPEC §7 behaviour of the real `qdns-edge` binary over real sockets: each test runs
//! over UDP and TCP, IPv4 and IPv6, with hickory-proto as the client.
mod common;

use std::{
    net::{Ipv4Addr, TcpStream},
    time::Duration,
};

use common::{ask, every_path, parse_response, query, read_framed, tcp_raw, udp_raw, write_framed, Ask, Edge, Via};
use hickory_proto::{
    op::{OpCode, ResponseCode},
    rr::{RData, RecordType},
};

// Each test starts its own edge: a process held in a static would never be dropped,
// and so never stopped, when the test binary exits.

fn a_values(msg: &hickory_proto::op::Message) -> Vec<Ipv4Addr> {
    let mut out: Vec<_> = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

#[test]
fn authoritative_answer_with_aa_and_case_echo() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "WwW.ExAmPlE.cOm.", RecordType::A, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{via:?} {addr}");
        assert!(msg.metadata.authoritative, "AA over {via:?} {addr}");
        assert!(!msg.metadata.recursion_available);
        assert_eq!(
            msg.queries[0].name().to_ascii(),
            "WwW.ExAmPlE.cOm.",
            "question case echoed"
        );
        assert_eq!(
            a_values(&msg),
            vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)]
        );
        assert_eq!(
            msg.answers[0].name.to_ascii(),
            "WwW.ExAmPlE.cOm.",
            "owner echoes the question's case"
        );
        assert_eq!(msg.answers[0].ttl, 30);
    }
}

#[test]
fn nxdomain_with_soa_and_negative_ttl() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "nope.example.net.", RecordType::A, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::NXDomain, "{via:?}");
        assert!(msg.metadata.authoritative);
        assert!(msg.answers.is_empty());
        assert_eq!(msg.authorities.len(), 1);
        let soa = &msg.authorities[0];
        assert_eq!(soa.record_type(), RecordType::SOA);
        assert_eq!(soa.name.to_ascii().to_lowercase(), "example.net.");
        // example.net: zone ttl 300, SOA minimum 120 → min = 120 (RFC 2308 §3).
        assert_eq!(soa.ttl, 120);
    }
}

#[test]
fn nodata_with_soa_and_empty_non_terminal() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        for name in ["www.example.com.", "ent.tree.example.com."] {
            let qtype = if name.starts_with("www") {
                RecordType::MX
            } else {
                RecordType::A
            };
            let msg = ask(addr, via, name, qtype, Ask::default());
            assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{name} {via:?}");
            assert!(msg.metadata.authoritative);
            assert!(msg.answers.is_empty(), "{name}");
            assert_eq!(msg.authorities[0].record_type(), RecordType::SOA, "{name}");
            assert_eq!(msg.authorities[0].ttl, 60);
        }
    }
}

#[test]
fn refused_outside_every_zone() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "www.example.org.", RecordType::A, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::Refused, "{via:?}");
        assert!(!msg.metadata.authoritative);
        assert!(msg.answers.is_empty() && msg.authorities.is_empty());
    }
}

/// QCLASS ANY (RFC 1035 §3.2.5) is answered from the zones as IN is, as knotd, NSD and
/// BIND answer it: AA, the same records (class IN), the question's class as asked;
/// NXDOMAIN likewise. CHAOS and other classes are refused.
#[test]
fn qclass_any_is_answered_as_in_and_other_classes_are_refused() {
    let edge = Edge::start();
    let with_class = |name: &str, class: u16| {
        let mut q = query(name, RecordType::A, Ask::default());
        // QCLASS: after the name (labels to the root) and QTYPE.
        let mut at = 12;
        while q[at] != 0 {
            at += 1 + usize::from(q[at]);
        }
        q[at + 3..at + 5].copy_from_slice(&class.to_be_bytes());
        q
    };
    for (addr, via) in every_path(&edge) {
        let raw = |q: &[u8]| match via {
            Via::Udp => udp_raw(addr, q),
            Via::Tcp => tcp_raw(addr, q),
        };
        let q = with_class("www.example.com.", 255);
        let response = raw(&q);
        let msg = parse_response(&q, &response);
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{via:?} {addr}");
        assert!(msg.metadata.authoritative);
        assert_eq!(msg.queries[0].query_class(), hickory_proto::rr::DNSClass::ANY);
        assert_eq!(
            a_values(&msg),
            vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)]
        );
        assert!(msg
            .answers
            .iter()
            .all(|r| r.dns_class == hickory_proto::rr::DNSClass::IN));
        let q = with_class("nope.example.com.", 255);
        let msg = parse_response(&q, &raw(&q));
        assert_eq!(msg.metadata.response_code, ResponseCode::NXDomain, "{via:?}");
        assert_eq!(msg.authorities[0].record_type(), RecordType::SOA);
        let q = with_class("www.example.com.", 3);
        let msg = parse_response(&q, &raw(&q));
        assert_eq!(msg.metadata.response_code, ResponseCode::Refused, "CHAOS over {via:?}");
        assert!(msg.answers.is_empty());
    }
}

#[test]
fn formerr_for_malformed_queries() {
    let edge = Edge::start();
    // QDCOUNT 2, a pointer in the question, trailing garbage, two OPT records.
    let good = query(
        "www.example.com.",
        RecordType::A,
        Ask {
            edns: None,
            ..Ask::default()
        },
    );
    let mut two_questions = good.clone();
    two_questions[5] = 2;
    let mut pointer = good[..12].to_vec();
    pointer.extend([0xc0, 0x0c, 0, 1, 0, 1]);
    let mut trailing = good.clone();
    trailing.extend(b"junk");
    let mut two_opts = query("www.example.com.", RecordType::A, Ask::default());
    let opt = two_opts[two_opts.len() - 11..].to_vec();
    two_opts.extend(opt);
    two_opts[11] = 2;
    for (addr, via) in every_path(&edge) {
        for (what, bad) in [
            ("qdcount", &two_questions),
            ("pointer", &pointer),
            ("trailing", &trailing),
            ("two OPT", &two_opts),
        ] {
            let raw = match via {
                Via::Udp => udp_raw(addr, bad),
                Via::Tcp => tcp_raw(addr, bad),
            };
            let msg = parse_response(bad, &raw);
            assert_eq!(msg.metadata.response_code, ResponseCode::FormErr, "{what} over {via:?}");
        }
    }
}

#[test]
fn notimp_for_other_opcodes() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let mut q = query(
            "example.com.",
            RecordType::SOA,
            Ask {
                edns: None,
                ..Ask::default()
            },
        );
        q[2] = (q[2] & !0x78) | (u8::from(OpCode::Notify) << 3);
        let raw = match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        };
        let msg = parse_response(&q, &raw);
        assert_eq!(msg.metadata.response_code, ResponseCode::NotImp, "{via:?}");
        assert_eq!(msg.metadata.op_code, OpCode::Notify, "opcode echoed");
    }
}

#[test]
fn name_compression_in_responses() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let q = query(
            "www.example.com.",
            RecordType::A,
            Ask {
                edns: None,
                ..Ask::default()
            },
        );
        let raw = match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        };
        // Header 12 + question 21 + two answers of pointer(2) + 10 + 4 = 65 octets.
        assert_eq!(raw.len(), 12 + 21 + 2 * 16, "{via:?}");
        assert_eq!(&raw[33..35], &[0xc0, 0x0c], "owner is a pointer to the question");
        parse_response(&q, &raw);
    }
}

#[test]
fn cname_chased_inside_the_zone() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "chain.example.com.", RecordType::A, Ask::default());
        let types: Vec<_> = msg.answers.iter().map(hickory_proto::rr::Record::record_type).collect();
        assert_eq!(
            types,
            [RecordType::CNAME, RecordType::CNAME, RecordType::A, RecordType::A],
            "{via:?}"
        );
        assert_eq!(msg.answers[1].name.to_ascii(), "alias.example.com.");
        assert_eq!(msg.answers[2].name.to_ascii(), "www.example.com.");
        assert!(msg.metadata.authoritative);
        // A CNAME to another zone is not chased across zones.
        let msg = ask(addr, via, "outside.example.com.", RecordType::A, Ask::default());
        assert_eq!(msg.answers.len(), 1);
        assert_eq!(msg.answers[0].record_type(), RecordType::CNAME);
        // Asking for the CNAME itself is not chased.
        let msg = ask(addr, via, "alias.example.com.", RecordType::CNAME, Ask::default());
        assert_eq!(msg.answers.len(), 1);
    }
}

#[test]
fn delegation_answered_as_referral_with_glue() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        for name in ["sub.example.com.", "host.deep.sub.example.com."] {
            let msg = ask(addr, via, name, RecordType::A, Ask::default());
            assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{name}");
            assert!(!msg.metadata.authoritative, "a referral is not authoritative");
            assert!(msg.answers.is_empty());
            let ns: Vec<_> = msg
                .authorities
                .iter()
                .map(|r| (r.name.to_ascii(), r.record_type()))
                .collect();
            assert_eq!(ns.len(), 2, "{ns:?}");
            assert!(
                ns.iter().all(|(n, t)| n == "sub.example.com." && *t == RecordType::NS),
                "{ns:?}"
            );
            let glue: Vec<_> = msg.additionals.iter().map(|r| r.name.to_ascii()).collect();
            assert_eq!(glue, ["ns.sub.example.com."], "in-zone glue only, over {via:?}");
        }
        // DS is answered from the parent side of the cut, authoritatively.
        let msg = ask(addr, via, "sub.example.com.", RecordType::DS, Ask::default());
        assert!(msg.metadata.authoritative);
        assert_eq!(msg.authorities[0].record_type(), RecordType::SOA);
    }
}

#[test]
fn additional_addresses_for_mx_targets() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "example.com.", RecordType::MX, Ask::default());
        assert_eq!(msg.answers.len(), 2);
        let extra: Vec<_> = msg
            .additionals
            .iter()
            .map(|r| (r.name.to_ascii(), r.record_type()))
            .collect();
        assert_eq!(extra, [("mail.example.com.".to_owned(), RecordType::A)], "{via:?}");
    }
}

#[test]
fn wildcard_synthesis() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "Any.Thing.wild.example.com.", RecordType::A, Ask::default());
        assert_eq!(a_values(&msg), [Ipv4Addr::new(192, 0, 2, 99)], "{via:?}");
        assert_eq!(msg.answers[0].name.to_ascii(), "Any.Thing.wild.example.com.");
        let msg = ask(addr, via, "x.wild.example.com.", RecordType::AAAA, Ask::default());
        assert!(msg.answers.is_empty() && msg.metadata.response_code == ResponseCode::NoError);
    }
}

#[test]
fn any_answered_per_rfc8482() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "example.com.", RecordType::ANY, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
        assert!(msg.metadata.authoritative);
        let types: std::collections::BTreeSet<_> =
            msg.answers.iter().map(hickory_proto::rr::Record::record_type).collect();
        assert_eq!(types.len(), 1, "one RRset, not all of them ({types:?}) over {via:?}");
    }
}

#[test]
fn edns_opt_echo_payload_and_do_bit() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(
            addr,
            via,
            "www.example.com.",
            RecordType::A,
            Ask {
                edns: Some(4096),
                dnssec_ok: true,
                ..Ask::default()
            },
        );
        let edns = msg.edns.as_ref().expect("OPT echoed");
        assert_eq!(edns.max_payload(), 1232, "our advertised size");
        assert_eq!(edns.version(), 0);
        assert!(edns.flags().dnssec_ok, "DO copied (RFC 3225)");
        let msg = ask(
            addr,
            via,
            "www.example.com.",
            RecordType::A,
            Ask {
                edns: None,
                ..Ask::default()
            },
        );
        assert!(msg.edns.is_none(), "no OPT without one in the query");
    }
}

#[test]
fn badvers_for_edns_version_above_zero() {
    let edge = Edge::start();
    for (addr, via) in every_path(&edge) {
        let msg = ask(
            addr,
            via,
            "www.example.com.",
            RecordType::A,
            Ask {
                version: 1,
                ..Ask::default()
            },
        );
        // hickory names code 16 BADSIG (it is BADVERS in an OPT context, RFC 6891 §9).
        assert_eq!(u16::from(msg.metadata.response_code), 16, "BADVERS over {via:?}");
        assert_eq!(msg.edns.as_ref().unwrap().version(), 0);
        assert!(msg.answers.is_empty());
    }
}

#[test]
fn truncation_over_udp_and_full_answer_over_tcp() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        for edns in [None, Some(512), Some(1232)] {
            let msg = ask(
                addr,
                Via::Udp,
                "big.example.com.",
                RecordType::TXT,
                Ask { edns, ..Ask::default() },
            );
            assert!(msg.metadata.truncation, "TC with edns {edns:?}");
            // RFC 1035 §4.1.1: AA describes the name, which truncation does not change.
            assert!(msg.metadata.authoritative, "AA kept on a truncated answer");
            assert!(msg.answers.is_empty());
            assert_eq!(msg.edns.is_some(), edns.is_some(), "OPT kept in a truncated answer");
        }
        // Fits in a large EDNS buffer? Our ceiling is 1232, so still TC at 4096.
        let msg = ask(
            addr,
            Via::Udp,
            "big.example.com.",
            RecordType::TXT,
            Ask {
                edns: Some(4096),
                ..Ask::default()
            },
        );
        assert!(msg.metadata.truncation);
        let msg = ask(addr, Via::Tcp, "big.example.com.", RecordType::TXT, Ask::default());
        assert!(!msg.metadata.truncation);
        assert_eq!(msg.answers.len(), 20);
        // 512 octets are enough for www without EDNS: no TC.
        let msg = ask(
            addr,
            Via::Udp,
            "www.example.com.",
            RecordType::A,
            Ask {
                edns: None,
                ..Ask::default()
            },
        );
        assert!(!msg.metadata.truncation);
    }
}

#[test]
fn tcp_pipelining_on_one_connection() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let names = [
            "www.example.com.",
            "static.example.com.",
            "nope.example.com.",
            "big.example.com.",
        ];
        let queries: Vec<_> = names.iter().map(|n| query(n, RecordType::A, Ask::default())).collect();
        // All queries first, then all answers.
        for q in &queries {
            write_framed(&mut stream, q);
        }
        let mut ids: Vec<u16> = Vec::new();
        for _ in &queries {
            let raw = read_framed(&mut stream);
            ids.push(u16::from_be_bytes([raw[0], raw[1]]));
        }
        let mut sent: Vec<u16> = queries.iter().map(|q| u16::from_be_bytes([q[0], q[1]])).collect();
        sent.sort_unstable();
        ids.sort_unstable();
        assert_eq!(ids, sent, "every pipelined query answered");
    }
}

#[test]
fn tcp_idle_connections_are_closed() {
    let edge = Edge::start_with(&common::example_zones(), &["--tcp-idle-timeout", "1"]);
    let mut stream = TcpStream::connect(edge.v4).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1];
    let n = std::io::Read::read(&mut stream, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "server closed the idle connection");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "closed after {waited:?}"
    );
}

/// Whether the server closed `stream` (it reads EOF or a reset within 2 s).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 1];
    match std::io::Read::read(stream, &mut buf) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn tcp_connection_cap_evicts_the_oldest_idle_client() {
    let edge = Edge::start_with(
        &common::example_zones(),
        &["--max-tcp-connections", "2", "--tcp-idle-timeout", "5"],
    );
    // Two idle connections take both places; a third client takes the oldest's place
    // (RFC 7766 §6.2.3) and is answered at once.
    let mut a = TcpStream::connect(edge.v4).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut b = TcpStream::connect(edge.v4).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let q = query("www.example.com.", RecordType::A, Ask::default());
    let started = std::time::Instant::now();
    parse_response(&q, &tcp_raw_patient(edge.v4, &q));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the third client was answered without waiting for the idle timeout"
    );
    assert!(closed_by_server(&mut a), "the oldest idle connection was closed for it");
    // The other is still served.
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write_framed(&mut b, &q);
    parse_response(&q, &read_framed(&mut b));
}

#[test]
fn tcp_connections_over_the_per_source_cap_replace_that_source_s_oldest() {
    let edge = Edge::start_with(&common::example_zones(), &["--max-tcp-per-source", "2"]);
    let q = query("www.example.com.", RecordType::A, Ask::default());
    let mut first = TcpStream::connect(edge.v4).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut second = TcpStream::connect(edge.v4).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The third from the same address takes the place of its oldest idle connection...
    let mut over = TcpStream::connect(edge.v4).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write_framed(&mut over, &q);
    parse_response(&q, &read_framed(&mut over));
    assert!(
        closed_by_server(&mut first),
        "the source's oldest connection was closed"
    );
    // ... while the other within the cap is answered.
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write_framed(&mut second, &q);
    parse_response(&q, &read_framed(&mut second));
}

fn tcp_raw_patient(addr: std::net::SocketAddr, q: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write_framed(&mut stream, q);
    read_framed(&mut stream)
}

#[test]
fn record_types_served() {
    let edge = Edge::start();
    let cases = [
        ("www.example.com.", RecordType::AAAA),
        ("example.com.", RecordType::NS),
        ("example.com.", RecordType::SOA),
        ("example.com.", RecordType::MX),
        ("example.com.", RecordType::TXT),
        ("example.com.", RecordType::CAA),
        ("_sip._udp.example.com.", RecordType::SRV),
        ("4.2.0.192.in-addr.example.com.", RecordType::PTR),
        ("alias.example.com.", RecordType::CNAME),
    ];
    for (addr, via) in every_path(&edge) {
        for (name, qtype) in cases {
            let msg = ask(addr, via, name, qtype, Ask::default());
            assert!(!msg.answers.is_empty(), "{name} {qtype} over {via:?}");
            assert!(msg.answers.iter().all(|r| r.record_type() == qtype), "{name} {qtype}");
        }
    }
}

/// A zone of CNAME corner cases (issue 12), served by its own edge.
fn cname_cases_edge() -> (Edge, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.test.toml"),
        r#"[zone]
origin = "c.example."
ttl = 60
[zone.soa]
mname = "ns.c.example."
rname = "h.c.example."
serial = 1
refresh = 7200
retry = 900
expire = 1209600
minimum = 30
[zone.ns]
names = ["ns.c.example."]
[[rrset]]
name = "ns"
type = "A"
values = ["192.0.2.53"]
[[rrset]]
name = "loop-a"
type = "CNAME"
values = ["loop-b"]
[[rrset]]
name = "loop-b"
type = "CNAME"
values = ["loop-a"]
[[rrset]]
name = "alias"
type = "CNAME"
values = ["target"]
[[rrset]]
name = "target"
type = "A"
values = ["192.0.2.7"]
[[rrset]]
name = "into-cut"
type = "CNAME"
values = ["host.cut"]
[[rrset]]
name = "cut"
type = "NS"
values = ["ns.cut", "ns.elsewhere.example."]
[[rrset]]
name = "ns.cut"
type = "A"
values = ["192.0.2.153"]
"#,
    )
    .unwrap();
    (Edge::start_with(dir.path(), &[]), dir)
}

#[test]
fn cname_loop_is_answered_with_the_loop_once() {
    let (edge, _dir) = cname_cases_edge();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "loop-a.c.example.", RecordType::A, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{via:?}");
        let owners: Vec<String> = msg.answers.iter().map(|r| r.name.to_ascii()).collect();
        // RFC 1034 §3.6.2, RFC 2181 §5: the two records of the loop, as knotd answers.
        assert_eq!(owners, ["loop-a.c.example.", "loop-b.c.example."], "{via:?}: {msg:?}");
    }
}

#[test]
fn rrsig_and_nsec_at_a_cname_owner_get_nodata() {
    let (edge, _dir) = cname_cases_edge();
    for (addr, via) in every_path(&edge) {
        for qtype in [RecordType::RRSIG, RecordType::NSEC] {
            let msg = ask(addr, via, "alias.c.example.", qtype, Ask::default());
            assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
            assert!(msg.metadata.authoritative);
            assert!(msg.answers.is_empty(), "{qtype} not chased through the CNAME: {msg:?}");
            assert_eq!(msg.authorities[0].record_type(), RecordType::SOA);
        }
        let msg = ask(addr, via, "alias.c.example.", RecordType::A, Ask::default());
        assert_eq!(msg.answers.len(), 2, "A is chased: {msg:?}");
    }
}

#[test]
fn cname_into_a_delegation_ends_with_the_referral() {
    let (edge, _dir) = cname_cases_edge();
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "into-cut.c.example.", RecordType::A, Ask::default());
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
        assert!(msg.metadata.authoritative, "the CNAME is ours: {msg:?}");
        assert_eq!(msg.answers.len(), 1);
        assert_eq!(msg.answers[0].record_type(), RecordType::CNAME);
        // RFC 1034 §4.3.2 step 3b at the target: the cut's NS, then the in-zone glue.
        let ns: Vec<(String, RecordType)> = msg
            .authorities
            .iter()
            .map(|r| (r.name.to_ascii(), r.record_type()))
            .collect();
        assert_eq!(ns.len(), 2, "{msg:?}");
        assert!(
            ns.iter().all(|(n, t)| n == "cut.c.example." && *t == RecordType::NS),
            "{ns:?}"
        );
        let glue: Vec<String> = msg.additionals.iter().map(|r| r.name.to_ascii()).collect();
        assert_eq!(glue, ["ns.cut.c.example."], "{msg:?}");
    }
}

/// Master-file forms from issue 12 (RFC 1035 §5.1 escapes, RFC 3597 generic syntax, DS
/// at a delegation from a master file and from TOML), loaded and served exactly.
#[test]
fn master_file_forms_are_served_exactly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.zone"),
        "$TTL 300\n\
         @ SOA ns h 1 7200 900 1209600 30\n\
         @ NS ns\n\
         ns A 192.0.2.53\n\
         txt TXT \"\\127\\128\\200\\255\" \"\\065\" plain\\032word\n\
         sp\\032ace A 192.0.2.1\n\
         unknown TYPE65280 \\# 4 0a000001\n\
         generic A \\# 4 c0000263\n\
         cut NS ns.cut\n\
         ns.cut A 192.0.2.153\n\
         cut DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118\n\
         cut2 NS ns.elsewhere.example.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("m.toml"),
        "[zone]\norigin = \"m.example.\"\ninclude = \"m.zone\"\nttl = 60\n\
         [[rrset]]\nname = \"cut2\"\ntype = \"DS\"\nvalues = [\"2371 13 2 1F987CC6583E92DF0890718C42\"]\n",
    )
    .unwrap();
    let edge = Edge::start_with(dir.path(), &[]);
    let rdata_of = |msg: &hickory_proto::op::Message| -> Vec<u8> {
        use hickory_proto::serialize::binary::BinEncodable as _;
        msg.answers[0].data.to_bytes().unwrap()
    };
    for (addr, via) in every_path(&edge) {
        let msg = ask(addr, via, "txt.m.example.", RecordType::TXT, Ask::default());
        assert_eq!(
            rdata_of(&msg),
            b"\x04\x7f\x80\xc8\xff\x01A\x0aplain word",
            "{via:?}: \\DDD is one octet"
        );
        let msg = ask(addr, via, "sp\\032ace.m.example.", RecordType::A, Ask::default());
        assert_eq!(a_values(&msg), [Ipv4Addr::new(192, 0, 2, 1)], "{via:?}: escaped label");
        let msg = ask(
            addr,
            via,
            "unknown.m.example.",
            RecordType::Unknown(65280),
            Ask::default(),
        );
        assert_eq!(msg.answers[0].record_type(), RecordType::Unknown(65280));
        assert_eq!(rdata_of(&msg), [10, 0, 0, 1], "{via:?}: RFC 3597 type");
        let msg = ask(addr, via, "generic.m.example.", RecordType::A, Ask::default());
        assert_eq!(
            a_values(&msg),
            [Ipv4Addr::new(192, 0, 2, 99)],
            "{via:?}: RFC 3597 form of A"
        );
        for (cut, len) in [("cut.m.example.", 24), ("cut2.m.example.", 17)] {
            // DS is the parent side's data: answered with authority (RFC 4035 §3.1.4.1).
            let msg = ask(addr, via, cut, RecordType::DS, Ask::default());
            assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{via:?} {cut}");
            assert!(msg.metadata.authoritative, "{via:?} {cut}: {msg:?}");
            assert_eq!(msg.answers.len(), 1, "{via:?} {cut}: {msg:?}");
            assert_eq!(msg.answers[0].record_type(), RecordType::DS);
            assert_eq!(rdata_of(&msg).len(), len, "{via:?} {cut}");
            let below = ask(addr, via, &format!("www.{cut}"), RecordType::A, Ask::default());
            assert!(
                !below.metadata.authoritative && below.answers.is_empty(),
                "still a referral"
            );
            assert_eq!(below.authorities[0].record_type(), RecordType::NS);
        }
    }
}

/// (TYPE, RDATA as sent) of every record after the question of `raw`.
fn raw_records(raw: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let skip_name = |mut pos: usize| loop {
        match raw[pos] {
            0 => return pos + 1,
            len if len >= 0xc0 => return pos + 2,
            len => pos += 1 + usize::from(len),
        }
    };
    let count = |i: usize| usize::from(u16::from_be_bytes([raw[4 + 2 * i], raw[5 + 2 * i]]));
    let mut pos = skip_name(12) + 4;
    let mut out = Vec::new();
    for _ in 0..count(1) + count(2) + count(3) {
        pos = skip_name(pos);
        let rtype = u16::from_be_bytes([raw[pos], raw[pos + 1]]);
        let rdlen = usize::from(u16::from_be_bytes([raw[pos + 8], raw[pos + 9]]));
        out.push((rtype, raw[pos + 10..pos + 10 + rdlen].to_vec()));
        pos += 10 + rdlen;
    }
    out
}

/// Names inside NS, CNAME and MX RDATA are compressed against the question (RFC 1035
/// §4.1.4; issue 12: a referral with 10 NS was 559 octets, knotd's 379).
#[test]
fn rdata_names_are_compressed() {
    let (edge, _dir) = cname_cases_edge();
    let no_edns = Ask {
        edns: None,
        ..Ask::default()
    };
    for (addr, via) in every_path(&edge) {
        let q = query("www.cut.c.example.", RecordType::A, no_edns);
        let raw = match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        };
        let msg = parse_response(&q, &raw);
        let ns: Vec<Vec<u8>> = raw_records(&raw)
            .into_iter()
            .filter(|(t, _)| *t == 2)
            .map(|(_, rdata)| rdata)
            .collect();
        // `ns` + pointer to "cut.c.example." at offset 12 + 4 in the question.
        assert!(ns.contains(&b"\x02ns\xc0\x10".to_vec()), "{via:?}: {ns:02x?}");
        // "ns.elsewhere.example." shares "example." with the question (offset 12 + 10).
        assert!(
            ns.contains(&b"\x02ns\x09elsewhere\xc0\x16".to_vec()),
            "{via:?}: {ns:02x?}"
        );
        let names: Vec<String> = msg.authorities.iter().map(|r| r.data.to_string()).collect();
        assert!(names.contains(&"ns.cut.c.example.".to_owned()), "{names:?}");
        // The CNAME's target, and the chain on from it, decode through the pointers.
        let q = query("into-cut.c.example.", RecordType::A, no_edns);
        let raw = match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        };
        let msg = parse_response(&q, &raw);
        assert_eq!(
            raw_records(&raw)[0],
            (5, b"\x04host\x03cut\xc0\x15".to_vec()),
            "{via:?}"
        );
        assert_eq!(msg.answers[0].data.to_string(), "host.cut.c.example.");
        assert_eq!(msg.authorities[0].name.to_ascii(), "cut.c.example.");
    }
}

/// NSID (RFC 5001): with `--nsid` set, a query carrying an NSID option gets the
/// identifier in our OPT record; other queries, and every query of an edge without
/// one, get no option.
#[test]
fn nsid_answers_only_when_set_and_asked() {
    let with = Edge::start_with(&common::example_zones(), &["--nsid", "edge-test-1"]);
    let without = Edge::start();
    let ask_raw = |addr, via: Via, options: &[u8]| {
        let mut q = query("www.example.com.", RecordType::A, Ask::default());
        let rdlen_at = q.len() - 2;
        q[rdlen_at..].copy_from_slice(&(options.len() as u16).to_be_bytes());
        q.extend_from_slice(options);
        let raw = match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        };
        parse_response(&q, &raw);
        raw
    };
    // An unassigned option (ignored), then the NSID request.
    let request = [0xfdu8, 0xe9, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3, 0, 0];
    let nsid_option = [&[0u8, 3, 0, 11][..], b"edge-test-1"].concat();
    for (addr, via) in every_path(&with) {
        let raw = ask_raw(addr, via, &request);
        assert!(raw.ends_with(&nsid_option), "{via:?}: {raw:02x?}");
        // OPT RDLENGTH covers exactly the option.
        assert_eq!(raw[raw.len() - 17..raw.len() - 15], [0, 15], "{via:?}");
        let raw = ask_raw(addr, via, &request[..12]);
        assert!(raw.ends_with(&[0, 0]), "{via:?}: no NSID asked, no option: {raw:02x?}");
    }
    for (addr, via) in every_path(&without) {
        let raw = ask_raw(addr, via, &request);
        assert!(raw.ends_with(&[0, 0]), "{via:?}: no NSID set, no option: {raw:02x?}");
    }
    // With a COOKIE too: the NSID option, then the cookie (RFC 7873), RDLENGTH both.
    let with_cookie = [&request[12..], &[0, 10, 0, 8], &[9; 8]].concat();
    for (addr, via) in every_path(&with) {
        let raw = ask_raw(addr, via, &with_cookie);
        let (options, cookie) = raw.split_at(raw.len() - 28);
        assert!(options.ends_with(&nsid_option), "{via:?}: {raw:02x?}");
        assert_eq!(cookie[..12], [&[0u8, 10, 0, 24][..], &[9; 8]].concat()[..], "{via:?}");
        assert_eq!(raw[raw.len() - 45..raw.len() - 43], [0, 43], "{via:?}");
    }
}

/// EDNS Client Subnet (RFC 7871): a valid option comes back with FAMILY, SOURCE and
/// ADDRESS copied and SCOPE 0 (no answer depends on the client yet), beside NSID when
/// both are asked; a malformed one is FORMERR; a query without one gets none.
#[test]
fn client_subnet_is_echoed_with_scope_zero_and_checked() {
    let edge = Edge::start_with(&common::example_zones(), &["--nsid", "edge-test-1"]);
    let ask_raw = |addr, via: Via, options: &[u8]| {
        let mut q = query("www.example.com.", RecordType::A, Ask::default());
        let rdlen_at = q.len() - 2;
        q[rdlen_at..].copy_from_slice(&(options.len() as u16).to_be_bytes());
        q.extend_from_slice(options);
        match via {
            Via::Udp => udp_raw(addr, &q),
            Via::Tcp => tcp_raw(addr, &q),
        }
    };
    let v4 = [0u8, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100];
    let v6 = [0u8, 8, 0, 11, 0, 2, 56, 0, 0x20, 1, 0x0d, 0xb8, 0, 0x12, 0x34];
    for (addr, via) in every_path(&edge) {
        for ecs in [&v4[..], &v6[..]] {
            let raw = ask_raw(addr, via, ecs);
            assert_eq!(raw[3] & 0x0f, 0, "{via:?}: NOERROR");
            assert!(raw.ends_with(ecs), "{via:?}: echoed with scope 0: {raw:02x?}");
            let rdlen = (ecs.len() as u16).to_be_bytes();
            assert_eq!(raw[raw.len() - ecs.len() - 2..raw.len() - ecs.len()], rdlen, "{via:?}");
        }
        // With an NSID request too: NSID, then ECS.
        let both = [&[0u8, 3, 0, 0][..], &v4].concat();
        let raw = ask_raw(addr, via, &both);
        let expected = [&[0u8, 3, 0, 11][..], b"edge-test-1", &v4].concat();
        assert!(raw.ends_with(&expected), "{via:?}: {raw:02x?}");
        // Malformed: SCOPE set in a query, bits past SOURCE, unknown family, two options.
        for bad in [
            vec![0u8, 8, 0, 7, 0, 1, 24, 8, 198, 51, 100],
            vec![0u8, 8, 0, 7, 0, 1, 22, 0, 10, 0, 5],
            vec![0u8, 8, 0, 7, 0, 3, 24, 0, 198, 51, 100],
            [&v4[..], &v4[..]].concat(),
        ] {
            let raw = ask_raw(addr, via, &bad);
            assert_eq!(raw[3] & 0x0f, 1, "{via:?}: FORMERR for {bad:02x?}: {raw:02x?}");
        }
        let raw = ask_raw(addr, via, &[]);
        assert!(raw.ends_with(&[0, 0]), "{via:?}: no ECS asked, none given: {raw:02x?}");
    }
}
