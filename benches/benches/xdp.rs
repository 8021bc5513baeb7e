//! Per-query cost of the XDP program in the kernel (needs root): `BPF_PROG_TEST_RUN`
//! with `repeat = 1`, 1,000,000 times per case.
//!
//! Why not one run with a large `repeat`: the kernel runs the program again on the same
//! buffer, and the in-place rewrite has turned the query into a response after the first
//! run, so every later run would measure the cheap "not a query" pass. With `repeat = 1`
//! each run gets a fresh copy of the query, the action is checked (`XDP_TX` where an
//! answer is expected), and the kernel's own per-run time is kept.
//!
//! That time includes the kernel's clock reads and bottom-half toggling around the run,
//! so a two-instruction program (`r0 = XDP_PASS; exit`) is measured the same way — the
//! floor — and the program's own cost is the case's median minus the floor's median.
//! The cases run interleaved in rounds of 20,000 runs. This VM's speed drifts by up to
//! 2× over seconds (host load; no steal shows in vmstat), which moves whole rounds, so
//! besides the overall percentiles each case reports its quietest round — the lowest
//! per-round median — and the program's cost is that figure minus the floor's quietest
//! round median.
//!
//! Run: `sudo taskset -c 1 cargo bench -p benches --bench xdp` (prints one line per case).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use qdns_edge::{xdp::XdpProgram, Engine};

/// Runs per case; `QDNS_XDP_RUNS` lowers it for quick comparisons, `QDNS_XDP_CASE`
/// keeps the cases whose label contains it.
const RUNS: u32 = 1_000_000;
/// Rounds the runs are split into (every case runs once per round).
const ROUNDS: u32 = 50;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const XDP_PASS: u32 = 2;

/// `bpf(2)` with an attribute block (the kernel reads the fields it knows, the rest is 0).
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zeroed, 8-aligned 128-octet block that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The floor: an XDP program of two instructions, `r0 = XDP_PASS; exit`.
fn floor_program() -> std::io::Result<OwnedFd> {
    let insns: [u64; 2] = [0xb7 | u64::from(XDP_PASS) << 32, 0x95];
    let license = c"GPL";
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_PROG_TYPE_XDP) | (insns.len() as u64) << 32;
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    let fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One `BPF_PROG_TEST_RUN` of the floor program: (action, ns).
fn floor_run(program: &OwnedFd, packet: &[u8]) -> std::io::Result<(u32, u32)> {
    let mut attr = [0u64; 16];
    attr[0] = u64::try_from(program.as_raw_fd()).map_err(std::io::Error::other)?;
    attr[1] = packet.len() as u64;
    attr[2] = packet.as_ptr() as u64;
    attr[4] = 1;
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(((attr[0] >> 32) as u32, (attr[4] >> 32) as u32))
}

fn frame(name: &str, qtype: u16, edns_do: Option<bool>) -> Vec<u8> {
    let mut dns = benches::query(name, qtype, None);
    if let Some(dnssec_ok) = edns_do {
        dns[11] = 1;
        dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + dns.len()) as u16;
    frame.extend([0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    frame[16..18].copy_from_slice(&total.to_be_bytes());
    frame.extend(40000u16.to_be_bytes());
    frame.extend(53u16.to_be_bytes());
    frame.extend(((8 + dns.len()) as u16).to_be_bytes());
    frame.extend([0, 0]);
    frame.extend(dns);
    frame
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("xdp bench: needs root (BPF_PROG_TEST_RUN); skipped");
        return;
    }
    let zones = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
    let snapshot = qdns_zone::load_dir(&zones, 1).expect("example zones");
    let engine = Engine::compile(&snapshot).expect("compile");
    engine.set_health(vec![u64::MAX; engine.health().len()]);
    let mut program = XdpProgram::load(&[53], engine.max_udp_payload()).expect("load");
    program.install(&engine).expect("install");
    let floor = floor_program().expect("load the floor program");
    let plain = frame("www.example.com.", 1, None);
    let cases = [
        ("floor (empty program)", plain.clone(), 2),
        ("plain A", plain.clone(), 3),
        ("plain A + EDNS", frame("www.example.com.", 1, Some(false)), 3),
        ("weighted", frame("www.shop.example.", 1, None), 3),
        ("failover", frame("api.shop.example.", 1, None), 3),
        ("multivalue", frame("mv.shop.example.", 28, None), 3),
        ("NXDOMAIN", frame("no-such-name.example.com.", 1, None), 3),
        ("NODATA", frame("www.example.com.", 16, None), 3),
        ("pass (DO=1)", frame("www.example.com.", 1, Some(true)), 2),
        (
            "pass (other port)",
            {
                let mut f = plain.clone();
                f[36..38].copy_from_slice(&5353u16.to_be_bytes());
                f
            },
            2,
        ),
    ];
    let runs: u32 = std::env::var("QDNS_XDP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS);
    let only = std::env::var("QDNS_XDP_CASE").unwrap_or_default();
    let check = std::env::var_os("QDNS_XDP_ANY").is_none();
    let cases: Vec<_> = cases
        .into_iter()
        .filter(|(label, _, _)| label.starts_with("floor") || label.contains(only.as_str()))
        .collect();
    let per_round = runs.div_ceil(ROUNDS);
    let mut times: Vec<Vec<u32>> = vec![Vec::with_capacity((per_round * ROUNDS) as usize); cases.len()];
    // Per case, the median of each round.
    let mut round_medians: Vec<Vec<u32>> = vec![Vec::with_capacity(ROUNDS as usize); cases.len()];
    let mut round = Vec::with_capacity(per_round as usize);
    for _ in 0..ROUNDS {
        for (((label, packet, action), times), medians) in cases.iter().zip(&mut times).zip(&mut round_medians) {
            round.clear();
            for _ in 0..per_round {
                let (got, ns) = if label.starts_with("floor") {
                    floor_run(&floor, packet).expect("floor test run")
                } else {
                    let run = program.test_run(packet, 1).expect("test run");
                    (run.action, u32::try_from(run.duration.as_nanos()).unwrap_or(u32::MAX))
                };
                if check {
                    assert_eq!(got, *action, "{label}");
                }
                round.push(ns);
            }
            times.extend_from_slice(&round);
            round.sort_unstable();
            medians.push(round[round.len() / 2]);
        }
    }
    let quiet = |medians: &[u32]| medians.iter().copied().min().unwrap_or(0);
    let floor_quiet = quiet(&round_medians[0]);
    for (((label, _, action), times), medians) in cases.iter().zip(&mut times).zip(&round_medians) {
        times.sort_unstable();
        let at = |q: usize| times[(times.len() - 1) * q / 100];
        let mean = times.iter().map(|&t| f64::from(t)).sum::<f64>()
            / f64::from(u32::try_from(times.len()).unwrap_or(u32::MAX));
        let quiet = quiet(medians);
        println!(
            "xdp {label:<22} p10 {:>4} ns  median {:>4} ns  p90 {:>4} ns  mean {mean:>6.1} ns  quiet {quiet:>4} ns  program {:>4} ns  ({} runs, action {action})",
            at(10),
            at(50),
            at(90),
            quiet.saturating_sub(floor_quiet),
            times.len()
        );
    }
}
