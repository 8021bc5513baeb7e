//! Client-aware answers against Knot's `geoip` module in subnet mode (Debian
//! `knot-module-geoip`, installed by scripts/setup-peers): the same generated prefix
//! rules — nested IPv4 and IPv6 prefixes, one answer per rule, a default for everyone
//! else — served by qdns (`policy = "ip"`) and by knotd, and thousands of ECS queries
//! (/24 and /56, as resolvers send them) asked of both.
//!
//! Answers must be equal. Scopes must be equal too, except where Knot is not an oracle
//! (read from its source, `knot/modules/geoip`): it echoes the matched view's own
//! prefix even when a nested view with another answer lies inside it (a resolver would
//! cache that answer for the nested view's clients too; RFC 7871 §7.3.1 asks for the
//! prefix the answer is valid for), and it answers the zone's default records with scope
//! 0 though other clients get other answers (§7.2.1: 0 only when the answer does not
//! depend on the client). Each difference is counted by its reason; any other fails.
mod common;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    path::Path,
    time::Duration,
};

use common::{knot::Knot, Edge};
use hickory_proto::{
    op::{Edns, Message, Query},
    rr::{
        rdata::opt::{ClientSubnet, EdnsCode, EdnsOption},
        Name, RData, RecordType,
    },
};
use qdns_testkit::{fixtures::ZONE_HEAD, Rng};

/// One generated rule: a prefix and its answer.
struct Rule {
    addr: IpAddr,
    len: u8,
    answer: Ipv4Addr,
}

impl Rule {
    fn text(&self) -> String {
        format!("{}/{}", self.addr, self.len)
    }

    fn contains(&self, addr: IpAddr) -> bool {
        match (self.addr, addr) {
            (IpAddr::V4(r), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(a) & mask == u32::from(r)
            }
            (IpAddr::V6(r), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0);
                u128::from(a) & mask == u128::from(r)
            }
            _ => false,
        }
    }
}

const DEFAULT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
/// ECS queries asked of both servers.
const QUERIES: usize = 3000;

/// Nested rules in `10.0.0.0/8` and `2001:db8::/32` (few top bits vary, so they nest).
fn generate(rng: &mut Rng) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut n = 0u8;
    while rules.len() < 48 {
        let (addr, len) = if rng.chance(70) {
            let len = [9u8, 12, 14, 16, 18, 20, 22, 24][rng.below(8)];
            let raw = 0x0a00_0000 | (rng.below(4) as u32) << 22 | (rng.next() as u32 & 0x003f_ffff);
            let mask = u32::MAX << (32 - u32::from(len));
            (IpAddr::V4(Ipv4Addr::from(raw & mask)), len)
        } else {
            let len = [36u8, 40, 44, 48, 52, 56][rng.below(6)];
            let raw = 0x2001_0db8u128 << 96 | (rng.below(4) as u128) << 90 | (u128::from(rng.next()) << 32);
            let mask = u128::MAX << (128 - u32::from(len));
            (IpAddr::V6(Ipv6Addr::from(raw & mask)), len)
        };
        if rules.iter().any(|r| r.addr == addr && r.len == len) {
            continue;
        }
        n += 1;
        rules.push(Rule {
            addr,
            len,
            answer: Ipv4Addr::new(10, 255, n, 1),
        });
    }
    rules
}

fn qdns_zone(rules: &[Rule]) -> String {
    let mut zone = format!("{ZONE_HEAD}\n[[cidr_collection]]\nid = \"g\"\n[cidr_collection.locations]\n");
    for (i, r) in rules.iter().enumerate() {
        let _ = writeln!(zone, "r{i} = [\"{}\"]", r.text());
    }
    zone.push_str("\n[[rrset]]\nname = \"geo\"\ntype = \"A\"\npolicy = \"ip\"\nmembers = [\n");
    for (i, r) in rules.iter().enumerate() {
        let _ = writeln!(
            zone,
            "  {{ id = \"r{i}\", cidr = \"g/r{i}\", values = [\"{}\"] }},",
            r.answer
        );
    }
    let _ = writeln!(
        zone,
        "  {{ id = \"rest\", cidr = \"*\", values = [\"{DEFAULT}\"] }},\n]"
    );
    zone
}

/// knotd with the zone (default `geo` record) and mod-geoip in subnet mode.
fn start_knot(dir: &Path, rules: &[Rule]) -> Knot {
    let zone = "$ORIGIN t.example.\n$TTL 60\n@ SOA ns.t.example. h.t.example. 1 1 1 1 5\n@ NS ns.t.example.\n";
    std::fs::write(dir.join("t.zone"), format!("{zone}geo A {DEFAULT}\n")).unwrap();
    let mut geo = String::from("geo.t.example:\n");
    for r in rules {
        let _ = writeln!(geo, "  - net: {}\n    A: {}", r.text(), r.answer);
    }
    std::fs::write(dir.join("geo.conf"), geo).unwrap();
    let d = dir.display();
    let rest = format!(
        "mod-geoip:\n  - id: subnets\n    config-file: {d}/geo.conf\n    mode: subnet\n    ttl: 60\n\
         zone:\n  - domain: t.example\n    file: {d}/t.zone\n    journal-content: none\n    zonefile-sync: -1\n    \
         module: mod-geoip/subnets\n"
    );
    // Without knot-module-geoip knotd refuses the configuration and exits.
    Knot::start(dir, "    edns-client-subnet: on\n", &rest, |addr| {
        ask(addr, None).is_some()
    })
}

/// (answer addresses, echoed scope) for `geo.t.example A` with ECS `client`.
fn ask(server: SocketAddr, client: Option<(IpAddr, u8)>) -> Option<(Vec<Ipv4Addr>, Option<u8>)> {
    let mut msg = Message::query();
    msg.metadata.id = 7;
    msg.add_query(Query::query(Name::from_ascii("geo.t.example.").ok()?, RecordType::A));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    if let Some((addr, len)) = client {
        edns.options_mut()
            .as_mut()
            .push((EdnsCode::Subnet, EdnsOption::Subnet(ClientSubnet::new(addr, len, 0))));
    }
    msg.set_edns(edns);
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        socket.send_to(&msg.to_vec().ok()?, server).ok()?;
        if let Ok((len, _)) = socket.recv_from(&mut buf) {
            let reply = Message::from_vec(&buf[..len]).ok()?;
            if reply.metadata.response_code != hickory_proto::op::ResponseCode::NoError {
                return None;
            }
            let mut answers: Vec<Ipv4Addr> = reply
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect();
            answers.sort();
            let scope = reply
                .edns
                .as_ref()
                .and_then(|e| match e.options().get(EdnsCode::Subnet) {
                    Some(EdnsOption::Subnet(s)) => Some(s.scope_prefix()),
                    _ => None,
                });
            return Some((answers, scope));
        }
    }
    None
}

/// A client prefix: mostly inside the rules' space, some outside.
fn client(rng: &mut Rng, rules: &[Rule]) -> (IpAddr, u8) {
    let v6 = rng.chance(30);
    // Half the time a prefix drawn near a rule (its first, last or a random /24 or /56).
    let near = rules.iter().filter(|r| r.addr.is_ipv6() == v6).nth(rng.below(16));
    match (v6, near, rng.chance(50)) {
        (false, Some(r), true) => {
            let IpAddr::V4(base) = r.addr else { unreachable!() };
            let span = 1u32.checked_shl(32 - u32::from(r.len)).unwrap_or(0).wrapping_sub(1);
            let pick = [0, span, rng.next() as u32 & span][rng.below(3)];
            (IpAddr::V4(Ipv4Addr::from((u32::from(base) | pick) & 0xffff_ff00)), 24)
        }
        (true, Some(r), true) => {
            let IpAddr::V6(base) = r.addr else { unreachable!() };
            let span = u128::MAX.checked_shr(u32::from(r.len)).unwrap_or(0);
            let pick = [0, span, (u128::from(rng.next()) << 64 | u128::from(rng.next())) & span][rng.below(3)];
            (
                IpAddr::V6(Ipv6Addr::from((u128::from(base) | pick) & (u128::MAX << 72))),
                56,
            )
        }
        (false, _, _) => {
            let raw = if rng.chance(80) {
                0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff)
            } else {
                rng.next() as u32
            };
            (IpAddr::V4(Ipv4Addr::from(raw & 0xffff_ff00)), 24)
        }
        (true, _, _) => {
            let raw = 0x2001_0db8u128 << 96 | u128::from(rng.next()) << 40;
            (IpAddr::V6(Ipv6Addr::from(raw & (u128::MAX << 72))), 56)
        }
    }
}

#[test]
fn answers_and_scopes_match_knots_geoip_subnet_mode() {
    let seed = 0x5eed_0029;
    let mut rng = Rng(seed);
    let rules = generate(&mut rng);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.toml"), qdns_zone(&rules)).unwrap();
    let edge = Edge::start_with(dir.path(), &[]);
    let knot_dir = tempfile::tempdir().unwrap();
    let knot = start_knot(knot_dir.path(), &rules);

    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unexplained = Vec::new();
    for _ in 0..QUERIES {
        let c = client(&mut rng, &rules);
        let ours = ask(edge.v4, Some(c)).expect("qdns answers");
        let theirs = ask(knot.addr, Some(c)).expect("knotd answers");
        let matched = rules.iter().filter(|r| r.contains(c.0)).max_by_key(|r| r.len);
        let want = matched.map_or(DEFAULT, |r| r.answer);
        if ours.0 != [want] || theirs.0 != [want] {
            unexplained.push(format!(
                "{}/{}: answer qdns {:?}, knotd {:?}, rules say {want}",
                c.0, c.1, ours.0, theirs.0
            ));
            continue;
        }
        let reason = match (ours.1, theirs.1, matched) {
            (a, b, _) if a == b => "same scope",
            // Knot echoes the matched view's prefix though a nested view lies inside it.
            (Some(a), Some(b), Some(r)) if b == r.len && a > b => {
                "knotd: the matched view's prefix, though a nested view inside it answers otherwise"
            }
            // Knot answers its default records with scope 0.
            (Some(a), Some(0), None) if a > 0 => "knotd: scope 0 for the default answer, though other clients differ",
            _ => {
                unexplained.push(format!(
                    "{}/{}: answer {want}, scope qdns {:?}, knotd {:?} (rule {:?})",
                    c.0,
                    c.1,
                    ours.1,
                    theirs.1,
                    matched.map(Rule::text)
                ));
                continue;
            }
        };
        *reasons.entry(reason).or_default() += 1;
    }
    eprintln!("seed {seed:#x}, {QUERIES} ECS queries: {reasons:#?}");
    assert!(
        unexplained.is_empty(),
        "{} of {QUERIES} differ without a reason; first: {:#?}",
        unexplained.len(),
        &unexplained[..unexplained.len().min(20)]
    );
    assert!(
        reasons.get("same scope").copied().unwrap_or(0) > QUERIES / 3,
        "{reasons:?}"
    );
}
