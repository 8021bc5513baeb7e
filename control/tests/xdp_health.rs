//! A health change decided in control reaches the XDP program's answers (needs root, as
//! CI has): control with the example zones, an edge following it inside a network
//! namespace this test creates, with the XDP program on that namespace's loopback;
//! queries from a thread inside the namespace. An override flips the failover set's
//! primary; the answer the program sends follows, and its counters show it answered.
mod common;

use std::{os::fd::AsRawFd, process::Command, time::Duration};

use common::{ask, values, Location};
use hickory_proto::rr::RecordType;
use qdns_testkit::require_root;

/// A network namespace with loopback up, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let ns = Netns(format!("qdns-ctl-xdp-{}", std::process::id()));
        for args in [
            vec!["netns", "add", &ns.0],
            vec!["-n", &ns.0, "link", "set", "lo", "up"],
        ] {
            assert!(
                Command::new("ip").args(&args).status().unwrap().success(),
                "ip {args:?}"
            );
        }
        ns
    }

    /// Runs `f` on a thread inside the namespace.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: changes this thread's namespace only, to one we hold open.
            assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ns_values(dns: std::net::SocketAddr) -> Vec<String> {
    values(&ask(dns, "api.shop.example.", RecordType::A, Duration::from_secs(2), 3).expect("an answer"))
}

#[test]
fn an_override_in_control_changes_the_xdp_answer() {
    require_root("network namespaces, XDP");
    let ns = Netns::new();
    let mut loc = Location::control_only();
    loc.start_edge_with(
        &["ip", "netns", "exec", &ns.0],
        &["--xdp", "lo", "--xdp-mode", "generic"],
    );
    let edge = loc.edge.as_ref().unwrap();
    edge.wait_for("snapshot applied");
    // The table watcher installs the applied snapshot right after (a query before that
    // goes to user space, which is correct but would not show here).
    edge.wait_for("XDP tables installed");
    let dns = loc.dns.unwrap();
    assert_eq!(ns.run(move || ns_values(dns)), ["192.0.2.20"], "primary while healthy");

    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    loc.wait_edges_current();
    // The edge's table watcher polls every 2 ms; allow it a moment.
    let flipped = ns.run(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let got = ns_values(dns);
            if got == ["198.51.100.20"] || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    assert_eq!(
        flipped,
        ["198.51.100.20"],
        "secondary once control marks the primary down"
    );

    loc.ctl_json(&["override", "clear", "api-1"]);
    loc.wait_edges_current();
    let back = ns.run(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let got = ns_values(dns);
            if got == ["192.0.2.20"] || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    assert_eq!(back, ["192.0.2.20"], "primary again after the override is cleared");

    // The edge reports its XDP counters to control every 2 s: `qdnsctl status` shows them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = loc.ctl_json(&["status"]);
        let answered = status["edges"][0]["xdp"]["counters"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|pair| pair[0] == "answered_failover")
            .and_then(|pair| pair[1].as_u64())
            .unwrap_or(0);
        if answered >= 3 {
            assert_eq!(status["edges"][0]["xdp"]["interfaces"][0], "lo", "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no XDP report in status: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = String::from_utf8(loc.ctl(&["status"]).stdout).unwrap();
    assert!(text.contains("lo gen "), "{text}");

    let edge = loc.edge.as_mut().unwrap();
    assert!(edge.term().success());
    let detach = edge.seen("detaching XDP");
    let failover: u64 = detach
        .split("(\"answered_failover\", ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(failover >= 3, "the XDP program gave the answers: {detach}");
}
