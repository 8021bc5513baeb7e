//! 10,000 HTTP checks at a 10 s interval against a local target: the checker process's
//! CPU share and RSS, and the report bandwidth one location receives.
//!
//! Builds the release binaries, starts an HTTP target (in this process, tokio), a
//! location (`qdns-control --checker-listen`, no embedded checker) and one checker
//! (`qdns-control checker`) probing all 10,000 checks (1,000 probes/s). After a 15 s
//! warm-up (first probes are spread over the interval) it samples /proc and the
//! location's counters over a 30 s window. Bounded: about 50 s in all.
//!
//! `cargo bench -p benches --bench checkers`
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHECKS: usize = 10_000;
const WARMUP: Duration = Duration::from_secs(15);
const WINDOW: Duration = Duration::from_secs(30);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn build() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "qdns-control"])
        .current_dir(workspace())
        .status()
        .expect("cargo build");
    assert!(status.success());
    workspace().join("target/release")
}

/// Starts the HTTP target; returns its port and a request counter.
fn target(runtime: &tokio::runtime::Runtime) -> (u16, Arc<AtomicU64>) {
    let served = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&served);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind target");
    let port = listener.local_addr().expect("addr").port();
    runtime.spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
                    .await;
                counter.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    (port, served)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// utime + stime of `pid`, in seconds.
#[expect(clippy::cast_precision_loss, reason = "clock ticks per second are small")]
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    // SAFETY: sysconf has no preconditions; _SC_CLK_TCK is a valid name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks / if hz > 0 { hz as f64 } else { 100.0 }
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn report_bytes(bin: &Path, socket: &Path) -> (u64, u64) {
    let out = Command::new(bin.join("qdnsctl"))
        .arg("--socket")
        .arg(socket)
        .args(["--json", "status"])
        .output()
        .expect("qdnsctl");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (
        status["checkers"]["report_bytes"].as_u64().unwrap_or(0),
        status["checkers"]["reports_accepted"].as_u64().unwrap_or(0),
    )
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[expect(clippy::cast_precision_loss, reason = "display of small counts")]
fn main() {
    let bin = build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (port, served) = target(&runtime);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::create_dir(d.join("zones")).expect("mkdir");
    let mut zone = String::from("[zone]\norigin = \"chk.example.\"\nttl = 60\n[zone.soa]\nmname = \"ns.chk.example.\"\nrname = \"h.chk.example.\"\nserial = 1\nrefresh = 1\nretry = 1\nexpire = 1\nminimum = 5\n[zone.ns]\nnames = [\"ns.chk.example.\"]\n");
    for i in 0..CHECKS {
        let _ = writeln!(zone, "[[health_check]]\nid = \"c{i}\"\ntype = \"http\"\nip = \"127.0.0.1\"\nport = {port}\npath = \"/c{i}\"\ninterval = 10\nsearch_string = \"OK\"");
    }
    std::fs::write(d.join("zones/chk.toml"), zone).expect("zone");
    let key = "c2VjcmV0LWtleS1mb3ItdGhlLWJlbmNobWFyay0wMDE=";
    qdns_testkit::write_secret(
        &d.join("keys.toml"),
        format!("[[checker]]\nid = \"bench\"\nregion = \"local\"\nkey = \"{key}\"\n"),
    );
    qdns_testkit::write_secret(&d.join("bench.key"), key);
    let listen = free_port();
    let location = Kill(
        Command::new(bin.join("qdns-control"))
            .arg("--zones")
            .arg(d.join("zones"))
            .arg("--socket")
            .arg(d.join("c.sock"))
            .arg("--state-dir")
            .arg(d.join("cs"))
            .arg("--edge-socket")
            .arg(d.join("e.sock"))
            .args([
                "--location",
                "bench",
                "--no-embedded-checker",
                "--checker-listen",
                &format!("127.0.0.1:{listen}"),
                "--checker-keys",
            ])
            .arg(d.join("keys.toml"))
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .expect("location"),
    );
    std::thread::sleep(Duration::from_secs(3));
    let checker = Kill(
        Command::new(bin.join("qdns-control"))
            .args(["checker", "--id", "bench", "--region", "local", "--zones"])
            .arg(d.join("zones"))
            .arg("--key-file")
            .arg(d.join("bench.key"))
            .args(["--report-to", &format!("bench=127.0.0.1:{listen}")])
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .expect("checker"),
    );
    let pid = checker.0.id();
    std::thread::sleep(WARMUP);
    let (cpu0, served0, (bytes0, reports0), t0) = (
        cpu_seconds(pid),
        served.load(Ordering::Relaxed),
        report_bytes(&bin, &d.join("c.sock")),
        Instant::now(),
    );
    let mut peak_rss = 0.0f64;
    while t0.elapsed() < WINDOW {
        std::thread::sleep(Duration::from_secs(1));
        peak_rss = peak_rss.max(rss_mib(pid));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let probes = served.load(Ordering::Relaxed) - served0;
    let (bytes1, reports1) = report_bytes(&bin, &d.join("c.sock"));
    println!("checkers: {CHECKS} HTTP checks, interval 10 s, one checker, one location; window {elapsed:.1} s after {} s warm-up", WARMUP.as_secs());
    println!("checkers/probes_per_second: {:.0}", probes as f64 / elapsed);
    println!("checkers/cpu_share_of_one_core: {:.1} %", cpu / elapsed * 100.0);
    println!("checkers/rss_peak: {peak_rss:.1} MiB");
    println!(
        "checkers/report_bandwidth_per_location: {:.1} KiB/s ({:.1} reports/s)",
        (bytes1 - bytes0) as f64 / elapsed / 1024.0,
        (reports1 - reports0) as f64 / elapsed
    );
    drop(checker);
    drop(location);
}
