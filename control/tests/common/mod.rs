//! Helpers for end-to-end tests: a location (real `qdns-control` + real `qdns-edge`
//! following it) in a temporary directory, `qdnsctl`, and a DNS client (hickory-proto).
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod deployment;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
    time::{Duration, Instant},
};

use hickory_proto::{
    op::Message,
    rr::{RData, RecordType},
};

/// The `qdns-edge` binary, built once if this test run did not build it.
pub fn edge_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "qdns-edge", "--bin", "qdns-edge"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo build qdns-edge");
            assert!(status.success());
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("qdns-edge")
        })
        .clone()
}

/// A daemon under test (qdns-testkit's, shared with the edge's tests).
pub use qdns_testkit::daemon::Daemon as Proc;
#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::fixtures::{free_port, sample};

/// Spawns the edge `command`; waits until it listens and applied a snapshot; returns it
/// and its UDP address.
pub fn spawn_edge(command: Command) -> (Proc, SocketAddr) {
    let edge = Proc::spawn("edge", command);
    let line = edge.wait_for("listening");
    let addr = listening_addr(&line);
    edge.wait_for("snapshot applied");
    (edge, addr)
}

/// The UDP address in the edge's `listening udp=ADDR …` line.
pub fn listening_addr(line: &str) -> SocketAddr {
    line.split("udp=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no udp= address in {line:?}"))
}

/// `qdnsctl --socket SOCKET --json ARGS`, which must succeed; its JSON.
pub fn ctl_json_at(socket: &Path, args: &[&str]) -> serde_json::Value {
    qdns_testkit::fixtures::qdnsctl_json(Path::new(env!("CARGO_BIN_EXE_qdnsctl")), socket, args)
}

/// Writes `lines` to the control socket at once (a client that pipelines) and reads
/// one answer per line, in order.
pub fn pipeline(socket: &Path, lines: &[&str]) -> Vec<serde_json::Value> {
    use std::io::{BufRead as _, BufReader, Write as _};
    let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut all = lines.join("\n");
    all.push('\n');
    (&stream).write_all(all.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    lines
        .iter()
        .map(|line| {
            let mut reply = String::new();
            reader.read_line(&mut reply).unwrap();
            serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{line}: {e}: {reply:?}"))
        })
        .collect()
}

/// One location: control and an edge in a temp dir, zones copied from examples.
pub struct Location {
    pub dir: tempfile::TempDir,
    pub control: Option<Proc>,
    pub edge: Option<Proc>,
    pub dns: Option<SocketAddr>,
}

impl Location {
    pub fn zones(&self) -> PathBuf {
        self.dir.path().join("zones")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }
    pub fn edge_socket(&self) -> PathBuf {
        self.dir.path().join("edge.sock")
    }

    pub fn new() -> Location {
        let mut location = Location::control_only();
        location.start_edge();
        location.edge.as_ref().unwrap().wait_for("snapshot applied");
        location
    }

    /// Control running, no edge yet.
    pub fn control_only() -> Location {
        let mut location = Location::prepared();
        location.start_control();
        location
    }

    /// The example zones in a new directory; nothing running.
    pub fn prepared() -> Location {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("zones")).unwrap();
        qdns_testkit::fixtures::copy_examples(&dir.path().join("zones"));
        Location {
            dir,
            control: None,
            edge: None,
            dns: None,
        }
    }

    /// Starts control without its embedded checker: health here is driven by overrides
    /// and external checks; probing has its own tests (the example checks probe loopback
    /// ports where nothing listens).
    pub fn start_control(&mut self) {
        self.start_control_with(&["--no-embedded-checker"]);
    }

    /// Starts control with `extra` arguments.
    pub fn start_control_with(&mut self, extra: &[&str]) {
        let zones = self.zones();
        self.spawn_control(&["--zones".as_ref(), zones.as_os_str()], extra);
    }

    /// Starts control taking its zones from the deployment's intent at `url`.
    pub fn start_control_following(&mut self, url: &str, extra: &[&str]) {
        self.spawn_control(&["--intent".as_ref(), url.as_ref()], extra);
    }

    /// [`Location::start_control_following`] inside the network namespace `netns` (its
    /// sockets and state stay files of this location, so the edge and qdnsctl reach it
    /// from the host).
    pub fn start_control_following_in(&mut self, netns: &str, url: &str, extra: &[&str]) {
        let source = [
            "netns",
            "exec",
            netns,
            env!("CARGO_BIN_EXE_qdns-control"),
            "--intent",
            url,
        ];
        let source: Vec<&std::ffi::OsStr> = source.iter().map(std::ffi::OsStr::new).collect();
        self.spawn("ip", &source, extra);
    }

    /// Starts control with the zones from `source`, this location's socket, state and
    /// edge socket, and `extra`; waits until its socket is ready.
    fn spawn_control(&mut self, source: &[&std::ffi::OsStr], extra: &[&str]) {
        self.spawn(env!("CARGO_BIN_EXE_qdns-control"), source, extra);
    }

    /// Runs `program` with `source`, then control's arguments for this location.
    fn spawn(&mut self, program: &str, source: &[&std::ffi::OsStr], extra: &[&str]) {
        let mut cmd = Command::new(program);
        cmd.args(source).arg("--socket").arg(self.socket());
        cmd.arg("--state-dir")
            .arg(self.dir.path().join("control-state"))
            .arg("--edge-socket")
            .arg(self.edge_socket());
        cmd.args(extra);
        let proc = Proc::spawn("control", cmd);
        proc.wait_for("control socket ready");
        self.control = Some(proc);
    }

    /// Starts control inside the network namespace `netns` (`ip netns exec`) with this
    /// location's zones, socket and state and `extra` arguments; waits until its socket
    /// is ready and returns it (not kept in `self.control`).
    pub fn start_control_in(&self, netns: &str, extra: &[&str]) -> Proc {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, env!("CARGO_BIN_EXE_qdns-control"), "--zones"])
            .arg(self.zones())
            .arg("--socket")
            .arg(self.socket())
            .arg("--state-dir")
            .arg(self.dir.path().join("control-state"))
            .args(extra);
        let proc = Proc::spawn("control", cmd);
        proc.wait_for("control socket ready");
        proc
    }

    /// Starts the edge (on a new port unless one was used before); waits until it listens.
    pub fn start_edge(&mut self) {
        self.start_edge_with(&[], &[]);
    }

    /// Starts the edge under `prefix` (e.g. `ip netns exec NS`) with `extra` arguments.
    pub fn start_edge_with(&mut self, prefix: &[&str], extra: &[&str]) {
        let mut cmd = match prefix.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(edge_bin());
                cmd
            }
            None => Command::new(edge_bin()),
        };
        let listen = self.dns.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
        cmd.args([
            "--listen",
            &listen,
            "--workers",
            "1",
            "--edge-id",
            "test-edge",
            "--control",
        ])
        .arg(self.edge_socket());
        cmd.arg("--state-dir").arg(self.dir.path().join("edge-state"));
        cmd.args(extra);
        let proc = Proc::spawn("edge", cmd);
        let line = proc.wait_for("listening");
        self.dns = Some(listening_addr(&line));
        self.edge = Some(proc);
    }

    /// Runs `qdnsctl ARGS` against this location.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs `qdnsctl --json ARGS`, which must succeed; returns the JSON.
    pub fn ctl_json(&self, args: &[&str]) -> serde_json::Value {
        ctl_json_at(&self.socket(), args)
    }

    /// Waits until every connected edge acknowledged the current health.
    pub fn wait_edges_current(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.ctl_json(&["status"]);
            let seq = status["health_seq"].as_u64().unwrap();
            let version = status["snapshot_version"].as_u64().unwrap();
            let edges = status["edges"].as_array().unwrap();
            if !edges.is_empty()
                && edges
                    .iter()
                    .all(|e| e["seq"].as_u64() == Some(seq) && e["snapshot"].as_u64() == Some(version))
            {
                return;
            }
            assert!(Instant::now() < deadline, "edges did not catch up: {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn values(&self, name: &str, qtype: RecordType) -> Vec<String> {
        values(&ask(self.dns.unwrap(), name, qtype, Duration::from_secs(2), 3).expect("an answer"))
    }
}

/// Asks over UDP without EDNS, up to `tries` times; `None` when nothing came back.
pub use qdns_testkit::dns::ask_udp as ask;

/// Asks `name` A from inside the network namespace `ns` until the sorted answer is
/// `want` (5 s at most); the last answer.
pub fn ns_values_until(
    ns: &qdns_testkit::netns::Netns,
    dns: SocketAddr,
    name: &'static str,
    want: &'static [&'static str],
) -> Vec<String> {
    ns.run(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = values(&ask(dns, name, RecordType::A, Duration::from_secs(2), 3).expect("an answer"));
            if got == want || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// Sorted answer values.
pub fn values(msg: &Message) -> Vec<String> {
    let mut v: Vec<String> = msg
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::AAAA(a) => a.0.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    v.sort();
    v
}

/// `GET /metrics` from `addr` over a plain socket: the body.
pub fn scrape(addr: &str) -> String {
    scrape_from("127.0.0.1", addr)
}

/// The counter `qdns_control_transfers_total{outcome="OUTCOME"}` control serves at
/// `metrics` (0 when absent).
pub fn transfers_counted(metrics: &str, outcome: &str) -> u64 {
    let needle = format!("qdns_control_transfers_total{{outcome=\"{outcome}\"}} ");
    scrape(metrics)
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The body of `GET PATH` at `addr` (from 127.0.0.1).
pub fn get(addr: &str, path: &str) -> String {
    qdns_testkit::fixtures::get_from(std::net::Ipv4Addr::LOCALHOST, addr.parse().unwrap(), path)
}

/// The body of `/metrics` at `addr`, asked from the loopback address `source`.
pub fn scrape_from(source: &str, addr: &str) -> String {
    qdns_testkit::fixtures::scrape_from(source.parse().unwrap(), addr.parse().unwrap())
}

/// Asks `www.example.com A` at `dns` from `source` (an address of this host) with a
/// COOKIE option of `cookie` (client, then any server cookie); returns the response's
/// cookie (24 octets).
pub fn cookie_answer(dns: SocketAddr, source: std::net::IpAddr, cookie: &[u8]) -> Vec<u8> {
    let mut msg = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
    msg.extend(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
    msg.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    msg.extend(((cookie.len() + 4) as u16).to_be_bytes());
    msg.extend([0, 10]);
    msg.extend((cookie.len() as u16).to_be_bytes());
    msg.extend(cookie);
    let socket = std::net::UdpSocket::bind((source, 0)).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 2048];
    for _ in 0..3 {
        socket.send_to(&msg, dns).unwrap();
        if let Ok((len, _)) = socket.recv_from(&mut buf) {
            let at = buf[..len]
                .windows(4)
                .rposition(|w| w == [0, 10, 0, 24])
                .expect("a COOKIE");
            return buf[at + 4..at + 28].to_vec();
        }
    }
    panic!("no answer from {dns}");
}

/// The serial transfers of `zone` (`"xfr.example."`) carry at `location`'s control
/// (`qdnsctl status`; 0: none yet).
pub fn transfer_serial(location: &Location, zone: &str) -> u64 {
    let status = location.ctl_json(&["status"]);
    status["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == zone)
        .and_then(|z| z["transfer"]["serial"].as_u64())
        .unwrap_or(0)
}
