//! The QPS harness (`scripts/bench-qps`): qdns-edge beside knotd, nsd and gdnsd on the
//! same zone, driven in turn by the same generator (dnsperf) on loopback.
//!
//! For each server: start-up time and RSS, closed-loop maximum, and fixed offered loads
//! with the server's CPU time per answered query (user + sys from `/proc/PID/stat`, all
//! threads) and p50/p99 latency from a probe that sends one query per millisecond beside
//! the load. Three runs each (one with `--smoke`); median and range. The generator's own
//! CPU use is measured (`getrusage` of the finished dnsperf): a run where dnsperf kept
//! its core busy is marked generator-bound. Then, for qdns: 100,000- and 1,000,000-rrset reloads under
//! load (time, lost queries), and start-up time and RSS of every server with a
//! 1,000,000-record zone. Prints a Markdown table at the end and writes it, with the raw
//! numbers as JSON, under the output directory.
//!
//! Peers have no routing policies: the weighted and failover names are plain record sets
//! there (all members), so they do the same lookup work with a plain answer.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_sign_loss,
    reason = "a measurement tool: counters and times become f64 for averages and back for display"
)]

mod floor;
mod sink;
mod veth;
mod xdp_asm;
mod xdp_load;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::{BufRead, BufReader},
    net::{SocketAddr, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    time::{Duration, Instant},
};

const ZONE: &str = "bench.test.";
const NAMES: usize = 10_000;
const POLICY_NAMES: usize = 4;
const QUERIES: usize = 100_000;

/// What the report says of a stage `--only loopback` leaves out.
const NOT_RUN: &str = "not run (--only loopback)";

/// A stage `--only` runs alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// The veth pair driven by a packet generator (root; `xdp_load.rs`).
    Generator,
    /// The reloads under load (qdns).
    Reload,
    /// The four servers on loopback (no reloads, no veth pair).
    Loopback,
}

/// What to run.
struct Plan {
    smoke: bool,
    /// `--only STAGE`: one stage alone.
    only: Option<Stage>,
    /// `--generator NAME`: what drives the veth pair in the generator stage (trafgen,
    /// the default, or kxdpgun where its XDP program loads).
    generator: xdp_load::Generator,
    /// `--edge-arg ARG` (repeatable): more arguments for every qdns-edge the harness
    /// starts on loopback (the servers' runs and the reloads; e.g. `--workers=1` after
    /// the harness's own `--workers 2`), printed with the results.
    edge_args: Vec<String>,
    out: PathBuf,
    edge: PathBuf,
    runs: usize,
    seconds: u32,
    loads: Vec<u32>,
    big_records: usize,
    /// Record sets of each reload-under-load measurement.
    reload_rrsets: Vec<usize>,
}

impl Plan {
    /// Offered loads stepped through on the veth pair.
    fn veth_steps(&self) -> &'static [u32] {
        if self.smoke {
            &[2_000]
        } else {
            &[25_000, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000]
        }
    }

    fn from_args() -> Result<Plan, String> {
        let mut smoke = false;
        let mut only = None;
        let mut generator = xdp_load::Generator::Trafgen;
        let mut edge_args = Vec::new();
        let mut out = PathBuf::from("target/qps");
        let mut edge = PathBuf::from("target/release/qdns-edge");
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--smoke" => smoke = true,
                "--only" => match args.next().as_deref() {
                    // `kxdpgun`: the stage's name while kxdpgun was its only generator.
                    Some("generator" | "kxdpgun") => only = Some(Stage::Generator),
                    Some("reload") => only = Some(Stage::Reload),
                    Some("loopback") => only = Some(Stage::Loopback),
                    _ => return Err("--only takes: generator (or kxdpgun), reload, loopback".into()),
                },
                "--generator" => {
                    let name = args.next().unwrap_or_default();
                    generator = xdp_load::Generator::named(&name)
                        .ok_or_else(|| format!("--generator takes trafgen or kxdpgun, not {name:?}"))?;
                }
                "--out" => out = args.next().ok_or("--out needs a directory")?.into(),
                "--edge" => edge = args.next().ok_or("--edge needs the qdns-edge binary")?.into(),
                "--edge-arg" => edge_args.push(args.next().ok_or("--edge-arg needs an argument")?),
                other => {
                    return Err(format!(
                        "unknown argument {other} (use --smoke, --only generator|reload|loopback, --generator trafgen|kxdpgun, --edge-arg ARG, --out DIR, --edge PATH)"
                    ))
                }
            }
        }
        Ok(if smoke {
            Plan {
                smoke,
                only,
                generator,
                edge_args,
                out,
                edge,
                runs: 1,
                seconds: 2,
                loads: vec![5_000],
                big_records: 10_000,
                reload_rrsets: vec![2_000],
            }
        } else {
            Plan {
                smoke,
                only,
                generator,
                edge_args,
                out,
                edge,
                runs: 3,
                seconds: 10,
                loads: vec![50_000, 100_000],
                big_records: 1_000_000,
                reload_rrsets: vec![100_000, 1_000_000],
            }
        })
    }
}

/// One server under test.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Server {
    Qdns,
    Knot,
    Nsd,
    Gdnsd,
}

impl Server {
    const ALL: [Server; 4] = [Server::Qdns, Server::Knot, Server::Nsd, Server::Gdnsd];

    fn name(self) -> &'static str {
        match self {
            Server::Qdns => "qdns-edge",
            Server::Knot => "knotd",
            Server::Nsd => "nsd",
            Server::Gdnsd => "gdnsd",
        }
    }

    fn port(self) -> u16 {
        15_350 + self as u16
    }

    fn version(self, plan: &Plan) -> String {
        let (program, flag) = match self {
            Server::Qdns => (plan.edge.to_string_lossy().into_owned(), "--version"),
            Server::Knot => ("knotd".to_owned(), "-V"),
            Server::Nsd => ("nsd".to_owned(), "-v"),
            Server::Gdnsd => ("gdnsd".to_owned(), "-V"),
        };
        let Ok(out) = Command::new(&program).arg(flag).output() else {
            return "?".into();
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        text.split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map_or_else(|| "?".into(), |v| v.trim_end_matches([',', ')']).to_owned())
    }
}

/// A running server, killed by PID on drop.
struct Running {
    child: Child,
    started: Duration,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

// ---- zone data --------------------------------------------------------------------------

fn v4(i: usize) -> String {
    format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn v6(i: usize) -> String {
    format!("2001:db8::{:x}:{:x}", i >> 16, i & 0xffff)
}

/// The zone for the peers (RFC 1035), `names` names with A and AAAA (or A only when
/// `aaaa` is false), plus the policy names as plain sets.
fn master_file(names: usize, aaaa: bool, with_soa: bool) -> String {
    let mut z = String::with_capacity(names * 64);
    if with_soa {
        z.push_str("$ORIGIN bench.test.\n$TTL 300\n");
        z.push_str("@ IN SOA ns1 hostmaster 1 7200 900 1209600 60\n@ IN NS ns1\n@ IN NS ns2\n");
        z.push_str("ns1 IN A 127.0.0.1\nns2 IN A 127.0.0.2\n");
        for i in 0..POLICY_NAMES {
            for m in 0..3 {
                let _ = writeln!(z, "w{i} IN A 192.0.2.{}", 10 + m);
            }
            let _ = writeln!(z, "f{i} IN A 198.51.100.{}", 20 + i);
        }
    }
    for i in 0..names {
        let _ = writeln!(z, "h{i} IN A {}", v4(i));
        if aaaa {
            let _ = writeln!(z, "h{i} IN AAAA {}", v6(i));
        }
    }
    z
}

/// The qdns zone: TOML with SOA, NS, the policy sets (health by external checks, which
/// start healthy), and the plain names in an included master file.
fn qdns_zone(dir: &Path, names: usize, aaaa: bool, serial: u32) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let mut t = format!(
        "[zone]\norigin = \"{ZONE}\"\nttl = 300\ninclude = \"bench.test.zone\"\n\n\
         [zone.soa]\nmname = \"ns1.bench.test.\"\nrname = \"hostmaster.bench.test.\"\nserial = {serial}\n\
         refresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 60\n\n\
         [zone.ns]\nnames = [\"ns1.bench.test.\", \"ns2.bench.test.\"]\n\n"
    );
    t.push_str("[[rrset]]\nname = \"ns1\"\ntype = \"A\"\nvalues = [\"127.0.0.1\"]\n\n");
    t.push_str("[[rrset]]\nname = \"ns2\"\ntype = \"A\"\nvalues = [\"127.0.0.2\"]\n\n");
    for i in 0..POLICY_NAMES {
        for m in 0..3 {
            let _ = write!(t, "[[health_check]]\nid = \"w{i}-{m}\"\ntype = \"external\"\n\n");
        }
        let _ = write!(t, "[[health_check]]\nid = \"f{i}-p\"\ntype = \"external\"\n\n");
        let _ = write!(
            t,
            "[[rrset]]\nname = \"w{i}\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [\n\
             {{ id = \"a\", weight = 10, values = [\"192.0.2.10\"], health_check = \"w{i}-0\" }},\n\
             {{ id = \"b\", weight = 20, values = [\"192.0.2.11\"], health_check = \"w{i}-1\" }},\n\
             {{ id = \"c\", weight = 20, values = [\"192.0.2.12\"], health_check = \"w{i}-2\" }},\n]\n\n"
        );
        let _ = write!(
            t,
            "[[rrset]]\nname = \"f{i}\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\n\
             {{ id = \"p\", role = \"primary\", values = [\"198.51.100.{}\"], health_check = \"f{i}-p\" }},\n\
             {{ id = \"s\", role = \"secondary\", values = [\"203.0.113.{}\"] }},\n]\n\n",
            20 + i,
            20 + i
        );
    }
    fs::write(dir.join("bench.test.toml"), t)?;
    fs::write(dir.join("bench.test.zone"), master_file(names, aaaa, false))
}

/// `count` query lines (`name type`, then ` flag` when `flag` is not empty): A/AAAA of
/// random names, the policy names, ~5 % NXDOMAIN. dnsperf and the generator stage read
/// the same form; its flags (kxdpgun's) are `E` (EDNS) and `D` (EDNS with DO=1).
fn query_text(count: usize, flag: &str) -> String {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let flag = if flag.is_empty() {
        String::new()
    } else {
        format!(" {flag}")
    };
    let mut q = String::with_capacity(count * 24);
    for _ in 0..count {
        let r = next();
        let _ = match r % 100 {
            0..=4 => writeln!(q, "nx{}.{ZONE} A{flag}", r % 1_000_000),
            5..=6 => writeln!(q, "w{}.{ZONE} A{flag}", r % POLICY_NAMES as u64),
            7..=8 => writeln!(q, "f{}.{ZONE} A{flag}", r % POLICY_NAMES as u64),
            n => writeln!(
                q,
                "h{}.{ZONE} {}{flag}",
                (r >> 8) % NAMES as u64,
                if n % 2 == 0 { "A" } else { "AAAA" }
            ),
        };
    }
    q
}

/// dnsperf input: [`query_text`] without flags.
fn query_file(path: &Path) -> std::io::Result<()> {
    fs::write(path, query_text(QUERIES, ""))
}

// ---- servers ------------------------------------------------------------------------------

/// Writes the server's configuration and zone under `dir` and starts it; waits until it
/// answers. `zone` is the master file (peers) or the zone directory (qdns).
fn start(server: Server, plan: &Plan, dir: &Path, zone: &Path) -> Result<Running, String> {
    let port = server.port();
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let d = dir.display();
    let z = zone.display();
    let mut command = match server {
        Server::Qdns => {
            let mut c = Command::new(&plan.edge);
            c.args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "2", "--zones"])
                .arg(zone)
                .args(&plan.edge_args);
            c
        }
        Server::Knot => {
            let conf = format!(
                "server:\n    listen: 127.0.0.1@{port}\n    rundir: {d}\n    udp-workers: 2\n    tcp-workers: 1\n    background-workers: 1\n\
                 database:\n    storage: {d}/db\nlog:\n  - target: stderr\n    any: warning\n\
                 zone:\n  - domain: bench.test\n    file: {z}\n    journal-content: none\n    zonefile-sync: -1\n"
            );
            fs::write(dir.join("knot.conf"), conf).map_err(|e| e.to_string())?;
            let mut c = Command::new("knotd");
            c.arg("-c").arg(dir.join("knot.conf"));
            c
        }
        Server::Nsd => {
            let conf = format!(
                "server:\n    ip-address: 127.0.0.1@{port}\n    server-count: 2\n    reuseport: yes\n    rrl-ratelimit: 0\n    username: \"\"\n    database: \"\"\n\
                 zonesdir: \"{d}\"\n    pidfile: \"{d}/nsd.pid\"\n    xfrdfile: \"{d}/xfrd.state\"\n    zonelistfile: \"{d}/zone.list\"\n\
                 logfile: \"{d}/nsd.log\"\n    verbosity: 0\nremote-control:\n    control-enable: no\n\
                 zone:\n    name: bench.test\n    zonefile: \"{z}\"\n"
            );
            fs::write(dir.join("nsd.conf"), conf).map_err(|e| e.to_string())?;
            let mut c = Command::new("nsd");
            c.arg("-d").arg("-c").arg(dir.join("nsd.conf"));
            c
        }
        Server::Gdnsd => {
            for sub in ["zones", "run", "state"] {
                fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
            }
            fs::copy(zone, dir.join("zones/bench.test")).map_err(|e| e.to_string())?;
            let conf = format!(
                "options => {{\n  listen => [ 127.0.0.1:{port} ]\n  udp_threads => 2\n  tcp_threads => 1\n  run_dir => {d}/run\n  state_dir => {d}/state\n}}\n"
            );
            fs::write(dir.join("config"), conf).map_err(|e| e.to_string())?;
            let mut c = Command::new("gdnsd");
            c.arg("-c").arg(dir).arg("start");
            c
        }
    };
    let log = fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
    let begun = Instant::now();
    let child = command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: cannot start: {e}", server.name()))?;
    let mut running = Running {
        child,
        started: Duration::ZERO,
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().map_err(|e| format!("{e}"))?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(format!(
                "{} exited at start ({status}); see {}/server.log",
                server.name(),
                d
            ));
        }
        if probe(addr, "h1.bench.test.", 1, Duration::from_millis(100)).is_some_and(|rcode| rcode == 0) {
            running.started = begun.elapsed();
            return Ok(running);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!(
        "{} did not answer within 300 s; see {d}/server.log",
        server.name()
    ))
}

/// One query; the RCODE of the answer.
fn probe(addr: SocketAddr, name: &str, qtype: u16, timeout: Duration) -> Option<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket.set_read_timeout(Some(timeout)).ok()?;
    let query = benches::query(name, qtype, None);
    socket.send_to(&query, addr).ok()?;
    let mut buf = [0u8; 1500];
    let n = socket.recv(&mut buf).ok()?;
    (n >= 4 && buf[..2] == query[..2]).then_some(buf[3] & 0x0f)
}

/// `pid` and every process below it (nsd serves from forked children).
fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = stat_fields(child).and_then(|f| f.get(1).and_then(|v| v.parse().ok())) {
                parents.push((child, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// The fields of `/proc/PID/stat` after the command (which may hold spaces): state is
/// index 0, ppid 1, utime 11, stime 12.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// user + sys CPU seconds of `pid` and its children (all threads).
fn cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    process_tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            (ticks(11) + ticks(12)) / hz
        })
        .sum()
}

/// Proportional set size of `pid` and its children, MiB (RSS with shared pages split
/// between the processes sharing them, so forked servers are not counted twice).
fn rss_mib(pid: u32) -> f64 {
    process_tree(pid)
        .into_iter()
        .filter_map(|p| fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .sum::<f64>()
        / 1024.0
}

// ---- the generator ------------------------------------------------------------------------

/// One dnsperf run.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct Load {
    sent: u64,
    completed: u64,
    lost: u64,
    qps: f64,
    avg_latency_ms: f64,
    /// dnsperf's CPU seconds over its wall seconds.
    generator_cpu: f64,
    /// Server CPU µs per answered query.
    server_us_per_query: f64,
    /// From the probe beside the load.
    p50_ms: f64,
    p99_ms: f64,
}

fn children_cpu() -> f64 {
    // SAFETY: an out-parameter of the right type.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Runs dnsperf against `server` for `seconds`, closed loop (`rate` None) or at `rate`
/// qps, with the latency probe beside it.
fn drive(server: Server, running: &Running, queries: &Path, seconds: u32, rate: Option<u32>) -> Result<Load, String> {
    let addr: SocketAddr = format!("127.0.0.1:{}", server.port())
        .parse()
        .map_err(|e| format!("{e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let probe_stop = Arc::clone(&stop);
    let prober = std::thread::spawn(move || {
        let mut rtts = Vec::new();
        while !probe_stop.load(Ordering::Relaxed) && rtts.len() < 1_000_000 {
            let t = Instant::now();
            if probe(addr, "h7.bench.test.", 1, Duration::from_millis(500)).is_some() {
                rtts.push(t.elapsed().as_secs_f64() * 1e3);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        rtts
    });
    let mut cmd = Command::new("dnsperf");
    cmd.args([
        "-s",
        "127.0.0.1",
        "-p",
        &server.port().to_string(),
        "-l",
        &seconds.to_string(),
    ])
    .args(["-c", "8", "-q", "500", "-T", "1", "-t", "2"])
    .arg("-d")
    .arg(queries);
    if let Some(rate) = rate {
        cmd.args(["-Q", &rate.to_string()]);
    }
    let cpu_before = cpu_seconds(running.pid());
    let gen_before = children_cpu();
    let wall = Instant::now();
    let out = cmd.output().map_err(|e| format!("dnsperf: {e} (is it installed?)"))?;
    let wall = wall.elapsed().as_secs_f64();
    let generator = children_cpu() - gen_before;
    let server_cpu = cpu_seconds(running.pid()) - cpu_before;
    stop.store(true, Ordering::Relaxed);
    let mut rtts = prober.join().map_err(|_| "latency probe panicked".to_owned())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "dnsperf failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let field = |label: &str| dnsperf_field(&text, label);
    rtts.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        rtts.get(((rtts.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let completed = field("Queries completed") as u64;
    Ok(Load {
        sent: field("Queries sent") as u64,
        completed,
        lost: field("Queries lost") as u64,
        qps: field("Queries per second"),
        avg_latency_ms: field("Average Latency (s)") * 1e3,
        generator_cpu: generator / wall,
        server_us_per_query: if completed > 0 {
            server_cpu * 1e6 / completed as f64
        } else {
            0.0
        },
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
    })
}

/// A number from dnsperf's statistics (`  Label:  123.4 ...`), 0 when absent.
fn dnsperf_field(text: &str, label: &str) -> f64 {
    text.lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

// ---- summaries ----------------------------------------------------------------------------

/// Median and range of some runs.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(values: impl Iterator<Item = f64>) -> Spread {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return Spread::default();
    }
    Spread {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

#[derive(Debug, Default, serde::Serialize)]
struct ServerResult {
    version: String,
    start_s: f64,
    rss_mib: f64,
    closed: Vec<Load>,
    fixed: BTreeMap<u32, Vec<Load>>,
    big_start_s: f64,
    big_rss_mib: f64,
    error: Option<String>,
}

fn bench_server(server: Server, plan: &Plan, work: &Path, queries: &Path) -> ServerResult {
    let mut result = ServerResult {
        version: server.version(plan),
        ..ServerResult::default()
    };
    let zone = if server == Server::Qdns {
        work.join("qdns-zones")
    } else {
        work.join("bench.test.zone")
    };
    let outcome = (|| -> Result<(), String> {
        let running = start(server, plan, &work.join(server.name()), &zone)?;
        result.start_s = running.started.as_secs_f64();
        result.rss_mib = rss_mib(running.pid());
        for run in 0..plan.runs {
            eprintln!("bench-qps: {} closed loop, run {}", server.name(), run + 1);
            result
                .closed
                .push(drive(server, &running, queries, plan.seconds, None)?);
            for &rate in &plan.loads {
                eprintln!("bench-qps: {} at {rate} qps, run {}", server.name(), run + 1);
                let load = drive(server, &running, queries, plan.seconds, Some(rate))?;
                result.fixed.entry(rate).or_default().push(load);
            }
        }
        Ok(())
    })();
    result.error = outcome.err();
    let big = (|| -> Result<(f64, f64), String> {
        let zone = if server == Server::Qdns {
            work.join("qdns-big")
        } else {
            work.join("big.zone")
        };
        eprintln!("bench-qps: {} with {} records", server.name(), plan.big_records);
        let running = start(server, plan, &work.join(format!("{}-big", server.name())), &zone)?;
        Ok((running.started.as_secs_f64(), rss_mib(running.pid())))
    })();
    match big {
        Ok((start, rss)) => {
            result.big_start_s = start;
            result.big_rss_mib = rss;
        }
        Err(err) => result.error = Some(result.error.take().map_or(err.clone(), |e| format!("{e}; {err}"))),
    }
    result
}

/// `--only reload`: prints the reloads' figures; an error if one failed.
fn reload_alone(plan: &Plan, reload: &[(usize, Reload)]) -> Result<(), String> {
    for (rrsets, r) in reload {
        println!(
            "- qdns reload of {rrsets} rrsets under {} qps: {r:?} (seconds, lost, sent)",
            plan.loads[0] / 2
        );
    }
    reload
        .iter()
        .find_map(|(_, r)| r.as_ref().err().cloned())
        .map_or(Ok(()), Err)
}

/// One reload under load: (reload seconds, lost queries, queries sent).
type Reload = Result<(f64, u64, u64), String>;

/// qdns: a reload of `rrsets` record sets under a fixed load; (reload seconds, lost,
/// sent). The load runs long enough to cover the reload (10 s more per million sets).
fn reload_under_load(plan: &Plan, rrsets: usize, work: &Path, queries: &Path) -> Reload {
    let zones = work.join("qdns-reload");
    let _ = fs::remove_dir_all(&zones);
    qdns_zone(&zones, rrsets / 2, true, 1).map_err(|e| e.to_string())?;
    let dir = work.join("qdns-reload-run");
    let running = start(Server::Qdns, plan, &dir, &zones)?;
    let log = dir.join("server.log");
    let (tx, rx) = mpsc::channel();
    let pid = running.pid();
    let zones_for_reload = zones.clone();
    let trigger = std::thread::spawn(move || -> Result<f64, String> {
        std::thread::sleep(Duration::from_secs(1));
        qdns_zone(&zones_for_reload, plan_half(&zones_for_reload), true, 2).map_err(|e| e.to_string())?;
        let before = count_lines(&log, "zones reloaded");
        let t = Instant::now();
        Command::new("kill")
            .args(["-s", "HUP", &pid.to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        while count_lines(&log, "zones reloaded") == before {
            if t.elapsed() > Duration::from_secs(120) {
                return Err("no reload within 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = tx.send(());
        Ok(t.elapsed().as_secs_f64())
    });
    let seconds = plan.seconds.max(4) + u32::try_from(rrsets / 100_000).unwrap_or(0);
    let load = drive(Server::Qdns, &running, queries, seconds, Some(plan.loads[0] / 2))?;
    let reload = trigger.join().map_err(|_| "reload thread panicked".to_owned())??;
    rx.recv_timeout(Duration::from_secs(1))
        .map_err(|_| "reload not seen".to_owned())?;
    Ok((reload, load.lost, load.sent))
}

/// The number of plain names in a reload zone directory (kept across the rewrite).
fn plan_half(zones: &Path) -> usize {
    fs::read_to_string(zones.join("bench.test.zone")).map_or(0, |z| z.lines().count() / 2)
}

fn count_lines(path: &Path, needle: &str) -> usize {
    fs::File::open(path).map_or(0, |f| {
        BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.contains(needle))
            .count()
    })
}

#[expect(clippy::too_many_lines, reason = "one table, row by row, then the ratios")]
fn table(
    plan: &Plan,
    results: &BTreeMap<Server, ServerResult>,
    reload: &[(usize, Reload)],
    veth: &Result<veth::VethResult, String>,
) -> String {
    let mut t = String::new();
    let rate_hi = *plan.loads.last().unwrap_or(&0);
    let _ = writeln!(
        t,
        "| server | version | path | generator | closed-loop qps median [range] | p50 / p99 ms @ {rate_hi} qps | lost @ {rate_hi} | {} | PSS MiB | start s | PSS MiB / start s, {} records |",
        plan.loads
            .iter()
            .map(|r| format!("CPU µs/query @ {r}"))
            .collect::<Vec<_>>()
            .join(" | "),
        plan.big_records
    );
    let _ = writeln!(t, "|{}", "---|".repeat(10 + plan.loads.len()));
    for (server, r) in results {
        let closed = spread(r.closed.iter().map(|l| l.qps));
        let bound = r.closed.iter().any(|l| l.generator_cpu > 0.9);
        let hi = r.fixed.get(&rate_hi).map(Vec::as_slice).unwrap_or_default();
        let p50 = spread(hi.iter().map(|l| l.p50_ms)).median;
        let p99 = spread(hi.iter().map(|l| l.p99_ms)).median;
        let lost: u64 = hi.iter().map(|l| l.lost).sum();
        let cpu: Vec<String> = plan
            .loads
            .iter()
            .map(|rate| {
                let runs = r.fixed.get(rate).map(Vec::as_slice).unwrap_or_default();
                let s = spread(runs.iter().map(|l| l.server_us_per_query));
                let achieved = spread(runs.iter().map(|l| l.qps)).median;
                format!("{:.2} [{:.2}–{:.2}] ({achieved:.0} qps)", s.median, s.min, s.max)
            })
            .collect();
        let _ = writeln!(
            t,
            "| {} | {} | UDP, user space | dnsperf 1 thread{} | {:.0} [{:.0}–{:.0}] | {p50:.3} / {p99:.3} | {lost} | {} | {:.1} | {:.2} | {:.1} / {:.2} |{}",
            server.name(),
            r.version,
            if bound { " (generator-bound)" } else { "" },
            closed.median,
            closed.min,
            closed.max,
            cpu.join(" | "),
            r.rss_mib,
            r.start_s,
            r.big_rss_mib,
            r.big_start_s,
            r.error.as_ref().map_or(String::new(), |e| format!(" error: {e}"))
        );
    }
    // Ratios qdns / best peer: a full run's (a smoke run's loads are too small to
    // compare servers by).
    if plan.smoke {
        let _ = writeln!(
            t,
            "\n- a smoke run: loads too small to compare servers by, so no ratios (`scripts/bench-qps` measures them)"
        );
    } else if let Some(q) = results.get(&Server::Qdns) {
        let peers: Vec<&ServerResult> = results
            .iter()
            .filter(|(s, r)| **s != Server::Qdns && r.error.is_none())
            .map(|(_, r)| r)
            .collect();
        let best_qps = peers
            .iter()
            .map(|r| spread(r.closed.iter().map(|l| l.qps)).median)
            .fold(0.0, f64::max);
        let _ = writeln!(t);
        if best_qps > 0.0 {
            let _ = writeln!(
                t,
                "- closed-loop qps, qdns / best peer: {:.2}",
                spread(q.closed.iter().map(|l| l.qps)).median / best_qps
            );
        }
        for rate in &plan.loads {
            let us = |r: &ServerResult| {
                spread(r.fixed.get(rate).into_iter().flatten().map(|l| l.server_us_per_query)).median
            };
            let best = peers
                .iter()
                .map(|r| us(r))
                .filter(|v| *v > 0.0)
                .fold(f64::MAX, f64::min);
            if best < f64::MAX {
                let _ = writeln!(
                    t,
                    "- CPU µs/query at {rate} qps, qdns / best peer: {:.2} (target ≤ 0.7)",
                    us(q) / best
                );
            }
        }
        let knot_rss = results.get(&Server::Knot).map_or(0.0, |k| k.big_rss_mib);
        if knot_rss > 0.0 {
            let _ = writeln!(
                t,
                "- RSS with {} records, qdns / knotd: {:.2} (target ≤ 0.5)",
                plan.big_records,
                q.big_rss_mib / knot_rss
            );
        }
    }
    for (rrsets, reload) in reload {
        // Issue 6's target for 100,000 sets, issue 13's for 1,000,000.
        let target = if *rrsets >= 1_000_000 { 2 } else { 1 };
        match reload {
            Ok((seconds, lost, sent)) => {
                let _ = writeln!(
                    t,
                    "- qdns reload of {rrsets} rrsets under {} qps: {seconds:.2} s, {lost} of {sent} queries lost{}",
                    plan.loads[0] / 2,
                    if plan.smoke {
                        String::new()
                    } else {
                        format!(" (target < {target} s, 0 lost)")
                    }
                );
            }
            Err(err) => {
                let _ = writeln!(t, "- qdns reload of {rrsets} rrsets under load: error: {err}");
            }
        }
    }
    match veth {
        Ok(v) => {
            // Ratios only from a full run's loads.
            let times = |a: f64, b: f64| {
                if plan.smoke {
                    String::new()
                } else {
                    format!(" ({:.2}×)", ratio(a, b))
                }
            };
            let _ = writeln!(
                t,
                "- qdns-edge through a veth pair (dnsperf in a netns; native mode with a pass-everything XDP program on the client end): closed loop {:.0} qps XDP off, {:.0} qps generic{}, {:.0} qps native{}; zero-loss rate (offered steps {:?}) {:.0} qps off{}, {:.0} qps generic{}, {:.0} qps native{}; queries answered by the XDP program: {} generic, {} native",
                v.off.closed_qps,
                v.generic.closed_qps,
                times(v.generic.closed_qps, v.off.closed_qps),
                v.native.closed_qps,
                times(v.native.closed_qps, v.off.closed_qps),
                plan.veth_steps(),
                v.off.zero_loss_qps,
                bound(&v.off),
                v.generic.zero_loss_qps,
                bound(&v.generic),
                v.native.zero_loss_qps,
                bound(&v.native),
                v.generic.xdp_answered,
                v.native.xdp_answered
            );
            match &v.knot_xdp {
                Ok(knot) => {
                    let _ = writeln!(
                        t,
                        "- knotd in XDP mode (AF_XDP, native) on the same pair: closed loop {:.0} qps, zero-loss {:.0} qps{}; {} queries redirected to its AF_XDP sockets{}",
                        knot.closed_qps,
                        knot.zero_loss_qps,
                        bound(knot),
                        knot.xdp_answered,
                        if plan.smoke {
                            String::new()
                        } else {
                            format!(
                                ". qdns native / knotd XDP: closed loop {:.2}, zero-loss {:.2} (target ≥ 1.5; both behind the same dnsperf)",
                                ratio(v.native.closed_qps, knot.closed_qps),
                                ratio(v.native.zero_loss_qps, knot.zero_loss_qps)
                            )
                        }
                    );
                }
                Err(why) => {
                    let _ = writeln!(
                        t,
                        "- knotd in XDP mode (AF_XDP, native) on the same pair: not available on this kernel: {why}"
                    );
                }
            }
        }
        Err(err) => {
            let _ = writeln!(t, "- veth pair: {}{err}", if err == NOT_RUN { "" } else { "error: " });
        }
    }
    t
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// How to read a zero-loss figure.
fn bound(run: &veth::VethRun) -> &'static str {
    if run.generator_bound {
        " (generator-bound)"
    } else if run.all_steps_passed {
        " (every step passed: a floor)"
    } else {
        ""
    }
}

fn main() {
    let plan = match Plan::from_args() {
        Ok(plan) => plan,
        Err(err) => {
            eprintln!("bench-qps: {err}");
            std::process::exit(2);
        }
    };
    if let Err(err) = run(&plan) {
        eprintln!("bench-qps: {err}");
        std::process::exit(1);
    }
}

/// The report's first line: the machine and how the servers were run.
fn machine_line(plan: &Plan) -> String {
    format!(
        "Machine: {} CPUs, {}; {} s per run, {} run(s) per server{}{}.\n\n",
        std::thread::available_parallelism().map_or(0, usize::from),
        fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "?".into(), |s| format!("Linux {}", s.trim())),
        plan.seconds,
        plan.runs,
        if plan.smoke { " (smoke)" } else { "" },
        if plan.edge_args.is_empty() {
            String::new()
        } else {
            format!("; qdns-edge with {}", plan.edge_args.join(" "))
        }
    )
}

fn run(plan: &Plan) -> Result<(), String> {
    fs::create_dir_all(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    // Absolute: the servers' configurations name these paths from other directories.
    let out = fs::canonicalize(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    let work = out.join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let io = |e: std::io::Error| e.to_string();
    fs::write(work.join("bench.test.zone"), master_file(NAMES, true, true)).map_err(io)?;
    qdns_zone(&work.join("qdns-zones"), NAMES, true, 1).map_err(io)?;
    fs::write(work.join("big.zone"), master_file(plan.big_records, false, true)).map_err(io)?;
    qdns_zone(&work.join("qdns-big"), plan.big_records, false, 1).map_err(io)?;
    let queries = work.join("queries.txt");
    query_file(&queries).map_err(io)?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if plan.only == Some(Stage::Generator) {
        if !root {
            return Err("the generator stage needs root (network namespaces, XDP)".into());
        }
        let gun = xdp_load::run(plan, &work)?;
        let report = format!("{}{}", machine_line(plan), xdp_load::report(&gun));
        println!("{report}");
        fs::write(out.join("generator.md"), &report).map_err(io)?;
        fs::write(out.join("generator.json"), serde_json::json!(gun).to_string()).map_err(io)?;
        return Ok(());
    }
    let mut results = BTreeMap::new();
    for server in Server::ALL.into_iter().filter(|_| plan.only != Some(Stage::Reload)) {
        let r = bench_server(server, plan, &work, &queries);
        if let Some(err) = &r.error {
            eprintln!("bench-qps: {}: {err}", server.name());
        }
        results.insert(server, r);
    }
    let reload: Vec<(usize, Reload)> = plan
        .reload_rrsets
        .iter()
        .filter(|_| plan.only != Some(Stage::Loopback))
        .map(|&rrsets| {
            eprintln!("bench-qps: qdns reload of {rrsets} rrsets under load");
            (rrsets, reload_under_load(plan, rrsets, &work, &queries))
        })
        .collect();
    if plan.only == Some(Stage::Reload) {
        return reload_alone(plan, &reload);
    }
    let loopback_only = plan.only == Some(Stage::Loopback);
    let veth = if loopback_only {
        Err(NOT_RUN.to_owned())
    } else if root {
        eprintln!("bench-qps: qdns on a veth pair, XDP off and on");
        veth::run(plan, &work, &queries)
    } else {
        Err("skipped: network namespaces need root".to_owned())
    };
    let gun = if loopback_only {
        Err(NOT_RUN.to_owned())
    } else if root {
        eprintln!("bench-qps: the veth pair driven by {}", plan.generator.label());
        xdp_load::run(plan, &work)
    } else {
        Err("skipped: network namespaces need root".to_owned())
    };
    let mut report = machine_line(plan);
    report.push_str(&table(plan, &results, &reload, &veth));
    match &gun {
        Ok(gun) => report.push_str(&xdp_load::report(gun)),
        Err(err) => {
            let _ = writeln!(
                report,
                "- generator stage: {}{err}",
                if *err == NOT_RUN { "" } else { "error: " }
            );
        }
    }
    println!("{report}");
    fs::write(out.join("results.md"), &report).map_err(io)?;
    let json = serde_json::json!({
        "servers": results.iter().map(|(s, r)| (s.name(), r)).collect::<BTreeMap<_, _>>(),
        "veth": veth.as_ref().ok(),
        "generator": gun.as_ref().ok(),
    });
    fs::write(out.join("results.json"), json.to_string()).map_err(io)?;
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, r)| r.error.is_some())
        .map(|(s, _)| s.name())
        .collect();
    let reload_failed: Vec<&String> = reload.iter().filter_map(|(_, r)| r.as_ref().err()).collect();
    if !failed.is_empty() || !reload_failed.is_empty() || (root && !loopback_only && (veth.is_err() || gun.is_err())) {
        return Err(format!(
            "some parts failed: {failed:?} {reload_failed:?} {:?} {:?}",
            veth.err(),
            gun.err()
        ));
    }
    Ok(())
}
