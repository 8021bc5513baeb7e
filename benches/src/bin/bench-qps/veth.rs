//! qdns-edge through a veth pair, XDP off, generic and native, and knotd in its XDP mode
//! (`AF_XDP`, native) on the same pair, in the same run: two network namespaces (created
//! here, removed on drop), dnsperf in the client one, the server in the server one. For
//! each: the closed-loop rate and the zero-loss rate found by stepping the offered load.
//!
//! Native mode on veth delivers the program's `XDP_TX` answers only while the peer end
//! has a native XDP program (the kernel wakes the peer's NAPI only then; see
//! docs/OPERATIONS.md), so for that run the client end gets qdns's own program loaded
//! with no service port, which passes everything.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use super::{dnsperf_field, Plan, Running};

/// The server end's address.
pub const SERVER: &str = "10.79.0.1";
/// The service port on the pair.
pub const PORT: u16 = 15_360;

/// The two ends (`qdns_testkit::netns::Pair`), removed on drop.
pub use qdns_testkit::netns::Pair;

/// Runs `ip ARGS`.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The pair, addressed 10.79.0.1 (server) and 10.79.0.2 (client), GRO on at both ends
/// (testkit's pair on its own network, so it never meets a test's).
pub fn pair() -> Pair {
    Pair::on_net('Q', "79")
}

/// One configuration's results.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct VethRun {
    /// Closed-loop rate, answered queries per second.
    pub closed_qps: f64,
    /// Achieved rate of the highest stepped offered load answered with no loss.
    pub zero_loss_qps: f64,
    /// The generator could not offer the next step.
    pub generator_bound: bool,
    /// The highest step passed with no loss: the zero-loss rate is at least the figure.
    pub all_steps_passed: bool,
    /// Packets the XDP program answered (0 with XDP off).
    pub xdp_answered: u64,
}

/// XDP off, generic, native.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VethResult {
    /// Without `--xdp`.
    pub off: VethRun,
    /// With `--xdp IFACE --xdp-mode generic`.
    pub generic: VethRun,
    /// With `--xdp IFACE --xdp-mode native` (a pass-everything program on the peer).
    pub native: VethRun,
    /// knotd with `xdp: listen: IFACE@PORT` (its `AF_XDP` path, native mode), or why
    /// this kernel cannot run it.
    pub knot_xdp: Result<VethRun, String>,
}

/// How the server runs on the server end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// qdns-edge without `--xdp` (user space).
    Off,
    /// qdns-edge with `--xdp-mode generic`.
    Generic,
    /// qdns-edge with `--xdp-mode native`.
    Native,
    /// knotd, UDP in user space.
    KnotUdp,
    /// knotd with its `AF_XDP` listener.
    KnotXdp,
    /// The driver's floor, native (`floor.rs`: no server, no DNS work).
    FloorNative,
    /// The driver's floor in generic mode.
    FloorGeneric,
}

impl Mode {
    /// The label in reports and directory names.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Generic => "generic",
            Mode::Native => "native",
            Mode::KnotUdp => "knotd-udp",
            Mode::KnotXdp => "knotd-xdp",
            Mode::FloorNative => "floor-native",
            Mode::FloorGeneric => "floor-generic",
        }
    }
}

/// Where and how wide the server runs: `cpu` pins it (with `taskset`), `workers` is
/// its UDP worker count.
#[derive(Clone, Copy)]
pub struct Placement {
    /// CPU to pin the server to.
    pub cpu: Option<usize>,
    /// UDP workers (qdns `--workers`, knotd `udp-workers`).
    pub workers: usize,
}

/// Unpinned, two workers: the dnsperf stage.
const SHARED: Placement = Placement { cpu: None, workers: 2 };

/// Starts the server for `mode` in the server namespace and waits until it answers;
/// `edge_args` go to qdns-edge after the harness's own (knotd ignores them).
pub fn start_server(
    plan: &Plan,
    pair: &Pair,
    work: &Path,
    dir: &Path,
    (mode, edge_args): (Mode, &[&str]),
    place: Placement,
    signed: Option<&Path>,
) -> Result<Running, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &pair.server]);
    if let Some(cpu) = place.cpu {
        cmd.args(["taskset", "-c", &cpu.to_string()]);
    }
    let workers = place.workers.to_string();
    if matches!(mode, Mode::KnotXdp | Mode::KnotUdp) {
        // Its storage holds the signing keys (KASP database) when it signs.
        std::fs::create_dir_all(dir.join("db")).map_err(|e| e.to_string())?;
        let d = dir.display();
        let xdp = if mode == Mode::KnotXdp {
            format!(
                "xdp:\n    listen: {}@{PORT}\n    udp: on\n    tcp: off\n",
                pair.server_if
            )
        } else {
            String::new()
        };
        let conf = format!(
            "server:\n    listen: {SERVER}@{PORT}\n    rundir: {d}\n    udp-workers: {workers}\n    tcp-workers: 1\n    background-workers: 1\n\
             {xdp}\
             database:\n    storage: {d}/db\nlog:\n  - target: stderr\n    any: info\n\
             zone:\n  - domain: bench.test\n    file: {zone}\n    journal-content: none\n    zonefile-sync: -1\n{signing}",
            zone = work.join("bench.test.zone").display(),
            // knotd signs the zone itself: its default policy is ECDSA P-256 with NSEC,
            // as control signs for qdns.
            signing = if signed.is_some() { "    dnssec-signing: on\n" } else { "" },
        );
        std::fs::write(dir.join("knot.conf"), conf).map_err(|e| e.to_string())?;
        cmd.arg("knotd").arg("-c").arg(dir.join("knot.conf"));
    } else {
        cmd.arg(&plan.edge)
            .args(["--listen", &format!("{SERVER}:{PORT}"), "--workers", &workers]);
        match signed {
            // The signed snapshot as an edge persists what control sent it, and a
            // control that is not there: the edge serves the snapshot (signing is
            // control's; an edge holds no key).
            Some(snapshot) => {
                let state = dir.join("state");
                std::fs::create_dir_all(&state).map_err(|e| e.to_string())?;
                std::fs::copy(snapshot, state.join("snapshot.bin")).map_err(|e| e.to_string())?;
                cmd.args(["--edge-id", "bench", "--control"])
                    .arg(dir.join("no-control.sock"))
                    .arg("--state-dir")
                    .arg(state);
            }
            None => {
                cmd.arg("--zones").arg(work.join("qdns-zones"));
            }
        }
        if mode != Mode::Off {
            cmd.args(["--xdp", &pair.server_if, "--xdp-mode", mode.label()]);
        }
        cmd.args(edge_args);
    }
    let child = cmd
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", mode.label()))?;
    let mut running = Running {
        child,
        started: Duration::ZERO,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(format!(
                "{} exited ({status}) before it answered on the veth pair; see {}/server.log",
                mode.label(),
                dir.display()
            ));
        }
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.client, "dig", "+short", "+tries=1", "+time=1"])
            .arg(format!("@{SERVER}"))
            .args(["-p", &PORT.to_string(), "h1.bench.test", "A"])
            .output()
            .map_err(|e| format!("dig: {e}"))?;
        // dig prints its errors (";; communications error …") on stdout too: only an
        // address counts as an answer.
        let answered = String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|line| line.trim().parse::<std::net::Ipv4Addr>().is_ok());
        if answered {
            return Ok(running);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{} did not answer on the veth pair; see {}/server.log",
        mode.label(),
        dir.display()
    ))
}

/// A counter of `ethtool -S` on the interface `iface` in the namespace `ns` (0 when
/// missing).
pub fn ethtool_counter((ns, iface): (&str, &str), name: &str) -> u64 {
    Command::new("ip")
        .args(["netns", "exec", ns, "ethtool", "-S", iface])
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// dnsperf in the client namespace: (answered qps, lost).
fn dnsperf(pair: &Pair, queries: &Path, seconds: u32, rate: Option<u32>) -> Result<(f64, u64), String> {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &pair.client,
        "dnsperf",
        "-s",
        SERVER,
        "-p",
        &PORT.to_string(),
    ])
    .args([
        "-l",
        &seconds.to_string(),
        "-c",
        "8",
        "-q",
        "500",
        "-T",
        "1",
        "-t",
        "2",
        "-d",
    ])
    .arg(queries);
    if let Some(rate) = rate {
        cmd.args(["-Q", &rate.to_string()]);
    }
    let out = cmd.output().map_err(|e| format!("dnsperf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("dnsperf in the namespace failed: {text}"));
    }
    Ok((
        dnsperf_field(&text, "Queries per second"),
        dnsperf_field(&text, "Queries lost") as u64,
    ))
}

fn measure(plan: &Plan, pair: &Pair, work: &Path, queries: &Path, mode: Mode) -> Result<VethRun, String> {
    let dir = work.join(format!("veth-xdp-{}", mode.label()));
    let peer = peer_program(pair, mode)?;
    let redirected = ethtool_counter((&pair.server, &pair.server_if), "rx_queue_0_xdp_redirect");
    let running = start_server(plan, pair, work, &dir, (mode, &[]), SHARED, None)?;
    let (closed_qps, _) = dnsperf(pair, queries, plan.seconds, None)?;
    // Step the offered load up; keep the achieved rate of the last step with no loss.
    // A step the generator cannot offer (achieved < 95 % of it) ends the search: the
    // figure is then generator-bound, and the report says so.
    let mut zero_loss_qps = 0.0;
    let mut generator_bound = false;
    let mut all_steps_passed = true;
    // Steps run half as long as the closed loop (5 s in a full run): four modes times seven
    // steps keep the whole harness inside its 20 minutes on a fresh machine.
    let step_seconds = (plan.seconds / 2).max(1);
    for &rate in plan.veth_steps() {
        let (achieved, lost) = dnsperf(pair, queries, step_seconds, Some(rate))?;
        if lost > 0 {
            all_steps_passed = false;
            break;
        }
        zero_loss_qps = achieved;
        if achieved < 0.95 * f64::from(rate) {
            generator_bound = true;
            all_steps_passed = false;
            break;
        }
    }
    drop(running);
    drop(peer);
    let xdp_answered = if mode == Mode::KnotXdp {
        // knotd's program redirects the queries to its AF_XDP sockets.
        ethtool_counter((&pair.server, &pair.server_if), "rx_queue_0_xdp_redirect").saturating_sub(redirected)
    } else {
        xdp_answered_in_log(&dir.join("server.log"))
    };
    Ok(VethRun {
        closed_qps,
        zero_loss_qps,
        generator_bound,
        all_steps_passed,
        xdp_answered,
    })
}

/// The queries qdns's program answered, from the counters the edge logs when it
/// detaches.
pub fn xdp_answered_in_log(log: &Path) -> u64 {
    xdp_counters_in_log(log, "answered_")
}

/// The sum of the program's counters whose names start with `prefix` (`answered_`,
/// `pass_`, or one whole name such as `rrl_slipped`), from the counters the edge logs
/// when it detaches (`name=count` pairs; 0 when the line is missing).
pub fn xdp_counters_in_log(log: &Path, prefix: &str) -> u64 {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines()
        .find(|l| l.contains("detaching XDP"))
        .map_or(0, |line| qdns_testkit::fixtures::logged_count(line, prefix))
}

/// In native mode, qdns's pass-everything program on the client end (native veth
/// delivers `XDP_TX` answers only to a peer with a native program); nothing otherwise.
pub fn peer_program(pair: &Pair, mode: Mode) -> Result<Option<qdns_edge::xdp::peer::PeerPassProgram>, String> {
    if mode == Mode::Native {
        Ok(Some(qdns_edge::xdp::peer::PeerPassProgram::attach(
            &pair.client,
            &pair.client_if,
        )?))
    } else {
        Ok(None)
    }
}

/// The veth stage.
pub fn run(plan: &Plan, work: &Path, queries: &Path) -> Result<VethResult, String> {
    let pair = pair();
    Ok(VethResult {
        off: measure(plan, &pair, work, queries, Mode::Off)?,
        generic: measure(plan, &pair, work, queries, Mode::Generic)?,
        native: measure(plan, &pair, work, queries, Mode::Native)?,
        knot_xdp: match measure(plan, &pair, work, queries, Mode::KnotXdp) {
            Ok(run) => Ok(run),
            // A peer's mode the kernel refuses is reported, not failed.
            Err(err) => Err(refused_by_kernel(Mode::KnotXdp, &work.join("veth-xdp-knotd-xdp/server.log")).ok_or(err)?),
        },
    })
}

/// Why this kernel cannot run a peer's `mode`, in the kernel's and the peer's own
/// words from its log, when that is why it did not start: knotd's XDP mode, whose
/// program the kernel refused (Knot 3.2.6 on Linux 6.18: "program of this type cannot
/// use helper `bpf_xdp_adjust_meta#54`"). `None` for anything else — qdns's modes
/// above all: qdns failing to start is a failure, never "not available".
pub fn refused_by_kernel(mode: Mode, log: &Path) -> Option<String> {
    if mode != Mode::KnotXdp {
        return None;
    }
    let log = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = log.lines().map(str::trim).collect();
    // libbpf prints the verifier's log; its last line before the count of processed
    // instructions is the refusal.
    let counted = lines
        .iter()
        .position(|l| l.starts_with("processed ") && l.contains(" insns"))?;
    let kernel = lines[..counted].last()?;
    let knotd = lines.iter().find(|l| l.contains("failed to initialize XDP"))?;
    let knotd = knotd.split_once("warning: ").map_or(*knotd, |(_, said)| said);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "this kernel".into(), |r| format!("Linux {}", r.trim()));
    Some(format!(
        "{release} refused knotd's XDP program: \"{kernel}\" (knotd: \"{knotd}\")"
    ))
}
