//! The QPS harness cannot rot: its smoke mode (a few seconds per server) runs against the
//! real qdns-edge, knotd, nsd and gdnsd with dnsperf (and kxdpgun on the veth pair, as
//! root). It fails where the peers are not installed (`scripts/setup-peers`, which
//! `scripts/test` runs, installs them): a smoke test that skips proves nothing.
use std::{path::PathBuf, process::Command};

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The `qdns-edge` binary of this build profile, built if needed.
fn edge_bin() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "qdns-edge", "--bin", "qdns-edge"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo build qdns-edge");
    assert!(status.success());
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("qdns-edge")
}

#[test]
fn harness_smoke_run_produces_the_table() {
    let missing: Vec<&str> = ["knotd", "nsd", "gdnsd", "dnsperf", "kxdpgun"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    assert!(missing.is_empty(), "{missing:?} not installed: run scripts/setup-peers");
    // The veth and kxdpgun stages need root; without it the harness would skip them, so
    // the test fails instead of passing on half the harness.
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "the qps smoke test needs root (network namespaces, XDP); run it as root, as .ci/run does"
    );
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_bench-qps"))
        .arg("--smoke")
        .arg("--edge")
        .arg(edge_bin())
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "bench-qps --smoke failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for server in ["qdns-edge", "knotd", "nsd", "gdnsd"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {server} |")))
            .unwrap_or_else(|| panic!("no row for {server}:\n{stdout}"));
        assert!(!row.contains("error"), "{row}");
        // The closed-loop rate is a real measurement.
        let qps: f64 = row
            .split('|')
            .nth(5)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(qps > 100.0, "{server} answered: {row}");
    }
    assert!(stdout.contains("qdns reload of"), "{stdout}");
    {
        // The veth stage ran in all three modes and the program answered in both XDP ones.
        let veth = stdout
            .lines()
            .find(|l| l.starts_with("- qdns-edge through a veth pair"))
            .unwrap_or_else(|| panic!("no veth line:\n{stdout}"));
        let answered: Vec<u64> = veth
            .split("queries answered by the XDP program: ")
            .nth(1)
            .unwrap_or_else(|| panic!("{veth}"))
            .split(", ")
            .map(|part| part.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(answered.len() == 2 && answered.iter().all(|&n| n > 0), "{veth}");
        // Each closed loop measured something (the edge was up before dnsperf started).
        let closed = veth.split("closed loop ").nth(1).unwrap_or_else(|| panic!("{veth}"));
        let rates: Vec<f64> = closed
            .split(" qps")
            .take(3)
            .map(|part| part.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(rates.len() == 3 && rates.iter().all(|&r| r > 100.0), "{veth}");
        // The kxdpgun stage: every server with the plain and resolver mixes answered,
        // qdns's XDP modes from the program.
        for mix in ["plain", "resolver (DO=1)"] {
            for server in ["native", "generic", "off", "knotd-udp", "knotd-xdp"] {
                let (capacity, in_xdp, row) = kxdpgun_row(&stdout, mix, server);
                assert!(capacity > 1000.0, "{row}");
                if server == "native" || server == "generic" {
                    assert!(in_xdp > 1000, "answered by the program: {row}");
                }
            }
        }
        // The driver's floor answered, and the signed flood came from the program in
        // generic mode (veth's native frames have no room for a signed NXDOMAIN).
        for (mix, server) in [
            ("plain", "floor-native"),
            ("plain", "floor-generic"),
            ("random-subdomain flood, signed zone, DO=1", "generic"),
        ] {
            let (capacity, in_xdp, row) = kxdpgun_row(&stdout, mix, server);
            assert!(capacity > 1000.0, "{row}");
            if server == "generic" {
                assert!(in_xdp > 1000, "the signed flood answered by the program: {row}");
            }
        }
        assert_rate_limited_floods(&stdout);
    }
    assert!(out.path().join("results.json").is_file());
}

/// The floods with the limiter on and off: on, the program slips and drops (and
/// nothing of the flood reaches user space); off, it does neither.
fn assert_rate_limited_floods(stdout: &str) {
    for (mix, server) in [
        ("random-subdomain flood (NXDOMAIN)", "native"),
        ("random-subdomain flood (NXDOMAIN)", "generic"),
        ("random-subdomain flood, signed zone, DO=1", "generic"),
    ] {
        for rrl in ["off", "on"] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(&format!("| {mix} | {server} | {rrl} |")))
                .unwrap_or_else(|| panic!("no RRL row for {mix} {server} {rrl}:\n{stdout}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let count = |from_end: usize| -> u64 { cells[cells.len() - 1 - from_end].parse().unwrap() };
            let (answered, slipped, dropped, passed) = (count(4), count(3), count(2), count(1));
            assert!(answered > 1000 && passed * 100 < answered, "{row}");
            if rrl == "on" {
                assert!(slipped > 100 && dropped > 100, "the limiter at work in XDP: {row}");
            } else {
                assert!(slipped == 0 && dropped == 0, "{row}");
            }
        }
    }
}

/// The kxdpgun table's row for `mix` and `server`: its capacity, the queries the
/// program answered, and the row.
fn kxdpgun_row<'s>(stdout: &'s str, mix: &str, server: &str) -> (f64, u64, &'s str) {
    let row = stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {mix} | {server} |")))
        .unwrap_or_else(|| panic!("no kxdpgun row for {mix} {server}:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let capacity: f64 = cells[3].split_whitespace().next().unwrap().parse().unwrap();
    let in_xdp: u64 = cells[cells.len() - 2].parse().unwrap();
    (capacity, in_xdp, row)
}
