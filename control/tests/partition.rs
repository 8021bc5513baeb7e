//! The partition-quorum rule (SPEC §4) across real network paths: three checker regions
//! (a network namespace each, two `qdns-control checker` processes per region), two
//! locations (control + edge in a namespace each) and an HTTP target (Python's
//! `http.server`) in a namespace of its own, joined by point-to-point veth links. Links
//! are cut by setting one end down — the other end keeps its carrier-less route, so
//! packets vanish as on a real broken path rather than failing fast — and healed by
//! setting it up again. Every scenario is asserted over DNS (dig) at each location's
//! edge and through `qdnsctl health`/`status`.
//!
//! ```text
//!                 tgt (10.99.0.80:80, http.server)
//!              /       |        \
//!           r1         r2         r3        two checkers each
//!          /  \       /  \       /  \
//!         a    b     a    b     a    b      control + edge
//! ```
//!
//! Needs root (namespaces).
mod common;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{edge_bin, Proc};
use qdns_testkit::fixtures::zone_head;
use qdns_testkit::netns::{require_root, run, Netns};

/// The probed target.
const TARGET: &str = "10.99.0.80";
/// Where each location's control accepts checker reports (in its own namespace).
const REPORT_PORT: u16 = 5301;
/// The failover set: primary while the target is healthy, secondary otherwise.
const NAME: &str = "www.p.example.";
const PRIMARY: &str = "192.0.2.80";
const SECONDARY: &str = "198.51.100.80";
/// The check's probe interval and failure threshold (the zone below).
const INTERVAL: u64 = 10;
const FAILURE_THRESHOLD: u64 = 1;
/// How long a checker's report stays fresh: `quorum::fresh_for(INTERVAL)`.
const FRESH_FOR: u64 = 3 * INTERVAL + 5;

const REGIONS: [u8; 3] = [1, 2, 3];
const CHECKERS_PER_REGION: u8 = 2;
const LOCATIONS: [&str; 2] = ["a", "b"];

/// Each location: its namespace, control, edge and the edge's DNS port.
struct Site {
    control: Proc,
    edge: Proc,
    dns_port: u16,
    socket: PathBuf,
    ns: Netns,
}

/// The processes first, the namespaces last (fields drop in order).
struct World {
    target: Option<Proc>,
    checkers: Vec<Proc>,
    sites: Vec<Site>,
    regions: Vec<Netns>,
    tgt: Netns,
    dir: tempfile::TempDir,
}

fn key(checker: &str) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = (0..32u8).map(|b| b ^ checker.as_bytes()[1].wrapping_mul(37)).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn checker_id(region: u8, n: u8) -> String {
    format!("c{region}{n}")
}

/// A veth link from `a` (interface `a_if`, address `a_addr`) to `b` (`b_if`, `b_addr`),
/// created inside the namespaces so the interface names are theirs alone.
fn link(a: &Netns, a_if: &str, a_addr: &str, b: &Netns, b_if: &str, b_addr: &str) {
    run(&[
        "ip",
        "-n",
        a.name(),
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ]);
    for (ns, dev, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
        run(&["ip", "-n", ns.name(), "addr", "add", addr, "dev", dev]);
        run(&["ip", "-n", ns.name(), "link", "set", dev, "up"]);
    }
}

fn set_link(ns: &Netns, dev: &str, up: bool) {
    run(&[
        "ip",
        "-n",
        ns.name(),
        "link",
        "set",
        dev,
        if up { "up" } else { "down" },
    ]);
}

/// `program args…` inside `ns`.
fn in_ns(ns: &Netns, program: &Path) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns.name()]).arg(program);
    cmd
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let zones = dir.path().join("zones");
        std::fs::create_dir(&zones).unwrap();
        std::fs::write(
            zones.join("p.toml"),
            format!(
                "{}[[health_check]]\nid = \"web\"\ntype = \"http\"\nip = \"{TARGET}\"\nport = 80\n\
                 interval = {INTERVAL}\nfailure_threshold = {FAILURE_THRESHOLD}\n\
                 [[rrset]]\nname = \"www\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
                 {{ id = \"p\", role = \"primary\", values = [\"{PRIMARY}\"], health_check = \"web\" }},\n\
                 {{ id = \"s\", role = \"secondary\", values = [\"{SECONDARY}\"] }},\n]\n",
                zone_head("p.example.")
            ),
        )
        .unwrap();
        let mut keys = String::new();
        for r in REGIONS {
            for n in 1..=CHECKERS_PER_REGION {
                let id = checker_id(r, n);
                let _ = writeln!(
                    keys,
                    "[[checker]]\nid = \"{id}\"\nregion = \"r{r}\"\nkey = \"{}\"",
                    key(&id)
                );
                qdns_testkit::write_secret(&dir.path().join(format!("{id}.key")), key(&id));
            }
        }
        qdns_testkit::write_secret(&dir.path().join("keys.toml"), keys);
        std::fs::write(dir.path().join("index.html"), "ok\n").unwrap();

        // The network: the target's address on the target namespace's loopback, reached
        // from each region over its own link; each region linked to each location.
        let tgt = Netns::new("qp-tgt");
        run(&[
            "ip",
            "-n",
            tgt.name(),
            "addr",
            "add",
            &format!("{TARGET}/32"),
            "dev",
            "lo",
        ]);
        let regions: Vec<Netns> = REGIONS.iter().map(|r| Netns::new(&format!("qp-r{r}"))).collect();
        let location_ns: Vec<Netns> = LOCATIONS.iter().map(|l| Netns::new(&format!("qp-{l}"))).collect();
        for (r, region) in REGIONS.iter().zip(&regions) {
            link(
                &tgt,
                &format!("to-r{r}"),
                &format!("10.91.{r}.1/30"),
                region,
                "to-tgt",
                &format!("10.91.{r}.2/30"),
            );
            run(&[
                "ip",
                "-n",
                region.name(),
                "route",
                "add",
                &format!("{TARGET}/32"),
                "via",
                &format!("10.91.{r}.1"),
            ]);
            for (l, location) in location_ns.iter().enumerate() {
                let net = 92 + l;
                link(
                    location,
                    &format!("to-r{r}"),
                    &format!("10.{net}.{r}.1/30"),
                    region,
                    &format!("to-{}", LOCATIONS[l]),
                    &format!("10.{net}.{r}.2/30"),
                );
            }
        }

        let mut world = World {
            target: None,
            checkers: Vec::new(),
            sites: Vec::new(),
            regions,
            tgt,
            dir,
        };
        world.start_target();
        for (l, ns) in location_ns.into_iter().enumerate() {
            let site = world.start_site(LOCATIONS[l], ns);
            world.sites.push(site);
        }
        for (i, r) in REGIONS.iter().enumerate() {
            for n in 1..=CHECKERS_PER_REGION {
                let checker = world.start_checker(i, *r, n);
                world.checkers.push(checker);
            }
        }
        world
    }

    fn start_target(&mut self) {
        let mut cmd = in_ns(&self.tgt, Path::new("/usr/bin/python3"));
        cmd.args(["-m", "http.server", "80", "--bind", TARGET, "--directory"])
            .arg(self.dir.path());
        let target = Proc::spawn("http-target", cmd);
        // Up once it answers from inside its namespace.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    self.tgt.name(),
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                ])
                .arg(format!("http://{TARGET}/"))
                .output()
                .unwrap();
            if out.stdout == b"200" {
                break;
            }
            assert!(Instant::now() < deadline, "the HTTP target did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.target = Some(target);
    }

    fn start_site(&self, name: &'static str, ns: Netns) -> Site {
        let d = self.dir.path();
        let socket = d.join(format!("{name}.sock"));
        let edge_socket = d.join(format!("{name}-edge.sock"));
        let mut cmd = in_ns(&ns, Path::new(env!("CARGO_BIN_EXE_qdns-control")));
        cmd.arg("--zones").arg(d.join("zones")).arg("--socket").arg(&socket);
        cmd.arg("--state-dir").arg(d.join(format!("{name}-state")));
        cmd.arg("--edge-socket").arg(&edge_socket);
        cmd.args([
            "--location",
            name,
            "--no-embedded-checker",
            "--checker-listen",
            &format!("0.0.0.0:{REPORT_PORT}"),
        ]);
        cmd.arg("--checker-keys").arg(d.join("keys.toml"));
        let control = Proc::spawn(name, cmd);
        control.wait_for("accepting checker reports");
        let mut cmd = in_ns(&ns, &edge_bin());
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--edge-id",
            name,
            "--control",
        ])
        .arg(&edge_socket)
        .arg("--state-dir")
        .arg(d.join(format!("{name}-edge-state")));
        let (edge, addr) = common::spawn_edge(cmd);
        Site {
            control,
            edge,
            dns_port: addr.port(),
            socket,
            ns,
        }
    }

    /// Checker `n` of region `r` (namespace `regions[i]`), reporting to both locations
    /// over its region's links.
    fn start_checker(&self, i: usize, r: u8, n: u8) -> Proc {
        let id = checker_id(r, n);
        let d = self.dir.path();
        let mut cmd = in_ns(&self.regions[i], Path::new(env!("CARGO_BIN_EXE_qdns-control")));
        cmd.args(["checker", "--id", &id, "--region", &format!("r{r}"), "--zones"])
            .arg(d.join("zones"))
            .arg("--key-file")
            .arg(d.join(format!("{id}.key")));
        for (l, location) in LOCATIONS.iter().enumerate() {
            cmd.args(["--report-to", &format!("{location}=10.{}.{r}.1:{REPORT_PORT}", 92 + l)]);
        }
        let checker = Proc::spawn("checker", cmd);
        checker.wait_for("checker running");
        checker
    }

    fn site(&self, name: &str) -> &Site {
        &self.sites[LOCATIONS.iter().position(|l| *l == name).unwrap()]
    }

    /// `qdnsctl --json ARGS` at location `name`.
    fn ctl(&self, name: &str, args: &[&str]) -> serde_json::Value {
        common::ctl_json_at(&self.site(name).socket, args)
    }

    fn health(&self, name: &str) -> serde_json::Value {
        self.ctl(name, &["health", "web"])[0].clone()
    }

    /// The A records the edge of location `name` answers for [`NAME`] (dig, inside the
    /// location's namespace).
    fn answer(&self, name: &str) -> Vec<String> {
        let site = self.site(name);
        let out = run(&[
            "ip",
            "netns",
            "exec",
            site.ns.name(),
            "dig",
            "+short",
            "+time=1",
            "+tries=3",
            "@127.0.0.1",
            "-p",
            &site.dns_port.to_string(),
            NAME,
            "A",
        ]);
        out.lines().map(str::to_owned).collect()
    }

    /// Waits until location `name` decides with a `why` containing `why` and its edge
    /// answers `value`; returns how long that took.
    fn wait(&self, name: &str, why: &str, value: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let health = self.health(name);
            let answer = self.answer(name);
            if health["why"].as_str().unwrap_or("").contains(why) && answer == [value] {
                eprintln!(
                    "location {name}: {why:?}, answering {value}, after {:?}",
                    start.elapsed()
                );
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "location {name}: wanted {why:?} and {value} within {limit:?}; have {answer:?} and {health:#}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits (up to 5 s: `status` counts at control's once-a-second re-evaluation)
    /// until location `name` hears exactly `want` ("id (region)").
    fn wait_reachable(&self, name: &str, want: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let status = self.ctl(name, &["status"]);
            let have: Vec<String> = status["checkers"]["list"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{} ({})", c["id"].as_str().unwrap(), c["region"].as_str().unwrap()))
                .collect();
            if have == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "location {name} hears {have:?}, not {want:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn each_location_decides_from_the_checkers_it_can_reach() {
    require_root("network namespaces");
    let mut world = World::new();
    let limit = Duration::from_secs(40);
    // All paths up: every checker reaches the target and both locations.
    for l in LOCATIONS {
        world.wait(l, "6 of 6 reachable checkers report healthy", PRIMARY, limit);
    }

    // 1. Regions r2 and r3 lose their path to the target (the target's ends go down:
    // their probes time out). Four of six checkers report unhealthy, yet 2/6 > 18 %:
    // the endpoint stays healthy everywhere — the quorum does not follow the majority.
    set_link(&world.tgt, "to-r2", false);
    set_link(&world.tgt, "to-r3", false);
    for l in LOCATIONS {
        world.wait(l, "2 of 6 reachable checkers report healthy", PRIMARY, limit);
    }

    // 2. Location b loses regions r1 and r2. Once their reports are stale it decides
    // from r3 alone, whose checkers cannot reach the target: 0 of 2, unhealthy, and b's
    // edge answers the secondary while a's still answers the primary.
    set_link(&world.site("b").ns, "to-r1", false);
    set_link(&world.site("b").ns, "to-r2", false);
    let took = world.wait(
        "b",
        "0 of 2 reachable checkers report healthy",
        SECONDARY,
        Duration::from_secs(FRESH_FOR + 25),
    );
    assert!(
        took >= Duration::from_secs(FRESH_FOR - INTERVAL - 1),
        "b decided before r1's reports could be stale ({took:?})"
    );
    world.wait_reachable("b", &["c31 (r3)".into(), "c32 (r3)".into()]);
    let health = world.health("b");
    let reachable: Vec<&str> = health["reachable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(reachable, ["c31", "c32"], "{health:#}");
    assert_eq!(
        health["observations"].as_array().unwrap().len(),
        6,
        "unreachable checkers' last reports stay listed: {health:#}"
    );
    world.wait("a", "2 of 6 reachable checkers report healthy", PRIMARY, limit);
    let everyone: Vec<String> = REGIONS
        .iter()
        .flat_map(|r| (1..=CHECKERS_PER_REGION).map(move |n| format!("{} (r{r})", checker_id(*r, n))))
        .collect();
    world.wait_reachable("a", &everyone);
    let events = world.ctl("b", &["events"]).to_string();
    assert!(events.contains("checker c11 (r1) is unreachable"), "{events}");

    // 3. Heal every link: both locations hear all six checkers again, all healthy.
    set_link(&world.tgt, "to-r2", true);
    set_link(&world.tgt, "to-r3", true);
    set_link(&world.site("b").ns, "to-r1", true);
    set_link(&world.site("b").ns, "to-r2", true);
    for l in LOCATIONS {
        world.wait(
            l,
            "6 of 6 reachable checkers report healthy",
            PRIMARY,
            Duration::from_secs(60),
        );
    }

    // 4. The target really dies: every location flips within failure_threshold ×
    // interval + the staleness bound (and in practice within one interval and a report).
    let mut target = world.target.take().unwrap();
    target.kill9();
    let bound = Duration::from_secs(FAILURE_THRESHOLD * INTERVAL + FRESH_FOR);
    for l in LOCATIONS {
        let took = world.wait(l, "0 of 6 reachable checkers report healthy", SECONDARY, bound);
        eprintln!("location {l} flipped to the secondary {took:?} after the target died");
    }

    // 5. It comes back: everything converges on the primary.
    world.start_target();
    for l in LOCATIONS {
        world.wait(l, "6 of 6 reachable checkers report healthy", PRIMARY, limit);
    }
    for site in &world.sites {
        assert!(
            !site.edge.history_has("panicked") && !site.control.history_has("panicked"),
            "a daemon panicked"
        );
    }
}
