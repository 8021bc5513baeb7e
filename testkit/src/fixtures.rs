//! Fixtures and small clients every crate's tests use: the example zones, a free
//! loopback port, and a `/metrics` scrape.
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

/// The example zones (`examples/zones`), the fixture of most tests.
pub fn example_zones() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones")
}

/// The `[zone]` head of a small test zone `t.example.` (TTL 60, SOA, one NS): a test
/// appends its own tables (`format!("{ZONE_HEAD}{body}")`).
pub const ZONE_HEAD: &str = r#"
[zone]
origin = "t.example."
ttl = 60
[zone.soa]
mname = "ns.t.example."
rname = "h.t.example."
serial = 1
refresh = 1
retry = 1
expire = 1
minimum = 5
[zone.ns]
names = ["ns.t.example."]
"#;

/// [`ZONE_HEAD`] with a geo set `geo.t.example. A`: Bavaria (`DE-BY`) 10.0.0.1, Europe
/// (`EU`) 10.0.0.2, everyone else 10.0.0.9.
#[must_use]
pub fn geo_zone() -> String {
    format!(
        "{ZONE_HEAD}\n[[rrset]]\nname = \"geo\"\ntype = \"A\"\npolicy = \"geo\"\nmembers = [\n\
         {{ id = \"bavaria\", location = \"DE-BY\", values = [\"10.0.0.1\"] }},\n\
         {{ id = \"europe\", location = \"EU\", values = [\"10.0.0.2\"] }},\n\
         {{ id = \"rest\", location = \"*\", values = [\"10.0.0.9\"] }},\n]\n"
    )
}

/// [`ZONE_HEAD`] for another origin (`"chk.example."`): the same TTL, SOA timers and
/// one NS, `ns.ORIGIN`.
#[must_use]
pub fn zone_head(origin: &str) -> String {
    ZONE_HEAD.replace("t.example.", origin)
}

/// Writes `big.example.` into `dir`: the test zone head (`zone_head`) including a master
/// file of `names` names `h0`, `h1`, … with one A each (`h{i}` → `10.(i>>16).(i>>8).i`,
/// the last three octets of `i`). Returns the master file's text (a test edits it to
/// reload).
pub fn write_big_zone(dir: &Path, names: usize) -> String {
    use std::fmt::Write as _;
    let toml = zone_head("big.example.").replacen("[zone]\n", "[zone]\ninclude = \"big.example.zone\"\n", 1);
    std::fs::write(dir.join("big.example.toml"), toml).unwrap();
    let mut body = String::with_capacity(names * 26);
    for i in 0..names {
        let _ = writeln!(body, "h{i} IN A 10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
    }
    std::fs::write(dir.join("big.example.zone"), &body).unwrap();
    body
}

/// Copies the example zones into `dir` (for tests that change them).
pub fn copy_examples(dir: &Path) {
    for entry in std::fs::read_dir(example_zones()).expect("examples/zones") {
        let path = entry.expect("a directory entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("a file name"))).expect("copy");
    }
}

/// A port on 127.0.0.1 free for both TCP and UDP a moment ago, for a daemon to bind.
///
/// Chosen below the kernel's ephemeral range (`ip_local_port_range`, 32768–60999 by
/// default), where ports bound to `:0` and outgoing connections come from: a port
/// taken from that range was often handed to another test's socket before the daemon
/// got to bind it ("Address already in use" in CI). Each process walks 20000–32767
/// from a point of its own, so tests running at once rarely try the same port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_768;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000–32767 on 127.0.0.1")
}

/// A TCP port on 127.0.0.1 that refuses connections for as long as this lives: a
/// socket bound to it that never listens. Holding the port (instead of binding `:0`
/// and letting go) keeps anything else from taking it — a daemon's own listener once
/// got the "closed" port a test had just released, and the probe found it open.
pub struct ClosedPort {
    _socket: socket2::Socket,
    /// The port number.
    pub port: u16,
}

impl ClosedPort {
    /// Binds a fresh port below the ephemeral range ([`free_port`]) without listening.
    pub fn new() -> ClosedPort {
        for _ in 0..64 {
            let port = free_port();
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
            if socket
                .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())
                .is_ok()
            {
                return ClosedPort { _socket: socket, port };
            }
        }
        panic!("no port to hold closed on 127.0.0.1")
    }
}

impl Default for ClosedPort {
    fn default() -> ClosedPort {
        ClosedPort::new()
    }
}

/// The body of `GET /metrics` at `addr`, asked from the loopback address `source`.
pub fn scrape_from(source: Ipv4Addr, addr: SocketAddr) -> String {
    get_from(source, addr, "/metrics")
}

/// The body of `GET PATH` (HTTP/1.1, `Connection: close`) at `addr`, asked from the
/// loopback address `source`.
pub fn get_from(source: Ipv4Addr, addr: SocketAddr, path: &str) -> String {
    let mut conn = crate::connect_from(source, addr).expect("the client connects");
    conn.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("request");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("response");
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The value of the sample `series` (name and labels, as the text shows them) in a
/// metrics body, if present.
pub fn sample(body: &str, series: &str) -> Option<u64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The counts in an edge's log line of `label=count` pairs (`detaching XDP`, `stopped`)
/// whose label is `label`, or starts with it when it ends in `_` (`pass_`): summed, 0
/// when none is there (the edge leaves zero counts out).
#[must_use]
pub fn logged_count(line: &str, label: &str) -> u64 {
    line.split_whitespace()
        .filter_map(|token| {
            let (key, count) = token.trim_matches('"').rsplit_once('=')?;
            let key = key.rsplit('=').next()?;
            let wanted = if label.ends_with('_') {
                key.starts_with(label)
            } else {
                key == label
            };
            wanted.then(|| count.parse::<u64>().ok()).flatten()
        })
        .sum()
}

/// The XDP program's counter `counter` (e.g. `answered_plain`) that edge `edge` last
/// reported, from control's `qdnsctl status` JSON; 0 when the edge or the counter is
/// not there (not linked yet, or no XDP).
pub fn edge_xdp_counter(status: &serde_json::Value, edge: &str, counter: &str) -> u64 {
    status["edges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == edge)
        .flat_map(|e| e["xdp"]["counters"].as_array().cloned().unwrap_or_default())
        .find(|pair| pair[0] == counter)
        .and_then(|pair| pair[1].as_u64())
        .unwrap_or(0)
}

/// `QDNSCTL --socket SOCKET --json ARGS` (the `qdnsctl` binary at `qdnsctl`), which must
/// succeed; its JSON.
///
/// # Panics
/// When it cannot run, fails, or prints something other than JSON.
pub fn qdnsctl_json(qdnsctl: &Path, socket: &Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(qdnsctl)
        .arg("--socket")
        .arg(socket)
        .arg("--json")
        .args(args)
        .output()
        .expect("qdnsctl runs");
    assert!(
        out.status.success(),
        "qdnsctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("qdnsctl prints JSON")
}
