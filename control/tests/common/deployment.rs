//! Helpers for the deployment tests: publishing to the store, locations following it,
//! `qdnsctl` against the store, and waiting for answers and timeline entries.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use hickory_proto::rr::RecordType;

use super::Location;

/// `qdnsctl publish DIR --intent URL`, as it ended.
pub fn try_publish(dir: &Path, url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .arg("publish")
        .arg(dir)
        .args(["--intent", url])
        .output()
        .unwrap()
}

/// `qdnsctl publish DIR --intent URL`, which must succeed.
pub fn publish(dir: &Path, url: &str) {
    published(dir, url);
}

/// The revision in `publish`'s `change REV …`, if it succeeded.
fn revision_of(out: &std::process::Output) -> Option<u64> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    out.status
        .success()
        .then(|| stdout.split_whitespace().nth(1)?.parse().ok())?
}

/// Publishes until the store takes it (a member lost, an election: the first tries
/// may fail), for up to 30 s; its revision.
pub fn published_retrying(dir: &Path, url: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = try_publish(dir, url);
        if let Some(revision) = revision_of(&out) {
            return revision;
        }
        assert!(Instant::now() < deadline, "{}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `loc` answers `name` A with `want`.
pub fn answers(loc: &Location, name: &str, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = loc.values(name, RecordType::A);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} A is {got:?} at {}, not {want:?}",
            loc.dir.path().display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `loc`'s timeline holds an event saying `needle`.
pub fn in_timeline(loc: &Location, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !loc.ctl_json(&["events"]).to_string().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no event saying {needle:?}: {}",
            loc.ctl_json(&["events"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A location following `url` as `name`, with an edge.
pub fn location(url: &str, name: &str) -> Location {
    let mut loc = Location::prepared();
    loc.start_control_following(url, &["--no-embedded-checker", "--location", name]);
    loc.start_edge();
    // Its control has written its row: a test that stops it next stops a known location.
    heard_from(url, name, true);
    loc
}

/// `qdnsctl ARGS --intent URL --json`, its JSON and whether it succeeded.
pub fn qdnsctl_json(args: &[&str], url: &str) -> (bool, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .args(args)
        .args(["--intent", url, "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (out.status.success(), json, stderr)
}

/// Each location's status in `qdnsctl change --json` output.
pub fn statuses(change: &serde_json::Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = change["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["location"].as_str().unwrap().to_owned(),
                row["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// `qdnsctl publish`'s revision.
pub fn published(dir: &Path, url: &str) -> u64 {
    let out = try_publish(dir, url);
    revision_of(&out).unwrap_or_else(|| {
        panic!(
            "publish: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Waits (up to 90 s: the lease is 30 s, and a loaded machine is slow to let it go)
/// until `qdnsctl fleet` says the store hears from `location` (`alive`) or not.
pub fn heard_from(url: &str, location: &str, alive: bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, fleet, _) = qdnsctl_json(&["fleet"], url);
        let row = fleet
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["location"] == location)
            .cloned();
        if row.is_some_and(|r| r["alive"] == alive) {
            return;
        }
        assert!(Instant::now() < deadline, "{location} is not alive={alive}: {fleet}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The example zones in `dir/zones` (shop.example, whose checks probe loopback, only
/// `with_shop`).
pub fn example_zones(dir: &Path, with_shop: bool) -> std::path::PathBuf {
    let zones = dir.join("zones");
    std::fs::create_dir_all(&zones).unwrap();
    qdns_testkit::fixtures::copy_examples(&zones);
    if !with_shop {
        std::fs::remove_file(zones.join("shop.example.toml")).unwrap();
    }
    zones
}

/// `qdnsctl secret put NAME FILE --intent URL`, which must succeed.
pub fn secret_put(name: &str, file: &Path, url: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
        .args(["secret", "put", name])
        .arg(file)
        .args(["--intent", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
