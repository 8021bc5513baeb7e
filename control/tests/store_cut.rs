//! The partition contract over a real network path (issue 52 §8, docs/OPERATIONS.md
//! "When the intent store is impaired"): three locations, each control in a network
//! namespace of its own with two veth links to the host — one to a 3-member etcd
//! cluster (Debian's etcd-server), one its remote checker reports over — and each edge
//! on the host (the edge socket is a file). One location's link to the store is cut;
//! what it answers is checked over DNS.
//!
//! Needs root (namespaces). A binary of its own: it does not share the machine with
//! the other store tests' clusters.
mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::{
    deployment::{example_zones, in_timeline, publish, secret_put},
    Location,
};
use hickory_proto::rr::RecordType;
use qdns_testkit::etcd::EtcdCluster;

/// The steered name of the network partition test, and its two answers.
const STEERED: &str = "www.steer.test.";
const STEER_PRIMARY: &[&str] = &["192.0.2.80"];
const STEER_SECONDARY: &[&str] = &["198.51.100.80"];
/// Where each location's control takes checker reports (in its namespace).
const REPORT_PORT: u16 = 5301;

/// A TCP service the checker probes (the primary's health): up while it runs.
struct Target {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Target {
    /// Listens on 127.0.0.1:`port` (0: any), accepting and closing connections.
    fn start(port: u16) -> Target {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                drop(listener.accept());
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Target {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes it: connections are refused from now on.
    fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The host's end of namespace `n`'s link to the store.
fn store_end(n: usize) -> String {
    format!("qsp{n}s-{}", std::process::id() % 100_000)
}

/// Namespace `ns` linked to the host by two veth pairs: one the checker reaches the
/// location over (host `10.97.N.1/24`, namespace `10.97.N.2/24`), one to the store
/// (host `10.96.N.1/24`, where the store's members serve it; namespace `10.96.N.2/24`).
/// Both go with `ns`.
fn link_to_host(ns: &qdns_testkit::netns::Netns, n: usize) {
    use qdns_testkit::netns::run;
    let checker_end = format!("qsp{n}c-{}", std::process::id() % 100_000);
    for (host_end, inside, net) in [(checker_end, "v0", 97), (store_end(n), "v1", 96)] {
        run(&[
            "ip",
            "link",
            "add",
            &host_end,
            "type",
            "veth",
            "peer",
            "name",
            inside,
            "netns",
            ns.name(),
        ]);
        run(&["ip", "addr", "add", &format!("10.{net}.{n}.1/24"), "dev", &host_end]);
        run(&["ip", "link", "set", &host_end, "up"]);
        run(&[
            "ip",
            "-n",
            ns.name(),
            "addr",
            "add",
            &format!("10.{net}.{n}.2/24"),
            "dev",
            inside,
        ]);
        run(&["ip", "-n", ns.name(), "link", "set", inside, "up"]);
    }
    // The store's end known for good (no ARP to fail fast once the link is cut).
    let mac = format!("02:00:00:00:96:{n:02x}");
    run(&["ip", "link", "set", "dev", &store_end(n), "address", &mac]);
    let store = format!("10.96.{n}.1");
    run(&[
        "ip",
        "-n",
        ns.name(),
        "neigh",
        "replace",
        &store,
        "lladdr",
        &mac,
        "dev",
        "v1",
        "nud",
        "permanent",
    ]);
}

/// Cuts (or heals) namespace `n`'s path to the store only, by setting the host's end of
/// its store link down: the namespace keeps its carrier-less route and its neighbour
/// entry, so its packets vanish as on a broken path (no error comes back: a request
/// waits out its timeout), while the checker still reaches
/// the location over the other link.
fn cut_from_store(n: usize, cut: bool) {
    let state = if cut { "down" } else { "up" };
    qdns_testkit::netns::run(&["ip", "link", "set", &store_end(n), state]);
}

/// `loc` answers the steered name with `want` (waiting up to `limit`).
fn steers(loc: &Location, want: &[&str], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let got = loc.values(STEERED, RecordType::A);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{STEERED} is {got:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// steer.test: www fails over on the health of the TCP service at 127.0.0.1:`port`.
fn write_steer_zone(zones: &Path, port: u16) {
    std::fs::write(
        zones.join("steer.test.toml"),
        format!(
            "{}[[health_check]]\nid = \"t\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = {port}\n\
             interval = 10\nfailure_threshold = 1\n\
             [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
             {{ id = \"p\", role = \"primary\", values = [\"192.0.2.80\"], health_check = \"t\" }},\n\
             {{ id = \"s\", role = \"secondary\", values = [\"198.51.100.80\"] }},\n]\n",
            qdns_testkit::fixtures::zone_head("steer.test."),
        ),
    )
    .unwrap();
}

/// Checker c1 (its key in `dir/c1.key`) following the intent at `url` and reporting to
/// each of `names` at its namespace's address (`10.97.N.2`); running.
fn checker_reporting_to(dir: &Path, url: &str, names: &[&str]) -> qdns_testkit::daemon::Daemon {
    let mut checker = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    checker
        .args(["checker", "--id", "c1", "--region", "r1", "--intent", url])
        .arg("--state-dir")
        .arg(dir.join("checker-state"))
        .arg("--key-file")
        .arg(dir.join("c1.key"));
    for (n, name) in names.iter().enumerate() {
        checker.args(["--report-to", &format!("{name}=10.97.{}.2:{REPORT_PORT}", n + 1)]);
    }
    let checker = qdns_testkit::daemon::Daemon::spawn("checker", checker);
    checker.wait_for("checker running");
    checker
}

/// The partition contract over a real network path (issue 52 §8): three locations, each
/// control in a network namespace of its own reaching a 3-member store and taking the
/// reports of a remote checker over a veth link. par's path to the store is cut (its
/// link down: packets vanish; the checker still reaches it over its own link): par keeps serving and keeps steering
/// by its checker's reports both ways, refuses an operator change within 5 s naming the
/// store, and does not take the change another location made meanwhile; healed, it
/// catches up and answers by it.
#[test]
fn a_location_cut_off_from_the_store_by_the_network_steers_by_its_checkers_and_catches_up() {
    qdns_testkit::netns::require_root("network namespaces");
    let dir = tempfile::tempdir().unwrap();
    let names = ["fra", "ams", "par"];
    let nets: Vec<qdns_testkit::netns::Netns> = (1..=3)
        .map(|n| {
            let ns = qdns_testkit::netns::Netns::new(&format!("qsp{n}"));
            link_to_host(&ns, n);
            ns
        })
        .collect();
    let store_addresses: Vec<String> = (1..=3).map(|n| format!("10.96.{n}.1")).collect();
    let also_on: Vec<&str> = store_addresses.iter().map(String::as_str).collect();
    let store = EtcdCluster::start_also_on(dir.path(), 3, &also_on);
    let url = store.url("qdns/cut");

    // The zones: steer.test's www fails over on the target's health.
    let mut target = Target::start(0);
    let zones = example_zones(dir.path(), true);
    write_steer_zone(&zones, target.port);
    publish(&zones, &url);
    let key = "c2VjcmV0LWtleS1vZi1jaGVja2VyLWMx";
    qdns_testkit::write_secret(&dir.path().join("c1.key"), key);
    let keys = dir.path().join("keys.toml");
    qdns_testkit::write_secret(
        &keys,
        format!("[[checker]]\nid = \"c1\"\nregion = \"r1\"\nkey = \"{key}\"\n"),
    );
    secret_put("checker-keys", &keys, &url);

    // Each location: control in its namespace (the store and checker reports over its
    // link), the edge on the host (the edge socket is a file).
    let mut locations = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let mut loc = Location::prepared();
        let listen = format!("10.97.{}.2:{REPORT_PORT}", n + 1);
        loc.start_control_following_in(
            nets[n].name(),
            &store.url_at(&store_addresses[n], "qdns/cut"),
            &[
                "--no-embedded-checker",
                "--location",
                name,
                "--checker-listen",
                &listen,
                "--insecure-plaintext-link",
            ],
        );
        in_timeline(&loc, "the deployment's checker keys taken: 1 checkers");
        loc.start_edge();
        locations.push(loc);
    }
    let checker = checker_reporting_to(dir.path(), &url, &names);
    let [fra, ams, par] = [&locations[0], &locations[1], &locations[2]];
    for loc in [fra, ams, par] {
        steers(loc, STEER_PRIMARY, Duration::from_secs(30));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !loc.ctl_json(&["health", "t"]).to_string().contains("\"c1\"") {
            assert!(Instant::now() < deadline, "{}", loc.ctl_json(&["health", "t"]));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // par's path to the store is cut.
    cut_from_store(3, true);
    let started = Instant::now();
    let out = par.ctl(&["override", "set", "t", "unhealthy", "--expires", "30m"]);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a change at a location cut off from the store");
    assert!(took < Duration::from_secs(8), "refused after {took:?}");
    assert!(
        err.contains("nothing was changed") && err.contains("intent store 10.96.3.1:"),
        "{err}"
    );
    // A change made at fra is in force where the store is reached, not at par.
    fra.ctl_json(&["override", "set", "t", "unhealthy", "--expires", "30m"]);
    steers(fra, STEER_SECONDARY, Duration::from_secs(20));
    steers(ams, STEER_SECONDARY, Duration::from_secs(20));
    steers(par, STEER_PRIMARY, Duration::from_secs(1));
    // par steers by its checker's reports, both ways.
    target.stop();
    steers(par, STEER_SECONDARY, Duration::from_secs(60));
    let _target = Target::start(target.port);
    steers(par, STEER_PRIMARY, Duration::from_secs(60));
    in_timeline(par, "cut off from the intent store");

    // Healed: par catches up and answers by the change made meanwhile.
    cut_from_store(3, false);
    in_timeline(par, "intent store reached again");
    steers(par, STEER_SECONDARY, Duration::from_secs(30));
    drop(checker);
    drop(locations);
    drop(store);
}
