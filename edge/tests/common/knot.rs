//! knotd (Debian `knot`, installed by scripts/setup-peers) on a free loopback port, for
//! the differential tests.
use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use qdns_testkit::fixtures::free_port;

/// A running knotd, stopped (by its PID) on drop.
pub struct Knot {
    child: Child,
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
}

impl Knot {
    /// Starts knotd in `dir` with `server` lines added to its `server:` section and
    /// `rest` (module and zone sections) after the database and log sections; returns
    /// once `ready(addr)` (checked every 100 ms, for 20 s).
    pub fn start(dir: &Path, server: &str, rest: &str, ready: impl Fn(SocketAddr) -> bool) -> Knot {
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "server:\n    listen: 127.0.0.1@{port}\n    rundir: {d}\n    udp-workers: 1\n    tcp-workers: 1\n    \
             background-workers: 1\n{server}\
             database:\n    storage: {d}/db\nlog:\n  - target: stderr\n    any: warning\n{rest}"
        );
        std::fs::write(dir.join("knot.conf"), conf).unwrap();
        let child = Command::new("knotd")
            .arg("-c")
            .arg(dir.join("knot.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("knotd (Debian package knot, installed by scripts/setup-peers) must be on PATH");
        let mut knot = Knot {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if ready(knot.addr) {
                return knot;
            }
            assert!(Instant::now() < deadline, "knotd was not ready within 20 s");
            if let Ok(Some(status)) = knot.child.try_wait() {
                panic!("knotd exited ({status}) before it was ready");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
