//! The veth pair driven by kxdpgun (Knot's `AF_XDP` generator) instead of dnsperf, so
//! the server is measured rather than the generator: qdns XDP native, qdns XDP generic,
//! qdns user space, knotd UDP and knotd XDP (`AF_XDP`), each with the bench's plain query
//! mix and with the real-resolver mix (every query DO=1, as BIND and Unbound send).
//!
//! Placement on the two CPUs: the generator, this harness and the client end's NAPI
//! (threaded) on CPU 0; the server — its process, and the server end's NAPI, threaded
//! and pinned — on CPU 1. Server CPU per answered query is the run time of the server's
//! threads plus the server end's NAPI thread (`/proc/TID/schedstat`) over the answers
//! kxdpgun received: it takes in the kernel's receive and transmit work for the
//! answers, which the process's own CPU time would miss (XDP runs in the NAPI thread,
//! not in qdns-edge), and nothing else that ran on the CPU. kxdpgun attaches its own
//! XDP program to the client end, which is also what lets native mode's `XDP_TX` answers
//! be delivered (see docs/OPERATIONS.md).
//!
//! For each server and mix the offered load steps up until more than 1 % is lost (the
//! capacity is the reply rate of the last step at ≤ 1 % loss) or kxdpgun cannot offer the
//! step (sent < 95 % of it: the generator's ceiling, reported as such).
mod rrl;

use std::{fmt::Write as _, path::Path, process::Command};

use super::{
    floor::Floor,
    veth::{self, Mode, Pair, Placement, PORT, SERVER},
    Plan,
};

/// The CPU the generator and the harness use.
const GENERATOR_CPU: usize = 0;
/// The CPU the server and its NAPI thread use.
const SERVER_CPU: usize = 1;
/// The servers, in report order: the driver's floor first (what the others divide by).
const MODES: [Mode; 7] = [
    Mode::FloorNative,
    Mode::FloorGeneric,
    Mode::Native,
    Mode::Generic,
    Mode::Off,
    Mode::KnotUdp,
    Mode::KnotXdp,
];

/// A query mix.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Mix {
    /// A/AAAA of random names, policy names, ~5 % NXDOMAIN; no EDNS.
    Plain,
    /// The same queries, each with EDNS and DO=1 (kxdpgun's `D` flag).
    Resolver,
    /// A random-subdomain flood: 20,000 distinct names that do not exist, A, no EDNS
    /// (every answer NXDOMAIN; issue 31 §2, on the unsigned bench zone).
    Flood,
    /// The same flood with DO=1 on the bench zone signed, as validating resolvers relay
    /// it: every answer an NXDOMAIN proof (SOA, two NSECs, their RRSIGs). qdns serves a
    /// snapshot signed as control signs (ECDSA P-256, NSEC; `signed_snapshot`), knotd
    /// signs the zone itself.
    SignedFlood,
}

impl Mix {
    fn label(self) -> &'static str {
        match self {
            Mix::Plain => "plain",
            Mix::Resolver => "resolver (DO=1)",
            Mix::Flood => "random-subdomain flood (NXDOMAIN)",
            Mix::SignedFlood => "random-subdomain flood, signed zone, DO=1",
        }
    }
}

/// One offered load.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Step {
    /// Offered queries per second.
    pub offered: u32,
    /// What kxdpgun sent, per second.
    pub sent_qps: f64,
    /// Replies received, per second.
    pub replied_qps: f64,
    /// Share of sent queries not answered.
    pub loss: f64,
    /// Server CPU (CPU 1) nanoseconds per reply.
    pub server_ns_per_query: f64,
    /// Server CPU nanoseconds per query sent (the same as per reply when every query is
    /// answered; the figure for a rate-limited flood, where most are not).
    pub server_ns_per_sent: f64,
}

/// One server with one mix.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Run {
    /// `Mode::label`.
    pub server: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Reply rate of the highest step with ≤ 1 % loss.
    pub capacity_qps: f64,
    /// The last step could not be offered by kxdpgun: the capacity is at least the figure.
    pub generator_ceiling: bool,
    /// Every step passed: the capacity is at least the figure.
    pub all_steps_passed: bool,
    /// Queries qdns's program answered (0 for the others).
    pub xdp_answered: u64,
}

/// The whole stage.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GunResult {
    /// `(mix, runs in MODES order)`.
    pub mixes: Vec<(&'static str, Vec<Run>)>,
    /// The fixed loads the CPU column reads.
    pub fixed: Vec<u32>,
    /// The floods with response rate limiting off and on (`rrl.rs`).
    pub rrl: Vec<rrl::RrlRun>,
}

impl Plan {
    /// Offered loads for kxdpgun.
    fn gun_steps(&self) -> &'static [u32] {
        if self.smoke {
            &[5_000, 20_000]
        } else {
            &[50_000, 100_000, 200_000, 300_000, 400_000, 600_000, 800_000, 1_000_000]
        }
    }

    /// Seconds per kxdpgun step.
    fn gun_seconds(&self) -> u32 {
        if self.smoke {
            1
        } else {
            3
        }
    }
}

/// kxdpgun's input: the dnsperf mix, with `D` on every line for the resolver mix; for
/// the flood, distinct missing names.
fn query_file(path: &Path, mix: Mix) -> std::io::Result<()> {
    let text = match mix {
        Mix::Plain => super::query_text(20_000, ""),
        Mix::Resolver => super::query_text(20_000, "D"),
        Mix::Flood => flood_text(20_000, ""),
        Mix::SignedFlood => flood_text(20_000, " D"),
    };
    std::fs::write(path, text)
}

/// `count` distinct names under the bench zone that do not exist (`rI-HEX`), type A,
/// each line ending with `flag`.
fn flood_text(count: u64, flag: &str) -> String {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut q = String::with_capacity(count as usize * 32);
    for i in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let _ = writeln!(q, "r{i}-{:08x}.{} A{flag}", state as u32, super::ZONE);
    }
    q
}

/// Nanoseconds the threads of `pid` and the NAPI threads of `iface` have run so far
/// (`/proc/TID/schedstat`, the scheduler's own exact account: the softirq work of a
/// threaded NAPI poll is that thread's time).
fn server_runtime_ns(pid: Option<u32>, iface: &str) -> u64 {
    let runtime = |path: std::path::PathBuf| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let mut total = 0;
    // The floor has no process: its NAPI thread alone.
    if let Some(Ok(tasks)) = pid.map(|pid| std::fs::read_dir(format!("/proc/{pid}/task"))) {
        for task in tasks.flatten() {
            total += runtime(task.path().join("schedstat"));
        }
    }
    for tid in napi_threads(iface) {
        total += runtime(std::path::PathBuf::from(format!("/proc/{tid}/schedstat")));
    }
    total
}

/// The kernel threads polling `iface`'s NAPI (threaded mode).
fn napi_threads(iface: &str) -> Vec<String> {
    let prefix = format!("napi/{iface}-");
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| {
                    std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|comm| comm.starts_with(&prefix))
                })
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Pins this process (and the children it starts from now on) to `cpu`.
fn pin_self(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; the call reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("sched_setaffinity: {}", std::io::Error::last_os_error()))
    }
}

/// Every CPU again.
fn unpin_self() {
    // SAFETY: as in `pin_self`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set);
    }
}

/// Threaded NAPI on `iface` in `ns`, its kthread pinned to `cpu`. The kthread is made
/// again when the device's NAPI is (an XDP program attached or removed), so this runs
/// before every step.
fn pin_napi(ns: &str, iface: &str, cpu: usize) -> Result<(), String> {
    let set = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        .arg(format!("echo 1 > /sys/class/net/{iface}/threaded"))
        .status()
        .map_err(|e| e.to_string())?;
    if !set.success() {
        return Err(format!("threaded NAPI on {iface} refused"));
    }
    let mut pinned = 0;
    for pid in napi_threads(iface) {
        let ok = Command::new("taskset")
            .args(["-p", "-c", &cpu.to_string(), &pid])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            pinned += 1;
        }
    }
    if pinned == 0 {
        return Err(format!("no NAPI thread for {iface}"));
    }
    Ok(())
}

/// One kxdpgun run: (sent, replied) queries, all from the client end's address
/// (kxdpgun 3.2 takes a source range with `-l` but sends from its first address only,
/// as measured on this pair). Its XDP socket is refused as busy for a moment after the
/// previous run let go of the queue: tried again a few times.
fn kxdpgun(pair: &Pair, queries: &Path, seconds: u32, rate: u32) -> Result<(u64, u64), String> {
    let mut last = String::new();
    for _ in 0..5 {
        match kxdpgun_once(pair, queries, seconds, rate) {
            Err(err) if err.contains("busy") => {
                last = err;
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
    Err(last)
}

fn kxdpgun_once(pair: &Pair, queries: &Path, seconds: u32, rate: u32) -> Result<(u64, u64), String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.client, "kxdpgun"])
        .args(["-t", &seconds.to_string(), "-Q", &rate.to_string()])
        .args(["-F", &GENERATOR_CPU.to_string(), "-p", &PORT.to_string(), "-i"])
        .arg(queries)
        .arg(SERVER)
        .output()
        .map_err(|e| format!("kxdpgun: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |label: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))?
            .split(':')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    match (field("total queries"), field("total replies")) {
        (Some(sent), Some(replied)) if out.status.success() => Ok((sent, replied)),
        _ => Err(format!("kxdpgun failed: {}", text.trim())),
    }
}

/// One offered load of `queries` for the stage's seconds: what kxdpgun sent and got
/// back, and the server's CPU over it (its threads, `pid`, and the server end's NAPI).
fn offer(plan: &Plan, pair: &Pair, queries: &Path, pid: Option<u32>, rate: u32) -> Result<Step, String> {
    pin_napi(&pair.server, &pair.server_if, SERVER_CPU)?;
    pin_napi(&pair.client, &pair.client_if, GENERATOR_CPU)?;
    let before = server_runtime_ns(pid, &pair.server_if);
    let (sent, replied) = kxdpgun(pair, queries, plan.gun_seconds(), rate)?;
    let server_ns = server_runtime_ns(pid, &pair.server_if).saturating_sub(before) as f64;
    let seconds = f64::from(plan.gun_seconds());
    Ok(Step {
        offered: rate,
        sent_qps: sent as f64 / seconds,
        replied_qps: replied as f64 / seconds,
        loss: 1.0 - replied as f64 / (sent.max(1) as f64),
        server_ns_per_query: server_ns / replied.max(1) as f64,
        server_ns_per_sent: server_ns / sent.max(1) as f64,
    })
}

fn measure(plan: &Plan, pair: &Pair, work: &Path, queries: &Path, mode: Mode, mix: Mix) -> Result<Run, String> {
    let dir = work.join(format!("kxdpgun-{}-{:?}", mode.label(), mix));
    let place = Placement {
        cpu: Some(SERVER_CPU),
        workers: 1,
    };
    // kxdpgun leaves its program on the client end, and it takes DNS responses for a
    // socket that is gone: off before the readiness probe (dig). That probe needs, in
    // native mode, a native program there to receive the answers: ours, which passes all.
    veth::ip(&["-n", &pair.client, "link", "set", "dev", &pair.client_if, "xdp", "off"])?;
    // A killed knotd leaves its program on the server end the same way.
    veth::ip(&["-n", &pair.server, "link", "set", "dev", &pair.server_if, "xdp", "off"])?;
    let (running, floor) = match mode {
        Mode::FloorNative | Mode::FloorGeneric => {
            let native = mode == Mode::FloorNative;
            let floor = Floor::attach(&pair.server, &pair.server_if, PORT, native)?;
            (None, Some(floor))
        }
        _ => {
            let peer = veth::peer_program(pair, mode)?;
            let signed = matches!(mix, Mix::SignedFlood).then(|| work.join("signed-snapshot.bin"));
            let running = veth::start_server(plan, pair, work, &dir, (mode, &[]), place, signed.as_deref())?;
            drop(peer);
            (Some(running), None)
        }
    };
    let pid = running.as_ref().map(|r| r.child.id());
    let mut run = Run {
        server: mode.label(),
        all_steps_passed: true,
        ..Run::default()
    };
    for &rate in plan.gun_steps() {
        let step = offer(plan, pair, queries, pid, rate)?;
        eprintln!(
            "bench-qps: kxdpgun {} {}: offered {rate}, sent {:.0}/s, replied {:.0}/s, loss {:.2} %, {:.0} ns/query",
            mode.label(),
            mix.label(),
            step.sent_qps,
            step.replied_qps,
            step.loss * 100.0,
            step.server_ns_per_query
        );
        let lossy = step.loss > 0.01;
        let ceiling = step.sent_qps < 0.95 * f64::from(rate);
        if !lossy {
            run.capacity_qps = step.replied_qps;
        }
        run.steps.push(step);
        if lossy || ceiling {
            run.all_steps_passed = false;
            run.generator_ceiling = ceiling && !lossy;
            break;
        }
    }
    drop(running);
    drop(floor);
    if matches!(mode, Mode::Native | Mode::Generic) {
        run.xdp_answered = veth::xdp_answered_in_log(&dir.join("server.log"));
    }
    Ok(run)
}

/// The bench zone signed as control signs it (a fresh ECDSA P-256 key, NSEC, valid
/// from an hour ago for 14 days), persisted at `path` as an edge persists a snapshot.
fn signed_snapshot(work: &Path, path: &Path) -> Result<(), String> {
    use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, Signatures, ZoneKey};
    let mut snapshot = qdns_zone::load_dir(&work.join("qdns-zones"), 1).map_err(|e| e.to_string())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    for zone in &mut snapshot.zones {
        zone.dnssec = Some(Box::new(Signatures::requested(Algorithm::EcdsaP256Sha256)));
        let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).map_err(|e| e.to_string())?;
        sign_zone(zone, &[key], SignOptions::at(now)).map_err(|e| e.to_string())?;
    }
    qdns_link::protocol::persist(path, &snapshot).map_err(|e| e.to_string())
}

/// The kxdpgun stage.
pub fn run(plan: &Plan, work: &Path) -> Result<GunResult, String> {
    let pair = veth::pair();
    // Each end's receive work in its own NAPI thread: NAPI needs GRO (or an XDP program)
    // on the receiving end, and veth uses it only for frames from a sender without TSO
    // (`veth_skb_is_eligible_for_gro`; a native XDP program turns the peer's off, generic
    // mode and user space do not). Without this the server's receive path — generic
    // XDP included — ran in the sender's softirq on the generator's CPU.
    for (ns, iface) in [(&pair.server, &pair.server_if), (&pair.client, &pair.client_if)] {
        let ok = Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", iface, "gro", "on", "tso", "off"])
            .status()
            .map_err(|e| format!("ethtool: {e}"))?;
        if !ok.success() {
            return Err(format!("ethtool -K {iface} gro on tso off failed"));
        }
    }
    pin_self(GENERATOR_CPU)?;
    let result = (|| {
        let mut result = GunResult {
            fixed: plan.gun_steps().get(1..4).unwrap_or(plan.gun_steps()).to_vec(),
            ..GunResult::default()
        };
        signed_snapshot(work, &work.join("signed-snapshot.bin"))?;
        let mixes = match std::env::var("QDNS_KXDPGUN_MIXES").ok().as_deref() {
            Some("flood") => vec![Mix::Flood, Mix::SignedFlood],
            Some("rrl") => vec![],
            _ => vec![Mix::Plain, Mix::Resolver, Mix::Flood, Mix::SignedFlood],
        };
        for mix in mixes {
            let queries = work.join(format!("kxdpgun-{mix:?}.txt"));
            query_file(&queries, mix).map_err(|e| e.to_string())?;
            let mut runs = Vec::new();
            for mode in MODES {
                runs.push(measure(plan, &pair, work, &queries, mode, mix)?);
            }
            result.mixes.push((mix.label(), runs));
        }
        result.rrl = rrl::runs(plan, &pair, work, &result.fixed)?;
        Ok(result)
    })();
    unpin_self();
    result
}

/// The Markdown lines of the stage.
pub fn report(result: &GunResult) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nkxdpgun on the veth pair (server and its NAPI thread on CPU 1, generator on CPU 0; server CPU = run time of the server's threads and its NAPI thread per reply):\n"
    );
    let _ = writeln!(
        t,
        "| mix | server | capacity qps (≤ 1 % loss) | {} | answered in XDP |",
        result
            .fixed
            .iter()
            .map(|r| format!("server ns/query @ {r}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(t, "|{}", "---|".repeat(4 + result.fixed.len()));
    for (mix, runs) in &result.mixes {
        for run in runs {
            let ns: Vec<String> = result
                .fixed
                .iter()
                .map(|rate| {
                    run.steps
                        .iter()
                        .find(|s| s.offered == *rate)
                        .map_or("–".into(), |s| format!("{:.0}", s.server_ns_per_query))
                })
                .collect();
            let note = if run.generator_ceiling {
                " (kxdpgun's ceiling: at least)"
            } else if run.all_steps_passed {
                " (every step passed: at least)"
            } else {
                ""
            };
            let _ = writeln!(
                t,
                "| {mix} | {} | {:.0}{note} | {} | {} |",
                run.server,
                run.capacity_qps,
                ns.join(" | "),
                run.xdp_answered
            );
        }
        let find = |label: &str| runs.iter().find(|r| r.server == label);
        floor_ratios(&mut t, mix, runs, &result.fixed);
        if let (Some(native), Some(knot)) = (find("native"), find("knotd-xdp")) {
            let ratios: Vec<String> = cpu_at(native, &result.fixed)
                .iter()
                .zip(cpu_at(knot, &result.fixed))
                .map(|(q, k)| format!("{:.2}", super::ratio(*q, k)))
                .collect();
            let _ = writeln!(
                t,
                "\n- {mix}: qdns native / knotd XDP — server CPU per query {} at {:?} qps (target ≤ 0.25); capacity {:.2}× (target ≥ 3){}\n",
                ratios.join(", "),
                result.fixed,
                super::ratio(native.capacity_qps, knot.capacity_qps),
                if native.generator_ceiling || native.all_steps_passed {
                    " — qdns's figure is kxdpgun's ceiling, so the ratio is a floor"
                } else {
                    ""
                }
            );
        }
    }
    t.push_str(&rrl::report(&result.rrl, &result.fixed));
    t
}

/// Server CPU per query at `fixed` loads, in order (the loads a run reached).
fn cpu_at(run: &Run, fixed: &[u32]) -> Vec<f64> {
    fixed
        .iter()
        .filter_map(|rate| run.steps.iter().find(|s| s.offered == *rate))
        .map(|s| s.server_ns_per_query)
        .collect()
}

/// Each XDP server over the floor of its mode: CPU per query at the fixed loads (the
/// issue's target for qdns: ≤ 1.15) and capacity (≥ 0.9).
fn floor_ratios(t: &mut String, mix: &str, runs: &[Run], fixed: &[u32]) {
    let find = |label: &str| runs.iter().find(|r| r.server == label);
    for (server, floor) in [
        ("native", "floor-native"),
        ("generic", "floor-generic"),
        ("knotd-xdp", "floor-native"),
    ] {
        let (Some(run), Some(floor)) = (find(server), find(floor)) else {
            continue;
        };
        let ratios: Vec<String> = cpu_at(run, fixed)
            .iter()
            .zip(cpu_at(floor, fixed))
            .map(|(q, f)| format!("{:.2}", super::ratio(*q, f)))
            .collect();
        let _ = writeln!(
            t,
            "- {mix}: {server} / {} — server CPU per query {} at {fixed:?} qps; capacity {:.2}×{}",
            floor.server,
            ratios.join(", "),
            super::ratio(run.capacity_qps, floor.capacity_qps),
            if floor.generator_ceiling || floor.all_steps_passed {
                " (the floor's capacity is kxdpgun's ceiling: the ratio is a ceiling)"
            } else {
                ""
            }
        );
    }
}
