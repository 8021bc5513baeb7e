//! The tls:// control↔edge link (issue 14): real `qdns-control`, real `qdns-edge`s and
//! `qdnsctl pki` certificates. An edge of the location CA follows control; an impostor
//! edge (another CA), an edge whose hello names another edge, and a raw TCP peer get
//! nothing and are counted; a certificate re-issued while control runs is used for the
//! next connection without a restart; an impostor control on the real address (another
//! CA) is refused by the edge, which keeps answering from its last snapshot and persists
//! nothing of it.
mod common;

use std::{
    fs,
    io::{Read, Write},
    net::SocketAddr,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{ask, edge_bin, free_port, sample, scrape, values, Proc};
use hickory_proto::rr::RecordType;
use qdns_testkit::fixtures::ZONE_HEAD;

/// The test zone's tables after [`ZONE_HEAD`]; `PRIMARY` is replaced.
const ZONE_BODY: &str = r#"
[[health_check]]
id = "p"
type = "external"
[[rrset]]
name = "f"
type = "A"
policy = "failover"
members = [
  { id = "p", role = "primary", values = ["PRIMARY"], health_check = "p" },
  { id = "s", role = "secondary", values = ["192.0.2.2"] },
]
"#;

/// The test zone, `PRIMARY` not yet replaced.
fn zone() -> String {
    format!("{ZONE_HEAD}{ZONE_BODY}")
}

fn pki(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("pki")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qdnsctl pki {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A CA in `dir` with control's certificate (for 127.0.0.1 and `sans`) and one per edge.
fn ca(dir: &Path, sans: &[&str], edges: &[&str]) {
    let dir = dir.to_str().unwrap();
    pki(&["init", "--dir", dir, "--days", "2"]);
    let mut args = vec!["issue", "control", "--control", "--dir", dir, "--san", "127.0.0.1"];
    for san in sans {
        args.extend(["--san", san]);
    }
    pki(&args);
    for edge in edges {
        pki(&["issue", edge, "--dir", dir]);
    }
}

/// Control on `tls://127.0.0.1:PORT` with `pki`'s certificates, serving `zones`.
fn control(root: &Path, name: &str, zones: &Path, pki: &Path, port: u16, metrics: u16) -> Proc {
    control_with(root, name, zones, pki, port, metrics, &[])
}

/// [`control`] with `extra` arguments.
fn control_with(root: &Path, name: &str, zones: &Path, pki: &Path, port: u16, metrics: u16, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    cmd.arg("--zones").arg(zones);
    cmd.arg("--socket").arg(root.join(format!("{name}.sock")));
    cmd.arg("--state-dir").arg(root.join(format!("{name}-state")));
    cmd.arg("--edge-socket").arg(format!("tls://127.0.0.1:{port}"));
    cmd.arg("--edge-tls-cert").arg(pki.join("control.pem"));
    cmd.arg("--edge-tls-key").arg(pki.join("control.key"));
    cmd.arg("--edge-tls-ca").arg(pki.join("ca.pem"));
    cmd.args(["--metrics", &format!("127.0.0.1:{metrics}"), "--no-embedded-checker"]);
    cmd.args(extra);
    let proc = Proc::spawn("control", cmd);
    proc.wait_for("control socket ready");
    proc
}

/// An edge named `id` presenting `cert` of `pki`, following `tls://127.0.0.1:PORT`, its
/// state in `root`/`state`.
fn edge(root: &Path, state: &str, id: &str, cert: &str, pki: &Path, port: u16, extra: &[&str]) -> (Proc, SocketAddr) {
    let mut cmd = Command::new(edge_bin());
    cmd.args(["--listen", "127.0.0.1:0", "--workers", "1", "--edge-id", id]);
    cmd.args(["--control", &format!("tls://127.0.0.1:{port}")]);
    cmd.arg("--control-tls-cert").arg(pki.join(format!("{cert}.pem")));
    cmd.arg("--control-tls-key").arg(pki.join(format!("{cert}.key")));
    cmd.arg("--control-tls-ca").arg(pki.join("ca.pem"));
    cmd.arg("--state-dir").arg(root.join(state));
    cmd.args(extra);
    let proc = Proc::spawn("edge", cmd);
    let line = proc.wait_for("listening");
    let addr = line.split("udp=").nth(1).unwrap().split_whitespace().next().unwrap();
    (proc, addr.parse().unwrap())
}

fn answers(addr: SocketAddr, expect: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = ask(addr, "f.t.example.", RecordType::A, Duration::from_secs(2), 3).map(|m| values(&m));
        if got.as_deref() == Some(&[expect.to_owned()][..]) {
            return;
        }
        assert!(Instant::now() < deadline, "{addr}: wanted {expect}, got {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn refused(metrics: u16, reason: &str) -> u64 {
    let series = format!("qdns_edge_links_refused_total{{reason=\"{reason}\"}}");
    sample(&scrape(&format!("127.0.0.1:{metrics}")), &series).unwrap_or(0)
}

fn wait_refused(metrics: u16, reason: &str, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while refused(metrics, reason) < at_least {
        assert!(
            Instant::now() < deadline,
            "edge_links_refused{{reason={reason}}} stayed below {at_least}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn edge_names(root: &Path, name: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("--socket")
        .arg(root.join(format!("{name}.sock")))
        .args(["--json", "status"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> = status["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn ctl(root: &Path, name: &str, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("--socket")
        .arg(root.join(format!("{name}.sock")))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn tls_link_serves_its_edges_and_refuses_impostors_on_both_sides() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let (ours, theirs) = (root.join("pki"), root.join("evil-pki"));
    ca(&ours, &[], &["edge-1", "edge-2"]);
    ca(&theirs, &[], &["edge-1"]);
    for (dir, primary) in [("zones", "192.0.2.1"), ("evil-zones", "198.51.100.66")] {
        fs::create_dir(root.join(dir)).unwrap();
        fs::write(root.join(dir).join("t.toml"), zone().replace("PRIMARY", primary)).unwrap();
    }
    let (port, metrics) = (free_port(), free_port());
    let mut real = control(root, "control", &root.join("zones"), &ours, port, metrics);
    real.seen("serving edges");

    // The location's own edge follows.
    let (edge1, dns1) = edge(root, "edge-1-state", "edge-1", "edge-1", &ours, port, &[]);
    edge1.wait_for("snapshot applied");
    answers(dns1, "192.0.2.1");

    // An edge of another CA (claiming a real edge's name) is refused in the handshake.
    let (impostor, _) = edge(root, "impostor-state", "edge-1", "edge-1", &theirs, port, &[]);
    wait_refused(metrics, "tls", 1);
    impostor.seen("TLS with control failed");
    // A real certificate whose hello names another edge: refused before any snapshot.
    let (liar, _) = edge(root, "liar-state", "edge-9", "edge-2", &ours, port, &[]);
    wait_refused(metrics, "wrong_name", 1);
    // A raw TCP peer gets no zone data: only TLS, which it cannot complete.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    raw.write_all(b"\0\0\0\x10give me the zones").unwrap();
    let mut got = Vec::new();
    let _ = raw.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("t.example"),
        "plain text leaked: {got:?}"
    );
    assert!(got.len() < 64, "a raw peer got {} octets", got.len());
    assert_eq!(
        edge_names(root, "control"),
        ["edge-1"],
        "only the real edge is registered"
    );
    assert!(!impostor.history_has("snapshot applied") && !liar.history_has("snapshot applied"));
    drop((impostor, liar));

    // Rotation without downtime: edge-2 dials a name control's certificate lacks and is
    // refused; control's certificate is re-issued with that name while control runs; the
    // next attempt is served. edge-1 stays connected throughout and follows health.
    let (edge2, dns2) = edge(
        root,
        "edge-2-state",
        "edge-2",
        "edge-2",
        &ours,
        port,
        &["--control-tls-name", "control.t.example"],
    );
    edge2.wait_for("TLS with control failed");
    pki(&[
        "issue",
        "control",
        "--control",
        "--dir",
        ours.to_str().unwrap(),
        "--san",
        "127.0.0.1",
        "--san",
        "control.t.example",
    ]);
    edge2.wait_for("snapshot applied");
    ctl(root, "control", &["external", "p", "unhealthy"]);
    answers(dns1, "192.0.2.2");
    answers(dns2, "192.0.2.2");
    assert_eq!(edge_names(root, "control"), ["edge-1", "edge-2"]);
    real.seen("link certificates reloaded");

    // An impostor control on the real address: edge-1 refuses it, keeps answering from its
    // last snapshot and persists nothing of it.
    let state = root.join("edge-1-state");
    let persisted = |file: &str| fs::read(state.join(file)).unwrap_or_default();
    let (snapshot, health) = (persisted("snapshot.bin"), persisted("health.bin"));
    real.kill9();
    edge1.wait_for("serving the last snapshot");
    let evil_metrics = free_port();
    let evil = control(root, "evil", &root.join("evil-zones"), &theirs, port, evil_metrics);
    edge1.wait_for("invalid peer certificate");
    edge1.wait_for("invalid peer certificate"); // a second attempt, after a backoff
    answers(dns1, "192.0.2.2");
    assert_eq!(persisted("snapshot.bin"), snapshot, "nothing of the impostor persisted");
    assert_eq!(persisted("health.bin"), health);
    assert!(edge_names(root, "evil").is_empty(), "the impostor never served edge-1");
    drop(evil);

    // The real control back: edge-1 follows again.
    let _real = control(root, "control", &root.join("zones"), &ours, port, metrics);
    ctl(root, "control", &["external", "p", "healthy"]);
    answers(dns1, "192.0.2.1");
}

#[test]
fn tls_settings_are_checked_at_start() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    fs::create_dir(root.join("zones")).unwrap();
    fs::write(root.join("zones/t.toml"), zone().replace("PRIMARY", "192.0.2.1")).unwrap();
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let mut control = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    control
        .arg("--zones")
        .arg(root.join("zones"))
        .arg("--socket")
        .arg(root.join("c.sock"));
    control
        .arg("--state-dir")
        .arg(root.join("cs"))
        .args(["--edge-socket", "tls://127.0.0.1:1"]);
    assert!(run(&mut control).contains("tls:// needs --edge-tls-cert, --edge-tls-key and --edge-tls-ca"));
    control.arg("--edge-tls-cert").arg(root.join("missing.pem"));
    control.arg("--edge-tls-key").arg(root.join("missing.key"));
    control.arg("--edge-tls-ca").arg(root.join("missing-ca.pem"));
    let err = run(&mut control);
    assert!(err.contains("missing"), "{err}");
    let mut edge = Command::new(edge_bin());
    edge.args(["--listen", "127.0.0.1:0", "--control", "tls://127.0.0.1:1"])
        .arg("--state-dir")
        .arg(root.join("es"));
    assert!(run(&mut edge).contains("tls:// needs --control-tls-cert, --control-tls-key and --control-tls-ca"));
    let mut plain = Command::new(edge_bin());
    plain.args([
        "--listen",
        "127.0.0.1:0",
        "--control",
        "tcp://127.0.0.1:1",
        "--control-tls-ca",
        "x",
    ]);
    plain.arg("--state-dir").arg(root.join("es"));
    assert!(run(&mut plain).contains("apply to a tls:// --control"));
    // `qdnsctl pki` refuses to replace a CA.
    let dir = root.join("pki");
    pki(&["init", "--dir", dir.to_str().unwrap()]);
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .args(["pki", "init", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to replace a CA key"));
}

/// One edge name holds at most `MAX_PER_EDGE` (4) connections: a fifth naming it gets
/// no snapshot and is counted; another name still gets in.
#[test]
fn one_edge_name_holds_at_most_four_connections() {
    let mut location = common::Location::prepared();
    let metrics = free_port();
    location.start_control_with(&["--metrics", &format!("127.0.0.1:{metrics}")]);
    let hello = |name: &str| {
        qdns_link::protocol::encode(&qdns_link::protocol::ToControl::Hello {
            edge: name.to_owned(),
            serving: None,
        })
        .unwrap()
    };
    // Connects as `name`; true when a snapshot frame comes back.
    let connect = |name: &str| {
        let mut stream = std::os::unix::net::UnixStream::connect(location.edge_socket()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(&hello(name)).unwrap();
        let mut prefix = [0u8; 4];
        let got = stream.read_exact(&mut prefix).is_ok() && u32::from_be_bytes(prefix) > 100;
        (stream, got)
    };
    let held: Vec<_> = (0..4).map(|_| connect("edge-x")).collect();
    assert!(held.iter().all(|(_, got)| *got), "the first four get the snapshot");
    let (_fifth, got) = connect("edge-x");
    assert!(!got, "a fifth connection naming edge-x gets nothing");
    wait_refused(metrics, "per_edge", 1);
    let (_other, got) = connect("edge-y");
    assert!(got, "another edge still gets in");
}

/// Revocation (issue 28 §10): `qdnsctl pki revoke` writes the CRL control reads with
/// `--edge-tls-crl`; the revoked edge's live link is dropped within seconds and its
/// reconnections are refused in the handshake, while the other edge keeps its link.
#[test]
fn a_revoked_edge_is_dropped_at_once_and_refused_while_the_others_stay() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let dir = root.join("pki");
    ca(&dir, &[], &["edge-1", "edge-2", "retired"]);
    // Start with a list that revokes another certificate only.
    pki(&["revoke", "retired", "--dir", dir.to_str().unwrap()]);
    fs::create_dir(root.join("zones")).unwrap();
    fs::write(
        root.join("zones").join("t.toml"),
        zone().replace("PRIMARY", "192.0.2.1"),
    )
    .unwrap();
    let (port, metrics) = (free_port(), free_port());
    let crl = dir.join("crl.pem");
    let control = control_with(
        root,
        "control",
        &root.join("zones"),
        &dir,
        port,
        metrics,
        &["--edge-tls-crl", crl.to_str().unwrap()],
    );
    let (edge1, _) = edge(root, "edge-1-state", "edge-1", "edge-1", &dir, port, &[]);
    edge1.wait_for("snapshot applied");
    let (edge2, dns2) = edge(root, "edge-2-state", "edge-2", "edge-2", &dir, port, &[]);
    edge2.wait_for("snapshot applied");
    assert_eq!(edge_names(root, "control"), ["edge-1", "edge-2"]);
    let before = refused(metrics, "tls");

    let out = pki(&["revoke", "edge-1", "--dir", dir.to_str().unwrap()]);
    assert!(out.contains("crl.pem"), "{out}");
    control.wait_for("edge certificate revoked: link dropped");
    // edge-1 retries and is refused in the handshake; edge-2 stays linked and served.
    wait_refused(metrics, "tls", before + 1);
    assert_eq!(edge_names(root, "control"), ["edge-2"]);
    ctl(
        root,
        "control",
        &["override", "set", "p", "unhealthy", "--expires", "10m"],
    );
    answers(dns2, "192.0.2.2");
}
