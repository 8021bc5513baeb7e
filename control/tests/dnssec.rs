//! DNSSEC end to end through real validators: control signs `shop.example.` (every
//! routing policy, a wildcard, an empty non-terminal), an edge follows it in a network
//! namespace, and BIND 9 and Unbound — each validating with the zone's DS from
//! `qdnsctl dnssec ds` as their only trust anchor — must set AD on every kind of answer
//! (DS proofs at an unsigned and a signed delegation too) in every health state
//! (fail-open included), through a key rollover, served by XDP and by user space
//! alone; and must
//! SERVFAIL under an anchor that names no key of the zone, and on signatures broken on
//! purpose. The zone walked through the
//! edge's NSEC chain passes `dnssec-verify` and `ldns-verify-zone`, and `DNSViz` finds
//! no error or warning.
mod common;

use std::{
    fmt::Write as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::Location;
use qdns_edge::xdp::peer::PeerPassProgram;
use qdns_testkit::{
    netns::{require_root, Pair},
    resolvers::{bind_options, unbound_server, Kind, Resolver},
};

const SERVER: &str = "10.77.0.1";
const ZONE: &str = "shop.example.";

/// (name, type, expected status) of every kind of answer.
const QUESTIONS: &[(&str, &str, &str)] = &[
    ("shop.example.", "SOA", "NOERROR"),
    ("shop.example.", "DNSKEY", "NOERROR"),
    ("static.shop.example.", "A", "NOERROR"),
    ("www.shop.example.", "A", "NOERROR"),      // weighted
    ("api.shop.example.", "A", "NOERROR"),      // failover
    ("mv.shop.example.", "AAAA", "NOERROR"),    // multivalue
    ("lb.shop.example.", "A", "NOERROR"),       // zonal
    ("app.shop.example.", "A", "NOERROR"),      // failover with an alias to the zonal set
    ("shop.shop.example.", "CNAME", "NOERROR"), // weighted CNAME
    ("any.w.shop.example.", "A", "NOERROR"),    // wildcard answer
    ("any.w.shop.example.", "MX", "NOERROR"),   // wildcard NODATA
    ("static.shop.example.", "TXT", "NOERROR"), // NODATA
    ("ent.shop.example.", "A", "NOERROR"),      // empty non-terminal (NODATA)
    ("nothing.shop.example.", "A", "NXDOMAIN"),
    ("deep.nothing.shop.example.", "AAAA", "NXDOMAIN"),
    ("sub.shop.example.", "DS", "NOERROR"), // unsigned delegation: NSEC proves no DS
    ("sec.shop.example.", "DS", "NOERROR"), // signed delegation: the DS and its RRSIG
];

/// Two cuts: `sub` without a DS (its glue below the cut is neither signed nor in the
/// NSEC chain) and `sec` with one. Nothing here follows them: the addresses are
/// documentation ones no namespace routes.
const DELEGATIONS: &str = r#"
[[rrset]]
name = "sub"
type = "NS"
values = ["ns.sub"]
[[rrset]]
name = "ns.sub"
type = "A"
values = ["192.0.2.53"]
[[rrset]]
name = "sec"
type = "NS"
values = ["ns.elsewhere.example."]
[[rrset]]
name = "sec"
type = "DS"
values = ["12345 13 2 2BB183AF5F22588179A53B0A98631FAD1A292118C8A4D1C79A5A78A2FCDA4F0F"]
"#;

/// Every check of the zone, for overrides.
const CHECKS: &[&str] = &["web-1", "web-2", "api-1", "api-2", "m-1", "m-2", "a1", "b1", "a2", "b2"];

/// Starts the validator in the client namespace with `ds` (`TAG ALG 2 HEX`) as its
/// only trust anchor; waits until it answers the apex.
fn start(pair: &Pair, kind: Kind, dir: &Path, ds: &str) -> Resolver {
    start_expecting(pair, kind, dir, ds, "status: NOERROR")
}

/// [`start`], ready once the apex query's answer contains `ready`.
fn start_expecting(pair: &Pair, kind: Kind, dir: &Path, ds: &str, ready: &str) -> Resolver {
    let parts: Vec<&str> = ds.split_whitespace().collect();
    let config = if kind == Kind::Bind {
        let mut conf = bind_options(
            dir,
            // Every missing name asked reaches the edge: no NXDOMAIN made from cached
            // NSEC records (RFC 8198).
            &[
                "dnssec-validation yes;",
                "max-cache-ttl 1;",
                "max-ncache-ttl 1;",
                "synth-from-dnssec no;",
            ],
        );
        let _ = writeln!(
            conf,
            "trust-anchors {{ \"{ZONE}\" static-ds {} {} {} \"{}\"; }};",
            parts[0], parts[1], parts[2], parts[3]
        );
        let _ = writeln!(
            conf,
            "zone \"{ZONE}\" {{ type static-stub; server-addresses {{ {SERVER}; }}; }};"
        );
        conf
    } else {
        let anchor = format!("trust-anchor: \"{ZONE} DS {ds}\"");
        let mut conf = unbound_server(
            dir,
            &[
                "val-log-level: 2",
                "cache-max-ttl: 1",
                "cache-max-negative-ttl: 1",
                "aggressive-nsec: no",
                &anchor,
            ],
        );
        let _ = writeln!(conf, "stub-zone:\n    name: \"{ZONE}\"\n    stub-addr: {SERVER}");
        conf
    };
    Resolver::start(&pair.client, kind, dir, &config, || {
        dig(pair, ZONE, "SOA").contains(ready)
    })
}

fn dig(pair: &Pair, name: &str, rtype: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.client,
            "dig",
            "@127.0.0.1",
            "+dnssec",
            "+tries=2",
            "+time=2",
        ])
        .args([name, rtype])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when dig's header says AD.
fn has_ad(out: &str) -> bool {
    out.lines().find(|l| l.starts_with(";; flags:")).is_some_and(|l| {
        l.split(';')
            .nth(2)
            .is_some_and(|f| f.split_whitespace().any(|w| w == "ad"))
    })
}

/// Every question validates (AD) with its expected status.
fn all_validate(pair: &Pair, resolver: &Resolver, state: &str) {
    // Past the resolvers' 1-second cache and the edge's apply.
    std::thread::sleep(Duration::from_millis(1500));
    let mut failures = String::new();
    for &(name, rtype, status) in QUESTIONS {
        let out = dig(pair, name, rtype);
        if !out.contains(&format!("status: {status}")) || !has_ad(&out) {
            let _ = writeln!(failures, "--- {name} {rtype} (want {status}, AD):\n{out}");
        }
    }
    assert!(
        failures.is_empty(),
        "{state}: not validated:\n{failures}\n--- resolver log:\n{}",
        resolver.log_text()
    );
}

/// The edge's metric lines `name{labels} value`, summed over the lines whose name and
/// labels start with `prefix`.
fn metric_sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A validating resolver's traffic: names that exist (an empty non-terminal's NODATA and
/// a wildcard's answer among them) and one in twelve that does not, spread over the zone
/// (below the apex, a leaf, an empty non-terminal, a name that does not exist either). Every answer validates (AD) with its
/// status, and at least 99 % of the queries the resolver sent the edge were answered by
/// the XDP program — the NXDOMAIN proofs too, from its gap tables.
fn mix_is_answered_from_xdp(pair: &Pair, resolver: &Resolver) {
    const EXISTING: &[(&str, &str)] = &[
        ("static.shop.example.", "A"),
        ("www.shop.example.", "A"),
        ("api.shop.example.", "A"),
        ("mv.shop.example.", "AAAA"),
        ("lb.shop.example.", "A"),
        ("static.shop.example.", "TXT"),
        ("below.ent.shop.example.", "A"),
        // NODATA at an empty non-terminal: the NSEC covering it, from the node's signed
        // variant.
        ("ent.shop.example.", "A"),
        // A wildcard's answer: the A and its RRSIG, the NSEC proving the name missing.
        ("any.w.shop.example.", "A"),
        ("shop.example.", "SOA"),
        ("static.shop.example.", "AAAA"),
    ];
    let served = || {
        let text = pair.server_metrics("127.0.0.1:9153");
        let xdp = metric_sum(&text, "qdns_edge_xdp_packets_total{counter=\"answered_");
        let user = metric_sum(&text, "qdns_edge_responses_total{path=\"user\",transport=\"udp\"");
        let nxdomain = metric_sum(&text, "qdns_edge_xdp_packets_total{counter=\"answered_nxdomain\"}");
        (xdp, user, nxdomain, text)
    };
    let (xdp_before, user_before, nx_before, _) = served();
    let mut failures = String::new();
    let (mut asked, mut missing) = (0, 0);
    for round in 0..20 {
        // Past the resolver's 1-second cache every fifth round, so the names are asked
        // again.
        if round % 5 == 4 {
            std::thread::sleep(Duration::from_millis(1100));
        }
        for (i, &(name, rtype)) in EXISTING.iter().enumerate() {
            let out = dig(pair, name, rtype);
            asked += 1;
            if !out.contains("status: NOERROR") || !has_ad(&out) {
                let _ = writeln!(failures, "--- {name} {rtype} (want NOERROR, AD):\n{out}");
            }
            if i == 0 {
                let parent = ["", "static.", "ent.", "nothing.", "zz.deep."][round % 5];
                let name = format!("nx{round}-{}.{parent}shop.example.", round * 7919 % 1000);
                let out = dig(pair, &name, "A");
                missing += 1;
                if !out.contains("status: NXDOMAIN") || !has_ad(&out) {
                    let _ = writeln!(failures, "--- {name} A (want NXDOMAIN, AD):\n{out}");
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "mix: not validated:\n{failures}\n--- resolver log:\n{}",
        resolver.log_text()
    );
    let (xdp_after, user_after, nx_after, text) = served();
    let (xdp, user, nxdomain) = (xdp_after - xdp_before, user_after - user_before, nx_after - nx_before);
    #[expect(clippy::cast_precision_loss, reason = "query counts stay far below 2^52")]
    let share = xdp as f64 / (xdp + user).max(1) as f64;
    eprintln!(
        "{:?}: asked {asked} names that exist and {missing} that do not; the edge answered {xdp} of its \
         queries in XDP ({nxdomain} NXDOMAIN), {user} from user space ({:.1} % in XDP)",
        resolver.kind(),
        share * 100.0
    );
    assert!(
        nxdomain >= 15,
        "signed NXDOMAIN answered in XDP: {nxdomain} of 20\n{text}"
    );
    assert!(
        share >= 0.99,
        "{xdp} answered by XDP, {user} by user space over UDP (< 99 %)\n{text}"
    );
}

/// The zone as a validator sees it, by walking its NSEC chain from the apex through
/// the edge: every type each NSEC names, with its RRSIGs (policy names with the answer
/// health gives now).
fn walk(pair: &Pair) -> String {
    let ask = |name: &str, rtype: &str| {
        pair.in_client(&[
            "dig",
            "+noall",
            "+answer",
            "+dnssec",
            "+norec",
            "@10.77.0.1",
            name,
            rtype,
        ])
    };
    let mut zone = String::new();
    let mut name = ZONE.to_owned();
    for _ in 0..1000 {
        let mut nsec = ask(&name, "NSEC");
        if !nsec.lines().any(|l| l.split_whitespace().nth(3) == Some("NSEC")) {
            // A cut answers NSEC with a referral: its NSEC (and RRSIG) is the proof of
            // a name just after it (`cut\000`, outside the delegation), NXDOMAIN.
            nsec = nsec_of_cut(pair, &name);
        }
        let line = nsec
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some("NSEC"))
            .unwrap_or_else(|| panic!("no NSEC at {name}:\n{nsec}"));
        zone.push_str(&nsec);
        let fields: Vec<&str> = line.split_whitespace().collect();
        for rtype in &fields[5..] {
            if *rtype == "NS" && !name.eq_ignore_ascii_case(ZONE) {
                // A cut's NS comes as a referral: in authority, unsigned.
                zone.push_str(&cut_ns(pair, &name));
            } else if !["NSEC", "RRSIG"].contains(rtype) {
                zone.push_str(&ask(&name, rtype));
            }
        }
        if fields[4].eq_ignore_ascii_case(ZONE) {
            return zone;
        }
        fields[4].clone_into(&mut name);
    }
    panic!("the NSEC chain does not come back to the apex:\n{zone}");
}

/// The NSEC record at the cut `name` and its RRSIG, from the NXDOMAIN proof for the
/// name just after it in canonical order.
fn nsec_of_cut(pair: &Pair, name: &str) -> String {
    let (first, rest) = name.split_once('.').unwrap();
    authority(pair, &format!("{first}\\000.{rest}"), "A", |fields| {
        fields.first().is_some_and(|f| f.eq_ignore_ascii_case(name))
            && (fields.get(3) == Some(&"NSEC") || fields.get(3..5) == Some(&["RRSIG", "NSEC"]))
    })
}

/// The NS records of the cut `name`, from the referral's authority section.
fn cut_ns(pair: &Pair, name: &str) -> String {
    let lines = authority(pair, name, "NS", |fields| fields.get(3) == Some(&"NS"));
    assert!(!lines.is_empty(), "no referral at {name}");
    lines
}

/// The authority records of the edge's answer to `name`/`rtype` (DO=1) whose fields
/// `keep` accepts, one per line.
fn authority(pair: &Pair, name: &str, rtype: &str, keep: impl Fn(&[&str]) -> bool) -> String {
    let out = pair.in_client(&[
        "dig",
        "+noall",
        "+authority",
        "+dnssec",
        "+norec",
        "@10.77.0.1",
        name,
        rtype,
    ]);
    let mut lines = String::new();
    for line in out.lines() {
        if keep(&line.split_whitespace().collect::<Vec<_>>()) {
            let _ = writeln!(lines, "{line}");
        }
    }
    lines
}

/// `dnssec-verify` (BIND) and `ldns-verify-zone` (ldns) on the walked zone.
fn verify_walked_zone(pair: &Pair, dir: &Path, state: &str) {
    let file = dir.join("walked.zone");
    std::fs::write(&file, walk(pair)).unwrap();
    for argv in [
        // -z: one combined key (KSK flag set) signs everything.
        vec!["dnssec-verify", "-z", "-o", ZONE, file.to_str().unwrap()],
        vec!["ldns-verify-zone", file.to_str().unwrap()],
    ] {
        let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{state}: {} fails the zone:\n{}{}\n{}",
            argv[0],
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&file).unwrap()
        );
    }
}

/// The `dnsviz` published on the Python package index, installed by `scripts/setup-resolvers` (Debian's 0.9.4 cannot
/// import Debian's `pygraphviz` 1.7).
const DNSVIZ: &str = "/opt/qdns-dnsviz/bin/dnsviz";

/// `DNSViz`: `dnsviz probe` of the zone's names against the edge (authoritative analysis
/// stopped at the zone — `ZONE+` — so nothing above it is asked), then `dnsviz grok`
/// with the zone's DNSKEY as trusted key: no error or warning anywhere, every name
/// answered, and SECURE, never BOGUS or INSECURE.
fn dnsviz(pair: &Pair, location: &Location, dir: &Path, state: &str) {
    let keys = location.ctl_json(&["dnssec", "ds", ZONE]);
    let trusted = dir.join("trusted.keys");
    let dnskeys: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["dnskey"].as_str().unwrap())
        .collect();
    std::fs::write(&trusted, dnskeys.join("\n") + "\n").unwrap();
    let (probe, grok) = (dir.join("probe.json"), dir.join("grok.json"));
    let servers = format!("{ZONE}+:{SERVER}");
    let names = [
        ZONE,
        "www.shop.example.",
        "api.shop.example.",
        "mv.shop.example.",
        "lb.shop.example.",
        "app.shop.example.",
        "shop.shop.example.",
        "static.shop.example.",
        "any.w.shop.example.",
        "ent.shop.example.",
        "nothing.shop.example.",
    ];
    let mut argv = vec![
        "timeout", "120", DNSVIZ, "probe", "-4", "-A", "-a", ZONE, "-x", &servers,
    ];
    argv.extend(["-o", probe.to_str().unwrap()]);
    argv.extend(names);
    pair.in_client(&argv);
    pair.in_client(&[
        "timeout",
        "120",
        DNSVIZ,
        "grok",
        "-P",
        "-t",
        trusted.to_str().unwrap(),
        "-r",
        probe.to_str().unwrap(),
        "-o",
        grok.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&grok).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    for name in names {
        let status = &report[name]["status"];
        assert!(
            status == "NOERROR" || status == "NXDOMAIN",
            "{state}: DNSViz: {name} is {status}:\n{text}"
        );
    }
    assert!(
        !text.contains("\"errors\"") && !text.contains("\"warnings\""),
        "{state}: DNSViz reports problems:\n{text}"
    );
    assert!(
        text.contains("\"SECURE\"") && !text.contains("BOGUS") && !text.contains("INSECURE"),
        "{state}: DNSViz:\n{text}"
    );
}

fn ds_of(location: &Location, state: &str) -> String {
    let keys = location.ctl_json(&["dnssec", "ds", ZONE]);
    let key = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["state"] == state)
        .unwrap_or_else(|| panic!("no {state} key in {keys}"));
    // "shop.example. IN DS TAG ALG 2 HEX"
    key["ds"].as_str().unwrap().split(" DS ").nth(1).unwrap().to_owned()
}

fn set_health(location: &Location, unhealthy: &[&str], healthy: &[&str]) {
    let version = location.ctl_json(&["status"])["snapshot_version"].clone();
    for (checks, status) in [(unhealthy, "unhealthy"), (healthy, "healthy")] {
        for check in checks {
            let out = location.ctl(&["override", "set", check, status, "--expires", "30m"]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    location.wait_edges_current();
    // Health picks among answers signed at compile: no re-signing, no new snapshot.
    assert_eq!(location.ctl_json(&["status"])["snapshot_version"], version);
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario in order: health states, rollover, restart, wrong anchor, broken signatures"
)]
fn validators_validate_every_answer(tag: char, kind: Kind) {
    require_root("network namespaces and a validating resolver on port 53");
    let mut location = Location::prepared();
    let zone_file = location.zones().join("shop.example.toml");
    let text = std::fs::read_to_string(&zone_file).unwrap();
    let text = text.replacen("ttl = 60\n", "ttl = 60\ndnssec = true\n", 1)
        + "\n[[rrset]]\nname = \"*.w\"\ntype = \"A\"\nvalues = [\"192.0.2.99\"]\n"
        + "\n[[rrset]]\nname = \"below.ent\"\ntype = \"A\"\nvalues = [\"192.0.2.98\"]\n"
        + DELEGATIONS;
    std::fs::write(&zone_file, text).unwrap();
    location.start_control();
    let pair = Pair::new(tag);
    // With the XDP program attached: DO=1 answers come from its signed variants or, where
    // proofs or health decide, from user space (`pass_signed`) — never unsigned.
    // Natively: a generic-mode frame on veth has about 256 octets of room (the kernel
    // copies the packet into a buffer just big enough, 6.18 `skb_cow_data_for_xdp`),
    // and a signed NXDOMAIN grows a query by twice that (`pass_no_room`); a NIC's frames
    // are pages. A native program on veth needs one on the peer end too (see
    // `edge/tests/xdp_veth.rs`).
    let _peer = PeerPassProgram::attach(&pair.client, &pair.client_if).expect("peer program");
    let listen = format!("{SERVER}:53");
    location.start_edge_with(
        &["ip", "netns", "exec", &pair.server],
        &[
            "--listen",
            &listen,
            "--xdp",
            &pair.server_if,
            "--xdp-mode",
            "auto",
            "--metrics",
            "127.0.0.1:9153",
        ],
    );
    location.edge.as_ref().unwrap().wait_for("snapshot applied");
    let dir = location.dir.path().join(format!("{kind:?}"));
    std::fs::create_dir_all(&dir).unwrap();

    let first = ds_of(&location, "active");
    // `status` shows the signing state: 14 days of validity from the signing grid (at
    // most the 7 days between signing and refresh before now).
    let status = location.ctl_json(&["status"]);
    let signing = &status["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == ZONE)
        .unwrap()["dnssec"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(signing["algorithm"], "ECDSAP256SHA256", "{status}");
    let expiration = signing["expiration"].as_u64().unwrap();
    assert!(
        expiration > now + 7 * 86_400 && expiration <= now + 14 * 86_400,
        "{status}"
    );
    assert!(signing["signatures"].as_u64().unwrap() > 20, "{status}");
    let mut resolver = start(&pair, kind, &dir, &first);
    // No check has reported: everything fails open.
    all_validate(&pair, &resolver, "fail-open (nothing healthy)");
    verify_walked_zone(&pair, &dir, "fail-open");
    dnsviz(&pair, &location, &dir, "fail-open");
    set_health(&location, &[], CHECKS);
    all_validate(&pair, &resolver, "everything healthy");
    mix_is_answered_from_xdp(&pair, &resolver);
    set_health(&location, &["web-1", "api-1", "m-1", "a1", "b1"], &[]);
    all_validate(&pair, &resolver, "primaries and one AZ down");
    verify_walked_zone(&pair, &dir, "primaries and one AZ down");
    dnsviz(&pair, &location, &dir, "primaries and one AZ down");

    // Rollover: the new key signs beside the old; the anchor (the parent's DS) moves;
    // the old key goes. No step may fail validation.
    let out = location.ctl(&["dnssec", "rollover", ZONE]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    location.wait_edges_current();
    all_validate(&pair, &resolver, "rollover started, old DS");
    let second = ds_of(&location, "incoming");
    assert_ne!(first, second);
    drop(resolver);
    resolver = start(&pair, kind, &dir, &second);
    all_validate(&pair, &resolver, "rollover started, new DS");
    let out = location.ctl(&["dnssec", "rollover", ZONE, "--complete"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    location.wait_edges_current();
    all_validate(&pair, &resolver, "rollover complete");
    assert_eq!(ds_of(&location, "active"), second);
    // A control restart keeps the key (state dir) and signs again at start.
    let _ = location.control.take().unwrap().term();
    location.start_control();
    location.wait_edges_current();
    assert_eq!(ds_of(&location, "active"), second);
    all_validate(&pair, &resolver, "after a control restart");
    let metrics = pair.server_metrics("127.0.0.1:9153");
    let count = |label: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("qdns_edge_xdp_packets_total{{counter=\"{label}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Validated answers came from both paths: XDP's signed variants (static names:
    // SOA, DNSKEY, plain sets; policy sets, one variant per outcome) and user space
    // (negative answers, wildcards, delegations, the set with an alias).
    assert!(
        count("pass_signed") >= 10,
        "XDP passed no DO=1 query to user space:\n{metrics}"
    );
    assert!(
        count("answered_signed") >= 5,
        "XDP answered no DO=1 query from a signed variant:\n{metrics}"
    );
    assert!(metrics.contains("qdns_edge_dnssec_expiry_seconds"), "{metrics}");
    // Every DO=1 answer found its RRSIG.
    assert!(metrics.contains("qdns_edge_dnssec_unsigned_answers 0"), "{metrics}");
    // Each policy kind's DO=1 answer, asked of the edge directly: XDP sends it, signed.
    for (name, rtype) in [
        ("www.shop.example.", "A"),
        ("api.shop.example.", "A"),
        ("mv.shop.example.", "AAAA"),
        ("lb.shop.example.", "A"),
    ] {
        let answered = |pair: &Pair| {
            let metrics = pair.server_metrics("127.0.0.1:9153");
            metrics
                .lines()
                .find(|l| l.starts_with("qdns_edge_xdp_packets_total{counter=\"answered_signed\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let before = answered(&pair);
        let out = pair.in_client(&["dig", "+dnssec", "+norec", "@10.77.0.1", name, rtype]);
        assert!(out.contains("RRSIG"), "{name} {rtype}:\n{out}");
        assert_eq!(
            answered(&pair),
            before + 1,
            "{name} {rtype} not answered by XDP:\n{out}"
        );
    }
    // Every answer again from user space alone: the edge restarted without XDP.
    let _ = location.edge.take().unwrap().term();
    location.start_edge_with(&["ip", "netns", "exec", &pair.server], &["--listen", &listen]);
    location.wait_edges_current();
    all_validate(&pair, &resolver, "user space only");

    // An anchor naming no key of the zone (a DS the parent got wrong): to a resolver
    // with nothing cached every signature is from an unknown key, so SERVFAIL — the
    // validators really validate, and this test can fail.
    drop(resolver);
    let mut wrong = second.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == '0' { '1' } else { '0' });
    let resolver = start_expecting(&pair, kind, &dir, &wrong, "status: SERVFAIL");
    for name in ["www.shop.example.", "nothing.shop.example."] {
        let out = dig(&pair, name, "A");
        assert!(
            out.contains("status: SERVFAIL"),
            "{name} under a wrong anchor:\n{out}\n{}",
            resolver.log_text()
        );
    }

    // Signatures broken on purpose: control stopped, every signature in the edge's
    // persisted snapshot altered (the file rewritten as the edge writes it, checksum
    // and all), the edge restarted on it. A resolver with the right anchor and nothing
    // cached: SERVFAIL.
    drop(resolver);
    let _ = location.control.take().unwrap().term();
    let _ = location.edge.take().unwrap().term();
    let path = location.dir.path().join("edge-state").join("snapshot.bin");
    let mut snapshot = qdns_link::protocol::load_snapshot(&path).unwrap().unwrap();
    let mut broken = 0;
    for zone in &mut snapshot.zones {
        for sig in zone.dnssec.iter_mut().flat_map(|s| s.sigs.iter_mut()) {
            for rdata in &mut sig.rdata {
                *rdata.last_mut().unwrap() ^= 0x55;
                broken += 1;
            }
        }
    }
    assert!(broken > 20, "{broken} signatures");
    qdns_link::protocol::persist(&path, &snapshot).unwrap();
    location.start_edge_with(&["ip", "netns", "exec", &pair.server], &["--listen", &listen]);
    let resolver = start_expecting(&pair, kind, &dir, &second, "status: SERVFAIL");
    for (name, rtype) in [
        ("www.shop.example.", "A"),
        ("static.shop.example.", "A"),
        ("nothing.shop.example.", "A"),
    ] {
        let out = dig(&pair, name, rtype);
        assert!(
            out.contains("status: SERVFAIL"),
            "{name} with broken signatures:\n{out}\n{}",
            resolver.log_text()
        );
    }
}

#[test]
fn bind9_validates_every_signed_answer() {
    validators_validate_every_answer('S', Kind::Bind);
}

#[test]
fn unbound_validates_every_signed_answer() {
    validators_validate_every_answer('T', Kind::Unbound);
}

/// The `expiration` control's status gives for the zone's signatures, and the snapshot
/// version.
fn signed_until(location: &Location) -> (u64, u64) {
    let status = location.ctl_json(&["status"]);
    let zone = status["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == ZONE)
        .unwrap();
    (
        zone["dnssec"]["expiration"].as_u64().unwrap(),
        status["snapshot_version"].as_u64().unwrap(),
    )
}

/// The expiration field (`YYYYMMDDHHmmSS`) of the RRSIG the edge sends with
/// `static.shop.example. A`.
fn served_expiration(location: &Location) -> String {
    let addr = location.dns.unwrap();
    let out = Command::new("dig")
        .args([
            "+dnssec",
            "+norec",
            "+noall",
            "+answer",
            "+time=2",
            &format!("@{}", addr.ip()),
            "-p",
            &addr.port().to_string(),
            "static.shop.example.",
            "A",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.get(3) == Some(&"RRSIG")).then(|| fields[8].to_owned())
        })
        .unwrap_or_else(|| panic!("no RRSIG:\n{text}"))
}

/// Signatures near their end are made again with no operator: with 120-second
/// signatures (`--dnssec-validity`) made again when under 110 seconds are left
/// (`--dnssec-refresh`), control signs again about every 10 s off its state lock,
/// pushes each result as a new snapshot, and the edge serves the new RRSIGs; the
/// control socket answers throughout.
#[test]
fn signatures_are_made_again_before_they_expire() {
    let mut location = Location::prepared();
    let zone_file = location.zones().join("shop.example.toml");
    let text = std::fs::read_to_string(&zone_file).unwrap();
    std::fs::write(&zone_file, text.replacen("ttl = 60\n", "ttl = 60\ndnssec = true\n", 1)).unwrap();
    location.start_control_with(&[
        "--no-embedded-checker",
        "--dnssec-validity",
        "120",
        "--dnssec-refresh",
        "110",
    ]);
    location.start_edge();
    location.wait_edges_current();
    let (first, version) = signed_until(&location);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(first <= now + 120 && first + 30 > now + 120, "{first} vs now {now}");
    let served = served_expiration(&location);
    // Two refreshes: each one later than the one before, each served.
    let mut last = (first, version, served);
    for round in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(30);
        let next = loop {
            let (until, version) = signed_until(&location);
            if until > last.0 {
                break (until, version);
            }
            assert!(Instant::now() < deadline, "round {round}: not signed again: {until}");
            std::thread::sleep(Duration::from_millis(250));
        };
        assert!(
            next.1 > last.1,
            "round {round}: a new snapshot: {next:?} after {last:?}"
        );
        location.wait_edges_current();
        let served = served_expiration(&location);
        assert!(
            served > last.2,
            "round {round}: the edge serves {served}, not past {}",
            last.2
        );
        last = (next.0, next.1, served);
    }
    let out = location.ctl(&["status"]);
    assert!(out.status.success());
}

/// A query of type RRSIG at a name of a signed zone is answered with the signatures
/// there, as BIND and NSD answer it (with or without DO): `static` (A) gets the RRSIGs
/// of its A and NSEC sets; a policy set's name (`www`, weighted) the NSEC's only (its
/// own signature comes with the answer it gives); an unsigned zone's name, NODATA.
#[test]
fn rrsig_queries_are_answered_with_the_signatures_at_the_name() {
    let mut location = Location::prepared();
    let zone_file = location.zones().join("shop.example.toml");
    let text = std::fs::read_to_string(&zone_file).unwrap();
    std::fs::write(&zone_file, text.replacen("ttl = 60\n", "ttl = 60\ndnssec = true\n", 1)).unwrap();
    location.start_control();
    location.start_edge();
    location.wait_edges_current();
    let addr = location.dns.unwrap();
    let ask = |name: &str, dnssec: bool| {
        let out = Command::new("dig")
            .args([
                if dnssec { "+dnssec" } else { "+nodnssec" },
                "+norec",
                "+time=2",
                &format!("@{}", addr.ip()),
                "-p",
                &addr.port().to_string(),
                name,
                "RRSIG",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let covered = |text: &str| -> Vec<String> {
        let mut types: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with(';'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(3) == Some(&"RRSIG")).then(|| f[4].to_owned())
            })
            .collect();
        types.sort();
        types
    };
    for dnssec in [false, true] {
        let text = ask("static.shop.example.", dnssec);
        assert!(text.contains("status: NOERROR") && text.contains(" aa"), "{text}");
        assert_eq!(covered(&text), ["A", "NSEC"], "{text}");
        let text = ask("www.shop.example.", dnssec);
        assert_eq!(covered(&text), ["NSEC"], "{text}");
    }
    let text = ask("www.example.com.", true);
    assert!(text.contains("status: NOERROR") && text.contains("ANSWER: 0"), "{text}");
}
