//! The QPS harness cannot rot: its smoke mode (a few seconds per server) runs against the
//! real qdns-edge, knotd, nsd and gdnsd with dnsperf (and trafgen on the veth pair, as
//! root). It fails where the peers are not installed (`scripts/setup-peers`, which
//! `scripts/test` runs, installs them): a smoke test that skips proves nothing.
//!
//! What a smoke run can show is asserted: every server answers, the tables are
//! complete, the rows have their shapes. Its loads are too small to compare servers
//! by, and it prints no ratio (the real ones are `scripts/bench-qps`'s). A peer's mode
//! this kernel cannot run (knotd's XDP mode on Linux 6.18) must say so with the kernel's
//! refusal; every qdns row must answer.
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
    let missing: Vec<&str> = ["knotd", "nsd", "gdnsd", "dnsperf", "trafgen", "tc"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    assert!(missing.is_empty(), "{missing:?} not installed: run scripts/setup-peers");
    // The veth and generator stages need root; without it the harness would skip them, so
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
    // No ratio from a smoke run's tiny loads beside the real targets.
    for ratio in [
        "qdns / best peer",
        "qdns / knotd",
        "qdns native / knotd XDP",
        " / floor-",
        "target",
    ] {
        assert!(
            !stdout.contains(ratio),
            "a smoke run printed a ratio ({ratio}):\n{stdout}"
        );
    }
    assert!(
        stdout.contains("a smoke run: loads too small to compare servers by"),
        "{stdout}"
    );
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
        // knotd's XDP mode answered, or the kernel refused it and the line says so.
        let knot_xdp = stdout
            .lines()
            .find(|l| l.starts_with("- knotd in XDP mode"))
            .unwrap_or_else(|| panic!("no knotd XDP line:\n{stdout}"));
        assert_peer_ran_or_kernel_refused(knot_xdp, knot_xdp.contains("queries redirected to its AF_XDP sockets"));
        // Each closed loop measured something (the edge was up before dnsperf started).
        let closed = veth.split("closed loop ").nth(1).unwrap_or_else(|| panic!("{veth}"));
        let rates: Vec<f64> = closed
            .split(" qps")
            .take(3)
            .map(|part| part.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(rates.len() == 3 && rates.iter().all(|&r| r > 100.0), "{veth}");
        assert_generator_stage(&stdout);
    }
    assert!(out.path().join("results.json").is_file());
}

/// The generator stage, driven by trafgen: every server with every mix answered (the
/// driver's floor, qdns's three modes and knotd UDP), qdns's XDP modes from the
/// program — the signed flood in generic mode (veth's native frames have no room for a
/// signed NXDOMAIN); knotd's XDP mode answered or was refused by the kernel; the floods
/// with the limiter on and off.
fn assert_generator_stage(stdout: &str) {
    assert!(stdout.contains("The veth pair driven by trafgen"), "{stdout}");
    for mix in [
        "plain",
        "resolver (DO=1)",
        "random-subdomain flood (NXDOMAIN)",
        "random-subdomain flood, signed zone, DO=1",
    ] {
        for server in [
            "floor-native",
            "floor-generic",
            "native",
            "generic",
            "off",
            "knotd-udp",
            "knotd-xdp",
        ] {
            let row = generator_row(stdout, mix, server);
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(
                cells.len(),
                9,
                "mix, server, generator, capacity, two loads, answered in XDP: {row}"
            );
            assert_eq!(cells[3], "trafgen", "{row}");
            if server == "knotd-xdp" {
                let ran = cells[4]
                    .split_whitespace()
                    .next()
                    .and_then(|c| c.parse::<f64>().ok())
                    .is_some();
                assert_peer_ran_or_kernel_refused(row, ran);
                if !ran {
                    continue;
                }
            }
            // The knotd UDP row of the signed flood may lose at the smoke's second
            // load (it signs on the fly on one worker); its first load answered.
            let capacity: f64 = cells[4].split_whitespace().next().unwrap().parse().unwrap();
            assert!(capacity > 1000.0, "{row}");
            let in_xdp: u64 = cells[cells.len() - 2].parse().unwrap();
            let from_program = match server {
                "generic" => true,
                "native" => !mix.contains("signed"),
                _ => false,
            };
            if from_program {
                assert!(in_xdp > 1000, "answered by the program: {row}");
            }
        }
    }
    assert_rate_limited_floods(stdout);
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
                .find(|l| l.starts_with(&format!("| {mix} | {server} | trafgen | {rrl} |")))
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

/// The generator table's row for `mix` and `server`.
fn generator_row<'s>(stdout: &'s str, mix: &str, server: &str) -> &'s str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {mix} | {server} |")))
        .unwrap_or_else(|| panic!("no generator row for {mix} {server}:\n{stdout}"))
}

/// A peer's mode either ran (`ran`) or the line says this kernel refused it, in the
/// kernel's words.
fn assert_peer_ran_or_kernel_refused(line: &str, ran: bool) {
    assert!(
        ran || (line.contains("not available on this kernel") && line.contains("refused knotd's XDP program: \"")),
        "neither ran nor refused by the kernel: {line}"
    );
}
