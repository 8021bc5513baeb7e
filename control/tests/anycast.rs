//! Anycast gated on the edge's health, over real BGP: an "edge" network namespace with
//! qdns-edge (following control over its Unix socket), BIRD 2 and `qdnsctl anycast`, and
//! a "router" namespace whose BIRD peers with it over a veth pair and installs what it
//! learns in its kernel table. The router must learn the service prefix while the edge
//! is ready (and reach the edge's DNS through it), lose it within seconds when the edge
//! stops or its snapshot goes stale (control gone past --ready-max-stale), and learn it
//! again on recovery. Needs root (namespaces) and bird2 (scripts/setup-ops).
mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{Location, Proc};
use qdns_testkit::netns::{require_root, Pair};

/// The service address the edge answers on and the prefix BGP carries.
const SERVICE: &str = "10.200.0.53";
/// Longest the router may take to learn or lose the prefix after a change: the
/// watchdog's fall (2 × 300 ms) and BGP's update, with room for a slow machine.
const CONVERGE: Duration = Duration::from_secs(8);

fn bird_conf(router_id: &str, body: &str) -> String {
    format!(
        "log stderr all;\nrouter id {router_id};\nprotocol device {{ scan time 1; }}\n{body}\n\
         # Fast timers: the test measures convergence in seconds.\n"
    )
}

const BGP_TIMERS: &str =
    "hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2;";

/// BIRD in namespace `ns` with `conf`, its control socket beside the file.
fn bird(ns: &str, dir: &Path, name: &'static str, conf: &str) -> Proc {
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "bird", "-f", "-c"])
        .arg(&path)
        .arg("-s")
        .arg(dir.join(format!("{name}.ctl")))
        .arg("-P")
        .arg(dir.join(format!("{name}.pid")));
    let bird = Proc::spawn(name, cmd);
    bird.wait_for("Started");
    bird
}

/// The router's kernel route to the service address, if it has one.
fn learned(pair: &Pair) -> Option<String> {
    let route = pair.in_client(&["ip", "-4", "route", "show", &format!("{SERVICE}/32")]);
    let route = route.trim();
    (!route.is_empty()).then(|| route.to_owned())
}

/// Waits until the router has (or has not) the route; how long it took.
fn wait_learned(pair: &Pair, want: bool, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let route = learned(pair);
        if route.is_some() == want {
            if let Some(route) = route {
                assert!(
                    route.contains("via 10.77.0.1") && route.contains("proto bird"),
                    "{route}"
                );
            }
            return start.elapsed();
        }
        assert!(
            start.elapsed() < CONVERGE,
            "{what}: the router {} the prefix after {CONVERGE:?}",
            if want { "did not learn" } else { "still has" }
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The BGP session on the router is up (a withdrawal is a withdrawal, not a dead peer).
fn session_up(pair: &Pair, dir: &Path) -> bool {
    pair.in_client(&[
        "birdc",
        "-s",
        &dir.join("router.ctl").to_string_lossy(),
        "show",
        "protocols",
        "from_edge",
    ])
    .contains("Established")
}

/// A DNS query from the router to the service address, routed by what BGP taught it.
fn answered_through_the_route(pair: &Pair) -> String {
    pair.in_client(&[
        "dig",
        "+short",
        "+time=1",
        "+tries=2",
        &format!("@{SERVICE}"),
        "www.example.com.",
        "A",
    ])
}

fn start_edge(location: &mut Location, pair: &Pair) {
    location.start_edge_with(
        &["ip", "netns", "exec", &pair.server],
        &["--metrics", "127.0.0.1:9153", "--ready-max-stale", "2"],
    );
    location.edge.as_ref().unwrap().wait_for("snapshot applied");
}

/// `qdnsctl anycast` in the server namespace, watching the edge's readiness and its DNS
/// answers and driving the edge's BIRD.
fn watchdog_command(pair: &Pair, dir: &Path) -> Command {
    let qdnsctl = env!("CARGO_BIN_EXE_qdnsctl");
    // Under the system call filter of its unit, as systemd applies it.
    let unit = qdns_testkit::units::shipped("qdns-anycast");
    let mut watchdog = Command::new("ip");
    watchdog
        .args(["netns", "exec", &pair.server])
        .args(qdns_testkit::units::filtered(&unit))
        .args([qdnsctl, "anycast"])
        .args(["--ready", "http://127.0.0.1:9153/ready"])
        .args(["--probe", &format!("{SERVICE}:53"), "--probe-name", "example.com."])
        .arg("--bird-socket")
        .arg(dir.join("edge-bird.ctl"))
        .args([
            "--protocol",
            "qdns_anycast",
            "--interval",
            "300ms",
            "--timeout",
            "500ms",
        ])
        .args(["--rise", "2", "--fall", "2"]);
    watchdog
}

#[test]
fn bird_announces_the_prefix_only_while_the_edge_is_ready() {
    require_root("network namespaces and BIRD");
    let pair = Pair::new('b');
    let dir = tempfile::tempdir().unwrap();
    // The service address on the edge's loopback; the link is 10.77.0.1 (edge) –
    // 10.77.0.2 (router).
    pair.in_server(&["ip", "addr", "add", &format!("{SERVICE}/32"), "dev", "lo"]);

    let edge_bird = bird(
        &pair.server,
        dir.path(),
        "edge-bird",
        &bird_conf(
            "10.77.0.1",
            &format!(
                "protocol static qdns_anycast {{ disabled yes; ipv4; route {SERVICE}/32 via \"lo\"; }}\n\
                 protocol bgp to_router {{ local 10.77.0.1 as 65001; neighbor 10.77.0.2 as 65000; {BGP_TIMERS}\n\
                 ipv4 {{ import none; export where proto = \"qdns_anycast\"; }}; }}"
            ),
        ),
    );
    let _router_bird = bird(
        &pair.client,
        dir.path(),
        "router",
        &bird_conf(
            "10.77.0.2",
            &format!(
                "protocol kernel {{ ipv4 {{ import none; export all; }}; }}\n\
                 protocol bgp from_edge {{ local 10.77.0.2 as 65000; neighbor 10.77.0.1 as 65001; {BGP_TIMERS}\n\
                 ipv4 {{ import all; export none; }}; }}"
            ),
        ),
    );

    let mut location = Location::prepared();
    location.start_control();
    location.dns = Some(format!("{SERVICE}:53").parse().unwrap());
    start_edge(&mut location, &pair);

    let watchdog = watchdog_command(&pair, dir.path());
    let mut watchdog = Proc::spawn("anycast", watchdog);

    // Ready: the router learns the prefix (the BGP session may take a few seconds to
    // come up first) and reaches the edge's DNS through it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while learned(&pair).is_none() {
        assert!(Instant::now() < deadline, "the router never learned {SERVICE}/32");
        std::thread::sleep(Duration::from_millis(200));
    }
    watchdog.wait_for("announcing");
    let answer = answered_through_the_route(&pair);
    assert!(answer.contains("192.0.2.10"), "www.example.com A via BGP: {answer}");

    // The edge stops: withdrawn within seconds, with the session still up.
    location.edge.as_mut().unwrap().term();
    let took = wait_learned(&pair, false, "edge stopped");
    assert!(session_up(&pair, dir.path()), "a withdrawal, not a lost session");
    eprintln!("edge stopped: withdrawn after {took:?}");
    watchdog.wait_for("withdrawn");

    // Back: learned again.
    start_edge(&mut location, &pair);
    let took = wait_learned(&pair, true, "edge restarted");
    eprintln!("edge restarted: announced after {took:?}");

    // Control gone: the edge keeps answering but is stale after 2 s; withdrawn.
    location.control.as_mut().unwrap().kill9();
    let took = wait_learned(&pair, false, "control gone");
    eprintln!("control gone: withdrawn after {took:?} (--ready-max-stale 2)");
    assert!(took >= Duration::from_secs(1), "not before the bound: {took:?}");
    let ready = pair.in_server(&["curl", "-s", "http://127.0.0.1:9153/ready"]);
    assert!(
        ready.starts_with("not ready: ") && ready.contains("cut off from control"),
        "{ready}"
    );

    // Control back: the edge relinks and is announced again.
    location.start_control();
    let took = wait_learned(&pair, true, "control back");
    eprintln!("control back: announced after {took:?}");

    // The watchdog stops: it withdraws on its way out.
    assert!(watchdog.term().success(), "the watchdog withdrew and exited cleanly");
    assert!(
        !watchdog.history_has("Operation not permitted") && !watchdog.history_has("os error 1)"),
        "the unit's filter refused a call"
    );
    wait_learned(&pair, false, "watchdog stopped");
    assert!(learned(&pair).is_none());
    drop(edge_bird);
}
