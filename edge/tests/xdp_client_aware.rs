//! Client-aware sets (SPEC §10, issue 29) decided in the XDP program, against the
//! user-space engine, through `BPF_PROG_TEST_RUN` on the real program (needs root).
//!
//! A zone with `ip` sets over a few hundred random nested IPv4 and IPv6 prefixes and a
//! `geo` set over a MaxMind DB written here, under random health: queries from many
//! packet sources, without EDNS, with EDNS and with Client Subnet options of every
//! SOURCE length (the clients at the edges of the rules' prefixes and just outside
//! them). Every frame the program sends must be byte for byte the message the engine
//! writes for the same query from the same source — the answer, and the echoed SCOPE —
//! and every frame it passes must be untouched.
mod common;

use std::{
    collections::{BTreeSet, HashMap},
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use common::{
    frames::{check_response_frame, from_source, ipv4_udp_frame, ipv6_udp_frame},
    netns::require_root,
    Rng,
};
use qdns_edge::{engine::Asked, xdp::XdpProgram, Engine, Transport};
use qdns_testkit::{
    fixtures::ZONE_HEAD,
    mmdb::{write, GeoNet},
};

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

/// Locations of the `ip` sets' collection.
const LOCATIONS: usize = 6;

/// A rule: an aligned prefix of either family, as text, with its first and last address.
struct Rule {
    text: String,
    first: IpAddr,
    last: IpAddr,
}

/// `count` random distinct nested prefixes: IPv4 inside 10.0.0.0/8 (/8 to /30) and a few
/// broad ones; IPv6 inside `2001:db8::/32` (/32 to /64).
fn rules(rng: &mut Rng, count: usize) -> Vec<Rule> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < count {
        let rule = if rng.chance(65) {
            let len = if rng.chance(5) {
                1 + rng.below(7) as u32
            } else {
                8 + rng.below(23) as u32
            };
            let raw = if len < 8 {
                rng.next() as u32
            } else {
                0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff)
            };
            let mask = u32::MAX << (32 - len);
            let net = raw & mask;
            if !seen.insert((4u8, u128::from(net), len)) {
                continue;
            }
            Rule {
                text: format!("{}/{len}", Ipv4Addr::from(net)),
                first: Ipv4Addr::from(net).into(),
                last: Ipv4Addr::from(net | !mask).into(),
            }
        } else {
            let len = 32 + rng.below(33) as u32;
            let raw = 0x2001_0db8u128 << 96 | u128::from(rng.next() as u32) << 64 | u128::from(rng.next());
            let mask = u128::MAX << (128 - len);
            let net = raw & mask;
            if !seen.insert((6u8, net, len)) {
                continue;
            }
            Rule {
                text: format!("{}/{len}", Ipv6Addr::from(net)),
                first: Ipv6Addr::from(net).into(),
                last: Ipv6Addr::from(net | !mask).into(),
            }
        };
        out.push(rule);
    }
    out
}

/// The test zone: `near` (A, `ip`, six locations and `*`, health-checked, degraded TTL),
/// `near6` (AAAA, the same locations), `wide` (A, one IPv6 rule longer than /64:
/// its IPv6 clients pass) and `geo` (A, `geo` over the database at `db`, ten members:
/// more than a policy entry holds, fewer in each chain).
fn zone_body(rules: &[Rule], rng: &mut Rng) -> String {
    let mut locations: Vec<Vec<&str>> = vec![Vec::new(); LOCATIONS];
    for rule in rules {
        locations[rng.below(LOCATIONS)].push(&rule.text);
    }
    let mut body = String::new();
    for i in 0..4 {
        let _ = write!(
            body,
            "\n[[health_check]]\nid = \"h{i}\"\ntype = \"http\"\nip = \"127.0.0.1\"\nport = {}\npath = \"/\"\n",
            18_100 + i
        );
    }
    body.push_str("\n[[cidr_collection]]\nid = \"c\"\n[cidr_collection.locations]\n");
    for (i, nets) in locations.iter().enumerate() {
        let quoted: Vec<String> = nets.iter().map(|n| format!("\"{n}\"")).collect();
        let _ = writeln!(body, "l{i} = [{}]", quoted.join(", "));
    }
    body.push_str(
        "\n[[cidr_collection]]\nid = \"w\"\n[cidr_collection.locations]\n\
         far = [\"2001:db8:77::/96\", \"10.77.0.0/16\"]\n",
    );
    let member = |i: usize, value: String| {
        let check = if i < 4 {
            format!(", health_check = \"h{i}\"")
        } else {
            String::new()
        };
        format!("  {{ id = \"m{i}\", cidr = \"c/l{i}\", values = [\"{value}\"]{check} }},\n")
    };
    body.push_str("\n[[rrset]]\nname = \"near\"\ntype = \"A\"\npolicy = \"ip\"\ndegraded_ttl = 10\nmembers = [\n");
    for i in 0..LOCATIONS {
        body.push_str(&member(i, format!("10.9.{i}.1")));
    }
    body.push_str("  { id = \"rest\", cidr = \"*\", values = [\"192.0.2.99\"] },\n]\n");
    body.push_str("\n[[rrset]]\nname = \"near6\"\ntype = \"AAAA\"\npolicy = \"ip\"\nmembers = [\n");
    for i in 0..LOCATIONS {
        body.push_str(&member(i, format!("2001:db8:9::{i}")));
    }
    body.push_str("  { id = \"rest\", cidr = \"*\", values = [\"2001:db8:9::99\"] },\n]\n");
    body.push_str(
        "\n[[rrset]]\nname = \"wide\"\ntype = \"A\"\npolicy = \"ip\"\nmembers = [\n\
         { id = \"far\", cidr = \"w/far\", values = [\"10.7.7.7\"], health_check = \"h0\" },\n\
         { id = \"rest\", cidr = \"*\", values = [\"10.7.7.8\"] },\n]\n\
         \n[[rrset]]\nname = \"geo\"\ntype = \"A\"\npolicy = \"geo\"\nmembers = [\n\
         { id = \"by\", location = \"DE-BY\", values = [\"10.8.0.0\"], health_check = \"h1\" },\n\
         { id = \"de\", location = \"DE\", values = [\"10.8.0.1\"], health_check = \"h2\" },\n\
         { id = \"fr\", location = \"FR\", values = [\"10.8.0.2\"], health_check = \"h0\" },\n\
         { id = \"eu\", location = \"EU\", values = [\"10.8.0.3\"] },\n\
         { id = \"ca\", location = \"US-CA\", values = [\"10.8.0.4\"], health_check = \"h3\" },\n\
         { id = \"us\", location = \"US\", values = [\"10.8.0.5\"], health_check = \"h1\" },\n\
         { id = \"na\", location = \"NA\", values = [\"10.8.0.6\"] },\n\
         { id = \"jp\", location = \"JP\", values = [\"10.8.0.7\"], health_check = \"h2\" },\n\
         { id = \"as\", location = \"AS\", values = [\"10.8.0.8\"], health_check = \"h3\" },\n\
         { id = \"rest\", location = \"*\", values = [\"10.8.0.9\"] },\n]\n\
         \n[[rrset]]\nname = \"static\"\ntype = \"A\"\nvalues = [\"192.0.2.7\"]\n",
    );
    body
}

/// A database of random networks inside `10.0.0.0/8` and `2001:db8::/32`, in Bavaria,
/// Germany, France, California, the US and Japan.
fn geo_db(path: &std::path::Path, rng: &mut Rng) {
    const PLACES: [(&str, &str, &[&str]); 6] = [
        ("EU", "DE", &["BY"]),
        ("EU", "DE", &[]),
        ("EU", "FR", &[]),
        ("NA", "US", &["CA"]),
        ("NA", "US", &[]),
        ("AS", "JP", &[]),
    ];
    let nets: Vec<(String, usize)> = (0..120)
        .map(|_| {
            let net = if rng.chance(70) {
                let len = 12 + rng.below(13) as u32;
                let net = (0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff)) & (u32::MAX << (32 - len));
                format!("{}/{len}", Ipv4Addr::from(net))
            } else {
                let len = 36 + rng.below(29) as u32;
                let raw = 0x2001_0db8u128 << 96 | u128::from(rng.next() as u32) << 64;
                format!("{}/{len}", Ipv6Addr::from(raw & (u128::MAX << (128 - len))))
            };
            (net, rng.below(PLACES.len()))
        })
        .collect();
    let networks: Vec<GeoNet<'_>> = nets
        .iter()
        .map(|(net, place)| {
            let (continent, country, subdivisions) = PLACES[*place];
            GeoNet {
                net,
                continent,
                country,
                subdivisions,
            }
        })
        .collect();
    write(path, &networks);
}

/// An address near the rules: a rule's first or last address, one just outside it, or
/// one inside; or anywhere.
fn client(rules: &[Rule], rng: &mut Rng, v6: bool) -> IpAddr {
    let family: Vec<&Rule> = rules.iter().filter(|r| r.first.is_ipv6() == v6).collect();
    let rule = family[rng.below(family.len())];
    let nudge = |addr: IpAddr, by: i32| match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add_signed(by))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add_signed(i128::from(by)))),
    };
    match rng.below(7) {
        0 => rule.first,
        1 => rule.last,
        2 => nudge(rule.first, -1),
        3 => nudge(rule.last, 1),
        4 if !v6 => IpAddr::V4(Ipv4Addr::from(rng.next() as u32)),
        4 => IpAddr::V6(Ipv6Addr::from(0x2001_0db8u128 << 96 | u128::from(rng.next()) << 32)),
        _ => match (rule.first, rule.last) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let span = u64::from(u32::from(b) - u32::from(a)) + 1;
                IpAddr::V4(Ipv4Addr::from(u32::from(a) + (rng.next() % span) as u32))
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let span = u128::from(b) - u128::from(a);
                let off = u128::from(rng.next()) << 64 | u128::from(rng.next());
                IpAddr::V6(Ipv6Addr::from(u128::from(a) + off % span.max(1)))
            }
            _ => rule.first,
        },
    }
}

/// How a query carries EDNS.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Edns {
    None,
    Plain,
    /// A Client Subnet option for the address cut to SOURCE bits.
    Subnet(IpAddr, u8),
}

/// A query for `name`/`qtype`: no EDNS, EDNS, or EDNS with a Client Subnet option for
/// `ecs` cut to `source` bits (RFC 7871 §6).
fn query(name: &str, qtype: u16, id: u16, edns: Edns, dnssec_ok: bool) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend(id.to_be_bytes());
    msg.extend([1, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns != Edns::None)]);
    for label in name.trim_end_matches('.').split('.') {
        msg.push(label.len() as u8);
        msg.extend(label.as_bytes());
    }
    msg.push(0);
    msg.extend(qtype.to_be_bytes());
    msg.extend(1u16.to_be_bytes());
    if edns == Edns::None {
        return msg;
    }
    let mut options = Vec::new();
    if let Edns::Subnet(addr, source) = edns {
        let (family, octets): (u16, Vec<u8>) = match addr {
            IpAddr::V4(a) => (1, a.octets().to_vec()),
            IpAddr::V6(a) => (2, a.octets().to_vec()),
        };
        let n = usize::from(source).div_ceil(8);
        let mut address = octets[..n].to_vec();
        if let (Some(last), 1..=7) = (address.last_mut(), source % 8) {
            *last &= 0xff << (8 - source % 8);
        }
        options.extend(8u16.to_be_bytes());
        options.extend(((4 + n) as u16).to_be_bytes());
        options.extend(family.to_be_bytes());
        options.extend([source, 0]);
        options.extend(address);
    }
    msg.extend([0, 0, 41, 0x04, 0xd0, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0]);
    msg.extend((options.len() as u16).to_be_bytes());
    msg.extend(options);
    msg
}

/// Signs the zone as control does: DO=1 queries get answers with RRSIGs, a client-aware
/// set's signed per chain and outcome.
fn sign(snapshot: &mut qdns_zone::Snapshot) {
    use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, Signatures, ZoneKey};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let zone = &mut snapshot.zones[0];
    zone.dnssec = Some(Box::new(Signatures::requested(Algorithm::EcdsaP256Sha256)));
    let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).expect("key");
    sign_zone(zone, &[key], SignOptions::at(now)).expect("the zone signs");
}

fn counters(program: &XdpProgram) -> HashMap<&'static str, u64> {
    program.counters().into_iter().collect()
}

#[test]
#[expect(clippy::too_many_lines, reason = "one generated run, then every assertion on it")]
fn xdp_client_aware_answers_are_byte_identical_to_user_space() {
    require_root("BPF_PROG_TEST_RUN");
    let mut rng = Rng::from_env();
    let seed = rng.0;
    let dir = tempfile::tempdir().unwrap();
    let zones = dir.path().join("zones");
    std::fs::create_dir(&zones).unwrap();
    let db = dir.path().join("geo.mmdb");
    geo_db(&db, &mut rng);
    // Enough IPv4 and IPv6 rules that `near`'s and `near6`'s tables are searched through
    // the first-level index (`qdns_abi::client::INDEX_MIN_BLOCKS`).
    let rules = rules(&mut rng, 3500);
    std::fs::write(
        zones.join("t.toml"),
        format!("{ZONE_HEAD}{}", zone_body(&rules, &mut rng)),
    )
    .unwrap();
    let mut snapshot = qdns_zone::load_dir_from(
        &zones,
        1,
        qdns_zone::Sources {
            geoip_db: Some(&db),
            location: None,
            secondary_dir: None,
            dynamic_dir: None,
        },
    )
    .expect("the test zone loads");
    sign(&mut snapshot);
    let options = qdns_edge::engine::ServeOptions {
        answer_sets: Some(std::sync::Arc::default()),
        ..qdns_edge::engine::ServeOptions::default()
    };
    let engine = Engine::compile(&snapshot)
        .expect("the test zone compiles")
        .with_options(&options);
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), engine.max_udp_payload()).expect("load");
    let stats = program.install(&engine).expect("tables install");
    assert!(stats.client == 4 && stats.client_indexed == 4, "{stats:?}");
    let mut out = vec![0u8; 1232];
    let (mut total, mut tx, mut tx_ecs, mut tx_v6) = (0u32, 0u32, 0u32, 0u32);
    // Answers whose echoed SCOPE is not 0 (decided by a prefix), and `*` answers.
    let (mut scoped, mut rest) = (0u32, 0u32);
    let mut passed: HashMap<&str, u32> = HashMap::new();
    // `geo`'s answers by member (its A record is 10.8.0.i for member i).
    let mut geo_members = [0u64; 10];
    for round in 0..6 {
        if round > 0 {
            let bitmap: Vec<u64> = (0..engine.health().len())
                .map(|_| match rng.below(3) {
                    0 => u64::MAX,
                    1 => 0,
                    _ => rng.next(),
                })
                .collect();
            engine.set_health(bitmap.clone());
            program.set_health(&bitmap).expect("health");
        }
        for _ in 0..1500 {
            let (name, qtype) = [
                ("near.t.example.", 1),
                ("near.t.example.", 1),
                ("near6.t.example.", 28),
                ("wide.t.example.", 1),
                ("geo.t.example.", 1),
                ("geo.t.example.", 1),
                ("static.t.example.", 1),
                ("near.t.example.", 16),
            ][rng.below(8)];
            let v6_packet = rng.chance(40);
            let source = client(&rules, &mut rng, v6_packet);
            let edns = match rng.below(5) {
                0 => Edns::None,
                1 => Edns::Plain,
                _ => {
                    let v6 = rng.chance(40);
                    let addr = client(&rules, &mut rng, v6);
                    let width = if v6 { 128 } else { 32 };
                    let source = match rng.below(4) {
                        0 => [0, 24, 56, 64, width][rng.below(5)].min(width),
                        _ => rng.below(usize::from(width) + 1) as u8,
                    };
                    Edns::Subnet(addr, source)
                }
            };
            let dns = query(name, qtype, rng.next() as u16, edns, rng.chance(30));
            let frame = if v6_packet {
                ipv6_udp_frame(&dns, 53)
            } else {
                ipv4_udp_frame(&dns, 53)
            };
            let frame = from_source(frame, source);
            let run = program.test_run(&frame, 1).expect("test run");
            total += 1;
            match run.action {
                XDP_TX => {
                    tx += 1;
                    tx_ecs += u32::from(matches!(edns, Edns::Subnet(..)));
                    tx_v6 += u32::from(v6_packet);
                    let sent = check_response_frame(&frame, &run.packet);
                    let asked = Asked {
                        transport: Transport::Udp,
                        draw: 0,
                        source: Some(source),
                    };
                    let len = engine
                        .respond_with(&dns, &mut out, asked)
                        .expect("user space answers")
                        .len;
                    assert_eq!(
                        sent,
                        &out[..len],
                        "seed {seed}: {name} type {qtype} from {source} with {edns:?}: XDP sent the first, user space the second"
                    );
                    if let Edns::Subnet(_, source_len) = edns {
                        // The echo closes the message: its SCOPE is at a fixed place.
                        let n = usize::from(source_len).div_ceil(8);
                        let scope = sent[sent.len() - n - 1];
                        scoped += u32::from(scope != 0);
                    }
                    rest += u32::from(sent.windows(4).any(|w| w == [192, 0, 2, 99]));
                    if name == "geo.t.example." {
                        // Header, question (15 + 4 octets), then the answer's owner
                        // pointer, type, class, TTL and length: its RDATA at 43.
                        let rdata = &sent[43..47];
                        assert_eq!(rdata[..3], [10, 8, 0], "seed {seed}: {sent:?}");
                        geo_members[usize::from(rdata[3])] += 1;
                    }
                }
                XDP_PASS => {
                    assert_eq!(
                        run.packet, frame,
                        "seed {seed}: {name} from {source}: passed frames are untouched"
                    );
                    let why = if name.starts_with("wide")
                        && (v6_packet || matches!(edns, Edns::Subnet(IpAddr::V6(_), s) if s > 0))
                    {
                        "wide over IPv6"
                    } else {
                        "other"
                    };
                    *passed.entry(why).or_default() += 1;
                }
                other => panic!("seed {seed}: {name}: action {other}"),
            }
        }
    }
    let c = counters(&program);
    eprintln!("{total} queries: {tx} answered by XDP ({tx_ecs} with ECS, {tx_v6} over IPv6, {scoped} scoped, {rest} `*`), passed {passed:?}; {c:?}");
    assert!(c["answered_client"] > 4000, "client-aware answers in XDP: {c:?}");
    assert!(
        tx_ecs > 3000 && tx_v6 > 2000 && scoped > 1000 && rest > 80,
        "{tx_ecs} {tx_v6} {scoped} {rest}"
    );
    assert!(c["pass_client_aware"] > 0, "`wide` over IPv6 passes: {c:?}");
    // DO=1 queries (the zone is signed) take the answer signed for their chain and outcome.
    assert!(c["answered_signed"] > 1000, "signed client-aware answers in XDP: {c:?}");
    // The program counted each `geo` answer at its member's counter (a chain's entry
    // holds only the chain's members: it names each one's index in the set).
    let (_, base, members) = engine
        .counted_sets()
        .into_iter()
        .find(|(label, ..)| label == "geo.t.example. A")
        .expect("the geo set is counted");
    assert_eq!(members.len(), geo_members.len());
    for (i, member) in members.iter().enumerate() {
        assert_eq!(program.answers(base + i as u32), geo_members[i], "member {member}");
    }
    assert!(geo_members.iter().filter(|&&n| n > 0).count() >= 6, "{geo_members:?}");
    // Only what the tables cannot hold passes: `wide`'s IPv6 clients.
    assert_eq!(passed.get("other"), None, "{passed:?}; {c:?}");
}
