//! Loss-free edge replacement (`--takeover`): a paced UDP load of 20,000 queries per
//! second runs while a new qdns-edge takes over from the running one, five times in a
//! row; every query sent must be answered, each answer whole and from the same zone
//! data (the zones do not change here, so any answer that differs is a broken
//! handover). Once in user space, once with the XDP program on the loopback of a
//! network namespace, where each new edge must update the old edge's XDP link to its
//! own program (`bpf_link_update` through a pin in a bpffs the test mounts).
mod common;

use std::{
    net::{SocketAddr, UdpSocket},
    os::fd::AsRawFd,
    path::Path,
    process::Command,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{example_zones, netns::require_root, Edge};
use qdns_testkit::netns::Netns;

/// Queries per second offered, and the most the load may send (bounded).
const RATE: u64 = 20_000;
const MAX_QUERIES: usize = 600_000;
/// Replacements in a row.
const REPLACEMENTS: usize = 5;

/// A paced load of `q{seq}.example.com. A` queries (NXDOMAIN, answered by both paths)
/// and a receiver marking each sequence number answered.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    answered: Arc<Vec<AtomicBool>>,
    bad: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Starts the load towards `target` (from the calling thread's network namespace).
    fn start(target: SocketAddr) -> Load {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Root (the test requires it) may go past rmem_max: no loss in our own buffer.
        let size: libc::c_int = 32 << 20;
        // SAFETY: a plain setsockopt on a socket we own, with an int of the right size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::from_ref(&size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        socket.connect(target).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            sent: Arc::new(AtomicU64::new(0)),
            answered: Arc::new((0..MAX_QUERIES).map(|_| AtomicBool::new(false)).collect()),
            bad: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
        };
        let receiver = {
            let socket = socket.try_clone().unwrap();
            let (stop, answered, bad) = (
                Arc::clone(&load.stop),
                Arc::clone(&load.answered),
                Arc::clone(&load.bad),
            );
            std::thread::spawn(move || {
                let mut buf = [0u8; 1500];
                let mut quiet_since: Option<Instant> = None;
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) => {
                            quiet_since = None;
                            match check(&buf[..n]) {
                                Some(seq) if seq < MAX_QUERIES => answered[seq].store(true, Ordering::Relaxed),
                                _ => {
                                    bad.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        Err(_) => {
                            if stop.load(Ordering::Relaxed) {
                                let since = *quiet_since.get_or_insert_with(Instant::now);
                                if since.elapsed() > Duration::from_secs(1) {
                                    return;
                                }
                            }
                        }
                    }
                }
            })
        };
        let sender = {
            let (stop, sent) = (Arc::clone(&load.stop), Arc::clone(&load.sent));
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut seq = 0usize;
                while !stop.load(Ordering::Relaxed) && seq < MAX_QUERIES {
                    // Paced by the clock: as many as the rate allows by now.
                    let due = (start.elapsed().as_micros() as u64 * RATE / 1_000_000) as usize;
                    while seq < due.min(MAX_QUERIES) {
                        if socket.send(&query(seq)).is_ok() {
                            seq += 1;
                            sent.store(seq as u64, Ordering::Relaxed);
                        } else {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        };
        let mut load = load;
        load.threads = vec![sender, receiver];
        load
    }

    /// Stops sending, waits for the last answers; (sent, sequence numbers unanswered,
    /// bad answers).
    fn finish(mut self) -> (usize, Vec<usize>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            thread.join().unwrap();
        }
        let sent = self.sent.load(Ordering::Relaxed) as usize;
        let lost = (0..sent)
            .filter(|&i| !self.answered[i].load(Ordering::Relaxed))
            .collect();
        (sent, lost, self.bad.load(Ordering::Relaxed))
    }
}

/// The two load tests run one after the other: each offers 20,000 queries a second to
/// a debug build on a shared machine, and zero loss is what they assert.
static ONE_LOAD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `q{seq}.example.com. A`, id `seq`.
fn query(seq: usize) -> Vec<u8> {
    let label = format!("q{seq}");
    let mut msg = vec![(seq >> 8) as u8, seq as u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    msg.push(label.len() as u8);
    msg.extend(label.as_bytes());
    msg.extend(b"\x07example\x03com\x00\x00\x01\x00\x01");
    msg
}

/// The sequence number of a whole, right answer: QR and AA set, NXDOMAIN, the question
/// echoed, no answer records, one SOA in authority (serial 2026120101 of the example
/// zone, the same for every edge).
fn check(response: &[u8]) -> Option<usize> {
    let flags = u16::from_be_bytes([*response.get(2)?, *response.get(3)?]);
    let counts: Vec<u16> = (0..4)
        .map(|i| u16::from_be_bytes([response[4 + 2 * i], response[5 + 2 * i]]))
        .collect();
    if flags & 0x8000 == 0 || flags & 0x0400 == 0 || flags & 0x000f != 3 || counts != [1, 0, 1, 0] {
        return None;
    }
    let len = usize::from(*response.get(12)?);
    let label = std::str::from_utf8(response.get(13..13 + len)?).ok()?;
    let seq: usize = label.strip_prefix('q')?.parse().ok()?;
    if u16::from_be_bytes([response[0], response[1]]) != seq as u16 {
        return None;
    }
    // The SOA's serial sits 20 octets before the end (serial, refresh, retry, expire,
    // minimum).
    let serial = response.get(response.len() - 20..response.len() - 16)?;
    (serial == 2_026_120_101u32.to_be_bytes()).then_some(seq)
}

/// Replaces the running edge `REPLACEMENTS` times under load; returns the last one.
fn replace_under_load(first: Edge, target: SocketAddr, start_new: &dyn Fn() -> Edge, log: &str) -> Edge {
    let load = Load::start(target);
    std::thread::sleep(Duration::from_millis(500));
    let mut running = first;
    for round in 0..REPLACEMENTS {
        let started = Instant::now();
        let next = start_new();
        next.wait_for_log(log, Duration::from_secs(30));
        let status = running.wait_exit(Duration::from_secs(30));
        assert!(status.success(), "round {round}: the old edge exited with {status}");
        eprintln!("round {round}: taken over in {:?}", started.elapsed());
        running = next;
        std::thread::sleep(Duration::from_millis(300));
    }
    let (sent, lost, bad) = load.finish();
    eprintln!("{sent} queries sent, {} unanswered, {bad} bad answers", lost.len());
    assert!(sent as u64 > RATE * 2, "the load ran: {sent}");
    assert_eq!(bad, 0, "every answer whole and from the same zone data");
    assert!(
        lost.is_empty(),
        "{} of {sent} queries lost, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    running
}

#[test]
fn five_takeovers_under_load_lose_no_query() {
    let _one = ONE_LOAD_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("takeover.sock");
    let path = socket.to_str().unwrap().to_owned();
    let first = Edge::start_with(&example_zones(), &["--takeover-socket", &path]);
    first.wait_for_log("a new edge may take over here", Duration::from_secs(10));
    let target = first.v4;
    let start_new = || {
        let edge = Edge::start_with(&example_zones(), &["--takeover-socket", &path, "--takeover"]);
        assert_eq!(edge.v4, target, "the same sockets");
        edge
    };
    let last = replace_under_load(first, target, &start_new, "takeover complete");
    // The last edge can be taken over again, and still answers.
    last.wait_for_log("a new edge may take over here", Duration::from_secs(10));
    assert!(last.stop().success());
}

/// A process this test did not spawn (but caused), sent SIGTERM on drop.
struct StopPid(u32);

impl Drop for StopPid {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.to_string()]).status();
    }
}

/// SIGUSR2: the edge starts its own binary again with `--takeover`, which takes over
/// (its log goes to the same stderr) and answers on the same address once the old one
/// has exited.
#[test]
fn sigusr2_starts_a_new_edge_that_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("takeover.sock").to_str().unwrap().to_owned();
    let old = Edge::start_with(&example_zones(), &["--takeover-socket", &path]);
    old.wait_for_log("a new edge may take over here", Duration::from_secs(10));
    let target = old.v4;
    old.signal("USR2");
    let started = old.wait_for_log("SIGUSR2: started a new edge", Duration::from_secs(10));
    let pid: u32 = started
        .split("pid=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{started}"));
    // The new edge is not the test's child: stopped by its PID whatever happens.
    let new = StopPid(pid);
    old.wait_for_log("takeover complete", Duration::from_secs(30));
    assert!(old.wait_exit(Duration::from_secs(30)).success());
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    socket.send_to(&query(7), target).unwrap();
    let mut buf = [0u8; 1500];
    let n = socket.recv(&mut buf).expect("the new edge answers");
    assert_eq!(check(&buf[..n]), Some(7));
    assert!(Path::new(&format!("/proc/{pid}")).exists(), "the new edge runs");
    drop(new);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/status")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("State:\tZ")
    {
        assert!(Instant::now() < deadline, "the new edge did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A bpffs mounted on a temporary directory for the test (unmounted on drop).
struct Bpffs(tempfile::TempDir);

impl Bpffs {
    fn mount() -> Bpffs {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t bpf");
        Bpffs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// The id of the XDP program on `lo` in `ns`.
fn xdp_prog_id(ns: &str) -> Option<u32> {
    let out = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "lo"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("prog/xdp")
        .nth(1)?
        .split_whitespace()
        .skip_while(|w| *w != "id")
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn five_takeovers_with_xdp_update_the_link_and_lose_no_query() {
    require_root("network namespaces, XDP, bpffs");
    let _one = ONE_LOAD_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let netns = std::sync::Arc::new(Netns::new("qdns-takeover"));
    let ns = netns.name().to_owned();
    let bpffs = Bpffs::mount();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("takeover.sock").to_str().unwrap().to_owned();
    let prefix = ["ip", "netns", "exec", ns.as_str()];
    let xdp = [
        "--xdp",
        "lo",
        "--xdp-mode",
        "generic",
        "--bpffs",
        bpffs.path().to_str().unwrap(),
        "--takeover-socket",
        &path,
    ];
    let first = Edge::start_in(&prefix, &example_zones(), &xdp);
    first.wait_for_log("a new edge may take over here", Duration::from_secs(10));
    let target = first.v4;
    let first_prog = xdp_prog_id(&ns).expect("XDP attached to lo");
    let ids = std::sync::Mutex::new(vec![first_prog]);
    let start_new = || {
        let mut args = xdp.to_vec();
        args.push("--takeover");
        let edge = Edge::start_in(&prefix, &example_zones(), &args);
        assert_eq!(edge.v4, target, "the same sockets");
        edge
    };
    let ns_load = std::sync::Arc::clone(&netns);
    // The load runs inside the namespace (its loopback carries the XDP program).
    let (load_tx, load_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let loader = std::thread::spawn(move || {
        ns_load.run(move || {
            let load = Load::start(target);
            let _ = load_rx.recv();
            let _ = done_tx.send(load.finish());
        });
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut running = first;
    for round in 0..REPLACEMENTS {
        let next = start_new();
        next.wait_for_log("XDP link taken over", Duration::from_secs(30));
        next.wait_for_log("takeover complete", Duration::from_secs(30));
        assert!(running.wait_exit(Duration::from_secs(30)).success(), "round {round}");
        let id = xdp_prog_id(&ns).expect("XDP still attached");
        ids.lock().unwrap().push(id);
        running = next;
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = load_tx.send(());
    let (sent, lost, bad) = done_rx.recv().unwrap();
    loader.join().unwrap();
    eprintln!(
        "{sent} queries sent, {} unanswered, {bad} bad answers; programs {ids:?}",
        lost.len()
    );
    let ids = ids.into_inner().unwrap();
    let mut distinct = ids.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        REPLACEMENTS + 1,
        "each edge's own program answered in turn: {ids:?}"
    );
    assert_eq!(bad, 0);
    assert!(
        lost.is_empty(),
        "{} of {sent} lost, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    // The last edge's program answered (its counters at stop), and it detaches on stop.
    let (status, lines) = running.stop_with_log();
    assert!(status.success());
    let detach = lines
        .iter()
        .find(|l| l.contains("detaching XDP"))
        .cloned()
        .unwrap_or_default();
    let answered = qdns_testkit::fixtures::logged_count(&detach, "answered_nxdomain");
    assert!(answered > 1000, "the last program answered in XDP: {detach}");
    assert_eq!(xdp_prog_id(&ns), None, "detached when the last edge stopped");
}
