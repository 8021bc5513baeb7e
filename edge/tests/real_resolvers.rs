//! Real recursive resolvers through the fast path (needs root, as CI has): Debian's
//! BIND 9, Unbound and Knot Resolver, each in its default mode (BIND and Unbound
//! validating, with the root trust anchor; Knot Resolver's stub policy, which does not
//! validate), run in a client network namespace and resolving the example zones from an
//! edge with `--xdp` on the server end of a veth pair.
//!
//! Each resolver is asked for A, AAAA, MX, TXT, CNAME chains, NXDOMAIN, policy names and
//! names over 64 octets;
//! every answer must be right, and at least 99 % of the queries it sent the edge over
//! UDP must have been answered by the XDP program (the edge's counters: answers from the
//! program against responses from user space over UDP).
//!
//! The zones are not delegated from the root here (no network but the pair), so each
//! resolver is pointed at the edge for them and told they are insecure — BIND's
//! `validate-except`, Unbound's `domain-insecure`, Knot Resolver's negative trust
//! anchors — as an operator would for a lab zone; validation stays on for everything
//! else. The client namespace has no route but the pair's: the resolvers' attempts at
//! the root servers fail at once and never leave the machine.
mod common;

use std::{fmt::Write as _, path::Path, process::Command};

use common::{
    copy_examples,
    netns::{require_root, run, Pair},
    Edge,
};
use qdns_testkit::resolvers::{bind_options, unbound_server, Kind, Resolver};

const SERVER: &str = "10.77.0.1";
const METRICS: &str = "127.0.0.1:9153";
const ZONES: &[&str] = &["example.com", "example.net", "shop.example"];

/// `dig @127.0.0.1` in the client namespace (the resolver), its output whatever it is.
fn dig(pair: &Pair, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.client, "dig", "@127.0.0.1"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The edge's metric lines `name{labels} value`, summed over the lines whose name and
/// labels start with `prefix`.
fn metric_sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// (answered by XDP, of those with DO=1, answered by user space over UDP) so far, and
/// the metrics text.
fn served(pair: &Pair) -> (u64, u64, u64, String) {
    let text = pair.server_metrics(METRICS);
    let xdp = metric_sum(&text, "qdns_edge_xdp_packets_total{counter=\"answered_");
    let with_do = metric_sum(&text, "qdns_edge_xdp_packets_total{counter=\"with_do\"}");
    let user = metric_sum(&text, "qdns_edge_responses_total{path=\"user\",transport=\"udp\"");
    (xdp, with_do, user, text)
}

fn start_edge(pair: &Pair, zones: &Path) -> Edge {
    Edge::start_in(
        &["ip", "netns", "exec", &pair.server],
        zones,
        &[
            "--listen",
            &format!("{SERVER}:53"),
            "--xdp",
            &pair.server_if,
            "--xdp-mode",
            "auto",
            "--metrics",
            METRICS,
        ],
    )
}

/// What each resolver is asked, and a fragment its answer must hold.
const QUESTIONS: &[(&str, &str, &str)] = &[
    ("www.example.com", "A", "192.0.2.10"),
    ("www.example.com", "AAAA", "2001:db8::10"),
    ("example.com", "MX", "10 mail.example.com."),
    ("example.com", "TXT", "v=spf1 mx -all"),
    ("mail.example.com", "A", "192.0.2.25"),
    ("alias.example.com", "A", "192.0.2.11"),
    ("chain.example.com", "A", "192.0.2.10"),
    ("outside.example.com", "A", "203.0.113.80"),
    ("alias.example.com", "CNAME", "www.example.com."),
    ("static.shop.example", "A", "192.0.2.1"),
    ("www.shop.example", "A", "IN\tA\t"),
    ("api.shop.example", "A", "IN\tA\t"),
    ("lb.shop.example", "A", "IN\tA\t"),
    ("mv.shop.example", "AAAA", "IN\tAAAA\t"),
    (LONG_NAME, "AAAA", "2001:db8::64"),
    (LONG_NAME, "TXT", "over 64 octets"),
];

/// A name of 101 octets (the XDP long-name stage), added to the copied example.com.
const LONG_NAME: &str =
    "host.label-of-the-long-name-stage-number-one.label-of-the-long-name-stage-number-two.example.com";
/// Its parent, below which the test asks for missing names of over 64 octets.
const LONG_PARENT: &str = "label-of-the-long-name-stage-number-one.label-of-the-long-name-stage-number-two.example.com";

/// Asks the resolver everything, checks the answers, and returns how the edge served
/// the queries the resolver sent it.
fn resolve_through(pair: &Pair, resolver: &Resolver) {
    let (xdp_before, do_before, user_before, text_before) = served(pair);
    for &(name, qtype, expect) in QUESTIONS {
        // A stub (Knot Resolver's STUB policy) expects a recursive upstream and does
        // not follow a CNAME out of the zone itself: it returns the CNAME.
        let expect = if resolver.kind() == Kind::Knot && name == "outside.example.com" {
            "CNAME\twww.example.net."
        } else {
            expect
        };
        let out = dig(pair, &["+tries=2", "+time=3", name, qtype]);
        assert!(
            out.contains("status: NOERROR") && out.contains(expect),
            "{}: {name} {qtype} should hold {expect:?}:\n{out}\n{}",
            resolver.kind(),
            resolver.log_text()
        );
    }
    // Distinct missing names: each one reaches the edge.
    let missing = (0..40)
        .map(|i| (format!("nx{i}.example.com"), "A"))
        .chain((0..20).map(|i| (format!("host{i}.nowhere.shop.example"), "AAAA")))
        .chain((0..10).map(|i| (format!("nx{i}.{LONG_PARENT}"), "A")));
    for (name, qtype) in missing {
        let out = dig(pair, &["+tries=2", "+time=3", &name, qtype]);
        assert!(
            out.contains("status: NXDOMAIN"),
            "{}: {name} {qtype}:\n{out}\n{}",
            resolver.kind(),
            resolver.log_text()
        );
    }
    let (xdp_after, do_after, user_after, text) = served(pair);
    let (xdp, with_do, user) = (xdp_after - xdp_before, do_after - do_before, user_after - user_before);
    // Exact in f64 for any count a test reaches.
    #[expect(clippy::cast_precision_loss, reason = "query counts stay far below 2^52")]
    let share = xdp as f64 / (xdp + user).max(1) as f64;
    eprintln!(
        "{}: {xdp} queries answered by XDP ({with_do} with DO=1), {user} by user space over UDP ({:.1} % in XDP)",
        resolver.kind(),
        share * 100.0
    );
    assert!(
        xdp >= 60,
        "{}: the resolver's queries reached XDP: {xdp}\n{text}",
        resolver.kind()
    );
    // BIND and Unbound validate, so they set DO on every query; the stub does not.
    if resolver.kind() == Kind::Knot {
        assert_eq!(with_do, 0, "{}: a stub sends DO=0", resolver.kind());
    } else {
        assert_eq!(with_do, xdp, "{}: every query had DO=1", resolver.kind());
    }
    assert!(
        share >= 0.99,
        "{}: {xdp} answered by XDP, {user} by user space over UDP (< 99 %)\n{text}",
        resolver.kind()
    );
    // BIND sends DNS cookies (RFC 7873): after its first answer, with the server cookie
    // the edge gave it, which the program validates (and so would not rate limit).
    let valid = |text: &str| metric_sum(text, "qdns_edge_xdp_packets_total{counter=\"valid_cookie\"}");
    let cookies = valid(&text) - valid(&text_before);
    eprintln!(
        "{}: {cookies} answers to queries with a valid server cookie",
        resolver.kind()
    );
    if resolver.kind() == Kind::Bind {
        assert!(
            cookies * 2 > xdp,
            "{}: most queries carry the server cookie XDP gave: {cookies} of {xdp}\n{text}",
            resolver.kind()
        );
    }
}

fn bind_config(dir: &Path) -> String {
    let except: Vec<String> = ZONES.iter().map(|z| format!("\"{z}\";")).collect();
    let validation = format!("validate-except {{ {} }};", except.join(" "));
    let mut conf = bind_options(dir, &["dnssec-validation auto;", &validation]);
    for z in ZONES {
        let _ = writeln!(
            conf,
            "zone \"{z}\" {{ type static-stub; server-addresses {{ {SERVER}; }}; }};"
        );
    }
    conf
}

fn unbound_config(dir: &Path) -> String {
    let mut conf = unbound_server(dir, &["trust-anchor-file: \"/usr/share/dns/root.key\""]);
    for zone in ZONES {
        let _ = writeln!(conf, "    domain-insecure: \"{zone}\"");
    }
    for zone in ZONES {
        let _ = writeln!(conf, "stub-zone:\n    name: \"{zone}\"\n    stub-addr: {SERVER}");
    }
    conf
}

fn kresd_config(dir: &Path) -> String {
    let names: Vec<String> = ZONES.iter().map(|z| format!("'{z}'")).collect();
    format!(
        r"net.listen('127.0.0.1', 53, {{ kind = 'dns' }})
net.ipv6 = false
cache.open(10 * MB, 'lmdb://{dir}/cache')
trust_anchors.set_insecure({{ {names} }})
policy.add(policy.suffix(policy.STUB({{ '{SERVER}' }}), policy.todnames({{ {names} }})))
",
        dir = dir.display(),
        names = names.join(", "),
    )
}

/// One resolver end to end: namespaces, edge, the resolver, the questions.
fn resolver_test(tag: char, kind: Kind, configure: fn(&Path) -> String) {
    require_root("network namespaces, XDP");
    let pair = Pair::new(tag);
    let zones = tempfile::tempdir().unwrap();
    copy_examples(zones.path());
    let mut master = std::fs::OpenOptions::new()
        .append(true)
        .open(zones.path().join("example.com.zone"))
        .unwrap();
    std::io::Write::write_all(
        &mut master,
        format!("{LONG_NAME}. IN AAAA 2001:db8::64\n{LONG_NAME}. IN TXT \"over 64 octets\"\n").as_bytes(),
    )
    .unwrap();
    let edge = start_edge(&pair, zones.path());
    let attached = run(&["ip", "-n", &pair.server, "link", "show", &pair.server_if]);
    assert!(attached.contains("xdpgeneric"), "{attached}");
    let dir = tempfile::tempdir().unwrap();
    // Up once it resolves the zone's apex through the edge (before the counts the test
    // compares are read).
    let ready = || dig(&pair, &["+tries=1", "+time=1", "example.com.", "SOA"]).contains("status: NOERROR");
    let resolver = Resolver::start(&pair.client, kind, dir.path(), &configure(dir.path()), ready);
    resolve_through(&pair, &resolver);
    drop(resolver);
    let (status, _) = edge.stop_with_log();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn bind9_validating_resolver_is_answered_from_xdp() {
    resolver_test('B', Kind::Bind, bind_config);
}

#[test]
fn unbound_validating_resolver_is_answered_from_xdp() {
    resolver_test('U', Kind::Unbound, unbound_config);
}

#[test]
fn knot_resolver_is_answered_from_xdp() {
    resolver_test('K', Kind::Knot, kresd_config);
}
