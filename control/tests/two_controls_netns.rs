//! Two controls and two edges of one location over a real network (issue 54 §3, SPEC §11
//! "Several controls at one location"), under a dnsperf load: each control and each edge
//! in a network namespace of its own on one bridge with the host, where the intent store
//! (etcd), the remote checker, the health target, a knotd secondary and dnsperf run.
//! Edges follow the controls over mutual TLS (the link cookie secrets may go over), the
//! checker reports to both controls, knotd lists both as primaries.
//!
//! Needs root (namespaces, a bridge). A binary of its own: two controls, two edges, etcd,
//! knotd and two dnsperf runs are what two cores carry.
mod common;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{
    deployment::{example_zones, publish, secret_put},
    edge_bin, listening_addr, values, Proc,
};
use hickory_proto::rr::RecordType;
use qdns_testkit::{
    etcd::EtcdCluster,
    netns::{run, Netns},
    transfer_peers::{Secondary, Server, TsigKey},
};

/// The host's address on the bridge: the store, the checker, knotd and dnsperf.
const HOST: &str = "10.94.0.1";
/// The two controls of fra, in order (the edges' first `--control` is A).
const CONTROL_A: &str = "10.94.0.11";
const CONTROL_B: &str = "10.94.0.12";
/// The two edges.
const EDGE_1: &str = "10.94.0.21";
const EDGE_2: &str = "10.94.0.22";
/// Ports every control uses at its own address.
const LINK_PORT: u16 = 5300;
const REPORT_PORT: u16 = 5301;
const TRANSFER_PORT: u16 = 5353;
const METRICS_PORT: u16 = 9154;
/// The edges' keepalive: a link silent for 3 of these is dropped; the bound for
/// an edge to be on the other control is 2 of them.
const KEEPALIVE: u64 = 2;

/// www.steer.test fails over on the health of a TCP service on the host.
const STEERED: &str = "www.steer.test.";
const STEER_PRIMARY: &[&str] = &["192.0.2.80"];
const STEER_SECONDARY: &[&str] = &["198.51.100.80"];
/// www.xfr.example fails over on the external check `p`; knotd is its secondary.
const XFR_NAME: &str = "www.xfr.example.";
const XFR_SECRET: &str = "8Qu0x5o6yRUCdlWrlHvqYpUBIJbBcXKHDz5dkSwPFh0=";

/// The host's bridge, deleted on drop (the namespaces' links go with them).
struct Bridge(String);

impl Bridge {
    fn new() -> Bridge {
        let bridge = Bridge(format!("qtcbr{}", std::process::id() % 100_000));
        run(&["ip", "link", "add", &bridge.0, "type", "bridge"]);
        run(&["ip", "addr", "add", &format!("{HOST}/24"), "dev", &bridge.0]);
        run(&["ip", "link", "set", &bridge.0, "up"]);
        bridge
    }

    /// A namespace on the bridge at `address`/24.
    fn attach(&self, prefix: &str, address: &str) -> Netns {
        let ns = Netns::new(prefix);
        let host_end = format!("{prefix}{}", std::process::id() % 100_000);
        run(&[
            "ip",
            "link",
            "add",
            &host_end,
            "type",
            "veth",
            "peer",
            "name",
            "v0",
            "netns",
            ns.name(),
        ]);
        run(&["ip", "link", "set", &host_end, "master", &self.0]);
        run(&["ip", "link", "set", &host_end, "up"]);
        run(&[
            "ip",
            "-n",
            ns.name(),
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            "v0",
        ]);
        run(&["ip", "-n", ns.name(), "link", "set", "v0", "up"]);
        ns
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// A TCP service on the host the checker probes (the primary's health): up while it runs.
struct Target {
    listener: Option<std::net::TcpListener>,
    port: u16,
}

impl Target {
    fn start(port: u16) -> Target {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        // Connections complete in the backlog; the checker only connects.
        Target {
            listener: Some(listener),
            port,
        }
    }

    fn stop(&mut self) {
        self.listener = None;
    }
}

/// One control of fra in its namespace.
struct Control {
    name: &'static str,
    address: &'static str,
    ns: String,
    dir: PathBuf,
    url: String,
    proc: Option<Proc>,
}

impl Control {
    fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.name))
    }

    /// Starts it (again, on the same state directory); waits until its socket is ready.
    fn start(&mut self) {
        let pki = self.dir.join("pki");
        let at = |port: u16| format!("{}:{port}", self.address);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_qdns-control")]);
        cmd.args(["--intent", &self.url, "--insecure-plaintext-link"]);
        cmd.args(["--location", "fra", "--checker-id", self.name, "--no-embedded-checker"]);
        cmd.arg("--socket").arg(self.socket());
        cmd.arg("--state-dir")
            .arg(self.dir.join(format!("{}-state", self.name)));
        cmd.args(["--edge-socket", &format!("tls://{}", at(LINK_PORT))]);
        cmd.arg("--edge-tls-cert").arg(pki.join("control.pem"));
        cmd.arg("--edge-tls-key").arg(pki.join("control.key"));
        cmd.arg("--edge-tls-ca").arg(pki.join("ca.pem"));
        cmd.args(["--checker-listen", &at(REPORT_PORT)]);
        cmd.args(["--transfer-listen", &at(TRANSFER_PORT)]);
        cmd.args(["--metrics", &at(METRICS_PORT)]);
        let proc = Proc::spawn(self.name, cmd);
        proc.wait_for("control socket ready");
        self.proc = Some(proc);
    }

    fn kill9(&mut self) {
        self.proc.as_mut().expect("running").kill9();
    }

    /// `qdnsctl ARGS` against it, which must succeed.
    fn ctl(&self, args: &[&str]) {
        let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Its counter `qdns_control_transfers_total{outcome="OUTCOME"}` (0 when absent).
    fn transfers(&self, outcome: &str) -> u64 {
        let needle = format!("qdns_control_transfers_total{{outcome=\"{outcome}\"}} ");
        common::scrape_from(HOST, &format!("{}:{METRICS_PORT}", self.address))
            .lines()
            .find_map(|l| l.strip_prefix(&needle))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// One edge of fra in its namespace, following A then B.
struct Edge {
    proc: Proc,
    dns: SocketAddr,
}

fn start_edge(ns: &Netns, id: &'static str, address: &str, dir: &Path) -> Edge {
    let pki = dir.join("pki");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns.name()]).arg(edge_bin());
    cmd.args(["--listen", &format!("{address}:53"), "--workers", "1", "--edge-id", id]);
    for control in [CONTROL_A, CONTROL_B] {
        cmd.args(["--control", &format!("tls://{control}:{LINK_PORT}")]);
    }
    cmd.arg("--control-tls-cert").arg(pki.join(format!("{id}.pem")));
    cmd.arg("--control-tls-key").arg(pki.join(format!("{id}.key")));
    cmd.arg("--control-tls-ca").arg(pki.join("ca.pem"));
    cmd.args(["--control-keepalive", &KEEPALIVE.to_string()]);
    cmd.arg("--state-dir").arg(dir.join(format!("{id}-state")));
    let proc = Proc::spawn(id, cmd);
    let dns = listening_addr(&proc.wait_for("listening"));
    proc.wait_for("snapshot applied");
    Edge { proc, dns }
}

/// `qdnsctl pki`: a CA, control's certificate (both controls' addresses) and one per edge.
fn pki(dir: &Path) {
    let pki = dir.join("pki");
    let pki = pki.to_str().unwrap();
    for args in [
        &["init", "--dir", pki, "--days", "2"][..],
        &[
            "issue",
            "control",
            "--control",
            "--dir",
            pki,
            "--san",
            CONTROL_A,
            "--san",
            CONTROL_B,
        ],
        &["issue", "e1", "--dir", pki],
        &["issue", "e2", "--dir", pki],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
            .arg("pki")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The zones: the examples, steer.test (on the target at `port`) and xfr.example
/// (transferred to knotd at `knot`, notified).
fn write_zones(dir: &Path, port: u16, knot: SocketAddr) -> PathBuf {
    let zones = example_zones(dir, false);
    let head = qdns_testkit::fixtures::zone_head;
    std::fs::write(
        zones.join("steer.test.toml"),
        format!(
            "{}[[health_check]]\nid = \"t\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = {port}\n\
             interval = 10\nfailure_threshold = 1\n\
             [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
             {{ id = \"p\", role = \"primary\", values = [\"192.0.2.80\"], health_check = \"t\" }},\n\
             {{ id = \"s\", role = \"secondary\", values = [\"198.51.100.80\"] }},\n]\n",
            head("steer.test."),
        ),
    )
    .unwrap();
    let xfr = head("xfr.example.").replacen(
        "[zone]\n",
        &format!("[zone]\ntransfer_allow = [\"10.94.0.0/24\"]\ntransfer_tsig = \"xfr-key\"\nnotify = [\"{knot}\"]\n"),
        1,
    );
    std::fs::write(
        zones.join("xfr.example.toml"),
        format!(
            "{xfr}[[health_check]]\nid = \"p\"\ntype = \"external\"\n\
             [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
             {{ id = \"p\", role = \"primary\", values = [\"192.0.2.1\"], health_check = \"p\" }},\n\
             {{ id = \"s\", role = \"secondary\", values = [\"192.0.2.2\"] }},\n]\n"
        ),
    )
    .unwrap();
    zones
}

/// Waits (at most `limit`) until the server at `dns` answers `name` A with `want`.
fn answers(dns: SocketAddr, name: &str, want: &[&str], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let got = common::ask(dns, name, RecordType::A, Duration::from_millis(500), 2).map(|m| values(&m));
        if got.as_deref().is_some_and(|g| g == want) {
            return;
        }
        assert!(Instant::now() < deadline, "{dns} {name}: {got:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The server at `dns` answers `name` A with `want` every time it is asked for `span`.
fn stays(dns: SocketAddr, name: &str, want: &[&str], span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        let got = common::ask(dns, name, RecordType::A, Duration::from_millis(500), 2).map(|m| values(&m));
        assert!(
            got.as_deref().is_some_and(|g| g == want),
            "{dns} {name}: {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The cookie the edge at `dns` answers `cookie` with (asked from the host's bridge
/// address).
fn cookie_from(dns: SocketAddr, cookie: &[u8]) -> Vec<u8> {
    common::cookie_answer(dns, HOST.parse().unwrap(), cookie)
}

/// dnsperf at a steady rate against both edges for `seconds`; [`Load::lost`] waits for it.
struct Load(Vec<std::process::Child>);

impl Load {
    fn start(dir: &Path, edges: &[&Edge], seconds: u64) -> Load {
        let queries = dir.join("queries.txt");
        std::fs::write(&queries, "www.steer.test A\nwww.xfr.example A\nwww.example.com A\n").unwrap();
        let children = edges
            .iter()
            .map(|edge| {
                Command::new("dnsperf")
                    .args(["-s", &edge.dns.ip().to_string(), "-p", &edge.dns.port().to_string()])
                    .arg("-d")
                    .arg(&queries)
                    .args(["-l", &seconds.to_string(), "-Q", "400", "-c", "2", "-t", "2"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("dnsperf (scripts/setup-peers installs it)")
            })
            .collect();
        Load(children)
    }

    /// Waits for every run to end; each one's (sent, lost).
    fn lost(self) -> Vec<(u64, u64)> {
        self.0
            .into_iter()
            .map(|child| {
                let out = child.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                let number = |label: &str| -> u64 {
                    text.lines()
                        .find_map(|l| l.trim().strip_prefix(label))
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("no {label:?} in dnsperf's output:\n{text}"))
                };
                (number("Queries sent:"), number("Queries lost:"))
            })
            .collect()
    }
}

/// Asserts a load lost nothing and was a load (at least `at_least` queries an edge).
fn nothing_lost(load: Load, at_least: u64) {
    for (sent, lost) in load.lost() {
        assert!(sent >= at_least, "dnsperf sent only {sent}");
        assert_eq!(lost, 0, "{lost} of {sent} queries lost");
    }
}

/// fra's two controls (A, B), two edges following them, the checker reporting to both,
/// knotd listing both, the store and the target, in namespaces on one bridge. Fields drop
/// in order: the daemons before the store, the namespaces and the bridge.
struct Fra {
    edges: [Edge; 2],
    knot: Secondary,
    checker: Proc,
    a: Control,
    b: Control,
    target: Target,
    store: EtcdCluster,
    _namespaces: [Netns; 4],
    _bridge: Bridge,
}

/// Sets fra up in `root`; returns once both edges answer from A.
fn fra(root: &Path) -> Fra {
    let bridge = Bridge::new();
    let (ns_a, ns_b) = (bridge.attach("qtca", CONTROL_A), bridge.attach("qtcb", CONTROL_B));
    let (ns_1, ns_2) = (bridge.attach("qte1", EDGE_1), bridge.attach("qte2", EDGE_2));
    let store = EtcdCluster::start_also_on(root, 1, &[HOST]);
    let url = store.url("qdns/fra");

    // The intent: zones, the checker's key, the TSIG key.
    let target = Target::start(0);
    let knot_addr: SocketAddr = format!("{HOST}:{}", common::free_port()).parse().unwrap();
    let zones = write_zones(root, target.port, knot_addr);
    let key = "c2VjcmV0LWtleS1vZi1jaGVja2VyLWMx";
    qdns_testkit::write_secret(&root.join("c1.key"), key);
    let keys = root.join("keys.toml");
    qdns_testkit::write_secret(
        &keys,
        format!("[[checker]]\nid = \"c1\"\nregion = \"r1\"\nkey = \"{key}\"\n"),
    );
    secret_put("checker-keys", &keys, &url);
    let tsig = root.join("tsig.conf");
    let tsig_text = format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{XFR_SECRET}\";\n}};\n");
    qdns_link::protocol::write_private(&tsig, tsig_text.as_bytes()).unwrap();
    secret_put("tsig-keys", &tsig, &url);
    publish(&zones, &url);
    pki(root);

    let control = |name, address, ns: &Netns| Control {
        name,
        address,
        ns: ns.name().to_owned(),
        dir: root.to_owned(),
        url: store.url_at(HOST, "qdns/fra"),
        proc: None,
    };
    let mut a = control("fra-a", CONTROL_A, &ns_a);
    let mut b = control("fra-b", CONTROL_B, &ns_b);
    a.start();
    b.start();
    let mut checker = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    checker
        .args(["checker", "--id", "c1", "--region", "r1", "--intent", &url])
        .arg("--state-dir")
        .arg(root.join("checker-state"))
        .arg("--key-file")
        .arg(root.join("c1.key"));
    for control in [CONTROL_A, CONTROL_B] {
        checker.args(["--report-to", &format!("fra={control}:{REPORT_PORT}")]);
    }
    let checker = Proc::spawn("checker", checker);
    checker.wait_for("checker running");
    let edges = [
        start_edge(&ns_1, "e1", EDGE_1, root),
        start_edge(&ns_2, "e2", EDGE_2, root),
    ];
    let xfr_key = TsigKey {
        name: "xfr-key".to_owned(),
        algorithm: "hmac-sha256".to_owned(),
        secret: XFR_SECRET.to_owned(),
    };
    let primaries: Vec<SocketAddr> = [CONTROL_A, CONTROL_B]
        .iter()
        .map(|c| format!("{c}:{TRANSFER_PORT}").parse().unwrap())
        .collect();
    let knot = Secondary::start_following_on(
        Server::Knot,
        &root.join("knot"),
        "xfr.example",
        &primaries,
        &xfr_key,
        knot_addr,
    );
    for edge in &edges {
        answers(edge.dns, STEERED, STEER_PRIMARY, Duration::from_secs(30));
        edge.proc.seen("cookie secrets from control");
    }
    Fra {
        edges,
        knot,
        checker,
        a,
        b,
        target,
        store,
        _namespaces: [ns_a, ns_b, ns_1, ns_2],
        _bridge: bridge,
    }
}

/// Two controls of fra (A, B) and two edges following them, in namespaces on one bridge,
/// under a dnsperf load at both edges: A is killed (SIGKILL) — no query lost, both edges on B
/// within 2 × keepalive, a health change the checker sees after the kill (it reports to
/// both) reaches their answers, a cookie an edge gave before the switch is still taken
/// as its own after it, and knotd (listing A then B) takes the next change from B by
/// IXFR; A comes back — the edges return to it, no query lost; then B is killed (SIGKILL) — the
/// edges stay on A, no query lost.
#[test]
fn two_controls_and_two_edges_of_a_location_under_load_lose_no_query_when_a_control_dies() {
    qdns_testkit::require_root("network namespaces and a bridge");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let Fra {
        edges,
        knot,
        checker,
        mut a,
        mut b,
        mut target,
        store,
        _namespaces,
        _bridge,
    } = fra(root);
    answers(knot.addr, XFR_NAME, &["192.0.2.1"], Duration::from_secs(20));
    // A change at A before the kill: knotd takes it from A.
    a.ctl(&["external", "xfr.example./p", "unhealthy"]);
    answers(knot.addr, XFR_NAME, &["192.0.2.2"], Duration::from_secs(20));
    let given = cookie_from(edges[0].dns, b"cookie-1");
    assert_eq!(cookie_from(edges[0].dns, &given), given, "fresh: taken as it came");
    let secrets_taken = edges[0].proc.count("cookie secrets from control");

    // A dies under load.
    let load = Load::start(root, &[&edges[0], &edges[1]], 45);
    std::thread::sleep(Duration::from_secs(3));
    a.kill9();
    let killed = Instant::now();
    for edge in &edges {
        edge.proc.wait_for("trying the next control of the location");
        edge.proc.wait_for("snapshot applied");
    }
    let switched = killed.elapsed();
    assert!(
        switched < Duration::from_secs(2 * KEEPALIVE),
        "edges on B {switched:?} after the kill"
    );
    // The cookie given under A's link is B's edge's too (the location's secret, sent
    // again by B).
    let deadline = Instant::now() + Duration::from_secs(10);
    while edges[0].proc.count("cookie secrets from control") == secrets_taken {
        assert!(Instant::now() < deadline, "B sent no cookie secrets");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cookie_from(edges[0].dns, &given), given, "the cookie after the switch");
    // The target fails after the kill: the checker tells B, B the edges.
    target.stop();
    for edge in &edges {
        answers(edge.dns, STEERED, STEER_SECONDARY, Duration::from_secs(30));
    }
    // A change at B reaches knotd by IXFR from B.
    // (Both controls notify knotd of each change; it may have taken the one before
    // from either: they serve the same serials.)
    let ixfr_before = b.transfers("ixfr");
    b.ctl(&["external", "xfr.example./p", "healthy"]);
    answers(knot.addr, XFR_NAME, &["192.0.2.1"], Duration::from_secs(20));
    assert_eq!(b.transfers("ixfr"), ixfr_before + 1, "{}", knot.log_text());
    assert_eq!(b.transfers("axfr"), 0, "{}", knot.log_text());
    assert_eq!(b.transfers("ixfr_whole_zone"), 0, "{}", knot.log_text());
    nothing_lost(load, 5_000);

    // A back under load, the target still down: A takes edges once it heard the checker
    // (not from the decisions it kept from before its kill, which said healthy), so the
    // edges return to it and answer as they did on B throughout.
    let load = Load::start(root, &[&edges[0], &edges[1]], 30);
    a.start();
    a.proc
        .as_ref()
        .unwrap()
        .wait_for("the deployment's state taken and the checkers heard: taking edges");
    for edge in &edges {
        edge.proc.wait_for_within(
            "an earlier control of the location answers again",
            Duration::from_secs(20),
        );
        edge.proc.wait_for("snapshot applied");
    }
    for edge in &edges {
        stays(edge.dns, STEERED, STEER_SECONDARY, Duration::from_secs(2));
    }
    let _target = Target::start(target.port);
    for edge in &edges {
        answers(edge.dns, STEERED, STEER_PRIMARY, Duration::from_secs(30));
    }
    let moves: Vec<usize> = edges
        .iter()
        .map(|e| e.proc.count("trying the next control of the location"))
        .collect();
    b.kill9();
    std::thread::sleep(Duration::from_secs(3 * KEEPALIVE));
    for (edge, before) in edges.iter().zip(moves) {
        assert_eq!(
            edge.proc.count("trying the next control of the location"),
            before,
            "an edge on A moved when B died"
        );
        answers(edge.dns, STEERED, STEER_PRIMARY, Duration::from_secs(1));
    }
    nothing_lost(load, 3_000);
    drop(edges);
    drop(knot);
    drop(checker);
    drop(a);
    drop(b);
    drop(store);
}
