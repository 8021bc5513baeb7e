//! The veth pair driven by a packet generator instead of dnsperf, so the server is
//! measured rather than the generator: qdns XDP native, qdns XDP generic, qdns user
//! space, knotd UDP and knotd XDP (`AF_XDP`), and the driver's floor (`floor.rs`), each
//! with the bench's plain query mix, the real-resolver mix (every query DO=1, as BIND
//! and Unbound send) and the random-subdomain floods.
//!
//! The generator is netsniff-ng's trafgen (`trafgen.rs`; a `PF_PACKET` TX ring, the
//! offered load held by a token bucket, replies counted by the kernel on the client end
//! by `sink.rs`), which depends on none of the servers it measures; Knot's kxdpgun
//! (`kxdpgun.rs`) where its XDP program loads and `--generator kxdpgun` asks for it.
//! Every row names its generator. A peer that cannot run on this kernel (knotd's XDP
//! mode on Linux 6.18: its program is refused) is reported with the kernel's words, not
//! failed; the floor is then the XDP rows' reference.
//!
//! Placement on the two CPUs: the generator, this harness and the client end's NAPI
//! (threaded) on CPU 0; the server — its process, and the server end's NAPI, threaded
//! and pinned — on CPU 1. Server CPU per answered query is the run time of the server's
//! threads plus the server end's NAPI thread (`/proc/TID/schedstat`) over the replies
//! counted: it takes in the kernel's receive and transmit work for the answers, which
//! the process's own CPU time would miss (XDP runs in the NAPI thread, not in
//! qdns-edge), and nothing else that ran on the CPU. The native program on the client
//! end (the sink, or kxdpgun's own) is also what lets native mode's `XDP_TX` answers be
//! delivered (see docs/OPERATIONS.md).
//!
//! For each server and mix the offered load steps up until more than 1 % is lost (the
//! capacity is the reply rate of the last step at ≤ 1 % loss) or the generator cannot
//! offer the step (sent < 95 % of it: the generator's ceiling, reported as such).
mod kxdpgun;
mod rrl;
mod trafgen;

use std::{fmt::Write as _, path::Path, path::PathBuf, process::Command};

use super::{
    floor::Floor,
    sink::Sink,
    veth::{self, Mode, Pair, Placement, PORT},
    Plan,
};

/// The CPU the generator and the harness use.
pub const GENERATOR_CPU: usize = 0;
/// The CPU the server and its NAPI thread use.
pub const SERVER_CPU: usize = 1;
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
    /// What the generator sent, per second (over its own account of the seconds it sent).
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
    /// Share of the server's CPU busy while the load ran (`/proc/stat`: everything on
    /// CPU 1, the server's threads, its NAPI thread and any softirq work there).
    pub server_cpu_busy: f64,
    /// Frames the generator tried to send per second (trafgen: what the bucket dropped
    /// over the rate included).
    pub attempted_qps: f64,
}

/// One server with one mix.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Run {
    /// `Mode::label`.
    pub server: &'static str,
    /// `Generator::label`.
    pub generator: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Reply rate of the highest step with ≤ 1 % loss.
    pub capacity_qps: f64,
    /// The last step could not be offered by the generator: the capacity is at least the figure.
    pub generator_ceiling: bool,
    /// The last step could not be offered because the server's CPU was full (≥ 90 %
    /// busy while it ran):
    /// veth pushes back on the sender when the receiving end's ring is full (Linux
    /// 6.18), so a saturated server shows as a sender held back, not as loss. The
    /// capacity is the server's.
    pub server_saturated: bool,
    /// Every step passed: the capacity is at least the figure.
    pub all_steps_passed: bool,
    /// Queries qdns's program answered (0 for the others).
    pub xdp_answered: u64,
    /// The server cannot run on this kernel: why, in the kernel's and the server's words
    /// (a peer's mode only; nothing of qdns is ever reported so).
    pub unavailable: Option<String>,
}

/// The whole stage.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GunResult {
    /// `Generator::label`.
    pub generator: &'static str,
    /// A smoke run: loads too small for ratios, which are not printed.
    pub smoke: bool,
    /// `(mix, runs in MODES order)`.
    pub mixes: Vec<(&'static str, Vec<Run>)>,
    /// The fixed loads the CPU column reads.
    pub fixed: Vec<u32>,
    /// The floods with response rate limiting off and on (`rrl.rs`).
    pub rrl: Vec<rrl::RrlRun>,
}

impl Plan {
    /// Offered loads for the generator.
    fn gun_steps(&self) -> &'static [u32] {
        if self.smoke {
            &[5_000, 20_000]
        } else {
            &[50_000, 100_000, 200_000, 300_000, 400_000, 600_000, 800_000, 1_000_000]
        }
    }

    /// Seconds per generator step.
    fn gun_seconds(&self) -> u32 {
        if self.smoke {
            1
        } else {
            3
        }
    }
}

/// The generator's input (`name TYPE [flag]` lines, as kxdpgun reads and
/// `trafgen.rs` turns into frames): the dnsperf mix, with `D` on every line for the
/// resolver mix; for the flood, distinct missing names.
fn query_text(mix: Mix) -> String {
    match mix {
        Mix::Plain => super::query_text(20_000, ""),
        Mix::Resolver => super::query_text(20_000, "D"),
        Mix::Flood => flood_text(20_000, ""),
        Mix::SignedFlood => flood_text(20_000, " D"),
    }
}

/// What sends the queries (`--generator`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Generator {
    /// netsniff-ng's trafgen with a token bucket (`trafgen.rs`): the default.
    Trafgen,
    /// Knot's kxdpgun (`kxdpgun.rs`), where its XDP program loads.
    Kxdpgun,
}

impl Generator {
    /// The name in `--generator` and in every row.
    pub fn label(self) -> &'static str {
        match self {
            Generator::Trafgen => "trafgen",
            Generator::Kxdpgun => "kxdpgun",
        }
    }

    /// The generator named `name`.
    pub fn named(name: &str) -> Option<Generator> {
        [Generator::Trafgen, Generator::Kxdpgun]
            .into_iter()
            .find(|g| g.label() == name)
    }
}

/// One mix made ready for the plan's generator.
struct Load {
    generator: Generator,
    /// The query lines (kxdpgun's input).
    queries: PathBuf,
    /// trafgen's frames.
    templates: Option<trafgen::Templates>,
}

impl Load {
    fn prepare(generator: Generator, pair: &Pair, work: &Path, mix: Mix) -> Result<Load, String> {
        let text = query_text(mix);
        let queries = work.join(format!("gun-{mix:?}.txt"));
        std::fs::write(&queries, &text).map_err(|e| format!("{}: {e}", queries.display()))?;
        let templates = match generator {
            Generator::Trafgen => Some(trafgen::Templates::write(
                pair,
                &text,
                &work.join(format!("trafgen-{mix:?}.cfg")),
            )?),
            Generator::Kxdpgun => None,
        };
        Ok(Load {
            generator,
            queries,
            templates,
        })
    }

    /// What counts the replies on the client end while a server runs: the sink for
    /// trafgen (kxdpgun attaches its own program).
    fn receiver(&self, pair: &Pair) -> Result<Option<Sink>, String> {
        match self.generator {
            Generator::Trafgen => Sink::attach(&pair.client, &pair.client_if, PORT).map(Some),
            Generator::Kxdpgun => Ok(None),
        }
    }

    /// Offers `rate` queries a second for `seconds`.
    fn send(&self, pair: &Pair, seconds: u32, rate: u32) -> Result<trafgen::Traffic, String> {
        match &self.templates {
            Some(templates) => templates.send(pair, seconds, rate),
            None => kxdpgun::send(pair, &self.queries, seconds, rate),
        }
    }
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
fn pin_napi(ns: &str, iface: &str, cpu: usize, realtime: bool) -> Result<(), String> {
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
        let ok = ok
            && (!realtime
                || Command::new("chrt")
                    .args(["-f", "-p", "10", &pid])
                    .status()
                    .is_ok_and(|s| s.success()));
        if ok {
            pinned += 1;
        }
    }
    if pinned == 0 {
        return Err(format!("no NAPI thread for {iface}"));
    }
    Ok(())
}

/// One offered load of `load` for the stage's seconds: what the generator sent and got
/// back, and the server's CPU over it (its threads, `pid`, and the server end's NAPI).
fn offer(plan: &Plan, pair: &Pair, load: &Load, pid: Option<u32>, rate: u32) -> Result<Step, String> {
    pin_napi(&pair.server, &pair.server_if, SERVER_CPU, false)?;
    // trafgen spins on the generator's CPU (its fast path never sleeps; the bucket
    // drops what is over the rate): the client end's NAPI thread, which takes the
    // replies off the ring the server answers into, runs before it (SCHED_FIFO), or
    // the server's answers are refused at a full ring (seen: 7 % of the floor's at
    // 100k as `xdp_tx_errors` on the server end).
    let realtime = load.generator == Generator::Trafgen;
    pin_napi(&pair.client, &pair.client_if, GENERATOR_CPU, realtime)?;
    let before = server_runtime_ns(pid, &pair.server_if);
    let sent_all = load.send(pair, plan.gun_seconds(), rate)?;
    let server_ns = server_runtime_ns(pid, &pair.server_if).saturating_sub(before) as f64;
    let (replied, sent, seconds) = (sent_all.replied, sent_all.sent, sent_all.seconds);
    Ok(Step {
        offered: rate,
        sent_qps: sent as f64 / seconds,
        replied_qps: replied as f64 / seconds,
        loss: 1.0 - replied as f64 / (sent.max(1) as f64),
        server_ns_per_query: server_ns / replied.max(1) as f64,
        server_ns_per_sent: server_ns / sent.max(1) as f64,
        server_cpu_busy: sent_all.server_cpu_busy.unwrap_or(0.0),
        attempted_qps: sent_all.attempted.unwrap_or(0) as f64 / seconds,
    })
}

fn measure(plan: &Plan, pair: &Pair, work: &Path, load: &Load, mode: Mode, mix: Mix) -> Result<Run, String> {
    let dir = work.join(format!("gun-{}-{:?}", mode.label(), mix));
    let place = Placement {
        cpu: Some(SERVER_CPU),
        workers: 1,
    };
    let mut run = Run {
        server: mode.label(),
        generator: load.generator.label(),
        all_steps_passed: true,
        ..Run::default()
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
            let started = veth::start_server(plan, pair, work, &dir, (mode, &[]), place, signed.as_deref());
            drop(peer);
            match started {
                Ok(running) => (Some(running), None),
                Err(err) => {
                    // A peer's mode the kernel refuses is reported, not failed.
                    run.unavailable = veth::refused_by_kernel(mode, &dir.join("server.log"));
                    if run.unavailable.is_some() {
                        run.all_steps_passed = false;
                        return Ok(run);
                    }
                    return Err(err);
                }
            }
        }
    };
    let receiver = load.receiver(pair)?;
    let pid = running.as_ref().map(|r| r.child.id());
    for &rate in plan.gun_steps() {
        let step = offer(plan, pair, load, pid, rate)?;
        eprintln!(
            "bench-qps: {} {} {}: offered {rate}, tried {:.0}/s, sent {:.0}/s, replied {:.0}/s, loss {:.2} %, {:.0} ns/query, server CPU {:.0} % busy",
            load.generator.label(),
            mode.label(),
            mix.label(),
            step.attempted_qps,
            step.sent_qps,
            step.replied_qps,
            step.loss * 100.0,
            step.server_ns_per_query,
            step.server_cpu_busy * 100.0
        );
        let lossy = step.loss > 0.01;
        let held_back = step.sent_qps < 0.95 * f64::from(rate);
        let saturated = held_back && step.server_cpu_busy >= 0.9;
        let ceiling = held_back && !saturated;
        if !lossy {
            run.capacity_qps = step.replied_qps;
        }
        run.steps.push(step);
        if lossy || held_back {
            run.all_steps_passed = false;
            run.generator_ceiling = ceiling && !lossy;
            run.server_saturated = saturated && !lossy;
            break;
        }
    }
    drop(receiver);
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

/// The stage.
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
    let _buffers = match plan.generator {
        Generator::Trafgen => Some(trafgen::SocketBuffers::raise()?),
        Generator::Kxdpgun => None,
    };
    pin_self(GENERATOR_CPU)?;
    let result = (|| {
        let mut result = GunResult {
            generator: plan.generator.label(),
            smoke: plan.smoke,
            fixed: plan.gun_steps().get(1..4).unwrap_or(plan.gun_steps()).to_vec(),
            ..GunResult::default()
        };
        signed_snapshot(work, &work.join("signed-snapshot.bin"))?;
        let chosen = std::env::var("QDNS_GENERATOR_MIXES")
            .or_else(|_| std::env::var("QDNS_KXDPGUN_MIXES"))
            .ok();
        let mixes = match chosen.as_deref() {
            Some("flood") => vec![Mix::Flood, Mix::SignedFlood],
            Some("plain") => vec![Mix::Plain],
            Some("rrl") => vec![],
            _ => vec![Mix::Plain, Mix::Resolver, Mix::Flood, Mix::SignedFlood],
        };
        // A peer's mode the kernel refused once is not started again in this run.
        let mut refused: Option<Run> = None;
        for mix in mixes {
            let load = Load::prepare(plan.generator, &pair, work, mix)?;
            let mut runs = Vec::new();
            for mode in MODES {
                let run = match &refused {
                    Some(run) if run.server == mode.label() => run.clone(),
                    _ => measure(plan, &pair, work, &load, mode, mix)?,
                };
                if run.unavailable.is_some() {
                    refused = Some(run.clone());
                }
                runs.push(run);
            }
            result.mixes.push((mix.label(), runs));
        }
        if chosen.as_deref() != Some("plain") {
            result.rrl = rrl::runs(plan, &pair, work, &result.fixed)?;
        }
        Ok(result)
    })();
    unpin_self();
    result
}

/// The Markdown lines of the stage. A smoke run's loads are too small to compare
/// servers by: its table has every row, and no ratio.
pub fn report(result: &GunResult) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nThe veth pair driven by {} (server and its NAPI thread on CPU 1, generator on CPU 0; server CPU = run time of the server's threads and its NAPI thread per reply):\n",
        result.generator
    );
    let _ = writeln!(
        t,
        "| mix | server | generator | capacity qps (≤ 1 % loss) | {} | answered in XDP |",
        result
            .fixed
            .iter()
            .map(|r| format!("server ns/query @ {r}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(t, "|{}", "---|".repeat(5 + result.fixed.len()));
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
            let capacity = match &run.unavailable {
                Some(why) => format!("not available on this kernel: {why}"),
                None if run.generator_ceiling => {
                    format!("{:.0} ({}'s ceiling: at least)", run.capacity_qps, run.generator)
                }
                None if run.server_saturated => format!(
                    "{:.0} (server CPU {:.0} % busy, the pair held the sender back)",
                    run.capacity_qps,
                    run.steps.last().map_or(0.0, |s| s.server_cpu_busy * 100.0)
                ),
                None if run.all_steps_passed => format!("{:.0} (every step passed: at least)", run.capacity_qps),
                None if run.capacity_qps == 0.0 => run.steps.first().map_or("–".into(), |s| {
                    format!("under {} ({:.1} % lost at the first step)", s.offered, s.loss * 100.0)
                }),
                None => format!("{:.0}", run.capacity_qps),
            };
            let _ = writeln!(
                t,
                "| {mix} | {} | {} | {capacity} | {} | {} |",
                run.server,
                run.generator,
                ns.join(" | "),
                run.xdp_answered
            );
        }
        if result.smoke {
            continue;
        }
        let find = |label: &str| runs.iter().find(|r| r.server == label);
        floor_ratios(&mut t, mix, runs, &result.fixed);
        match (find("native"), find("knotd-xdp")) {
            (Some(_), Some(knot)) if knot.unavailable.is_some() => {
                let _ = writeln!(
                    t,
                    "\n- {mix}: knotd's XDP mode is not available on this kernel; the driver's floor (above, same generator, same run) is the XDP rows' reference\n"
                );
            }
            (Some(native), Some(knot)) => {
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
                        format!(" — qdns's figure is {}'s ceiling, so the ratio is a floor", native.generator)
                    } else {
                        String::new()
                    }
                );
            }
            _ => {}
        }
    }
    if result.smoke {
        let _ = writeln!(
            t,
            "\n- a smoke run: loads too small to compare servers by, so no ratios (`scripts/bench-qps --only generator` measures them)"
        );
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
        if run.unavailable.is_some() {
            continue;
        }
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
                format!(
                    " (the floor's capacity is {}'s ceiling: the ratio is a ceiling)",
                    floor.generator
                )
            } else {
                String::new()
            }
        );
    }
}
