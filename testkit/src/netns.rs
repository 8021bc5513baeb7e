//! Network namespaces joined by a veth pair, for the tests that put the edge (with
//! `--xdp`, or announced by BGP) on one end and real clients or a router on the other. Everything a test creates here is
//! removed when its [`Pair`] drops.
#![allow(
    clippy::must_use_candidate,
    reason = "run() is called for its effect as often as for its output"
)]

use std::{os::fd::AsRawFd, process::Command};

pub use crate::{is_root, require_root};

/// Runs `args`, asserts it succeeded, and returns its standard output.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A single-queue veth pair from namespace `a` (interface `a.1`, `10.NET.0.1/24` and
/// `fd00:NET::1/64`) to namespace `b` (`.2`, `::2`), GRO on at both ends (what a
/// veth end needs to take frames an XDP program sends back with `XDP_TX`). It goes
/// when either namespace is deleted.
pub fn veth(a: (&str, &str), b: (&str, &str), net: &str) {
    let ((a_ns, a_if), (b_ns, b_if)) = (a, b);
    run(&[
        "ip",
        "link",
        "add",
        a_if,
        "numtxqueues",
        "1",
        "numrxqueues",
        "1",
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "numtxqueues",
        "1",
        "numrxqueues",
        "1",
    ]);
    run(&["ip", "link", "set", a_if, "netns", a_ns]);
    run(&["ip", "link", "set", b_if, "netns", b_ns]);
    for (ns, dev, host) in [(a_ns, a_if, "1"), (b_ns, b_if, "2")] {
        let v4 = format!("10.{net}.0.{host}/24");
        let v6 = format!("fd00:{net}::{host}/64");
        run(&["ip", "-n", ns, "addr", "add", &v4, "dev", dev]);
        run(&["ip", "-n", ns, "addr", "add", &v6, "dev", dev, "nodad"]);
        run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        run(&["ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on"]);
    }
}

/// Two namespaces joined by a veth pair; removed on drop (the pair goes with them).
pub struct Pair {
    /// The server's namespace.
    pub server: String,
    /// The client's namespace.
    pub client: String,
    /// The server end of the pair.
    pub server_if: String,
    /// The client end.
    pub client_if: String,
}

impl Pair {
    /// `tag` keeps the names of tests running at once apart; the link is on 10.77.0.0/24
    /// and `fd00:77::/64` (each pair in namespaces of its own, so pairs never clash).
    pub fn new(tag: char) -> Pair {
        Pair::on_net(tag, "77")
    }

    /// [`Pair::new`] on `10.NET.0.0/24` and `fd00:NET::/64`.
    pub fn on_net(tag: char, net: &str) -> Pair {
        let id = std::process::id() % 100_000;
        let pair = Pair {
            server: format!("qdns-vs{tag}-{id}"),
            client: format!("qdns-vc{tag}-{id}"),
            server_if: format!("qv{tag}s{id}"),
            client_if: format!("qv{tag}c{id}"),
        };
        run(&["ip", "netns", "add", &pair.server]);
        run(&["ip", "netns", "add", &pair.client]);
        pair.link(&pair.server_if, &pair.client_if, net);
        run(&["ip", "-n", &pair.server, "link", "set", "lo", "up"]);
        run(&["ip", "-n", &pair.client, "link", "set", "lo", "up"]);
        pair
    }

    /// A single-queue veth pair between the two namespaces, GRO on at both ends, with
    /// `10.NET.0.1/24` and `fd00:NET::1/64` on the server end (`.2` and `::2` on the
    /// client), `NET` being `net`.
    pub fn link(&self, server_if: &str, client_if: &str, net: &str) {
        veth((&self.server, server_if), (&self.client, client_if), net);
    }

    /// The text of the edge's `/metrics` at `addr` in the server's namespace.
    pub fn server_metrics(&self, addr: &str) -> String {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.server,
            "curl",
            "-s",
            &format!("http://{addr}/metrics"),
        ])
    }

    /// Runs `args` in the client's namespace (see [`run`]).
    pub fn in_client(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.client];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs `args` in the server's namespace (see [`run`]).
    pub fn in_server(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.server];
        full.extend_from_slice(args);
        run(&full)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.server]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.client]).status();
    }
}

/// One network namespace with its loopback up, deleted on drop.
pub struct Netns(pub String);

impl Netns {
    /// `{prefix}-{pid}`, created with `lo` up.
    pub fn new(prefix: &str) -> Netns {
        let ns = Netns(format!("{prefix}-{}", std::process::id()));
        run(&["ip", "netns", "add", &ns.0]);
        run(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Runs `f` on a thread inside the namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        std::thread::spawn(move || {
            enter(&path);
            f()
        })
        .join()
        .unwrap()
    }

    /// Where `ip netns` keeps it (what [`enter`] takes).
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.0)
    }
}

/// Moves the calling thread into the namespace at `path` ([`Netns::path`]); the sockets
/// it opens from then on are that namespace's. For a long-lived thread of a test (one
/// that only runs a closure uses [`Netns::run`]).
pub fn enter(path: &str) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // SAFETY: changes this thread's namespace only, to one we hold open.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}");
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
