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
use qdns_testkit::require_root;

#[test]
fn a_control_that_accepts_and_stalls_is_given_up_on_while_the_edge_serves() {
    let mut loc = Location::prepared();
    // The edge has a persisted snapshot (serial as in the example zones).
    let state = loc.dir.path().join("edge-state");
    std::fs::create_dir_all(&state).unwrap();
    let snapshot = qdns_zone::load_dir(&loc.zones(), 5).unwrap();
    qdns_zone::sync::persist(&state.join("snapshot.bin"), &snapshot).unwrap();
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
    std::fs::create_dir_all(&state).unwrap();
    assert!(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap()
        .success());
    let _mounted = Tmpfs(state.clone());
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
