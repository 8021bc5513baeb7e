//! Client-aware answers against Knot's `geoip` module (Debian `knot-module-geoip`,
//! installed by scripts/setup-peers), in both its modes:
//! - subnet mode: the same generated prefix rules — nested IPv4 and IPv6 prefixes, one
//!   answer per rule, a default for everyone else — served by qdns (`policy = "ip"`) and
//!   by knotd;
//! - geodb mode: one generated MaxMind DB (written by MaxMind's Perl writer) and the same
//!   continent / country / subdivision views, served by qdns (`policy = "geo"`, the
//!   database compiled to a prefix table) and by knotd (which reads the database);
//!
//! and thousands of ECS queries (/24 and /56, as resolvers send them) asked of both.
//!
//! Answers must be equal. Scopes must be equal too, except where Knot is not an oracle
//! (read from its source, `knot/modules/geoip`): it echoes the matched view's own
//! prefix even when a nested view with another answer lies inside it (a resolver would
//! cache that answer for the nested view's clients too; RFC 7871 §7.3.1 asks for the
//! prefix the answer is valid for), and it answers the zone's default records with scope
//! 0 though other clients get other answers (§7.2.1: 0 only when the answer does not
//! depend on the client). In geodb mode it echoes the database network's own prefix where
//! qdns merges neighbouring networks with the same answer into a shorter, still exact
//! scope. Each difference is counted by its reason; any other fails.
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
    let mut views = String::from("geo.t.example:\n");
    for r in rules {
        let _ = writeln!(views, "  - net: {}\n    A: {}", r.text(), r.answer);
    }
    start_knot_with(dir, &views, "    mode: subnet\n")
}

/// knotd serving `t.example` (the default `geo` record) with mod-geoip's `views` in the
/// `mode` lines given.
fn start_knot_with(dir: &Path, views: &str, mode: &str) -> Knot {
    let zone = "$ORIGIN t.example.\n$TTL 60\n@ SOA ns.t.example. h.t.example. 1 1 1 1 5\n@ NS ns.t.example.\n";
    std::fs::write(dir.join("t.zone"), format!("{zone}geo A {DEFAULT}\n")).unwrap();
    std::fs::write(dir.join("geo.conf"), views).unwrap();
    let d = dir.display();
    let rest = format!(
        "mod-geoip:\n  - id: views\n    config-file: {d}/geo.conf\n{mode}    ttl: 60\n\
         zone:\n  - domain: t.example\n    file: {d}/t.zone\n    journal-content: none\n    zonefile-sync: -1\n    \
         module: mod-geoip/views\n"
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

/// A generated database: distinct networks (/16 to /24) in `10.0.0.0/8` and
/// `2001:db8::/32`, each with a continent, a country and maybe a subdivision drawn from
/// small sets (so neighbours often share an answer).
fn geo_networks(rng: &mut Rng) -> Vec<(String, &'static str, &'static str, &'static str)> {
    const PLACES: [(&str, &str, &[&str]); 6] = [
        ("EU", "DE", &["BY", "BE", "HH"]),
        ("EU", "FR", &["IDF", ""]),
        ("EU", "NL", &[""]),
        ("NA", "US", &["CA", "NY", "TX"]),
        ("AS", "JP", &["13", ""]),
        ("AF", "NA", &[""]),
    ];
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..400u32 {
        let v6 = i % 5 == 4;
        let net = if v6 {
            let len = [40u8, 44, 48, 52, 56][rng.below(5)];
            // Distinct /40 parents keep networks from overlapping.
            let parent = 0x2001_0db8u128 << 96 | (u128::from(i) << 88);
            let within = (u128::from(rng.next()) << 64) & (u128::MAX >> 40) & (u128::MAX << (128 - u32::from(len)));
            format!("{}/{len}", Ipv6Addr::from(parent | within))
        } else {
            let len = [16u8, 18, 20, 22, 24][rng.below(5)];
            let parent = 0x0a00_0000u32 | (i << 16);
            let within = (rng.next() as u32) & 0xffff & (u32::MAX << (32 - u32::from(len)));
            format!("{}/{len}", Ipv4Addr::from(parent | within))
        };
        if !seen.insert(net.clone()) {
            continue;
        }
        let (continent, country, subs) = PLACES[rng.below(PLACES.len())];
        out.push((net, continent, country, subs[rng.below(subs.len())]));
    }
    // Neighbours with one answer: the next /24 after some /24s, same place.
    let copies: Vec<_> = out
        .iter()
        .filter(|(net, ..)| {
            net.ends_with(".0/24")
                && net
                    .split('.')
                    .nth(2)
                    .is_some_and(|o| o.parse::<u8>().is_ok_and(|o| o % 2 == 0))
        })
        .map(|(net, c, k, s)| {
            let base: Ipv4Addr = net.trim_end_matches("/24").parse().unwrap();
            (format!("{}/24", Ipv4Addr::from(u32::from(base) + 256)), *c, *k, *s)
        })
        .collect();
    out.extend(copies);
    out
}

/// The answer for a database record, by the views both servers are given: the most
/// specific of subdivision, country, continent that has a view, else the default.
fn geo_views() -> Vec<(&'static str, &'static str, Ipv4Addr)> {
    // (qdns location, Knot geodb key "continent;country;subdivision", answer)
    vec![
        ("DE-BY", "EU;DE;BY", Ipv4Addr::new(10, 255, 0, 1)),
        ("US-CA", "NA;US;CA", Ipv4Addr::new(10, 255, 0, 2)),
        ("JP-13", "AS;JP;13", Ipv4Addr::new(10, 255, 0, 3)),
        ("DE", "EU;DE;*", Ipv4Addr::new(10, 255, 0, 4)),
        ("US", "NA;US;*", Ipv4Addr::new(10, 255, 0, 5)),
        ("country:NA", "AF;NA;*", Ipv4Addr::new(10, 255, 0, 6)),
        ("EU", "EU;*;*", Ipv4Addr::new(10, 255, 0, 7)),
    ]
}

/// The qdns zone of the views: a geo set, a member per view, `*` the default.
fn geo_zone(views: &[(&str, &str, Ipv4Addr)]) -> String {
    let mut zone = format!("{ZONE_HEAD}\n[[rrset]]\nname = \"geo\"\ntype = \"A\"\npolicy = \"geo\"\nmembers = [\n");
    for (i, (location, _, answer)) in views.iter().enumerate() {
        let _ = writeln!(
            zone,
            "  {{ id = \"v{i}\", location = \"{location}\", values = [\"{answer}\"] }},"
        );
    }
    let _ = writeln!(
        zone,
        "  {{ id = \"rest\", location = \"*\", values = [\"{DEFAULT}\"] }},\n]"
    );
    zone
}

#[test]
fn answers_and_scopes_match_knots_geoip_geodb_mode() {
    use qdns_testkit::mmdb::{write, GeoNet};
    let seed = 0x5eed_6e0d;
    let mut rng = Rng(seed);
    let networks = geo_networks(&mut rng);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("geo.mmdb");
    let subdivision_of = |s: &'static str| {
        if s.is_empty() {
            &[][..]
        } else {
            std::slice::from_ref(Box::leak(Box::new(s)))
        }
    };
    let records: Vec<GeoNet<'_>> = networks
        .iter()
        .map(|(net, continent, country, sub)| GeoNet {
            net,
            continent,
            country,
            subdivisions: subdivision_of(sub),
        })
        .collect();
    write(&db, &records);
    let views = geo_views();
    let zone = geo_zone(&views);
    let zones = dir.path().join("zones");
    std::fs::create_dir(&zones).unwrap();
    std::fs::write(zones.join("t.toml"), zone).unwrap();
    let edge = Edge::start_with(&zones, &["--geoip-db", db.to_str().unwrap()]);
    // Knot: views most specific first (it takes the first view that matches).
    let mut knot_views = String::from("geo.t.example:\n");
    for (_, key, answer) in &views {
        let _ = writeln!(knot_views, "  - geo: \"{key}\"\n    A: {answer}");
    }
    let knot_dir = tempfile::tempdir().unwrap();
    let mode = format!(
        "    mode: geodb\n    geodb-file: {}\n    geodb-key: [ continent/code, country/iso_code, subdivisions/0/iso_code ]\n",
        db.display()
    );
    let knot = start_knot_with(knot_dir.path(), &knot_views, &mode);

    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unexplained = Vec::new();
    let mut located = 0;
    for _ in 0..QUERIES {
        let c = if rng.chance(75) {
            let raw = 0x0a00_0000u32 | ((rng.below(420) as u32) << 16) | (rng.next() as u32 & 0xff00);
            (IpAddr::V4(Ipv4Addr::from(raw)), 24)
        } else {
            let raw = 0x2001_0db8u128 << 96
                | (rng.below(420) as u128) << 88
                | (u128::from(rng.next()) << 72 & (u128::MAX >> 40));
            (IpAddr::V6(Ipv6Addr::from(raw)), 56)
        };
        let ours = ask(edge.v4, Some(c)).expect("qdns answers");
        let theirs = ask(knot.addr, Some(c)).expect("knotd answers");
        if ours.0 != theirs.0 {
            unexplained.push(format!(
                "{}/{}: answer qdns {:?}, knotd {:?}",
                c.0, c.1, ours.0, theirs.0
            ));
            continue;
        }
        let default = ours.0 == [DEFAULT];
        located += usize::from(!default);
        let reason = match (ours.1, theirs.1) {
            (a, b) if a == b => "same scope",
            (Some(a), Some(0)) if default && a > 0 => {
                "knotd: scope 0 for the default answer, though other clients differ"
            }
            (Some(a), Some(b)) if !default && a < b => {
                "qdns: neighbouring networks with one answer merged (a shorter scope, still exact)"
            }
            _ => {
                unexplained.push(format!(
                    "{}/{}: answer {:?}, scope qdns {:?}, knotd {:?}",
                    c.0, c.1, ours.0, ours.1, theirs.1
                ));
                continue;
            }
        };
        *reasons.entry(reason).or_default() += 1;
    }
    eprintln!(
        "seed {seed:#x}, {} networks, {QUERIES} ECS queries, {located} answered by a view: {reasons:#?}",
        networks.len()
    );
    assert!(
        unexplained.is_empty(),
        "{} of {QUERIES} differ without a reason; first: {:#?}",
        unexplained.len(),
        &unexplained[..unexplained.len().min(20)]
    );
    // Both paths asked often: clients a view locates, and clients it does not.
    assert!(
        located > QUERIES / 10 && located < QUERIES * 9 / 10,
        "{located} located: {reasons:?}"
    );
}
