//! Faults around the processes (issue 15): a control that accepts connections and never
//! answers, and a state directory with no room left. The edge keeps serving in both,
//! says so in its log and its metrics, and never loads anything half-written.
mod common;

use std::{
    os::unix::net::UnixListener,
    process::Command,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{free_port, sample, scrape, Location};
use hickory_proto::rr::RecordType;
use qdns_testkit::{netns::run, require_root};

#[test]
fn a_control_that_accepts_and_stalls_is_given_up_on_while_the_edge_serves() {
    let mut loc = Location::prepared();
    // The edge has a persisted snapshot (serial as in the example zones).
    let state = loc.dir.path().join("edge-state");
    std::fs::create_dir_all(&state).unwrap();
    let snapshot = qdns_zone::load_dir(&loc.zones(), 5).unwrap();
    qdns_link::protocol::persist(&state.join("snapshot.bin"), &snapshot).unwrap();
    // "Control": accepts every connection and never writes a byte.
    let stalled = UnixListener::bind(loc.edge_socket()).unwrap();
    stalled.set_nonblocking(true).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (counter, stop) = (Arc::clone(&accepted), Arc::clone(&done));
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && held.len() < 20 && !stop.load(Ordering::Relaxed) {
            if let Ok((stream, _)) = stalled.accept() {
                held.push(stream);
                counter.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_edge_with(&[], &["--control-timeout", "1", "--metrics", &metrics]);
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"],
        "the persisted snapshot is served"
    );
    let edge = loc.edge.as_ref().unwrap();
    edge.wait_for("control did not send its snapshot within 1s");
    let deadline = Instant::now() + Duration::from_secs(15);
    while accepted.load(Ordering::Relaxed) < 3 {
        assert!(Instant::now() < deadline, "the edge did not retry the stalled control");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = scrape(&metrics);
    let timeouts = sample(&text, "qdns_edge_control_timeouts_total").unwrap_or(0);
    assert!(timeouts >= 2, "{text}");
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"],
        "still served"
    );
    done.store(true, Ordering::Relaxed);
    drop(loc);
    holder.join().unwrap();
}

/// A tmpfs of 64 KiB mounted over a directory (unmounted on drop).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`64k`, `1m`) over `dir`, creating it.
    fn mount(dir: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        mount(&["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"], dir);
        Tmpfs(dir.to_path_buf())
    }

    /// Remounts it read-only or read-write.
    fn set_read_only(&self, read_only: bool) {
        mount(&["-o", if read_only { "remount,ro" } else { "remount,rw" }], &self.0);
    }
}

fn mount(args: &[&str], dir: &std::path::Path) {
    assert!(
        Command::new("mount").args(args).arg(dir).status().unwrap().success(),
        "mount {args:?}"
    );
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_state_directory_leaves_the_edge_serving_and_saying_so() {
    require_root("mounting a tmpfs");
    let mut loc = Location::prepared();
    loc.start_control();
    let state = loc.dir.path().join("edge-state");
    let _mounted = Tmpfs::mount(&state, "64k");
    // Fill it: nothing more fits.
    let _ = std::fs::write(state.join("filler"), vec![0u8; 128 * 1024]);
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_edge_with(&[], &["--metrics", &metrics]);
    let edge = loc.edge.as_ref().unwrap();
    edge.wait_for("snapshot applied");
    edge.wait_for("cannot persist the snapshot");
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"]
    );
    // Control keeps deciding and the edge keeps applying, from memory.
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "10m"]);
    loc.wait_edges_current();
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
    let text = scrape(&metrics);
    let failures = sample(&text, "qdns_edge_persist_failures_total").unwrap_or(0);
    assert!(failures >= 2, "the snapshot and the health update: {text}");
    // Nothing half-written is left (or could be loaded).
    let names: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["filler"], "no snapshot, health or partial file");
}

#[test]
fn a_read_only_state_directory_refuses_operator_changes_loudly_while_control_decides() {
    require_root("mounting a tmpfs");
    let mut loc = Location::prepared();
    let state = loc.dir.path().join("control-state");
    let mounted = Tmpfs::mount(&state, "1m");
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_control_with(&["--no-embedded-checker", "--metrics", &metrics]);
    loc.start_edge();
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    // Writable: an override is saved and in force.
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "10m"]);
    loc.wait_edges_current();
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
    let saved = std::fs::read_to_string(state.join("operator.json")).unwrap();
    // Read-only: a change cannot be saved, so it is refused — not half made.
    mounted.set_read_only(true);
    let out = loc.ctl(&["override", "set", "api-1", "healthy", "--expires", "10m"]);
    assert!(!out.status.success(), "a change that cannot be saved is refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot persist operator state") && stderr.contains("Read-only file system"),
        "{stderr}"
    );
    // Changes pipelined together are refused together, each with the reason, and none
    // of them stays in force.
    let replies = common::pipeline(
        &loc.socket(),
        &[
            r#"{"cmd":"override_set","check":"api-2","healthy":false,"expires":"10m"}"#,
            r#"{"cmd":"override_clear","check":"api-1"}"#,
        ],
    );
    for reply in &replies {
        assert_eq!(reply["ok"], false, "{replies:?}");
        assert!(
            reply["error"].as_str().unwrap().contains("Read-only file system"),
            "{replies:?}"
        );
    }
    let health = loc.ctl_json(&["health", "api-2"]);
    assert!(
        !health[0]["why"].as_str().unwrap().contains("forced"),
        "a refused change is not in force: {health}"
    );
    let health = loc.ctl_json(&["health", "api-1"]);
    assert!(
        health[0]["why"].as_str().unwrap().contains("forced unhealthy"),
        "the saved override stays: {health}"
    );
    // The running decisions stand: the edge answers as before.
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
    let status = loc.ctl_json(&["status"]);
    assert!(
        status["persist_error"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{status}"
    );
    let human = String::from_utf8_lossy(&loc.ctl(&["status"]).stdout).into_owned();
    assert!(human.starts_with("WARNING: cannot persist operator state"), "{human}");
    let text = scrape(&metrics);
    // One failed save for the single change, one for the pipelined pair: changes read
    // together are saved together.
    assert_eq!(sample(&text, "qdns_control_persist_failures_total"), Some(2), "{text}");
    let events = loc.ctl_json(&["events"]).to_string();
    assert!(events.contains("cannot persist operator state"), "{events}");
    let page = common::get(&metrics, "/status");
    assert!(
        page.contains("id=\"persist-error\"") && page.contains("Read-only file system"),
        "the status page says so first: {page:.600}"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("operator.json")).unwrap(),
        saved,
        "the file on disk is the last complete one"
    );
    // Writable again: changes are accepted and the warning clears.
    mounted.set_read_only(false);
    loc.ctl_json(&["override", "clear", "api-1"]);
    loc.wait_edges_current();
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["192.0.2.20"]);
    assert!(loc.ctl_json(&["status"])["persist_error"].is_null());
    // A restarted control reads back what was saved last (no override).
    loc.control.as_mut().unwrap().term();
    loc.start_control_with(&["--no-embedded-checker"]);
    let health = loc.ctl_json(&["health", "api-1"]);
    assert!(!health[0]["why"].as_str().unwrap().contains("forced"), "{health}");
}

/// Control in one network namespace, an edge following it over `tcp://` from another;
/// the path between them goes silent (one end of the veth down: packets vanish, no
/// reset, no FIN). The link is quiet while nothing changes, so only TCP keepalive can
/// tell: the edge must notice within `qdns_link::liveness::DEAD_AFTER` (then count the
/// cut-off towards `--ready-max-stale` and turn unready), and control must drop the
/// edge from its registry.
#[test]
fn a_silent_path_to_control_is_noticed_by_both_ends_of_a_quiet_link() {
    require_root("network namespaces");
    let pair = qdns_testkit::netns::Pair::new('k');
    let loc = Location::prepared();
    let d = loc.dir.path();
    let _control = loc.start_control_in(
        &pair.server,
        &[
            "--edge-socket",
            "tcp://10.77.0.1:5400",
            "--no-embedded-checker",
            "--insecure-plaintext-link",
        ],
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &pair.client])
        .arg(common::edge_bin())
        .args(["--listen", "127.0.0.1:0", "--workers", "1", "--edge-id", "far"])
        .args([
            "--control",
            "tcp://10.77.0.1:5400",
            "--insecure-plaintext-link",
            "--state-dir",
        ])
        .arg(d.join("edge-state"))
        .args(["--metrics", "127.0.0.1:9155", "--ready-max-stale", "5"]);
    let edge = common::Proc::spawn("edge", cmd);
    edge.wait_for("snapshot applied");
    let ready = || pair.in_client(&["curl", "-s", "http://127.0.0.1:9155/ready"]);
    assert!(ready().contains("linked to control"), "{}", ready());
    let edges = |loc: &Location| loc.ctl_json(&["status"])["edges"].as_array().unwrap().len();
    assert_eq!(edges(&loc), 1);

    run(&["ip", "-n", &pair.server, "link", "set", &pair.server_if, "down"]);
    let cut = Instant::now();
    let line = edge.wait_for_within("serving the last snapshot", Duration::from_secs(40));
    let noticed = cut.elapsed();
    eprintln!("the edge noticed the dead path after {noticed:?}: {line}");
    assert!(
        noticed <= qdns_link::liveness::DEAD_AFTER + Duration::from_secs(5),
        "{noticed:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready().contains("not ready: serving snapshot") {
        assert!(Instant::now() < deadline, "still {}", ready());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(ready().contains("cut off from control"), "{}", ready());
    let deadline = cut + qdns_link::liveness::DEAD_AFTER + Duration::from_secs(10);
    while edges(&loc) != 0 {
        assert!(Instant::now() < deadline, "control still lists the edge");
        std::thread::sleep(Duration::from_millis(250));
    }
    // Healed: the edge links again (its reconnect back-off is at most 5 s).
    run(&["ip", "-n", &pair.server, "link", "set", &pair.server_if, "up"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready().contains("linked to control") {
        assert!(Instant::now() < deadline, "not linked again: {}", ready());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(edges(&loc), 1);
}

/// Issue 32 §4: a hung peer whose kernel still acknowledges everything (SIGSTOP) is
/// noticed through the link's keepalives, which the edge asks for in its hello
/// (`--control-keepalive 1` here; 5 s by default). A stopped control: the edge gives
/// it up within three intervals (plus a second), goes not ready after
/// `--ready-max-stale`, answers on, and links again once control runs. A stopped edge:
/// control drops it from `status` within three intervals, with an event, and takes it
/// back when it runs again.
#[test]
fn a_hung_control_or_edge_is_noticed_through_keepalives() {
    let mut loc = Location::control_only();
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_edge_with(
        &[],
        &[
            "--control-keepalive",
            "1",
            "--metrics",
            &metrics,
            "--ready-max-stale",
            "2",
        ],
    );
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    let ready = || common::get(&metrics, "/ready");
    let until = |what: &str, limit: Duration, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < limit, "not {what} within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        started.elapsed()
    };
    until("linked", Duration::from_secs(10), &|| {
        ready().contains("linked to control")
    });
    let edges = |loc: &Location| loc.ctl_json(&["status"])["edges"].as_array().unwrap().len();
    assert_eq!(edges(&loc), 1);

    let control = loc.control.as_ref().unwrap();
    control.signal("STOP");
    let stopped = Instant::now();
    let line = loc
        .edge
        .as_ref()
        .unwrap()
        .wait_for_within("control silent for", Duration::from_secs(10));
    let noticed = stopped.elapsed();
    eprintln!("the edge noticed the stopped control after {noticed:?}: {line}");
    assert!(
        noticed >= Duration::from_secs(2) && noticed <= Duration::from_secs(4),
        "{noticed:?}"
    );
    until("unready", Duration::from_secs(5), &|| ready().contains("not ready"));
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"],
        "the last snapshot is served"
    );
    control.signal("CONT");
    until("linked again", Duration::from_secs(20), &|| {
        ready().contains("linked to control")
    });

    let edge = loc.edge.as_ref().unwrap();
    edge.signal("STOP");
    let dropped = until("dropped by control", Duration::from_secs(10), &|| edges(&loc) == 0);
    eprintln!("control dropped the stopped edge after {dropped:?}");
    assert!(dropped <= Duration::from_secs(4), "{dropped:?}");
    let events = loc.ctl_json(&["events"]).to_string();
    assert!(
        events.contains("edge test-edge silent for 3 s: link dropped"),
        "{events}"
    );
    edge.signal("CONT");
    until("back in status", Duration::from_secs(20), &|| edges(&loc) == 1);
}
