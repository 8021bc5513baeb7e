//! The XDP program against the user-space engine, through `BPF_PROG_TEST_RUN` on the
//! real program in the real kernel (needs root, as CI has).
//!
//! Tens of thousands of generated queries — names in and out of the zones, random case,
//! every policy, random health, EDNS or not (with options, DO=1, version 1), RD, IPv4
//! (with and without header options) and IPv6, VLAN tags, truncated and corrupted frames — go through both. Every frame
//! the program sends back must carry byte for byte the message the engine writes for
//! the same query (for weighted sets: the engine's message for some draw), with the
//! frame turned around and its checksums right as computed here independently. Every
//! frame it passes must be untouched.
mod common;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fmt::Write as _,
};

use common::{
    frames::{check_response_frame, ipv4_udp_frame, ipv6_udp_frame, vlan, with_ipv4_options},
    netns::require_root,
    Rng,
};
use qdns_abi::cookie::{answer, server_octets, ClientAddress, CookieSecrets};
use qdns_edge::{
    cookies::CookieJar,
    engine::{Asked, MAX_MESSAGE},
    xdp::XdpProgram,
    Engine, Transport,
};

/// The cookie secrets and clock both paths are given (pinned: the same second).
const COOKIE_SECRET: [u8; 16] = [0x11; 16];
const COOKIE_PREVIOUS: [u8; 16] = [0x22; 16];
const COOKIE_NEXT: [u8; 16] = [0x33; 16];
const COOKIE_NOW: u32 = 1_700_000_000;

/// The zones `engine()` signs: static names, and every routing policy.
const SIGNED_ZONES: &[&[u8]] = &[b"\x07example\x03com\x00", b"\x04shop\x07example\x00"];

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

/// The example zones plus one of answers over 256 and over 512 octets (the large-tail
/// table, and the client limits the program holds answers to).
fn zones() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        common::copy_examples(dir.path());
        // Multivalue sets of six and eight checked members in the signed shop.example:
        // the XDP tables hold a signed answer for each of the first's outcomes; the
        // second has more than `SIGNED_OUTCOMES_MAX` (128) and passes DO=1.
        let checks = ["web-1", "web-2", "api-1", "api-2", "m-1", "m-2", "a1", "b1"];
        let mut shop = std::fs::read_to_string(dir.path().join("shop.example.toml")).unwrap();
        for (name, n) in [("mv6", 6), ("mv8", 8)] {
            let _ = write!(shop, "\n[[rrset]]\nname = \"{name}\"\ntype = \"A\"\npolicy = \"multivalue\"\nmembers = [\n");
            for (i, check) in checks.iter().take(n).enumerate() {
                let _ = writeln!(shop, "  {{ id = \"m{i}\", values = [\"198.51.100.{i}\"], health_check = \"{check}\" }},");
            }
            shop.push_str("]\n");
        }
        // A weighted set whose two zero-weight members share a check: their health
        // is one slot, so the compiler must not take the combinations splitting them.
        shop.push_str(
            "\n[[rrset]]\nname = \"wz\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [\n\
             { id = \"a\", weight = 1, values = [\"198.51.100.20\"], health_check = \"web-1\" },\n\
             { id = \"z1\", weight = 0, values = [\"198.51.100.21\"], health_check = \"api-1\" },\n\
             { id = \"z2\", weight = 0, values = [\"198.51.100.22\"], health_check = \"api-1\" },\n]\n",
        );
        // A latency set (SPEC §10): its members' slots are control's choice bits, which
        // the random health here sets any way — both paths take the first one set.
        shop.push_str(
            "\n[[rrset]]\nname = \"fast\"\ntype = \"A\"\npolicy = \"latency\"\nmembers = [\n\
             { id = \"x\", values = [\"198.51.100.30\"], health_check = \"web-1\" },\n\
             { id = \"y\", values = [\"198.51.100.31\"], health_check = \"api-1\" },\n\
             { id = \"z\", values = [\"198.51.100.32\"] },\n]\n",
        );
        // Two cuts in the signed zone: `sub` without a DS (an NSEC proves there is none;
        // its glue is below the cut) and `sec` with one (servers elsewhere).
        shop.push_str(
            "\n[[rrset]]\nname = \"sub\"\ntype = \"NS\"\nvalues = [\"ns.sub\"]\n\
             [[rrset]]\nname = \"ns.sub\"\ntype = \"A\"\nvalues = [\"192.0.2.53\"]\n\
             [[rrset]]\nname = \"sec\"\ntype = \"NS\"\nvalues = [\"ns.elsewhere.example.\"]\n\
             [[rrset]]\nname = \"sec\"\ntype = \"DS\"\nvalues = [\"12345 13 2 \
             2BB183AF5F22588179A53B0A98631FAD1A292118C8A4D1C79A5A78A2FCDA4F0F\"]\n",
        );
        std::fs::write(dir.path().join("shop.example.toml"), shop).unwrap();
        // A hosted child of the signed example.com that example.com delegates to (NS,
        // glue, DS): DS at its apex is the parent's (RFC 4035 §3.1.4.1), and XDP, which
        // holds the child's apex only, leaves it to user space.
        let mut com = std::fs::read_to_string(dir.path().join("example.com.toml")).unwrap();
        com.push_str(
            "\n[[rrset]]\nname = \"kid\"\ntype = \"NS\"\nvalues = [\"ns.kid\"]\n\
             [[rrset]]\nname = \"ns.kid\"\ntype = \"A\"\nvalues = [\"192.0.2.54\"]\n\
             [[rrset]]\nname = \"kid\"\ntype = \"DS\"\nvalues = [\"12345 13 2 \
             2BB183AF5F22588179A53B0A98631FAD1A292118C8A4D1C79A5A78A2FCDA4F0F\"]\n",
        );
        std::fs::write(dir.path().join("example.com.toml"), com).unwrap();
        std::fs::write(
            dir.path().join("kid.example.com.toml"),
            "[zone]\norigin = \"kid.example.com.\"\nttl = 60\n[zone.soa]\nmname = \"ns.kid.example.com.\"\n\
             rname = \"h.kid.example.com.\"\nserial = 1\nrefresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 30\n\
             [zone.ns]\nnames = [\"ns.kid.example.com.\"]\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.81\"]\n",
        )
        .unwrap();
        let mut toml = String::from(
            "[zone]\norigin = \"big.example.\"\nttl = 60\n[zone.soa]\nmname = \"ns.big.example.\"\n\
             rname = \"h.big.example.\"\nserial = 1\nrefresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 30\n\
             [zone.ns]\nnames = [\"ns.big.example.\"]\n[[rrset]]\nname = \"ns\"\ntype = \"A\"\nvalues = [\"192.0.2.53\"]\n",
        );
        for (name, count) in [("a20", 20), ("a40", 40), ("a70", 70), ("a150", 150)] {
            let values: Vec<String> = (0..count).map(|i| format!("\"198.51.{}.{}\"", i / 200, i % 200)).collect();
            let _ = writeln!(toml, "[[rrset]]\nname = \"{name}\"\ntype = \"A\"\nvalues = [{}]", values.join(", "));
        }
        for (name, len) in [("txt300", 300), ("txt900", 900), ("txt1900", 1900)] {
            let strings: Vec<String> = (0..len / 100).map(|i| format!("'\"{i:03}{}\"'", "t".repeat(90))).collect();
            let _ = writeln!(toml, "[[rrset]]\nname = \"{name}\"\ntype = \"TXT\"\nvalues = [{}]", strings.join(", "));
        }
        // A delegation with 13 in-zone servers and their glue (a referral over 256
        // octets), and one to servers elsewhere.
        let servers: Vec<String> = (0..13).map(|i| format!("\"ns{i}.deleg\"")).collect();
        let _ = writeln!(toml, "[[rrset]]\nname = \"deleg\"\ntype = \"NS\"\nvalues = [{}]", servers.join(", "));
        for i in 0..13 {
            let _ = writeln!(toml, "[[rrset]]\nname = \"ns{i}.deleg\"\ntype = \"A\"\nvalues = [\"192.0.2.{i}\"]");
        }
        toml.push_str("[[rrset]]\nname = \"away\"\ntype = \"NS\"\nvalues = [\"ns1.elsewhere.example.\", \"ns2.elsewhere.example.\"]\n");
        // Wildcards whose answers name other owners (relocated per question): MX with
        // an in-zone exchange (its address in additional), a CNAME chased in zone, a
        // PTR out of zone.
        toml.push_str(
            "[[rrset]]\nname = \"mail\"\ntype = \"A\"\nvalues = [\"192.0.2.25\"]\n\
             [[rrset]]\nname = \"host\"\ntype = \"A\"\nvalues = [\"192.0.2.26\"]\n\
             [[rrset]]\nname = \"*.wmx\"\ntype = \"MX\"\nvalues = [\"10 mail.big.example.\", \"20 mx.elsewhere.example.\"]\n\
             [[rrset]]\nname = \"*.wcn\"\ntype = \"CNAME\"\nvalues = [\"host.big.example.\"]\n\
             [[rrset]]\nname = \"*.wptr\"\ntype = \"PTR\"\nvalues = [\"target.elsewhere.example.\"]\n\
             [[rrset]]\nname = \"*.wpol\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = 1, values = [\"192.0.2.90\"] }, \
             { id = \"b\", weight = 2, values = [\"192.0.2.91\"] }]\n",
        );
        // Names over 64 octets (the long-name stage): plain, policy, CNAME chain,
        // wildcard, ANY, large, up to the 255-octet limit.
        for (owner, rest) in long_rrsets() {
            let _ = writeln!(toml, "[[rrset]]\nname = \"{owner}\"\n{rest}");
        }
        std::fs::write(dir.path().join("big.example.toml"), toml).unwrap();
        std::fs::write(dir.path().join("reverse.toml"), reverse_zone()).unwrap();
        dir
    })
    .path()
}

/// Labels of `n` octets of `c`.
fn label(c: char, n: usize) -> String {
    std::iter::repeat_n(c, n).collect()
}

/// Owners (relative to big.example.) over 64 octets, and their record sets.
fn long_rrsets() -> Vec<(String, String)> {
    let l1 = format!("{}.{}", label('p', 60), label('q', 30));
    // 63 + 63 + 63 + 49 octets of labels and big.example.: 255 octets, the most.
    let longest = format!(
        "{}.{}.{}.{}",
        label('m', 63),
        label('n', 63),
        label('o', 63),
        label('z', 49)
    );
    vec![
        (
            format!("host.{l1}"),
            "type = \"A\"\nvalues = [\"192.0.2.80\", \"192.0.2.81\"]".into(),
        ),
        (format!("host.{l1}"), "type = \"TXT\"\nvalues = [\"long\"]".into()),
        (
            format!("w.{l1}"),
            "type = \"A\"\npolicy = \"weighted\"\nmembers = [{ id = \"a\", weight = 1, values = [\"192.0.2.82\"] }, \
             { id = \"b\", weight = 3, values = [\"192.0.2.83\"] }]"
                .into(),
        ),
        (
            format!("c.{l1}"),
            format!("type = \"CNAME\"\nvalues = [\"host.{l1}.big.example.\"]"),
        ),
        (format!("*.{l1}"), "type = \"A\"\nvalues = [\"192.0.2.84\"]".into()),
        (
            format!("*.{l1}"),
            "type = \"MX\"\nvalues = [\"5 mail.big.example.\"]".into(),
        ),
        (
            format!("big.{l1}"),
            "type = \"TXT\"\nvalues = [".to_string()
                + &(0..4)
                    .map(|i| format!("'\"{i}{}\"'", "v".repeat(90)))
                    .collect::<Vec<_>>()
                    .join(", ")
                + "]",
        ),
        (longest, "type = \"AAAA\"\nvalues = [\"2001:db8::255\"]".into()),
    ]
}

/// A reverse zone of an IPv6 /32 (names of 74 octets) with a few hosts.
fn reverse_zone() -> String {
    let mut toml = String::from(
        "[zone]\norigin = \"8.b.d.0.1.0.0.2.ip6.arpa.\"\nttl = 60\n[zone.soa]\nmname = \"ns.big.example.\"\n\
         rname = \"h.big.example.\"\nserial = 1\nrefresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 30\n\
         [zone.ns]\nnames = [\"ns.big.example.\"]\n",
    );
    for host in 1..=4 {
        let _ = writeln!(
            toml,
            "[[rrset]]\nname = \"{}.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0\"\ntype = \"PTR\"\nvalues = [\"h{host}.big.example.\"]",
            format!("{host:x}").chars().rev().collect::<Vec<_>>().iter().map(char::to_string).collect::<Vec<_>>().join(".")
        );
    }
    toml
}

/// The test zones compiled as the server compiles them: with answer counters, and
/// `example.com.` and `shop.example.` signed as control signs them (DO=1 answers with
/// RRSIGs, NSEC proofs).
fn engine() -> Engine {
    use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, Signatures, ZoneKey};
    let mut snapshot = qdns_zone::load_dir(zones(), 1).expect("test zones load");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for origin in SIGNED_ZONES {
        let zone = snapshot
            .zones
            .iter_mut()
            .find(|z| z.origin == *origin)
            .expect("a test zone");
        zone.dnssec = Some(Box::new(Signatures::requested(Algorithm::EcdsaP256Sha256)));
        let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).expect("key");
        sign_zone(zone, &[key], SignOptions::at(now)).expect("the zone signs");
    }
    let jar = CookieJar::new(COOKIE_SECRET, Some(COOKIE_PREVIOUS), Some(COOKIE_NEXT));
    jar.pin(COOKIE_NOW);
    let options = qdns_edge::engine::ServeOptions {
        answer_sets: Some(std::sync::Arc::default()),
        cookies: Some(std::sync::Arc::new(jar)),
        ..qdns_edge::engine::ServeOptions::default()
    };
    Engine::compile(&snapshot)
        .expect("test zones compile")
        .with_options(&options)
}

/// The program for `engine`, with the cookie secrets and clock `engine()` pinned.
fn load_program(engine: &Engine) -> XdpProgram {
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), engine.max_udp_payload()).expect("load");
    program
        .set_cookie_secrets(&CookieSecrets::new(
            COOKIE_SECRET,
            Some(COOKIE_PREVIOUS),
            Some(COOKIE_NEXT),
        ))
        .expect("cookie secrets");
    program.set_cookie_clock(COOKIE_NOW).expect("cookie clock");
    program
}

/// Owner names of the test zones, plus names that do not exist below them.
fn names(engine: &Engine) -> Vec<String> {
    let snapshot = qdns_zone::load_dir(zones(), 1).unwrap();
    let mut names: Vec<String> = snapshot
        .zones
        .iter()
        .flat_map(|z| z.rrsets.iter().map(|s| qdns_zone::name::to_text(&s.name)))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    names.sort();
    // Names a wildcard synthesises (RFC 4592): one and two labels below its parent.
    let synthesised: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix("*."))
        .flat_map(|parent| {
            [
                format!("a.{parent}"),
                format!("x.y-z.{parent}"),
                format!("*.b.{parent}"),
            ]
        })
        .collect();
    names.extend(synthesised);
    let zones: Vec<String> = engine.zones().map(|(apex, _)| apex).collect();
    for zone in &zones {
        for prefix in ["nx", "no.such.name", "x.y.z.w.v.u.t.s.r.q", "ent", "a.deep.ent.tree"] {
            names.push(format!("{prefix}.{zone}"));
        }
        names.push(format!("{}.{zone}", "l".repeat(50)));
        // Missing names over 64 octets (NXDOMAIN from the long-name stage).
        names.push(format!("{}.{}.{zone}", label('x', 40), label('y', 30)));
    }
    // Missing hosts of the reverse zone, and a long name below a cut.
    names.extend([
        "9.9.9.9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.".into(),
        "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.8.b.d.0.1.0.0.2.ip6.arpa.".into(),
        format!("{}.{}.deleg.big.example.", label('d', 40), label('e', 30)),
    ]);
    // Below the cuts (names that exist there only as glue, and ones that do not).
    names.extend(["www.deleg.big.example.".into(), "a.b.c.away.big.example.".into()]);
    // Below the signed zone's cuts (DO=1: signed referrals).
    names.extend(["www.sub.shop.example.".into(), "a.b.sec.shop.example.".into()]);
    names.extend([
        "example.org.".into(),
        "com.".into(),
        ".".into(),
        "www.sub.example.com.".into(),
    ]);
    names
}

const QTYPES: &[u16] = &[1, 28, 15, 16, 2, 6, 5, 33, 257, 43, 255, 12, 99, 0, 46, 47, 48];

fn random_case(name: &str, rng: &mut Rng) -> String {
    name.chars()
        .map(|c| if rng.chance(50) { c.to_ascii_uppercase() } else { c })
        .collect()
}

/// What a generated query's OPT record carried.
#[derive(Clone, Copy, Default)]
#[expect(clippy::struct_excessive_bools, reason = "one flag per thing the query carried")]
struct Sent {
    /// DO=1 (version 0).
    dnssec_ok: bool,
    /// At least one option (version 0).
    options: bool,
    /// A Client Subnet option (version 0).
    client_subnet: bool,
    /// A COOKIE option (version 0).
    cookie: bool,
}

/// The EDNS options real resolvers send (and some they do not): a client COOKIE as BIND
/// and dig send it, a client+server COOKIE (random, or one of ours: fresh, over half an
/// hour old, expired, under the previous secret), a COOKIE of a forbidden length, ECS
/// (RFC 7871), an NSID request (RFC 5001), padding (RFC 7830) and an unassigned code.
fn option(rng: &mut Rng) -> Vec<u8> {
    let (code, data): (u16, Vec<u8>) = match rng.below(9) {
        6 | 7 => (10, our_cookie(rng)),
        8 => (10, vec![7; [0, 5, 12, 20, 41][rng.below(5)]]),
        0 => (10, rng.next().to_be_bytes().to_vec()),
        1 => (
            10,
            [
                rng.next().to_be_bytes(),
                rng.next().to_be_bytes(),
                rng.next().to_be_bytes(),
            ]
            .concat(),
        ),
        2 => (8, client_subnet(rng)),
        3 => (3, Vec::new()),
        4 => (12, vec![0; rng.below(40)]),
        _ => (65_001, (0..rng.below(9)).map(|i| i as u8).collect()),
    };
    let mut out = Vec::new();
    out.extend(code.to_be_bytes());
    out.extend((data.len() as u16).to_be_bytes());
    out.extend(data);
    out
}

/// A client cookie with a server cookie made as ours are (RFC 9018) for one of the
/// test frames' sources (127.0.0.1 or `::1`; the frame may come from the other), at an
/// age that is echoed, refreshed or refused, under the current or the previous secret.
fn our_cookie(rng: &mut Rng) -> Vec<u8> {
    let client = rng.next().to_le_bytes();
    let address = if rng.chance(50) {
        ClientAddress::v4([127, 0, 0, 1])
    } else {
        ClientAddress::v6(std::net::Ipv6Addr::LOCALHOST.octets())
    };
    let secret = [
        COOKIE_SECRET,
        COOKIE_SECRET,
        COOKIE_SECRET,
        COOKIE_PREVIOUS,
        COOKIE_NEXT,
    ][rng.below(5)];
    let age = [10u32, 600, 2000, 3000, 4000][rng.below(5)];
    let made = answer(
        &CookieSecrets::new(secret, None, None),
        u64::from_le_bytes(client),
        None,
        &address,
        COOKIE_NOW - age,
    );
    [&client[..], &server_octets(made.server)].concat()
}

/// The data of a Client Subnet option (RFC 7871 §6): FAMILY 1 or 2, a random SOURCE and
/// address (bits past SOURCE zero), SCOPE 0; one in eight is malformed as resolvers must
/// not send it (a SCOPE, an unknown FAMILY, an address bit past SOURCE, a missing octet).
fn client_subnet(rng: &mut Rng) -> Vec<u8> {
    let v6 = rng.chance(40);
    let (family, bits) = if v6 { (2u16, 128usize) } else { (1, 32) };
    let source = match rng.below(4) {
        0 => [0, bits, bits / 2, 24, 56][rng.below(5)].min(bits),
        _ => rng.below(bits + 1),
    };
    let octets = source.div_ceil(8);
    let mut address: Vec<u8> = (0..octets).map(|_| rng.next() as u8).collect();
    if let (Some(last), 1..=7) = (address.last_mut(), source % 8) {
        *last &= 0xff << (8 - source % 8);
    }
    let mut data = Vec::new();
    data.extend(family.to_be_bytes());
    data.extend([source as u8, 0]);
    data.extend(&address);
    match rng.below(32) {
        0 => data[3] = 1 + rng.below(32) as u8,
        1 => data[1] = 3,
        2 if source % 8 != 0 => {
            let last = data.len() - 1;
            data[last] |= 1;
        }
        3 if octets > 0 => {
            data.pop();
        }
        _ => {}
    }
    data
}

/// Octets of the question of `dns` (name, type, class).
fn dns_question_len(dns: &[u8]) -> usize {
    let mut pos = 12;
    while let Some(&len) = dns.get(pos) {
        pos += 1 + usize::from(len);
        if len == 0 || len >= 0xc0 {
            break;
        }
    }
    pos - 12 + 4
}

/// A DNS query built here (not with the edge's own code).
fn dns_query(name: &str, qtype: u16, rng: &mut Rng) -> (Vec<u8>, Sent) {
    let id = rng.next() as u16;
    let flags: u16 = if rng.chance(50) { 0x0100 } else { 0 } | if rng.chance(10) { 0x0010 } else { 0 };
    let edns = rng.below(10);
    let mut msg = Vec::new();
    msg.extend(id.to_be_bytes());
    msg.extend(flags.to_be_bytes());
    msg.extend([0, 1, 0, 0, 0, 0, 0, u8::from(edns >= 3)]);
    for label in name.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        msg.push(label.len() as u8);
        msg.extend(label.as_bytes());
    }
    msg.push(0);
    msg.extend(qtype.to_be_bytes());
    msg.extend(1u16.to_be_bytes());
    let mut sent = Sent::default();
    if edns >= 3 {
        let payload: u16 = [512, 1232, 4096, 100][rng.below(4)];
        let version = u8::from(edns == 3);
        let dnssec_ok = rng.chance(50);
        let flags: u16 = if dnssec_ok { 0x8000 } else { 0 } | u16::from(rng.chance(10));
        msg.extend([0, 0, 41]);
        msg.extend(payload.to_be_bytes());
        msg.extend([0, version]);
        msg.extend(flags.to_be_bytes());
        let options: Vec<Vec<u8>> = (0..[0, 0, 1, 1, 2, 3, 17][rng.below(7)]).map(|_| option(rng)).collect();
        let client_subnet = options.iter().any(|o| o[..2] == [0, 8]);
        let cookie = options.iter().any(|o| o[..2] == [0, 10]);
        let options = options.concat();
        msg.extend((options.len() as u16).to_be_bytes());
        msg.extend(&options);
        sent = Sent {
            dnssec_ok: dnssec_ok && version == 0,
            options: !options.is_empty() && version == 0,
            client_subnet: client_subnet && version == 0,
            cookie: cookie && version == 0,
        };
    }
    (msg, sent)
}

/// The frame around `dns`, sometimes damaged: a bit flipped in the message (returned,
/// as that is what user space would read), the frame cut short, or padding after it.
fn frame(dns: &[u8], rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let mut dns = dns.to_vec();
    let damage = rng.below(40);
    if damage == 1 {
        let at = rng.below(dns.len());
        dns[at] ^= 1 << rng.below(8);
    }
    let mut frame = match rng.below(6) {
        0 => ipv4_udp_frame(&dns, 53),
        1 => ipv6_udp_frame(&dns, 53),
        2 => vlan(ipv4_udp_frame(&dns, 53)),
        3 => vlan(ipv6_udp_frame(&dns, 53)),
        4 => with_ipv4_options(ipv4_udp_frame(&dns, 53), 1 + rng.below(10)),
        _ => vlan(with_ipv4_options(ipv4_udp_frame(&dns, 53), 1 + rng.below(10))),
    };
    match damage {
        0 => frame.truncate(14 + rng.below(frame.len() - 14)), // test runs need an Ethernet header
        2 => frame.extend([0u8; 7]),                           // Ethernet-style padding
        _ => {}
    }
    (frame, dns)
}

/// Index of the frame's shape: IPv4, IPv4 with options, IPv6; +3 when VLAN-tagged.
fn frame_shape(frame: &[u8]) -> usize {
    let tagged = frame[12..14] == [0x81, 0x00];
    let l3 = if tagged { 18 } else { 14 };
    let shape = match frame[l3] {
        0x45 => 0,
        v if v >> 4 == 4 => 1,
        _ => 2,
    };
    shape + if tagged { 3 } else { 0 }
}

/// The source address of a test frame (`ipv4_udp_frame` or `ipv6_udp_frame`, tagged
/// or not): 127.0.0.1 or `::1`.
fn frame_source(frame: &[u8]) -> std::net::IpAddr {
    let l3 = if frame[12..14] == [0x81, 0x00] { 18 } else { 14 };
    if frame[l3] >> 4 == 4 {
        std::net::IpAddr::from(<[u8; 4]>::try_from(&frame[l3 + 12..l3 + 16]).unwrap())
    } else {
        std::net::IpAddr::from(<[u8; 16]>::try_from(&frame[l3 + 8..l3 + 24]).unwrap())
    }
}

/// The answer the engine gives `query` from `source` with the random `draw`.
fn respond(
    engine: &Engine,
    query: &[u8],
    out: &mut [u8],
    source: std::net::IpAddr,
    draw: u32,
) -> Option<qdns_edge::engine::Outcome> {
    let asked = Asked {
        transport: Transport::Udp,
        draw,
        source: Some(source),
    };
    engine.respond_with(query, out, asked)
}

/// Every message the engine may send for `query` from `source` (one unless a draw
/// decides).
fn engine_answers(engine: &Engine, query: &[u8], out: &mut [u8], source: std::net::IpAddr) -> Vec<Vec<u8>> {
    let mut all = BTreeSet::new();
    for k in 0..=256u64 {
        let draw = ((k << 24).min(u64::from(u32::MAX))) as u32;
        if let Some(o) = respond(engine, query, out, source, draw) {
            all.insert(out[..o.len].to_vec());
        }
    }
    all.into_iter().collect()
}

/// What `Engine::slip` makes of every message the engine may send for `query` from
/// `source`.
fn engine_slips(engine: &Engine, query: &[u8], out: &mut [u8], source: std::net::IpAddr) -> Vec<Vec<u8>> {
    let mut all = BTreeSet::new();
    for k in 0..=256u64 {
        let draw = ((k << 24).min(u64::from(u32::MAX))) as u32;
        if let Some(o) = respond(engine, query, out, source, draw) {
            if let Some(slipped) = engine.slip(query, out, o) {
                all.insert(out[..slipped.len].to_vec());
            }
        }
    }
    all.into_iter().collect()
}

fn counters(program: &XdpProgram) -> HashMap<&'static str, u64> {
    program.counters().into_iter().collect()
}

fn random_bitmap(engine: &Engine, rng: &mut Rng) -> Vec<u64> {
    let words = engine.health().len();
    (0..words)
        .map(|_| match rng.below(3) {
            0 => u64::MAX,
            1 => 0,
            _ => rng.next(),
        })
        .collect()
}

/// Each answer kind and each pass reason the generated queries must reach.
fn assert_every_outcome(c: &HashMap<&'static str, u64>) {
    for kind in [
        "answered_plain",
        "answered_weighted",
        "answered_failover",
        "answered_latency",
        "answered_multivalue",
        "answered_zonal",
        "answered_nodata",
        "answered_nxdomain",
        "answered_wildcard",
        "pass_edns",
        "pass_special_query",
        "pass_not_cached",
        "pass_outside_zones",
        "long_name",
        "pass_needs_tc",
        "pass_large",
        "answered_referral",
        "answered_signed",
        "pass_signed",
        // DO=1 below a signed zone's wildcard (the synthesis's NSEC is user space's), and
        // signed NXDOMAIN for names over 64 octets.
        "pass_signed_wildcard",
        "pass_signed_gap",
        // Malformed or repeated Client Subnet options (RFC 7871): user space answers
        // FORMERR.
        "pass_client_subnet",
        // COOKIE options of forbidden lengths (RFC 7873 §5.2.2): FORMERR from user space.
        "pass_cookie",
        // Answers to queries whose server cookie was ours and fresh.
        "valid_cookie",
    ] {
        assert!(c[kind] > 0, "{kind} never happened: {c:?}");
    }
}

#[test]
#[expect(clippy::too_many_lines, reason = "one generated run, then every assertion on it")]
fn xdp_answers_are_byte_identical_to_user_space() {
    require_root("BPF_PROG_TEST_RUN");
    let mut rng = Rng::from_env();
    let seed = rng.0;
    let engine = engine();
    let mut program = load_program(&engine);
    let stats = program.install(&engine).expect("tables install");
    assert!(stats.plain > 10 && stats.policy >= 4 && stats.nodes > 5, "{stats:?}");
    // Every tail class is in use: tails of 129..=512 octets without pointers to move
    // (most signed answers) in the medium table, longer ones and referrals in the large,
    // 33..=128 octets and each zone's negative SOA (one per zone, however many node
    // entries) in the small.
    assert!(stats.medium > 20 && stats.large > 5, "{stats:?}");
    assert!(stats.small > 40, "{stats:?}");
    // DS at the hosted child's apex: user space answers it from the parent.
    for dnssec_ok in [false, true] {
        let name = "kid.example.com.";
        let mut dns = dns_query(name, 43, &mut rng).0;
        dns.truncate(12 + name.len() + 1 + 4);
        dns[11] = 1;
        dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
        let packet = ipv4_udp_frame(&dns, 53);
        let run = program.test_run(&packet, 1).expect("test run");
        assert_eq!(run.action, XDP_PASS, "{name} DS DO={dnssec_ok}");
        assert_eq!(run.packet, packet);
        let mut out = vec![0u8; MAX_MESSAGE];
        let answer = engine.respond_with_draw(&dns, &mut out, Transport::Udp, 0).unwrap();
        assert!(
            u16::from_be_bytes([out[6], out[7]]) >= 1 && answer.len > 0,
            "the parent's DS: {:02x?}",
            &out[..answer.len]
        );
    }
    // Names over 64 octets in one query of six, so the others keep their share.
    let (long_names, names): (Vec<String>, Vec<String>) = names(&engine).into_iter().partition(|n| n.len() + 1 > 64);
    assert!(long_names.len() > 10, "{long_names:?}");
    // The owners of answers over 512 octets get a query of twelve of their own, for their
    // own type: at the names' share alone, fewer than 20 of them were answered in XDP in
    // one run of seven.
    let large_names: Vec<String> = names
        .iter()
        .filter(|n| {
            ["a40.", "a70.", "a150.", "txt900.", "txt1900.", "deleg."]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .cloned()
        .collect();
    assert_eq!(large_names.len(), 6, "{large_names:?}");
    let mut out = vec![0u8; MAX_MESSAGE];
    // The two DS queries of the hosted child above passed.
    let (mut tx, mut passed, mut total) = (0u32, 2u32, 2u32);
    // Answered in XDP with more than 512 and more than 256 + question octets.
    let (mut tx_over_512, mut tx_large) = (0u32, 0u32);
    // Answered in XDP: queries with DO=1, queries with options.
    let (mut tx_dnssec_ok, mut tx_options) = (0u32, 0u32);
    // Answered in XDP: queries with a Client Subnet option (echoed, SCOPE 0 for these).
    let mut tx_client_subnet = 0u32;
    // Answered in XDP: queries with a COOKIE option (answered with a server cookie).
    let mut tx_cookie = 0u32;
    // Answered in XDP: names over 64 octets (the long-name stage).
    let mut tx_long = 0u32;
    // Answered in XDP: DO=1 queries of the signed zones (the answers carry RRSIGs), and
    // of those the policy sets' (members chosen by health, answers signed per outcome).
    let (mut tx_signed, mut tx_signed_policy) = (0u32, 0u32);
    // Answered in XDP: wildcard answers that name other owners (relocated tails).
    let mut tx_relocated_wildcard = 0u32;
    // Answered in XDP: a weighted set at a wildcard.
    let mut tx_wildcard_policy = 0u32;
    // Answered frames per shape: [IPv4, IPv4 with options, IPv6] × [untagged, VLAN].
    let mut shapes = [0u32; 6];
    for round in 0..8 {
        if round > 0 {
            let bitmap = random_bitmap(&engine, &mut rng);
            engine.set_health(bitmap.clone());
            program.set_health(&bitmap).expect("health");
        }
        for _ in 0..2500 {
            let draw = rng.below(12);
            let pool = match draw {
                0 | 1 => &long_names,
                2 => &large_names,
                _ => &names,
            };
            let name = random_case(&pool[rng.below(pool.len())], &mut rng);
            let qtype = match name.as_bytes()[0] {
                // The large sets' own type (a referral answers any).
                _ if draw != 2 => QTYPES[rng.below(QTYPES.len())],
                b'a' | b'A' => 1,
                b't' | b'T' => 16,
                _ => QTYPES[rng.below(QTYPES.len())],
            };
            let (query, sent) = dns_query(&name, qtype, &mut rng);
            let (packet, dns) = frame(&query, &mut rng);
            let run = program.test_run(&packet, 1).expect("test run");
            total += 1;
            match run.action {
                XDP_TX => {
                    tx += 1;
                    tx_long += u32::from(name.len() + 1 > 64);

                    tx_dnssec_ok += u32::from(sent.dnssec_ok);
                    let lower = name.to_ascii_lowercase();
                    let signed_zone = lower.ends_with("example.com.") || lower.ends_with("shop.example.");
                    tx_signed += u32::from(sent.dnssec_ok && signed_zone);
                    tx_signed_policy += u32::from(
                        sent.dnssec_ok
                            && ["www.", "api.", "mv.", "lb."]
                                .iter()
                                .any(|p| lower == format!("{p}shop.example."))
                            && [1, 28].contains(&qtype),
                    );
                    tx_options += u32::from(sent.options);
                    tx_client_subnet += u32::from(sent.client_subnet);
                    tx_cookie += u32::from(sent.cookie);
                    shapes[frame_shape(&packet)] += 1;
                    let sent = check_response_frame(&packet, &run.packet);
                    tx_over_512 += u32::from(sent.len() > 512);
                    tx_large += u32::from(sent.len() > 12 + dns_question_len(&dns) + 256);
                    // An answer section from MX, CNAME (A chased), PTR or ANY there.
                    tx_wildcard_policy +=
                        u32::from(lower.contains(".wpol.") && qtype == 1 && sent.get(6..8) != Some(&[0, 0]));
                    tx_relocated_wildcard += u32::from(
                        [".wmx.", ".wcn.", ".wptr."].iter().any(|w| lower.contains(w))
                            && [15, 5, 12, 1, 255].contains(&qtype)
                            && sent.get(6..8) != Some(&[0, 0]),
                    );
                    let valid = engine_answers(&engine, &dns, &mut out, frame_source(&packet));
                    assert!(
                        valid.contains(&sent),
                        "seed {seed}: {name} type {qtype}: XDP sent\n{sent:02x?}\nuser space sends one of\n{valid:02x?}"
                    );
                }
                XDP_PASS => {
                    passed += 1;
                    assert_eq!(
                        run.packet, packet,
                        "seed {seed}: {name} type {qtype}: passed frames are untouched"
                    );
                }
                other => panic!("seed {seed}: {name} type {qtype}: action {other}"),
            }
        }
        // Each kind of signed policy set under this round's health, without EDNS and
        // with DO=1 as validating resolvers ask: answered in XDP (the signed one with
        // its RRSIG), with the bytes user space sends.
        for (name, qtype) in [
            ("www.shop.example.", 1),
            ("api.shop.example.", 1),
            ("mv.shop.example.", 28),
            ("lb.shop.example.", 1),
            ("mv6.shop.example.", 1),
            ("mv8.shop.example.", 1),
            // The latency set and a weighted set at a wildcard (unsigned): every round,
            // so their answers do not rest on the draw.
            ("fast.shop.example.", 1),
            ("x.wpol.big.example.", 1),
            // NODATA: with DO=1 the SOA, the name's NSEC and their RRSIGs.
            ("static.shop.example.", 28),
            // A name whose one A set's record is its node entry too: its A, ANY from
            // that record, NODATA and NXDOMAIN below it from it as a node entry.
            ("host.big.example.", 1),
            ("host.big.example.", 255),
            ("host.big.example.", 28),
            ("nope.host.big.example.", 1),
        ] {
            for dnssec_ok in [false, true] {
                let mut dns = dns_query(name, qtype, &mut rng).0;
                dns.truncate(12 + name.len() + 1 + 4);
                dns[11] = u8::from(dnssec_ok);
                if dnssec_ok {
                    // OPT: 1,232 octets, DO=1, no options.
                    dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
                }
                let packet = ipv4_udp_frame(&dns, 53);
                let run = program.test_run(&packet, 1).expect("test run");
                total += 1;
                if dnssec_ok && name.starts_with("mv8.") {
                    // Over the bound of signed outcomes: user space answers DO=1.
                    assert_eq!(run.action, XDP_PASS, "round {round}: {name} DO=1");
                    assert_eq!(run.packet, packet, "round {round}: passed frames are untouched");
                    passed += 1;
                    continue;
                }
                assert_eq!(
                    run.action, XDP_TX,
                    "round {round}: {name} DO={dnssec_ok} not answered in XDP"
                );
                let sent = check_response_frame(&packet, &run.packet);
                let valid = engine_answers(&engine, &dns, &mut out, frame_source(&packet));
                assert!(
                    valid.contains(&sent),
                    "round {round}: {name} DO={dnssec_ok}: XDP sent\n{sent:02x?}\nuser space sends one of\n{valid:02x?}"
                );
                tx_wildcard_policy += u32::from(name.contains(".wpol."));
                if dnssec_ok && name.ends_with("shop.example.") {
                    // The records and their RRSIG, or the NODATA proof's four.
                    let (answers, authority) = (
                        u16::from_be_bytes([sent[6], sent[7]]),
                        u16::from_be_bytes([sent[8], sent[9]]),
                    );
                    assert!(
                        answers >= 2 || (answers == 0 && authority == 4),
                        "round {round}: {name}: no RRSIG in {sent:02x?}"
                    );
                    tx_signed_policy += 1;
                }
                tx += 1;
            }
        }
        // The shared-check weighted set with DO=1 under more healths and draws.
        for _ in 0..4 {
            let bitmap = random_bitmap(&engine, &mut rng);
            engine.set_health(bitmap.clone());
            program.set_health(&bitmap).expect("health");
            for _ in 0..4 {
                let name = "wz.shop.example.";
                let mut dns = dns_query(name, 1, &mut rng).0;
                dns.truncate(12 + name.len() + 1 + 4);
                dns[11] = 1;
                dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
                let packet = ipv4_udp_frame(&dns, 53);
                let run = program.test_run(&packet, 1).expect("test run");
                total += 1;
                assert_eq!(run.action, XDP_TX, "round {round}: {name} DO=1 not answered in XDP");
                let sent = check_response_frame(&packet, &run.packet);
                let valid = engine_answers(&engine, &dns, &mut out, frame_source(&packet));
                assert!(
                    valid.contains(&sent),
                    "round {round}: {name} DO=1: XDP sent\n{sent:02x?}\nuser space sends one of\n{valid:02x?}"
                );
                tx += 1;
            }
        }
    }
    let c = counters(&program);
    eprintln!(
        "{total} queries: {tx} answered by XDP ({tx_dnssec_ok} with DO=1, {tx_options} with options, \
         {tx_long} for names over 64 octets, {tx_relocated_wildcard} relocated wildcard answers, {tx_wildcard_policy} weighted at a wildcard, {tx_large} over the 256-octet tail, {tx_over_512} over 512 octets), {passed} passed; {c:?}; shapes {shapes:?}"
    );
    assert!(tx_dnssec_ok > 500, "DO=1 queries are answered in XDP: {tx_dnssec_ok}");
    assert!(
        tx_signed > 50,
        "DO=1 queries of the signed zones are answered in XDP, with RRSIGs: {tx_signed}"
    );
    assert!(
        tx_signed_policy >= 32,
        "DO=1 queries of signed policy sets are answered in XDP: {tx_signed_policy}"
    );
    assert!(
        tx_options > 500,
        "queries with EDNS options are answered in XDP: {tx_options}"
    );
    assert!(
        tx_client_subnet > 200,
        "queries with Client Subnet are answered in XDP: {tx_client_subnet}"
    );
    assert!(
        tx_cookie > 300,
        "queries with COOKIE options are answered in XDP: {tx_cookie}"
    );
    assert!(shapes.iter().all(|&n| n > 0), "every frame shape answered: {shapes:?}");
    assert!(tx_long > 300, "names over 64 octets are answered in XDP: {tx_long}");
    assert!(
        tx_wildcard_policy > 10,
        "a weighted set at a wildcard is answered in XDP: {tx_wildcard_policy}"
    );
    assert!(
        tx_relocated_wildcard > 50,
        "wildcard answers naming other owners are answered in XDP: {tx_relocated_wildcard}"
    );
    assert!(
        tx_large > 150 && tx_over_512 > 100,
        "large answers are sent from XDP: {tx_large} over the 256-octet tail, {tx_over_512} over 512 octets"
    );
    assert_eq!(c["seen"], u64::from(total));
    assert_every_outcome(&c);
    let answered: u64 = c
        .iter()
        .filter(|(k, _)| k.starts_with("answered_"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(answered, u64::from(tx));
    assert!(
        tx * 3 > total,
        "the fast path answers the common queries: {tx} of {total}"
    );
}

/// The weighted draw in XDP follows the weights (www.shop.example: 10/20/20, all
/// healthy → 1/5, 2/5, 2/5; member a down → b and c 1/2 each).
#[test]
fn xdp_weighted_distribution_follows_the_weights() {
    require_root("BPF_PROG_TEST_RUN");
    let engine = engine();
    let mut program = load_program(&engine);
    program.install(&engine).expect("tables install");
    let all_healthy = vec![u64::MAX; engine.health().len()];
    engine.set_health(all_healthy.clone());
    program.set_health(&all_healthy).unwrap();
    let mut rng = Rng(7);
    let mut tally = |program: &mut XdpProgram, runs: u32| {
        let mut seen: HashMap<[u8; 4], u32> = HashMap::new();
        for _ in 0..runs {
            let (mut dns, _) = dns_query("www.shop.example.", 1, &mut rng);
            dns.truncate(12 + 18 + 4);
            dns[11] = 0;
            let packet = ipv4_udp_frame(&dns, 53);
            let run = program.test_run(&packet, 1).unwrap();
            assert_eq!(run.action, XDP_TX);
            let sent = check_response_frame(&packet, &run.packet);
            let address: [u8; 4] = sent[sent.len() - 4..].try_into().unwrap();
            *seen.entry(address).or_default() += 1;
        }
        seen
    };
    let runs = 5000;
    let seen = tally(&mut program, runs);
    let share = |a: [u8; 4]| f64::from(*seen.get(&a).unwrap_or(&0)) / f64::from(runs);
    for (address, expected) in [([192, 0, 2, 10], 0.2), ([192, 0, 2, 11], 0.4), ([192, 0, 2, 12], 0.4)] {
        let got = share(address);
        assert!(
            (got - expected).abs() < 0.03,
            "{address:?}: {got} vs {expected} ({seen:?})"
        );
    }
    // The program counted each answer at its member's counter, as it was sent.
    let (_, base, members) = engine
        .counted_sets()
        .into_iter()
        .find(|(label, ..)| label == "www.shop.example. A")
        .expect("the weighted set is counted");
    assert_eq!(members, ["a", "b", "c"]);
    for (i, address) in [[192, 0, 2, 10], [192, 0, 2, 11], [192, 0, 2, 12]].iter().enumerate() {
        assert_eq!(
            program.answers(base + i as u32),
            u64::from(seen[address]),
            "member {} ({address:?})",
            members[i]
        );
    }
}

const XDP_DROP: u32 = 1;

/// Issue 14: the rate-limit stage. One source per address family, rate 3 per second,
/// every 2nd limited answer slipped: every slipped frame carries byte for byte what
/// `Engine::slip` makes of the engine's answer (checksums right); limited answers
/// alternate drop, slip; no more pass than the burst and the elapsed time allow; and a
/// query the program does not answer is passed untouched and never charged.
#[test]
fn rate_limited_xdp_answers_slip_and_drop_as_user_space_does() {
    require_root("BPF_PROG_TEST_RUN");
    let mut rng = Rng(0x5eed_0014);
    let engine = engine();
    let mut program = load_program(&engine);
    program.install(&engine).expect("tables install");
    let settings = qdns_abi::rrl::RrlSettings::new(3, 2, 24, 56, 7);
    program.set_rrl(&settings).expect("rrl settings");
    let names = names(&engine);
    let mut out = vec![0u8; MAX_MESSAGE];
    let started = std::time::Instant::now();
    // Per family (IPv4, IPv6): answers sent whole, and the limited ones in order.
    let mut allowed = [0u32; 2];
    let mut limited: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    // Answers to queries with a valid server cookie: never limited (RFC 7873 §5.3).
    let (mut exempt, mut valid_cookies) = ([0u32; 2], 0);
    let mut passed = 0;
    for _ in 0..700 {
        let name = random_case(&names[rng.below(names.len())], &mut rng);
        let (query, _) = dns_query(&name, QTYPES[rng.below(QTYPES.len())], &mut rng);
        let v6 = rng.chance(50);
        let packet = match (v6, rng.below(3)) {
            (false, 0) => ipv4_udp_frame(&query, 53),
            (false, 1) => vlan(ipv4_udp_frame(&query, 53)),
            (false, _) => with_ipv4_options(ipv4_udp_frame(&query, 53), 1 + rng.below(10)),
            (true, 0) => ipv6_udp_frame(&query, 53),
            (true, _) => vlan(ipv6_udp_frame(&query, 53)),
        };
        let family = usize::from(v6);
        let run = program.test_run(&packet, 1).expect("test run");
        match run.action {
            XDP_PASS => {
                passed += 1;
                assert_eq!(run.packet, packet, "{name}: passed frames are untouched");
            }
            XDP_DROP => limited[family].push(XDP_DROP),
            XDP_TX => {
                let sent = check_response_frame(&packet, &run.packet);
                let valid = engine_answers(&engine, &query, &mut out, frame_source(&packet));
                if valid.contains(&sent) {
                    let now_valid = counters(&program)["valid_cookie"];
                    if now_valid > valid_cookies {
                        valid_cookies = now_valid;
                        exempt[family] += 1;
                    } else {
                        allowed[family] += 1;
                    }
                    continue;
                }
                // Not an answer: it must be the slipped form of one.
                let slipped = engine_slips(&engine, &query, &mut out, frame_source(&packet));
                assert!(
                    slipped.contains(&sent),
                    "{name}: XDP sent\n{sent:02x?}\nneither an answer nor the slipped form\n{slipped:02x?}"
                );
                assert_ne!(sent[2] & 0x02, 0, "TC set");
                limited[family].push(XDP_TX);
            }
            other => panic!("{name}: action {other}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let c = counters(&program);
    eprintln!(
        "in {elapsed:.2} s: allowed {allowed:?}, exempt by cookie {exempt:?}, limited {:?}, passed {passed}; {c:?}",
        limited.each_ref().map(Vec::len)
    );
    let burst = 3 + (started.elapsed().as_secs() as u32 + 1) * 3;
    for family in 0..2 {
        assert!(
            (3..=burst).contains(&allowed[family]),
            "family {family}: {} allowed, burst {burst}",
            allowed[family]
        );
        assert!(limited[family].len() > 50, "family {family}: the flood was limited");
        assert!(exempt[family] > 3, "family {family}: valid cookies were let through");
        for (i, action) in limited[family].iter().enumerate() {
            let expect = if i % 2 == 0 { XDP_DROP } else { XDP_TX };
            assert_eq!(
                *action, expect,
                "family {family}: limited answer {i} (drop, slip, drop, ...)"
            );
        }
    }
    let slipped: usize = limited.iter().map(|l| l.iter().filter(|&&a| a == XDP_TX).count()).sum();
    let dropped: usize = limited
        .iter()
        .map(|l| l.iter().filter(|&&a| a == XDP_DROP).count())
        .sum();
    assert_eq!(c["rrl_slipped"], slipped as u64);
    assert_eq!(c["rrl_dropped"], dropped as u64);
    assert!(passed > 20, "some queries passed (and were not charged)");
}

/// The program holds every answer to what the links carry (`fit_links`), also for a
/// question longer than the table compiler allowed for: a long name's relocated
/// wildcard answer is sent, then passes (`pass_large`) once the limit is one octet
/// under it.
#[test]
fn answers_over_the_links_limit_pass() {
    require_root("BPF_PROG_TEST_RUN");
    let engine = engine();
    let mut program = load_program(&engine);
    program.install(&engine).expect("tables install");
    // A plain query (no EDNS) for MX at a name the long wildcard covers.
    let mut query = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for part in ["x", &label('p', 60), &label('q', 30), "big", "example"] {
        query.push(part.len() as u8);
        query.extend(part.as_bytes());
    }
    query.extend([0, 0, 15, 0, 1]);
    assert!(query.len() - 12 - 4 > 64, "a name for the long-name stage");
    let packet = ipv4_udp_frame(&query, 53);
    let run = program.test_run(&packet, 1).expect("test run");
    assert_eq!(run.action, XDP_TX, "answered from XDP");
    let sent = check_response_frame(&packet, &run.packet);
    program.set_max_message(sent.len() - 1).expect("limit");
    let before = counters(&program)["pass_large"];
    let run = program.test_run(&packet, 1).expect("test run");
    assert_eq!(
        run.action,
        XDP_PASS,
        "{} octets over a {}-octet limit",
        sent.len(),
        sent.len() - 1
    );
    assert_eq!(run.packet, packet, "passed untouched");
    assert_eq!(counters(&program)["pass_large"], before + 1);
    program.set_max_message(sent.len()).expect("limit");
    assert_eq!(program.test_run(&packet, 1).expect("test run").action, XDP_TX);
}

/// `engine()` and its program with the tables installed (needs root).
fn installed() -> (Engine, XdpProgram, qdns_edge::xdp::TableStats) {
    require_root("BPF_PROG_TEST_RUN");
    let engine = engine();
    let mut program = load_program(&engine);
    let stats = program.install(&engine).expect("tables install");
    (engine, program, stats)
}

/// A query for `labels` (in order, any octets) with DO=1 and a 1232-octet EDNS size.
fn signed_query(labels: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend((rng.next() as u16).to_be_bytes());
    msg.extend(if rng.chance(50) { [1, 0] } else { [0, 0] });
    msg.extend([0, 1, 0, 0, 0, 0, 0, 1]);
    for label in labels {
        msg.push(label.len() as u8);
        msg.extend(label);
    }
    msg.push(0);
    let qtype: u16 = [1, 28, 15, 16, 6][rng.below(5)];
    msg.extend(qtype.to_be_bytes());
    msg.extend(1u16.to_be_bytes());
    msg.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
    msg
}

/// A label for a name that is probably missing below a parent with `children`: random
/// octets, or a child changed at its end (so it sorts right beside it), cut short,
/// grown past the 16 octets a key holds, or in another case.
fn missing_label(children: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    const OCTETS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-_";
    let random = |rng: &mut Rng, n: usize| -> Vec<u8> { (0..n).map(|_| OCTETS[rng.below(OCTETS.len())]).collect() };
    if children.is_empty() || rng.chance(30) {
        let n = 1 + rng.below(20);
        return random(rng, n);
    }
    let mut label = children[rng.below(children.len())].clone();
    match rng.below(5) {
        0 => {
            let n = 1 + rng.below(3);
            label.extend(random(rng, n));
        }
        1 if label.len() > 1 => label.truncate(label.len() - 1),
        2 => {
            let last = label.len() - 1;
            label[last] = OCTETS[rng.below(OCTETS.len())];
        }
        3 => {
            while label.len() < 17 {
                label.push(b'k');
            }
            let n = 1 + rng.below(4);
            label.extend(random(rng, n));
        }
        _ => label = label.to_ascii_uppercase().into_iter().chain(random(rng, 1)).collect(),
    }
    label
}

/// Random names that do not exist below every name of the signed zones, at every depth,
/// with DO=1 as validating resolvers ask: the program answers the NXDOMAIN (the SOA,
/// the NSEC covering the name and the one covering the encloser's wildcard, with their
/// RRSIGs) byte for byte as user space does, from the gaps between the encloser's
/// children and their pre-signed pieces.
#[test]
fn signed_nxdomain_is_answered_in_xdp_as_user_space_answers_it() {
    let (engine, mut program, stats) = installed();
    let mut rng = Rng::from_env();
    let seed = rng.0;
    assert!(stats.gaps > 20 && stats.pieces > 10, "{stats:?}");
    // The signed zones' names that exist (wire labels, lowercase) and each one's
    // children.
    let mut out = vec![0u8; MAX_MESSAGE];
    let source = std::net::IpAddr::from([127, 0, 0, 1]);
    let names: Vec<Vec<Vec<u8>>> = names(&engine)
        .into_iter()
        .map(|n| n.to_ascii_lowercase())
        .filter(|n| n.ends_with("example.com.") || n.ends_with("shop.example."))
        .filter(|n| !n.contains('*') && n.len() < 40)
        .map(|n| {
            n.trim_end_matches('.')
                .split('.')
                .map(|l| l.as_bytes().to_vec())
                .collect::<Vec<_>>()
        })
        .filter(|labels| {
            let query = signed_query(labels, &mut Rng(1));
            engine_answers(&engine, &query, &mut out, source)
                .iter()
                .all(|a| a[3] & 0x0f != 3)
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(names.len() > 30, "{}", names.len());
    let mut children: HashMap<Vec<Vec<u8>>, Vec<Vec<u8>>> = HashMap::new();
    for name in &names {
        for i in 0..name.len() {
            children
                .entry(name[i + 1..].to_vec())
                .or_default()
                .push(name[i].clone());
        }
    }
    let (mut nxdomain, mut tx_nxdomain, mut tx, mut passed) = (0u32, 0u32, 0u32, 0u32);
    let mut depths = BTreeSet::new();
    for _ in 0..4000 {
        let parent = &names[rng.below(names.len())];
        let kids = children.get(parent).cloned().unwrap_or_default();
        let mut labels = vec![missing_label(&kids, &mut rng)];
        // Deeper: more labels in front (the gap is the one of the label below the
        // encloser).
        for _ in 0..rng.below(3) {
            labels.insert(0, missing_label(&[], &mut rng));
        }
        labels.extend(parent.iter().cloned());
        if labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1 > 64 {
            continue;
        }
        let query = signed_query(&labels, &mut rng);
        let packet = ipv4_udp_frame(&query, 53);
        let valid = engine_answers(&engine, &query, &mut out, frame_source(&packet));
        let is_nxdomain = valid.len() == 1 && valid[0][3] & 0x0f == 3;
        nxdomain += u32::from(is_nxdomain);
        let run = program.test_run(&packet, 1).expect("test run");
        match run.action {
            XDP_TX => {
                tx += 1;
                let sent = check_response_frame(&packet, &run.packet);
                let name = labels
                    .iter()
                    .map(|l| String::from_utf8_lossy(l))
                    .collect::<Vec<_>>()
                    .join(".");
                assert!(
                    valid.contains(&sent),
                    "seed {seed}: {name}: XDP sent\n{sent:02x?}\nuser space sends\n{valid:02x?}"
                );
                if is_nxdomain {
                    tx_nxdomain += 1;
                    depths.insert(parent.len());
                }
            }
            XDP_PASS => {
                passed += 1;
                assert_eq!(run.packet, packet, "seed {seed}: passed frames are untouched");
            }
            other => panic!("seed {seed}: action {other}"),
        }
    }
    let c = counters(&program);
    eprintln!(
        "seed {seed}: {nxdomain} NXDOMAIN, {tx_nxdomain} of them from XDP; {tx} sent, {passed} passed; \
         {:?} passed signed; {stats:?}",
        c["pass_signed"]
    );
    assert!(nxdomain > 2000, "most generated names are missing: {nxdomain}");
    assert!(
        u64::from(tx_nxdomain) * 100 >= u64::from(nxdomain) * 99,
        "seed {seed}: signed NXDOMAIN answered in XDP: {tx_nxdomain} of {nxdomain}"
    );
    assert!(depths.len() >= 3, "enclosers at several depths: {depths:?}");
}

/// The signed zone's cuts with DO=1, as validating resolvers ask: the referral below
/// each (with the DS and its RRSIG at `sec`, the NSEC proving no DS at `sub`; glue in
/// additional) and DS at the cut are answered by the program, byte for byte as user
/// space answers them.
#[test]
fn signed_referrals_are_answered_in_xdp_as_user_space_answers_them() {
    let (engine, mut program, _) = installed();
    let mut rng = Rng::from_env();
    let mut out = vec![0u8; MAX_MESSAGE];
    let labels = |name: &str| -> Vec<Vec<u8>> {
        name.trim_end_matches('.')
            .split('.')
            .map(|l| l.as_bytes().to_vec())
            .collect()
    };
    for name in [
        "sub.shop.example.",
        "www.sub.shop.example.",
        "ns.sub.shop.example.",
        "a.b.c.sub.shop.example.",
        "sec.shop.example.",
        "x.sec.shop.example.",
    ] {
        for _ in 0..4 {
            let query = signed_query(&labels(&random_case(name, &mut rng)), &mut rng);
            let packet = ipv4_udp_frame(&query, 53);
            let run = program.test_run(&packet, 1).expect("test run");
            assert_eq!(run.action, XDP_TX, "{name}: answered in XDP");
            let sent = check_response_frame(&packet, &run.packet);
            let valid = engine_answers(&engine, &query, &mut out, frame_source(&packet));
            assert!(
                valid.contains(&sent),
                "{name}: XDP sent\n{sent:02x?}\nuser space sends\n{valid:02x?}"
            );
            // A referral: no AA, authority with the NS and the DS or NSEC and its RRSIG.
            assert_eq!(sent[2] & 0x04, 0, "{name}: not authoritative");
            assert!(
                u16::from_be_bytes([sent[8], sent[9]]) >= 3,
                "{name}: NS, DS or NSEC, RRSIG"
            );
        }
    }
    // DS at the cuts: the DS and its RRSIG, or the NSEC proving none.
    for name in ["sub.shop.example.", "sec.shop.example."] {
        let mut query = signed_query(&labels(name), &mut rng);
        let at = query.len() - 11 - 4;
        query[at..at + 2].copy_from_slice(&43u16.to_be_bytes());
        let packet = ipv4_udp_frame(&query, 53);
        let run = program.test_run(&packet, 1).expect("test run");
        assert_eq!(run.action, XDP_TX, "{name} DS: answered in XDP");
        let sent = check_response_frame(&packet, &run.packet);
        let valid = engine_answers(&engine, &query, &mut out, frame_source(&packet));
        assert!(valid.contains(&sent), "{name} DS");
    }
    let c = counters(&program);
    assert!(c["answered_referral"] >= 24, "{c:?}");
}

/// Names a signed zone's wildcard covers (`*.wild.example.com.`, an A record), asked
/// with DO=1: the program sends the synthesised answer — the A and its RRSIG owned by
/// the question, and the NSEC proving the name itself does not exist, with its RRSIG —
/// byte for byte as user space does, for names in every gap between the encloser's
/// children; a type the wildcard lacks (NODATA from the wildcard) passes.
#[test]
fn signed_wildcard_answers_are_answered_in_xdp_as_user_space_answers_them() {
    let (engine, mut program, _) = installed();
    let mut rng = Rng::from_env();
    let seed = rng.0;
    let mut out = vec![0u8; MAX_MESSAGE];
    let parent: Vec<Vec<u8>> = ["wild", "example", "com"]
        .iter()
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let (mut sent_a, mut passed_aaaa) = (0, 0);
    for i in 0..400 {
        let mut labels = vec![missing_label(&[b"*".to_vec()], &mut rng)];
        for _ in 0..rng.below(3) {
            labels.insert(0, missing_label(&[], &mut rng));
        }
        labels.extend(parent.iter().cloned());
        // The long-name stage passes signed proofs (`pass_signed_gap`).
        if labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1 > 64 {
            continue;
        }
        let mut query = signed_query(&labels, &mut rng);
        let aaaa = i % 4 == 3;
        let at = query.len() - 11 - 4;
        query[at..at + 2].copy_from_slice(&(if aaaa { 28u16 } else { 1 }).to_be_bytes());
        let packet = ipv4_udp_frame(&query, 53);
        let run = program.test_run(&packet, 1).expect("test run");
        let name = labels
            .iter()
            .map(|l| String::from_utf8_lossy(l))
            .collect::<Vec<_>>()
            .join(".");
        if aaaa {
            assert_eq!(
                run.action, XDP_PASS,
                "seed {seed}: {name} AAAA (NODATA from the wildcard) passes"
            );
            passed_aaaa += 1;
            continue;
        }
        assert_eq!(run.action, XDP_TX, "seed {seed}: {name} A answered in XDP");
        let sent = check_response_frame(&packet, &run.packet);
        let valid = engine_answers(&engine, &query, &mut out, frame_source(&packet));
        assert!(
            valid.contains(&sent),
            "seed {seed}: {name}: XDP sent\n{sent:02x?}\nuser space sends\n{valid:02x?}"
        );
        // The A and its RRSIG; the NSEC and its RRSIG.
        assert_eq!(u16::from_be_bytes([sent[6], sent[7]]), 2, "{name}");
        assert!(u16::from_be_bytes([sent[8], sent[9]]) >= 2, "{name}");
        sent_a += 1;
    }
    let c = counters(&program);
    assert!(sent_a > 150 && passed_aaaa > 50, "{sent_a} {passed_aaaa}");
    assert_eq!(c["answered_wildcard"], sent_a, "{c:?}");
    assert_eq!(c["pass_signed_wildcard"], passed_aaaa, "{c:?}");
}
