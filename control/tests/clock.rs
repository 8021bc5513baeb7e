//! Wall-clock steps (issue 15): control and an edge run under libfaketime, their wall
//! clock stepped an hour forward and then an hour back while the monotonic clock runs
//! on. What lasts "for a while" in a running process follows the monotonic clock: a
//! checker's report stays fresh, an operator's 10-minute override keeps its 10 minutes,
//! an edge cut off from control for seconds is not "cut off for an hour". Needs the
//! `faketime` package (scripts/setup-ops).
mod common;

use std::{
    fmt::Write as _,
    net::TcpListener,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{edge_bin, free_port, Proc};
use qdns_testkit::fixtures::zone_head;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// `program` with its wall clock offset by what `file` says (`+0`, `+1h`, `-1h`…),
/// re-read at most once a second; its monotonic clock untouched.
fn faked(program: &Path, file: &Path) -> Command {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} missing: install the faketime package (scripts/setup-ops)"
    );
    let mut cmd = Command::new(program);
    cmd.env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_TIMESTAMP_FILE", file)
        .env("FAKETIME_CACHE_DURATION", "1")
        .env("DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

struct World {
    control: Proc,
    edge: Option<Proc>,
    dns: std::net::SocketAddr,
    metrics: u16,
    clock: PathBuf,
    dir: tempfile::TempDir,
    _target: TcpListener,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port();
        let zones = dir.path().join("zones");
        std::fs::create_dir(&zones).unwrap();
        // Two checks on the same live TCP target: "a" gets overridden, "b" is decided
        // by the (embedded) checker alone.
        let mut zone = zone_head("k.example.");
        for id in ["a", "b"] {
            let _ = write!(
                zone,
                "[[health_check]]\nid = \"{id}\"\ntype = \"tcp\"\nip = \"127.0.0.1\"\nport = {port}\n\
                 interval = 10\nfailure_threshold = 1\n\
                 [[rrset]]\nname = \"{id}\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
                 {{ id = \"p\", role = \"primary\", values = [\"192.0.2.1\"], health_check = \"{id}\" }},\n\
                 {{ id = \"s\", role = \"secondary\", values = [\"192.0.2.2\"] }},\n]\n"
            );
        }
        std::fs::write(zones.join("k.toml"), zone).unwrap();
        let clock = dir.path().join("clock");
        std::fs::write(&clock, "+0\n").unwrap();
        let d = dir.path();
        let mut cmd = faked(Path::new(env!("CARGO_BIN_EXE_qdns-control")), &clock);
        cmd.arg("--zones")
            .arg(&zones)
            .arg("--socket")
            .arg(d.join("control.sock"));
        cmd.arg("--state-dir").arg(d.join("control-state"));
        cmd.arg("--edge-socket").arg(d.join("edge.sock"));
        let control = Proc::spawn("control", cmd);
        control.wait_for("control socket ready");
        let metrics = free_port();
        let mut cmd = faked(&edge_bin(), &clock);
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--edge-id",
            "e",
            "--control",
        ])
        .arg(d.join("edge.sock"))
        .arg("--state-dir")
        .arg(d.join("edge-state"))
        .args(["--metrics", &format!("127.0.0.1:{metrics}"), "--ready-max-stale", "30"]);
        let (edge, dns) = common::spawn_edge(cmd);
        World {
            control,
            edge: Some(edge),
            dns,
            metrics,
            clock,
            dir,
            _target: target,
        }
    }

    fn step(&self, offset: &str) {
        std::fs::write(&self.clock, format!("{offset}\n")).unwrap();
        // libfaketime re-reads the file at most once a second.
        std::thread::sleep(Duration::from_millis(1500));
    }

    fn ctl(&self, args: &[&str]) -> serde_json::Value {
        common::ctl_json_at(&self.dir.path().join("control.sock"), args)
    }

    fn why(&self, check: &str) -> String {
        self.ctl(&["health", check])[0]["why"].as_str().unwrap().to_owned()
    }

    fn answer(&self, name: &str) -> Vec<String> {
        common::values(
            &common::ask(
                self.dns,
                &format!("{name}.k.example."),
                hickory_proto::rr::RecordType::A,
                Duration::from_secs(1),
                3,
            )
            .expect("an answer"),
        )
    }

    /// The override's remaining seconds, from its `why`.
    fn override_left(&self) -> u64 {
        let why = self.why("a");
        why.split("for another ")
            .nth(1)
            .and_then(|rest| rest.trim_end_matches('s').parse().ok())
            .unwrap_or_else(|| panic!("not an override: {why}"))
    }

    /// For one probe interval and more: the override holds with what is left of its 10
    /// minutes, "b" is decided from a fresh report, and the edge answers accordingly.
    fn holds(&self, when: &str, start: Instant) {
        let until = Instant::now() + Duration::from_secs(12);
        while Instant::now() < until {
            let left = self.override_left();
            let elapsed = start.elapsed().as_secs();
            assert!(
                left <= 600 - elapsed + 1 && left + 3 >= 600 - elapsed,
                "{when}: the 10-minute override has {left} s left after {elapsed} s"
            );
            let why = self.why("b");
            assert!(
                why.contains("1 of 1 reachable checkers report healthy"),
                "{when}: b: {why}"
            );
            assert_eq!(self.answer("a"), ["192.0.2.2"], "{when}: a is forced unhealthy");
            assert_eq!(self.answer("b"), ["192.0.2.1"], "{when}: b is healthy");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn ready(&self) -> (u16, String) {
        let out = Command::new("curl")
            .args([
                "-s",
                "-w",
                "\n%{http_code}",
                &format!("http://127.0.0.1:{}/ready", self.metrics),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.parse().unwrap(), body.to_owned())
    }
}

#[test]
fn wall_clock_steps_move_neither_freshness_nor_expiries_nor_readiness() {
    let mut world = World::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !world.why("b").contains("1 of 1 reachable checkers report healthy") {
        assert!(Instant::now() < deadline, "no report: {}", world.why("b"));
        std::thread::sleep(Duration::from_millis(300));
    }
    world.ctl(&["override", "set", "a", "unhealthy", "--expires", "10m"]);
    let set = Instant::now();
    world.holds("before any step", set);
    world.step("+1h");
    world.holds("an hour ahead", set);
    // The step is real for control: b's latest observation (one probe interval later)
    // carries the stepped wall time.
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = world.ctl(&["health", "b"])[0]["observations"][0]["at"]
        .as_u64()
        .unwrap();
    assert!(
        at > real + 3000,
        "control's clock was not stepped: observation at {at}, real {real}"
    );
    world.step("-1h");
    world.holds("an hour behind", set);
    // Persisted on the wall clock of the moment it is written (a restart reads back
    // what is left, not an hour more or less).
    world.ctl(&["override", "set", "b", "healthy", "--expires", "5m"]); // any change persists
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(world.dir.path().join("control-state/operator.json")).unwrap())
            .unwrap();
    let fake_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600;
    let expires = saved["overrides"]["k.example./a"]["expires"].as_u64().unwrap();
    let left = expires.saturating_sub(fake_now);
    assert!(
        (600 - set.elapsed().as_secs() - 5..=600).contains(&left),
        "persisted end {expires} is {left} s after the (stepped) wall clock"
    );

    // The edge, cut off from control, is ready within --ready-max-stale (30 s) whatever
    // its wall clock does.
    world.control.term();
    world.edge.as_ref().unwrap().wait_for("control closed the connection");
    world.step("+2h");
    let (code, body) = world.ready();
    assert_eq!(code, 200, "cut off for seconds, not hours: {body}");
    assert!(body.contains("cut off from control for"), "{body}");
    world.step("-3h");
    let (code, body) = world.ready();
    assert_eq!(code, 200, "{body}");
    drop(world.edge.take());
}
