//! Helpers for the edge's integration tests: start the real `qdns-edge` binary on
//! loopback, and talk to it as a DNS client (`qdns_testkit::dns`).
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod frames;
pub mod knot;
pub mod netns;

use std::{net::SocketAddr, path::Path, process::Command, time::Duration};

use qdns_testkit::daemon::Daemon;

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::dns::{
    ask, name_of, parse_response, query, read_framed, tcp_raw, udp_raw, write_framed, Ask, Via,
};

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::fixtures::{copy_examples, example_zones};

/// A running `qdns-edge` (a [`Daemon`]: its log collected, killed by its PID on drop).
pub struct Edge {
    daemon: Daemon,
    /// IPv4 service address.
    pub v4: SocketAddr,
    /// IPv6 service address.
    pub v6: SocketAddr,
}

impl Edge {
    /// True when the edge has logged a line containing `needle`.
    pub fn history_has(&self, needle: &str) -> bool {
        self.daemon.history_has(needle)
    }

    /// Starts the edge on ephemeral loopback ports with the example zones.
    pub fn start() -> Edge {
        Edge::start_with(&example_zones(), &[])
    }

    /// Starts the edge on ephemeral loopback ports serving `zones`, with `extra` flags.
    pub fn start_with(zones: &Path, extra: &[&str]) -> Edge {
        Edge::start_in(&[], zones, extra)
    }

    /// Like [`Edge::start_with`], run through `prefix` (e.g. `ip netns exec NS`, which
    /// execs the edge, so the PID stays the edge's).
    pub fn start_in(prefix: &[&str], zones: &Path, extra: &[&str]) -> Edge {
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_qdns-edge"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_qdns-edge")),
        };
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--listen",
                "[::1]:0",
                "--workers",
                "2",
                "--zones",
            ])
            .arg(zones)
            .args(extra);
        let daemon = Daemon::spawn("qdns-edge", command);
        // One `listening udp=ADDR …` line per listener, in --listen order.
        let [v4, v6] = [(); 2].map(|()| {
            let line = daemon.wait_for_within("udp=", Duration::from_secs(30));
            let addr = line
                .split("udp=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next());
            addr.and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no address in {line:?}"))
        });
        Edge { daemon, v4, v6 }
    }

    /// Both service addresses.
    pub fn addrs(&self) -> [SocketAddr; 2] {
        [self.v4, self.v6]
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// Sends a signal to the edge.
    pub fn signal(&self, signal: &str) {
        self.daemon.signal(signal);
    }

    /// Waits for a log line containing `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        self.daemon.wait_for_within(needle, timeout)
    }

    /// Waits until a log line containing each of `needles` was seen, in any order.
    pub fn wait_for_logs(&self, needles: &[&str], timeout: Duration) {
        self.daemon.wait_for_all(needles, timeout);
    }

    /// Stops the edge with SIGTERM; returns its exit status and the log lines it wrote
    /// that no earlier `wait_for_log` consumed.
    pub fn stop_with_log(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.daemon.stop_with_log()
    }

    /// Stops the edge with SIGTERM and returns its exit status.
    pub fn stop(self) -> std::process::ExitStatus {
        self.stop_with_log().0
    }

    /// Waits for the edge to exit on its own (after handing over); its status.
    pub fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        self.daemon.wait_exit(timeout)
    }
}

/// Every (address, transport) pair of an edge.
pub fn every_path(edge: &Edge) -> Vec<(SocketAddr, Via)> {
    let mut out = Vec::new();
    for addr in edge.addrs() {
        out.push((addr, Via::Udp));
        out.push((addr, Via::Tcp));
    }
    out
}

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::Rng;

/// The COOKIE option's data in a response (code 10, length 24: the client cookie, then
/// the server cookie, in the OPT record that ends it).
pub fn response_cookie(response: &[u8]) -> Option<Vec<u8>> {
    let at = response.windows(4).rposition(|w| w == [0, 10, 0, 24])?;
    Some(response.get(at + 4..at + 28)?.to_vec())
}
