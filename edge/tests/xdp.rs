//! The XDP program in the real kernel (needs root, as CI has): `BPF_PROG_TEST_RUN` on a
//! loaded program, and the program attached to the loopback of a network namespace
//! this test creates, with real queries going through it.
//!
//! Without tables the program passes every packet with one counted reason; with them
//! it answers (see also `xdp_differential.rs` and `xdp_veth.rs`).
mod common;

use std::process::Command;

use common::{
    example_zones,
    frames::{ipv4_udp_frame, ipv6_udp_frame, vlan},
    netns::{require_root, run},
    query, Ask, Edge,
};
use hickory_proto::rr::RecordType;
use qdns_edge::xdp::XdpProgram;

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

fn counters(program: &XdpProgram) -> std::collections::HashMap<&'static str, u64> {
    program.counters().into_iter().collect()
}

/// One packet case: what goes in, and the one reason it must be counted under.
struct Case {
    description: &'static str,
    packet: Vec<u8>,
    reason: &'static str,
}

fn cases() -> Vec<Case> {
    let q = query("www.example.com.", RecordType::A, Ask::default());
    let mut response = q.clone();
    response[2] |= 0x80;
    let mut two_questions = q.clone();
    two_questions[5] = 2;
    let mut pointer = q[..12].to_vec();
    pointer.extend([0xc0, 0x0c, 0, 1, 0, 1]);
    let mut tcp = ipv4_udp_frame(&q, 53);
    tcp[14 + 9] = 6;
    let mut fragment = ipv4_udp_frame(&q, 53);
    fragment[14 + 6] = 0x20; // more fragments
    let mut arp = ipv4_udp_frame(&q, 53);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let whole = ipv4_udp_frame(&q, 53);
    vec![
        Case {
            description: "IPv4 query",
            packet: ipv4_udp_frame(&q, 53),
            reason: "pass_not_loaded",
        },
        Case {
            description: "IPv6 query",
            packet: ipv6_udp_frame(&q, 53),
            reason: "pass_not_loaded",
        },
        Case {
            description: "VLAN-tagged IPv4 query",
            packet: vlan(ipv4_udp_frame(&q, 53)),
            reason: "pass_not_loaded",
        },
        Case {
            description: "another UDP port",
            packet: ipv4_udp_frame(&q, 5353),
            reason: "pass_other_port",
        },
        Case {
            description: "TCP",
            packet: tcp,
            reason: "pass_not_udp",
        },
        Case {
            description: "IPv4 fragment",
            packet: fragment,
            reason: "pass_fragment",
        },
        Case {
            description: "ARP",
            packet: arp,
            reason: "pass_not_ip",
        },
        Case {
            description: "garbage",
            packet: vec![0xff; 60],
            reason: "pass_not_ip",
        },
        Case {
            description: "DNS response",
            packet: ipv4_udp_frame(&response, 53),
            reason: "pass_response",
        },
        Case {
            description: "two questions",
            packet: ipv4_udp_frame(&two_questions, 53),
            reason: "pass_not_simple_query",
        },
        Case {
            description: "compression pointer in the question",
            packet: ipv4_udp_frame(&pointer, 53),
            reason: "pass_bad_qname",
        },
        Case {
            description: "cut inside the question",
            packet: whole[..whole.len() - 20].to_vec(),
            reason: "pass_truncated",
        },
    ]
}

#[test]
fn test_run_parses_and_passes_every_packet_with_one_reason() {
    require_root("BPF and network namespaces");
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    for case in cases() {
        let before = counters(&program);
        let run = program.test_run(&case.packet, 1).unwrap();
        assert_eq!(run.action, XDP_PASS, "{}", case.description);
        assert_eq!(
            run.packet, case.packet,
            "{}: a passed packet is untouched",
            case.description
        );
        let after = counters(&program);
        for (label, value) in &after {
            let delta = value - before[label];
            let expected = u64::from(*label == "seen" || *label == case.reason);
            assert_eq!(delta, expected, "{}: counter {label}", case.description);
        }
    }
    // With repeat, the program runs each time.
    let before = counters(&program)["seen"];
    program.test_run(&cases()[0].packet, 1000).unwrap();
    assert_eq!(counters(&program)["seen"] - before, 1000);
}

/// A network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("qdns-{tag}-{}", std::process::id());
        run(&["ip", "netns", "add", &name]);
        let ns = Netns(name);
        run(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn attached_program_lets_queries_through_and_detaches_on_sigterm() {
    require_root("BPF and network namespaces");
    let ns = Netns::new("xdp");
    let edge = Edge::start_in(
        &["ip", "netns", "exec", &ns.0],
        &example_zones(),
        &["--xdp", "lo", "--xdp-mode", "generic"],
    );
    let attached = run(&["ip", "-n", &ns.0, "link", "show", "lo"]);
    assert!(attached.contains("xdpgeneric"), "program attached: {attached}");
    for addr in edge.addrs() {
        let out = run(&[
            "ip",
            "netns",
            "exec",
            &ns.0,
            "dig",
            &format!("@{}", addr.ip()),
            "-p",
            &addr.port().to_string(),
            "+tries=3",
            "www.example.com",
            "A",
        ]);
        assert!(out.contains("status: NOERROR") && out.contains("192.0.2.10"), "{out}");
    }
    let (status, log) = edge.stop_with_log();
    assert_eq!(status.code(), Some(0));
    let detach = log.iter().find(|l| l.contains("detaching XDP")).expect("detach logged");
    // Counters are logged as `seen=N …`; at least the queries went by.
    let seen = qdns_testkit::fixtures::logged_count(detach, "seen");
    assert!(seen >= 2, "{detach}");
    // The program answered the queries itself (generic XDP on lo sends XDP_TX back in).
    let answered = qdns_testkit::fixtures::logged_count(detach, "answered_plain");
    assert!(answered >= 2, "{detach}");
    let after = run(&["ip", "-n", &ns.0, "link", "show", "lo"]);
    assert!(!after.contains("xdp"), "detached on SIGTERM: {after}");
}

#[test]
fn attach_to_a_missing_interface_fails_clearly() {
    require_root("BPF and network namespaces");
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-edge"))
        .args(["--listen", "127.0.0.1:0", "--zones"])
        .arg(example_zones())
        .args(["--xdp", "qdns-nonexistent0", "--xdp-mode", "native"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("attaching XDP to qdns-nonexistent0 in Native mode failed"),
        "{last}"
    );
    assert!(last.contains("try --xdp-mode generic"), "{last}");
}

/// A query for www.example.com A with an OPT record carrying `options`.
fn query_with_options(options: &[u8]) -> Vec<u8> {
    let mut q = query("www.example.com.", RecordType::A, Ask::default());
    // The helper's OPT has no options: append them and fix its RDLENGTH.
    let rdlen_at = q.len() - 2;
    q[rdlen_at..].copy_from_slice(&(options.len() as u16).to_be_bytes());
    q.extend_from_slice(options);
    q
}

/// NSID (RFC 5001): with the edge's NSID set the program passes NSID requests (user
/// space adds the identifier) and still answers everything else, COOKIE included.
#[test]
fn nsid_requests_pass_when_the_edge_has_an_nsid() {
    require_root("BPF_PROG_TEST_RUN");
    let snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    let engine = qdns_edge::Engine::compile(&snapshot).unwrap();
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    program.install(&engine).expect("tables install");
    let nsid = ipv4_udp_frame(
        &query_with_options(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3, 0, 0]),
        53,
    );
    let cookie = ipv4_udp_frame(&query_with_options(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]), 53);
    for (on, nsid_action) in [(false, XDP_TX), (true, XDP_PASS), (false, XDP_TX)] {
        program.set_nsid(on).unwrap();
        let before = counters(&program);
        assert_eq!(
            program.test_run(&nsid, 1).unwrap().action,
            nsid_action,
            "NSID set: {on}"
        );
        assert_eq!(program.test_run(&cookie, 1).unwrap().action, XDP_TX, "NSID set: {on}");
        let after = counters(&program);
        assert_eq!(after["pass_nsid"] - before["pass_nsid"], u64::from(on));
    }
}

/// EDNS Client Subnet (RFC 7871): the program answers a query carrying a well-formed
/// option, echoing it with SCOPE 0 (the answer is the same for every client), with the
/// bytes user space sends; a malformed one (SCOPE set) passes, counted, for user space's
/// FORMERR.
#[test]
fn client_subnet_queries_are_echoed_and_malformed_ones_pass() {
    require_root("BPF_PROG_TEST_RUN");
    let snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    let engine = qdns_edge::Engine::compile(&snapshot).unwrap();
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    program.install(&engine).expect("tables install");
    let ecs = query_with_options(&[
        0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100,
    ]);
    let malformed = query_with_options(&[0, 8, 0, 7, 0, 1, 24, 3, 198, 51, 100]);
    let before = counters(&program);
    let run = program.test_run(&ipv4_udp_frame(&ecs, 53), 1).unwrap();
    assert_eq!(run.action, XDP_TX);
    let sent = &run.packet[14 + 20 + 8..];
    let mut out = vec![0u8; 1232];
    let expected = engine.respond(&ecs, &mut out, qdns_edge::Transport::Udp).unwrap();
    assert_eq!(sent, &out[..expected.len]);
    // The echo closes the message: FAMILY 1, SOURCE 24, SCOPE 0, the address.
    assert_eq!(&sent[sent.len() - 11..], &[0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100]);
    assert_eq!(
        program.test_run(&ipv4_udp_frame(&malformed, 53), 1).unwrap().action,
        XDP_PASS
    );
    let after = counters(&program);
    assert_eq!(after["pass_client_subnet"] - before["pass_client_subnet"], 1);
}

/// Client-aware sets the tables cannot hold whole pass to user space, counted as
/// `pass_client_aware`: the example's `near.shop.example` has an alias member (its US
/// clients get `www`'s answer), so plain and DO=1 queries pass; other names still
/// answer. Sets without aliases are decided in the program (`tests/xdp_client_aware.rs`).
#[test]
fn client_aware_sets_with_alias_members_pass_to_user_space() {
    require_root("BPF_PROG_TEST_RUN");
    let snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    let engine = qdns_edge::Engine::compile(&snapshot).unwrap();
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    program.install(&engine).expect("tables install");
    let near = ipv4_udp_frame(&query("near.shop.example.", RecordType::A, Ask::default()), 53);
    let near_do = ipv4_udp_frame(
        &query(
            "near.shop.example.",
            RecordType::A,
            Ask {
                dnssec_ok: true,
                ..Ask::default()
            },
        ),
        53,
    );
    let www = ipv4_udp_frame(&query("www.shop.example.", RecordType::A, Ask::default()), 53);
    let before = counters(&program);
    assert_eq!(program.test_run(&near, 1).unwrap().action, XDP_PASS);
    assert_eq!(program.test_run(&near_do, 1).unwrap().action, XDP_PASS);
    assert_eq!(program.test_run(&www, 1).unwrap().action, XDP_TX);
    let after = counters(&program);
    assert_eq!(after["pass_client_aware"] - before["pass_client_aware"], 2);
}

/// Every install fills the bank queries do not read and flips to it; health flips keep
/// the bank. Across installs and health changes the program keeps answering from the
/// latest generation, and a zone that changed answers with the new bytes.
#[test]
fn installs_alternate_banks_and_answer_from_the_latest_generation() {
    require_root("BPF_PROG_TEST_RUN");
    let dir = tempfile::tempdir().unwrap();
    common::copy_examples(dir.path());
    let engine_of = |dir: &std::path::Path| {
        let snapshot = qdns_zone::load_dir(dir, 1).unwrap();
        qdns_edge::Engine::compile(&snapshot).unwrap()
    };
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    let frame = ipv4_udp_frame(&query_with_options(&[]), 53);
    for round in 1..=4u32 {
        // Odd rounds serve the examples as they are, even rounds with www's A changed.
        let zone = dir.path().join("example.com.toml");
        let text = std::fs::read_to_string(&zone).unwrap();
        let (from, to) = if round % 2 == 0 {
            ("192.0.2.11\"", "192.0.2.99\"")
        } else {
            ("192.0.2.99\"", "192.0.2.11\"")
        };
        std::fs::write(&zone, text.replace(from, to)).unwrap();
        let engine = engine_of(dir.path());
        let stats = program.install(&engine).expect("tables install");
        assert!(stats.bytes > 0 && stats.crowded == 0, "{stats:?}");
        assert_eq!(program.table_stats().0, round);
        for _ in 0..2 {
            program.set_health(&vec![u64::MAX; engine.health().len()]).unwrap();
            let run = program.test_run(&frame, 1).unwrap();
            assert_eq!(run.action, XDP_TX, "round {round}");
            let want: [u8; 4] = if round % 2 == 0 {
                [192, 0, 2, 99]
            } else {
                [192, 0, 2, 11]
            };
            let answer = &run.packet[run.packet.len() - 11 - 4..run.packet.len() - 11];
            assert_eq!(answer, want, "round {round}");
        }
    }
}

/// Each program stays clear of the verifier's 1,000,000-instruction budget (the answer
/// path grew close to it before: a new branch must leave room, see ARCHITECTURE).
#[test]
fn every_program_leaves_verifier_headroom() {
    require_root("loading the XDP program");
    let program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    for (name, count) in program.verified_instructions() {
        let count = count.unwrap_or_else(|| panic!("{name}: the kernel reports no verified instruction count"));
        eprintln!("{name}: {count} instructions verified");
        assert!(count < 900_000, "{name}: {count} of 1,000,000 verified instructions");
    }
}

/// A table build of a large zone takes seconds; meanwhile the cookie secrets (a
/// rotation from control) and the cookie clock still reach the program, which keeps
/// stamping the cookies user space stamps (the watcher synced them only between
/// builds: a build held a rotation back for its whole length).
#[test]
fn cookie_secrets_and_clock_reach_the_program_while_tables_build() {
    use std::sync::{atomic::AtomicBool, Arc, Mutex};

    use qdns_edge::cookies::CookieJar;

    require_root("BPF_PROG_TEST_RUN");
    let small = Arc::new(qdns_edge::Engine::compile(&qdns_zone::load_dir(&example_zones(), 1).unwrap()).unwrap());
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), 1232).expect("load the XDP program");
    program.install(&small).expect("tables install");
    let program = Arc::new(Mutex::new(program));
    let engines = Arc::new(arc_swap::ArcSwap::new(Arc::clone(&small)));
    let jar = Arc::new(CookieJar::new([1; 16], None, None));
    jar.pin(1_000);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = qdns_edge::xdp::watch::spawn(
        Arc::clone(&program),
        Arc::clone(&engines),
        Arc::clone(&small),
        Some(Arc::clone(&jar)),
        Arc::clone(&stop),
    )
    .expect("the watcher starts");
    let client = [1, 2, 3, 4, 5, 6, 7, 8];
    let cookie_query = ipv4_udp_frame(&query_with_options(&[&[0, 10, 0, 8][..], &client].concat()), 53);
    // What user space stamps for this client (127.0.0.1) with the jar as it is.
    let expected = |jar: &CookieJar| {
        let option = qdns_edge::wire::edns::CookieOption { client, server: None };
        qdns_abi::cookie::server_octets(jar.answer(&option, "127.0.0.1".parse().unwrap()).server)
    };
    // The server cookie the program answers with (none before the watcher gave it
    // secrets).
    let stamped = |program: &Mutex<XdpProgram>| {
        let run = program.lock().unwrap().test_run(&cookie_query, 1).unwrap();
        assert_eq!(run.action, XDP_TX);
        common::response_cookie(&run.packet[14 + 20 + 8..]).and_then(|cookie| <[u8; 16]>::try_from(&cookie[8..]).ok())
    };
    let wait_for = |want: [u8; 16], what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stamped(&program) != Some(want) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: the program stamps {:?}",
                stamped(&program)
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    wait_for(expected(&jar), "the first secrets and second");
    // A zone of 100,000 names: its tables take seconds to build in a test build.
    let dir = tempfile::tempdir().unwrap();
    qdns_testkit::fixtures::copy_examples(dir.path());
    qdns_testkit::fixtures::write_big_zone(dir.path(), 100_000);
    let big = qdns_edge::Engine::compile(&qdns_zone::load_dir(dir.path(), 2).unwrap()).unwrap();
    let only_big = ipv4_udp_frame(&query("h99999.big.example.", RecordType::A, Ask::default()), 53);
    let big_answered = || program.lock().unwrap().test_run(&only_big, 1).unwrap().action == XDP_TX;
    engines.store(Arc::new(big));
    std::thread::sleep(std::time::Duration::from_millis(50));
    jar.set_secrets([2; 16], Some([1; 16]), None);
    jar.pin(2_000);
    let want = expected(&jar);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = stamped(&program);
        if now == Some(want) {
            assert!(
                !big_answered(),
                "the big zone's tables were in before the program took the new secret: this test proves nothing (make the zone larger)"
            );
            break;
        }
        assert!(
            !big_answered(),
            "the rotated secret and the new second waited for the table build: the program stamps {now:?}"
        );
        assert!(std::time::Instant::now() < deadline, "the program stamps {now:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().expect("the watcher ends");
}
