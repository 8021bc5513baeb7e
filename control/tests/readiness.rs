//! systemd readiness (`Type=notify`): each daemon sends `READY=1` to `$NOTIFY_SOCKET`
//! once it serves — control when its listeners are bound and its zones compiled, a
//! standalone edge when its zones are loaded, an edge following control only once it
//! has a snapshot to answer from (before that it refuses every query: not ready).
mod common;

use std::{
    os::unix::net::UnixDatagram,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::{edge_bin, Proc};

/// A datagram socket standing in for systemd's notification socket.
struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    fn bind(dir: &Path, name: &str) -> Notify {
        let path = dir.join(name);
        Notify {
            socket: UnixDatagram::bind(&path).unwrap(),
            path,
        }
    }

    /// The next notification within `wait`, if one comes.
    fn next(&self, wait: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 512];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

fn zones(dir: &Path) -> PathBuf {
    let zones = dir.join("zones");
    std::fs::create_dir(&zones).unwrap();
    qdns_testkit::fixtures::copy_examples(&zones);
    zones
}

#[test]
fn an_edge_is_ready_only_once_it_serves_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(dir.path());
    let edge_socket = dir.path().join("edge.sock");

    // Following a control that is not there yet, with nothing persisted: not ready.
    let edge_notify = Notify::bind(dir.path(), "edge-notify");
    let mut edge = Command::new(edge_bin());
    edge.args(["--listen", "127.0.0.1:0", "--workers", "1", "--control"])
        .arg(&edge_socket)
        .arg("--state-dir")
        .arg(dir.path().join("edge-state"))
        .env("NOTIFY_SOCKET", &edge_notify.path);
    let edge = Proc::spawn("edge", edge);
    edge.wait_for("listening");
    assert_eq!(
        edge_notify.next(Duration::from_secs(2)),
        None,
        "ready without a snapshot"
    );

    let control_notify = Notify::bind(dir.path(), "control-notify");
    let mut control = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    control
        .arg("--zones")
        .arg(&zones)
        .arg("--socket")
        .arg(dir.path().join("control.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("control-state"))
        .arg("--edge-socket")
        .arg(&edge_socket)
        .arg("--no-embedded-checker")
        .env("NOTIFY_SOCKET", &control_notify.path);
    let _control = Proc::spawn("control", control);
    let ready = control_notify.next(Duration::from_secs(30)).expect("control notifies");
    assert!(
        ready.contains("READY=1") && ready.contains("STATUS=location ready"),
        "{ready:?}"
    );

    // Control's first snapshot arrives: now the edge is ready.
    let ready = edge_notify
        .next(Duration::from_secs(30))
        .expect("the edge notifies once it has a snapshot");
    assert!(
        ready.contains("READY=1") && ready.contains("STATUS=serving snapshot"),
        "{ready:?}"
    );
    edge.wait_for("snapshot applied");
}

#[test]
fn a_standalone_edge_is_ready_once_its_zones_load() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(dir.path());
    let notify = Notify::bind(dir.path(), "notify");
    let mut edge = Command::new(edge_bin());
    edge.args(["--listen", "127.0.0.1:0", "--workers", "1", "--zones"])
        .arg(&zones)
        .env("NOTIFY_SOCKET", &notify.path);
    let _edge = Proc::spawn("edge", edge);
    let ready = notify.next(Duration::from_secs(30)).expect("the edge notifies");
    assert_eq!(ready, "READY=1\nSTATUS=serving snapshot 1\n");
}

#[test]
fn check_config_names_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(dir.path());
    let good = dir.path().join("control.toml");
    std::fs::write(
        &good,
        format!(
            "zones = {:?}\nsocket = {:?}\nedge_socket = {:?}\nstate_dir = {:?}\n",
            zones,
            dir.path().join("c.sock"),
            dir.path().join("e.sock"),
            dir.path().join("state")
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .args(["--check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("configuration ok; 3 zones"), "{text}");
    assert!(!dir.path().join("c.sock").exists(), "a check binds nothing");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "zones = 7\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .args(["--check-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("bad.toml: line 1 (`zones = 7`)"), "{text}");

    // A refresh window as long as the signatures' validity would sign without end.
    let lifetimes = dir.path().join("lifetimes.toml");
    let text = std::fs::read_to_string(&good).unwrap();
    std::fs::write(&lifetimes, text + "dnssec_validity = 3600\ndnssec_refresh = 3600\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .args(["--check-config", "--config"])
        .arg(&lifetimes)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        text.contains("--dnssec-refresh: 3600 s is outside 60..=3590 s (the validity, 3600 s, less 10 s)"),
        "{text}"
    );

    // A zone that does not load fails the edge's check too, naming the file.
    std::fs::write(
        zones.join("broken.toml"),
        "[zone]\norigin = \"broken.example.\"\nttl = \"x\"\n",
    )
    .unwrap();
    let out = Command::new(edge_bin())
        .args(["--check-config", "--listen", "127.0.0.1:0", "--zones"])
        .arg(&zones)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a broken zone passed the check");
    assert!(text.contains("broken.toml"), "{text}");
}
