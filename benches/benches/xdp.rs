//! Per-query cost of the XDP program in the kernel (needs root): `BPF_PROG_TEST_RUN`
//! with `repeat = 1`, 1,000,000 times per case.
//!
//! Why not one run with a large `repeat`: the kernel runs the program again on the same
//! buffer, and the in-place rewrite has turned the query into a response after the first
//! run, so every later run would measure the cheap "not a query" pass. With `repeat = 1`
//! each run gets a fresh copy of the query, the action is checked (`XDP_TX` where an
//! answer is expected), and the kernel's own per-run time is kept. The median is the
//! figure to quote: on this 2-vCPU VM a run that catches an interrupt or a steal of the
//! vCPU reads microseconds and drags the mean. The time includes the kernel's clock
//! reads around the run, so the figures are upper bounds.
//!
//! Run: `sudo cargo bench -p benches --bench xdp` (prints one line per case).
use qdns_edge::{xdp::XdpProgram, Engine};

/// Runs per case; `QDNS_XDP_RUNS` lowers it for quick comparisons, `QDNS_XDP_CASE`
/// keeps the cases whose label contains it.
const RUNS: u32 = 1_000_000;

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
    let cases = [
        ("plain A", frame("www.example.com.", 1, None), 3),
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
                let mut f = frame("www.example.com.", 1, None);
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
    for (label, packet, action) in cases {
        if !label.contains(only.as_str()) {
            continue;
        }
        let mut times = Vec::with_capacity(runs as usize);
        for _ in 0..runs {
            let run = program.test_run(&packet, 1).expect("test run");
            if std::env::var_os("QDNS_XDP_ANY").is_none() {
                assert_eq!(run.action, action, "{label}");
            }
            times.push(u32::try_from(run.duration.as_nanos()).unwrap_or(u32::MAX));
        }
        times.sort_unstable();
        let median = times[times.len() / 2];
        let p10 = times[times.len() / 10];
        if std::env::var_os("QDNS_XDP_SPREAD").is_some() {
            let q: Vec<u32> = (0..=20).map(|i| times[(times.len() - 1) * i / 20]).collect();
            println!("{label}: 5% steps {q:?}");
        }
        let p90 = times[times.len() * 9 / 10];
        let mean = times.iter().map(|&t| f64::from(t)).sum::<f64>() / f64::from(runs);
        println!("xdp {label:<20} p10 {p10:>4} ns  median {median:>4} ns  p90 {p90:>4} ns  mean {mean:>6.1} ns  ({runs} runs, action {action})");
    }
}
