//! The status page in a real browser: control (with its embedded checker probing a real
//! TCP target) and an edge following it; headless Chromium (Debian `chromium`, installed
//! by scripts/setup-ops) loads `/status`, the test reads the DOM Chromium built, forces a
//! check unhealthy with `qdnsctl override set`, and reads it again. The last page, with
//! an `explain` query, is screenshotted into target/artefacts/status-page.png.
mod common;

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{free_port, Location};

/// Longest one Chromium run may take before the test kills it (by PID) and fails.
const BROWSER_LIMIT: Duration = Duration::from_secs(60);

/// A zone whose one probed check points at `port`, and a weighted set on it.
fn zone(port: u16) -> String {
    format!(
        r#"[zone]
origin = "st.example."
ttl = 60
[zone.soa]
mname = "ns.st.example."
rname = "h.st.example."
serial = 7
refresh = 7200
retry = 900
expire = 1209600
minimum = 30
[zone.ns]
names = ["ns.st.example."]

[[health_check]]
id = "app"
type = "tcp"
ip = "127.0.0.1"
port = {port}
interval = 10
failure_threshold = 1

[[rrset]]
name = "ns"
type = "A"
values = ["192.0.2.53"]

[[rrset]]
name = "www"
type = "A"
policy = "weighted"
members = [
  {{ id = "a", weight = 1, health_check = "app", values = ["192.0.2.1"] }},
  {{ id = "b", weight = 1, values = ["192.0.2.2"] }},
]
"#
    )
}

/// Runs Chromium headless with `args` and then `url`; its stdout. Fails the test if
/// Chromium fails or outlives [`BROWSER_LIMIT`].
fn chromium(profile: &Path, args: &[&str], url: &str) -> String {
    let child = Command::new("chromium")
        .args([
            "--headless",
            // Root in a container: Chromium's sandbox needs user namespaces it may not get.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium runs (scripts/setup-ops installs it)");
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let Ok(output) = waited.recv_timeout(BROWSER_LIMIT) else {
        // Only the browser this test started, by its PID.
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("chromium did not finish {url} within {BROWSER_LIMIT:?}");
    };
    let output = output.expect("chromium output");
    assert!(output.status.success(), "chromium {args:?} {url}: {:?}", output.status);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The DOM Chromium built from `url`.
fn dom(profile: &Path, url: &str) -> String {
    chromium(profile, &["--dump-dom"], url)
}

/// The table row with id `id` in `dom`.
fn row<'d>(dom: &'d str, id: &str) -> &'d str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {id} in\n{dom}"));
    let end = dom[start..].find("</tr>").map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

/// Where the test leaves the screenshot.
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("artefacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_status_page_in_chromium_shows_a_check_flip_after_an_override() {
    // A real target: the kernel completes TCP handshakes on the listening socket.
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let target_port = target.local_addr().unwrap().port();
    let mut location = Location::prepared();
    std::fs::write(location.zones().join("st.example.toml"), zone(target_port)).unwrap();
    let http = free_port();
    let metrics = format!("127.0.0.1:{http}");
    location.start_control_with(&[
        "--checker-id",
        "embedded-1",
        "--region",
        "test-region",
        "--metrics",
        &metrics,
    ]);
    location.start_edge();
    location.edge.as_ref().unwrap().wait_for("snapshot applied");
    let profile = tempfile::tempdir().unwrap();
    let page = format!("http://{metrics}/status");

    // The checker's first report makes the check healthy with one fresh report from its
    // region; the edge shows as current.
    let deadline = Instant::now() + Duration::from_secs(40);
    let before = loop {
        let dom = dom(profile.path(), &page);
        let app = row(&dom, "check-st.example./app");
        if app.contains("test-region: 1/1") {
            break dom;
        }
        assert!(Instant::now() < deadline, "no fresh report shown:\n{dom}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let app = row(&before, "check-st.example./app");
    assert!(app.contains("badge healthy") && app.contains("tcp"), "{app}");
    assert!(
        before.contains("<td>st.example.</td><td>7</td>"),
        "zone and serial:\n{before}"
    );
    assert!(
        before.contains("<td>embedded-1</td><td>test-region</td>"),
        "checker:\n{before}"
    );
    assert!(before.contains("<td>test-edge</td>"), "edge:\n{before}");
    assert!(!before.contains("id=\"override-"), "no override yet:\n{before}");

    // Forced unhealthy: the same row flips, the override is listed with its expiry, and
    // the timeline has it.
    let out = location.ctl(&["override", "set", "st.example./app", "unhealthy", "--expires", "10m"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after = dom(profile.path(), &page);
    let app = row(&after, "check-st.example./app");
    assert!(app.contains("badge unhealthy"), "{app}");
    assert!(app.contains("override: forced unhealthy"), "{app}");
    let forced = row(&after, "override-st.example./app");
    // Expires in 10m, or 9m and some seconds once a second has passed.
    assert!(
        forced.contains("badge unhealthy") && (forced.contains("<td>10m</td>") || forced.contains("<td>9m ")),
        "{forced}"
    );
    assert!(
        after.contains("st.example./app forced unhealthy for 10m"),
        "event:\n{after}"
    );

    // Explain: member a is unhealthy, so b takes every answer.
    let explained = format!("{page}?name=www.st.example.&type=A");
    let dom = dom(profile.path(), &explained);
    let shares = &dom[dom.find("id=\"distribution\"").expect("a distribution")..];
    let shares = &shares[..shares.find("</table>").unwrap_or(shares.len())];
    assert!(shares.contains("<td>b</td>") && shares.contains("100.0 %"), "{shares}");
    assert!(dom.contains("id=\"explained\""), "{dom}");

    let shot = artefacts().join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        profile.path(),
        &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1400"],
        &explained,
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{} octets",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
    drop(target);
}

/// Explain for a client (`&client=`) says how that client is routed: answered to this
/// host only (issue 53 §8). Control in a network namespace serves its page on the
/// veth address; asked from the other end of the pair (10.76.0.2) it refuses with 403,
/// asked from its own loopback it answers; the page without `client` answers both.
#[test]
fn explain_for_a_client_is_answered_to_this_host_only() {
    qdns_testkit::require_root("network namespaces");
    let pair = qdns_testkit::netns::Pair::on_net('s', "76");
    let location = Location::prepared();
    let edge_socket = location.edge_socket().display().to_string();
    let control = location.start_control_in(
        &pair.server,
        &[
            "--edge-socket",
            &edge_socket,
            "--no-embedded-checker",
            "--metrics",
            "0.0.0.0:9154",
        ],
    );
    let status = |ns: &str, host: &str, query: &str| -> String {
        let url = format!("http://{host}:9154/status?name=www.example.com.&type=A{query}");
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "curl",
                "-s",
                "-m",
                "5",
                "-w",
                "\n%{http_code}",
                &url,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !status(&pair.client, "10.76.0.1", "").ends_with("200") {
        assert!(Instant::now() < deadline, "the page never answered over the pair");
        std::thread::sleep(Duration::from_millis(200));
    }
    let far = status(&pair.client, "10.76.0.1", "&client=198.51.100.7");
    assert!(far.ends_with("403") && far.contains("this host only"), "{far}");
    let near = status(&pair.server, "127.0.0.1", "&client=198.51.100.7");
    assert!(near.ends_with("200") && near.contains("id=\"explained\""), "{near}");
    drop(control);
}
