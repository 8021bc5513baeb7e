//! Control plane end to end (SPEC §1, §3, §5, §6): real qdns-control, real qdns-edge
//! following it, real qdnsctl, DNS over UDP. Health is driven through overrides and
//! external checks (health probing is a later piece).
mod common;

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{ask, values, Location};
use hickory_proto::{op::ResponseCode, rr::RecordType};
use qdns_testkit::fixtures::ZONE_HEAD;

#[test]
fn overrides_and_external_checks_steer_answers() {
    let loc = Location::new();
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["192.0.2.20"]);
    // Failover, four states, driven by overrides.
    for (p, s, expected) in [
        ("unhealthy", "healthy", "198.51.100.20"),
        ("unhealthy", "unhealthy", "192.0.2.20"), // fail-open: primary
        ("healthy", "unhealthy", "192.0.2.20"),
    ] {
        loc.ctl_json(&["override", "set", "api-1", p, "--expires", "30m"]);
        loc.ctl_json(&["override", "set", "api-2", s, "--expires", "30m"]);
        loc.wait_edges_current();
        assert_eq!(
            loc.values("api.shop.example.", RecordType::A),
            [expected],
            "primary {p}, secondary {s}"
        );
    }
    // Fail-open is visible in status and events.
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    let status = loc.ctl_json(&["status"]);
    assert!(
        status["fail_open"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "api.shop.example. A"),
        "{status}"
    );
    let events = loc.ctl_json(&["events"]);
    assert!(
        events.as_array().unwrap().iter().any(|e| e["kind"] == "fail-open"),
        "{events}"
    );
    let explain = loc.ctl_json(&["explain", "api.shop.example", "A"]);
    assert_eq!(explain["fail_open"], true);
    assert!(
        explain["candidates"][0]["why"].as_str().unwrap().contains("override"),
        "{explain}"
    );
    loc.ctl_json(&["override", "clear", "api-1"]);
    loc.ctl_json(&["override", "clear", "api-2"]);
    // External check: app's secondary (change-freeze) with lb down.
    loc.ctl_json(&["override", "set", "a1", "unhealthy", "--expires", "30m"]);
    loc.ctl_json(&["override", "set", "a2", "unhealthy", "--expires", "30m"]);
    loc.wait_edges_current();
    assert_eq!(loc.values("app.shop.example.", RecordType::A), ["203.0.113.9"]);
    loc.ctl_json(&["external", "change-freeze", "unhealthy"]);
    loc.wait_edges_current();
    assert_eq!(
        loc.values("app.shop.example.", RecordType::A),
        ["192.0.2.31", "192.0.2.32"],
        "fail-open through the alias"
    );
    // A probed check cannot be set like an external one.
    let out = loc.ctl(&["external", "web-1", "unhealthy"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an external check"));
}

/// Changes a client pipelines are made together (one save, one push), yet each is
/// answered as if alone, in order: a refused one among them changes nothing, and a
/// read between them sees the changes before it.
#[test]
fn pipelined_changes_are_answered_in_order_and_persisted_together() {
    let loc = Location::new();
    let set = |check: &str, healthy: bool| {
        format!(r#"{{"cmd":"override_set","check":"{check}","healthy":{healthy},"expires":"30m"}}"#)
    };
    let clear = |check: &str| format!(r#"{{"cmd":"override_clear","check":"{check}"}}"#);
    let lines = [
        set("api-1", false),
        clear("api-1"),
        set("api-1", false),
        r#"{"cmd":"health","check":"api-1"}"#.to_owned(),
        clear("web-1"),
        set("api-2", true),
        r#"{"cmd":"bogus"}"#.to_owned(),
        set("web-1", false),
        clear("web-1"),
    ];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let replies = common::pipeline(&loc.socket(), &lines);
    let oks: Vec<bool> = replies.iter().map(|r| r["ok"] == true).collect();
    assert_eq!(
        oks,
        [true, true, true, true, false, true, false, true, true],
        "{replies:?}"
    );
    assert!(
        replies[0]["data"]["check"].as_str().unwrap().ends_with("/api-1"),
        "{}",
        replies[0]
    );
    assert_eq!(replies[0]["data"]["healthy"], false);
    assert_eq!(replies[1]["data"]["cleared"], true);
    assert!(
        replies[3]["data"][0]["why"]
            .as_str()
            .unwrap()
            .contains("forced unhealthy"),
        "a read sees the changes before it: {}",
        replies[3]
    );
    assert_eq!(replies[4]["code"], "conflict", "{}", replies[4]);
    assert_eq!(replies[6]["code"], "malformed", "{}", replies[6]);
    // What is saved is the end state: api-1 and api-2 forced, web-1 not.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(loc.dir.path().join("control-state/operator.json")).unwrap())
            .unwrap();
    let forced: Vec<&String> = saved["overrides"].as_object().unwrap().keys().collect();
    assert_eq!(forced.len(), 2, "{saved}");
    // The timeline has every change made, in order, and none refused.
    let events = loc.ctl_json(&["events"]);
    let overrides: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "override")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(overrides.len(), 6, "{overrides:?}");
    assert!(
        overrides[0].contains("api-1") && overrides[0].contains("forced unhealthy"),
        "{overrides:?}"
    );
    assert!(
        overrides[1].contains("override of shop.example./api-1") && overrides[1].contains("cleared"),
        "{overrides:?}"
    );
    assert!(
        overrides[5].contains("override of shop.example./web-1") && overrides[5].contains("cleared"),
        "{overrides:?}"
    );
    // The edge serves the end state: api's primary forced down, secondary forced up.
    loc.wait_edges_current();
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
}

#[test]
fn weighted_shares_over_dns_within_binomial_bounds() {
    let loc = Location::new();
    loc.ctl_json(&["override", "set", "web-2", "unhealthy", "--expires", "30m"]);
    loc.wait_edges_current();
    let n = 1500;
    let mut first = 0;
    for _ in 0..n {
        let v = loc.values("www.shop.example.", RecordType::A);
        assert_ne!(v, ["192.0.2.11"], "the unhealthy member never answers");
        first += u32::from(v == ["192.0.2.10"]);
    }
    // p = 10/30; sd = sqrt(n p (1-p)) ≈ 18.3; allow 5 sd.
    let expected = f64::from(n) / 3.0;
    assert!(
        (f64::from(first) - expected).abs() < 5.0 * 18.3,
        "{first} of {n} vs {expected}"
    );
}

#[test]
fn reload_under_load_loses_nothing_and_never_mixes() {
    let loc = Location::new();
    let addr = loc.dns.unwrap();
    let zone = loc.zones().join("example.com.toml");
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let (mut sent, mut lost, mut mixed) = (0u32, 0u32, Vec::new());
            let started = Instant::now();
            // ~500 queries per second, bounded to 20 s.
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                sent += 1;
                match ask(addr, "static.example.com.", RecordType::A, Duration::from_secs(1), 1) {
                    Some(msg) => {
                        let v = values(&msg);
                        if v != ["192.0.2.1", "192.0.2.2"] && v != ["198.51.100.1", "198.51.100.2"] {
                            mixed.push(v);
                        }
                    }
                    None => lost += 1,
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (sent, lost, mixed)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let text = fs::read_to_string(&zone).unwrap();
    fs::write(
        &zone,
        text.replace("\"192.0.2.1\", \"192.0.2.2\"", "\"198.51.100.1\", \"198.51.100.2\""),
    )
    .unwrap();
    let reply = loc.ctl_json(&["reload"]);
    assert!(reply["snapshot_version"].as_u64().is_some());
    loc.wait_edges_current();
    std::thread::sleep(Duration::from_millis(300));
    // An invalid zone is rejected, with the error, and the old data keeps serving.
    fs::write(
        &zone,
        text.replace("\"192.0.2.1\", \"192.0.2.2\"", "\"not-an-address\""),
    )
    .unwrap();
    let out = loc.ctl(&["reload"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("example.com.toml") && err.contains("invalid A value"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (sent, lost, mixed) = load.join().unwrap();
    assert!(sent > 300, "load ran ({sent} queries)");
    assert_eq!(lost, 0, "unanswered queries during reload");
    assert!(mixed.is_empty(), "answers mixing old and new data: {mixed:?}");
    assert_eq!(
        loc.values("static.example.com.", RecordType::A),
        ["198.51.100.1", "198.51.100.2"]
    );
}

#[test]
fn edge_is_statically_stable_without_control() {
    let mut loc = Location::new();
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    loc.wait_edges_current();
    // Control killed: the edge keeps answering from what it has.
    loc.control.as_mut().unwrap().kill9();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
    // Edge restarted while control is down: the persisted snapshot and health.
    loc.edge.as_mut().unwrap().term();
    loc.start_edge();
    loc.edge.as_ref().unwrap().seen("serving the persisted snapshot");
    assert_eq!(loc.values("api.shop.example.", RecordType::A), ["198.51.100.20"]);
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"]
    );
    // A corrupted persisted snapshot: a clear error, a clean start, no wrong answer.
    loc.edge.as_mut().unwrap().term();
    let snapshot = loc.dir.path().join("edge-state/snapshot.bin");
    let mut data = fs::read(&snapshot).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    fs::write(&snapshot, data).unwrap();
    loc.start_edge();
    let line = loc.edge.as_ref().unwrap().seen("persisted snapshot unusable");
    assert!(line.contains("checksum mismatch"), "{line}");
    let msg = ask(
        loc.dns.unwrap(),
        "www.example.com.",
        RecordType::A,
        Duration::from_secs(2),
        3,
    )
    .unwrap();
    assert_eq!(
        msg.metadata.response_code,
        ResponseCode::ServFail,
        "no data yet: SERVFAIL (a resolver asks another server), never a wrong answer"
    );
    // And why, to a query with EDNS (RFC 8914 §4.15: 14, Not Ready).
    let dns = loc.dns.unwrap();
    let out = std::process::Command::new("dig")
        .args([
            &format!("@{}", dns.ip()),
            "-p",
            &dns.port().to_string(),
            "+tries=1",
            "+time=2",
            "www.example.com.",
            "A",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains("status: SERVFAIL") && out.contains("EDE: 14 (Not Ready)"),
        "{out}"
    );
    // Control back (removing its stale socket): the edge catches up by itself.
    loc.start_control();
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"]
    );
    assert_eq!(
        loc.values("api.shop.example.", RecordType::A),
        ["198.51.100.20"],
        "override persisted across the control restart"
    );
}

#[test]
fn zonal_shifts_start_update_cancel_persist_and_expire() {
    let mut loc = Location::new();
    let out = loc.ctl(&[
        "shift",
        "start",
        "--rrset",
        "lb.shop.example.",
        "--az",
        "az1",
        "--expires",
        "73h",
    ]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("72h"));
    let out = loc.ctl(&[
        "shift",
        "start",
        "--rrset",
        "lb.shop.example.",
        "--az",
        "az9",
        "--expires",
        "1h",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no AZ \"az9\""));
    loc.ctl_json(&[
        "shift",
        "start",
        "--rrset",
        "lb.shop.example.",
        "--az",
        "az1",
        "--expires",
        "2h",
        "--comment",
        "drill",
    ]);
    loc.wait_edges_current();
    assert_eq!(loc.values("lb.shop.example.", RecordType::A), ["192.0.2.32"]);
    let list = loc.ctl_json(&[
        "shift",
        "update",
        "--rrset",
        "lb.shop.example.",
        "--az",
        "az1",
        "--expires",
        "5h",
    ]);
    let left = list[0]["expires_in_s"].as_u64().unwrap();
    assert!(left > 4 * 3600 && left <= 5 * 3600, "{list}");
    // A shift that cannot move traffic (the other AZ is down too) says so.
    loc.ctl_json(&["override", "set", "a2", "unhealthy", "--expires", "30m"]);
    let list = loc.ctl_json(&["shift", "list"]);
    assert_eq!(list[0]["moves_traffic"], false, "{list}");
    loc.wait_edges_current();
    assert_eq!(
        loc.values("lb.shop.example.", RecordType::A),
        ["192.0.2.31", "192.0.2.32"]
    );
    loc.ctl_json(&["override", "clear", "a2"]);
    // Persisted across a control restart.
    loc.control.as_mut().unwrap().term();
    loc.start_control();
    let list = loc.ctl_json(&["shift", "list"]);
    assert_eq!(list[0]["comment"], "drill", "{list}");
    loc.ctl_json(&["shift", "cancel", "--rrset", "lb.shop.example.", "--az", "az1"]);
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    loc.wait_edges_current();
    assert_eq!(
        loc.values("lb.shop.example.", RecordType::A),
        ["192.0.2.31", "192.0.2.32"]
    );
    // Expiry: a persisted shift that ends in 2 s ends by itself.
    loc.control.as_mut().unwrap().term();
    let state = loc.dir.path().join("control-state/operator.json");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let json = format!(
        r#"{{"overrides":{{}},"externals":{{}},"shifts":{{"lb.shop.example.":{{"az2":{{"expires":{},"started":{now},"comment":null}}}}}}}}"#,
        now + 2
    );
    fs::write(&state, json).unwrap();
    loc.start_control();
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    assert_eq!(loc.values("lb.shop.example.", RecordType::A), ["192.0.2.31"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while loc.values("lb.shop.example.", RecordType::A) != ["192.0.2.31", "192.0.2.32"] {
        assert!(Instant::now() < deadline, "the shift did not expire");
        std::thread::sleep(Duration::from_millis(100));
    }
    let events = loc.ctl_json(&["events"]);
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("expired")),
        "{events}"
    );
}

#[test]
fn control_socket_is_private_and_stale_files_are_replaced() {
    let mut loc = Location::new();
    let mode = fs::metadata(loc.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second control on the same socket refuses to start (one line, non-zero).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .arg("--zones")
        .arg(loc.zones())
        .arg("--socket")
        .arg(loc.socket())
        .arg("--state-dir")
        .arg(loc.dir.path().join("other"))
        .arg("--edge-socket")
        .arg(loc.dir.path().join("other.sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another process is serving it"));
    // Killed control leaves its socket file; the next one removes it and starts.
    loc.control.as_mut().unwrap().kill9();
    assert!(loc.socket().exists());
    loc.start_control();
    assert!(loc.ctl(&["status"]).status.success());
    // An invalid zone stops start-up with one line naming file, key and reason.
    loc.control.as_mut().unwrap().term();
    let zone = loc.zones().join("shop.example.toml");
    let text = fs::read_to_string(&zone)
        .unwrap()
        .replace("interval = 10", "interval = 20");
    fs::write(&zone, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"))
        .arg("--zones")
        .arg(loc.zones())
        .arg("--socket")
        .arg(loc.socket())
        .arg("--state-dir")
        .arg(loc.dir.path().join("s2"))
        .arg("--edge-socket")
        .arg(loc.dir.path().join("e2.sock"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap();
    assert!(!out.status.success());
    assert!(
        last.starts_with("qdns-control: ")
            && last.contains("shop.example.toml:")
            && last.contains("health_check[0].interval"),
        "{last}"
    );
}

/// `explain --client` (SPEC §10): the rule a client matches, the scope its answer holds
/// for, the chain of matches and who answers now, following health.
#[test]
fn explain_for_a_client_names_the_rule_the_scope_and_the_answer() {
    let loc = Location::new();
    loc.ctl_json(&["override", "set", "web-1", "healthy", "--expires", "30m"]);
    let e = loc.ctl_json(&["explain", "near.shop.example", "A", "--client", "198.51.100.77/32"]);
    assert_eq!(e["policy"], "ip", "{e}");
    let client = &e["client"];
    assert_eq!(client["decided_by"], "198.51.100.0", "/32 is used as /24: {e}");
    assert_eq!(client["matched"], "clients/eu", "{e}");
    assert_eq!(client["scope_prefix"], "198.51.100.0/24", "{e}");
    assert_eq!(client["scope"], 24, "{e}");
    assert_eq!(client["chain"], serde_json::json!(["eu", "rest"]), "{e}");
    assert_eq!(client["answered_by"], "eu", "{e}");
    assert_eq!(e["candidates"][0]["cidr"], "clients/eu", "{e}");
    // Who answers each rule's clients.
    let by_client = e["distribution"]["by_client"].as_array().unwrap();
    assert!(
        by_client
            .iter()
            .any(|o| o["matched"] == "clients/us" && o["answered_by"] == "us"),
        "{e}"
    );
    // The eu member unhealthy: its clients fall back to `*`.
    loc.ctl_json(&["override", "set", "web-1", "unhealthy", "--expires", "30m"]);
    let e = loc.ctl_json(&["explain", "near.shop.example", "A", "--client", "198.51.100.7"]);
    assert_eq!(
        e["client"]["decided_by"], "198.51.100.7",
        "a bare address is a packet source"
    );
    assert_eq!(e["client"]["answered_by"], "rest", "{e}");
    assert_eq!(e["client"]["fail_open"], false, "{e}");
    // Outside every rule: `*`, with the largest prefix that meets no rule.
    let e = loc.ctl_json(&["explain", "near.shop.example", "A", "--client", "192.0.2.0/24"]);
    assert_eq!(
        (e["client"]["matched"].as_str(), e["client"]["scope"].as_u64()),
        (Some("*"), Some(6)),
        "{e}"
    );
    let human = loc.ctl(&["explain", "near.shop.example", "A", "--client", "203.0.113.0/24"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("matches clients/us, scope 203.0.113.0/24 (ECS scope /24)"),
        "{text}"
    );
    let out = loc.ctl(&["explain", "near.shop.example", "A", "--client", "eu"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use an address or ADDRESS/LEN"),
        "{out:?}"
    );
    loc.ctl_json(&["override", "clear", "web-1"]);
}

#[test]
fn explain_and_health_tell_why() {
    let loc = Location::new();
    for (name, policy) in [
        ("www.shop.example", "weighted"),
        ("api.shop.example", "failover"),
        ("lb.shop.example", "zonal"),
        ("app.shop.example", "failover"),
    ] {
        let e = loc.ctl_json(&["explain", name, "A"]);
        assert_eq!(e["policy"], policy, "{e}");
        assert!(!e["candidates"].as_array().unwrap().is_empty());
        assert!(
            e["candidates"].as_array().unwrap().iter().all(|c| c["why"].is_string()),
            "{e}"
        );
    }
    let e = loc.ctl_json(&["explain", "www.shop.example", "A"]);
    let shares: Vec<f64> = e["distribution"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["share"].as_f64().unwrap())
        .collect();
    assert_eq!(shares, [0.2, 0.4, 0.4], "{e}");
    let e = loc.ctl_json(&["explain", "mv.shop.example", "AAAA"]);
    assert_eq!(e["policy"], "multivalue");
    let plain = loc.ctl_json(&["explain", "static.example.com", "A"]);
    assert_eq!(plain["policy"], "plain");
    assert_eq!(
        plain["values"],
        serde_json::json!(["192.0.2.1", "192.0.2.2"]),
        "{plain}"
    );
    let human = loc.ctl(&["explain", "static.example.com", "A"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("static.example.com. 300 IN A 192.0.2.1\n") && text.contains(" IN A 192.0.2.2\n"),
        "a plain set's records, one per line:\n{text}"
    );
    let out = loc.ctl(&["explain", "nothing.example.com", "A"]);
    assert!(!out.status.success());
    let health = loc.ctl_json(&["health", "web-any"]);
    assert!(
        health[0]["why"].as_str().unwrap().contains("2 of 2 children healthy"),
        "{health}"
    );
    let human = loc.ctl(&["explain", "www.shop.example", "A"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("policy weighted") && text.contains("MEMBER"), "{text}");
    assert!(
        text.contains("answers: ") && text.contains(" 40.0 %") && !text.contains("[{"),
        "shares as a line of text, not JSON:\n{text}"
    );
}

/// The control socket speaks the typed protocol of `qdns_control::api`: a malformed
/// request gets a precise error with its code, and one over the size limit is refused
/// and its connection closed; a good request on the same connection still works.
#[test]
fn the_control_socket_refuses_malformed_requests_precisely() {
    use std::io::{BufRead, BufReader, Write};
    let loc = Location::control_only();
    let stream = std::os::unix::net::UnixStream::connect(loc.socket()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut ask = |line: &str| -> serde_json::Value {
        // Control may answer and close before a refused line is written whole (the
        // over-64-KiB one): the write then fails, the answer is still there to read.
        let _ = writer.write_all(line.as_bytes()).and_then(|()| writer.write_all(b"\n"));
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
    };
    for (line, code, says) in [
        (r#"{"cmd":"reboot"}"#, "malformed", "unknown variant `reboot`"),
        (
            r#"{"cmd":"explain","name":"static.example.com"}"#,
            "malformed",
            "missing field `rtype`",
        ),
        (r#"{"cmd":"dump","zone":"nowhere.example"}"#, "not_found", "no zone"),
        (
            r#"{"cmd":"explain","name":"static.example.com","rtype":"BOGUS"}"#,
            "bad_argument",
            "unknown type",
        ),
        (
            r#"{"cmd":"override_set","check":"web-1","healthy":true,"expires":"100h"}"#,
            "bad_argument",
            "72h",
        ),
        (
            r#"{"cmd":"override_clear","check":"web-1"}"#,
            "conflict",
            "has no override",
        ),
        // A field a command does not have is refused, also on commands without any.
        (
            r#"{"cmd":"reload","dry_run":true}"#,
            "malformed",
            "unknown field `dry_run`",
        ),
        (
            r#"{"cmd":"status","verbose":1}"#,
            "malformed",
            "unknown field `verbose`",
        ),
        (r#"{"cmd":"shift_list","all":true}"#, "malformed", "unknown field `all`"),
        (
            r#"{"cmd":"health","check":"web-1","x":0}"#,
            "malformed",
            "unknown field `x`",
        ),
        // Not a panic that closes the connection: an answer.
        (
            r#"{"cmd":"override_set","check":"web-1","healthy":true,"expires":"1é"}"#,
            "bad_argument",
            "bad duration",
        ),
    ] {
        let reply = ask(line);
        assert_eq!(reply["ok"], false, "{line}: {reply}");
        assert_eq!(reply["code"], code, "{line}: {reply}");
        assert!(reply["error"].as_str().unwrap().contains(says), "{line}: {reply}");
    }
    let status = ask(r#"{"cmd":"status"}"#);
    assert_eq!(status["ok"], true, "{status}");
    // Over 64 KiB without a newline: refused, then closed.
    let huge = format!(r#"{{"cmd":"dump","zone":"{}"}}"#, "a".repeat(70_000));
    let reply = ask(&huge);
    assert_eq!(reply["code"], "malformed", "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("over 65536 octets"),
        "{reply}"
    );
    let mut rest = String::new();
    assert_eq!(reader.read_line(&mut rest).unwrap_or(0), 0, "closed after: {rest:?}");
}

#[test]
fn every_policy_rule_over_dns_through_control() {
    let loc = Location::new();
    let set = |check: &str, status: &str| {
        loc.ctl_json(&["override", "set", check, status, "--expires", "30m"]);
    };
    // Zonal, SPEC scenario: AZ1 {A1 unhealthy, B1 healthy}, AZ2 {A2, B2 healthy}.
    set("a1", "unhealthy");
    loc.wait_edges_current();
    assert_eq!(
        loc.values("lb.shop.example.", RecordType::A),
        ["192.0.2.32"],
        "cross-zone off"
    );
    let zone = loc.zones().join("shop.example.toml");
    let text = fs::read_to_string(&zone).unwrap();
    fs::write(&zone, text.replace("cross_zone = false", "cross_zone = true")).unwrap();
    loc.ctl_json(&["reload"]);
    loc.wait_edges_current();
    assert_eq!(
        loc.values("lb.shop.example.", RecordType::A),
        ["192.0.2.31", "192.0.2.32"],
        "cross-zone on"
    );
    set("b1", "unhealthy");
    set("b2", "unhealthy");
    loc.wait_edges_current();
    assert_eq!(
        loc.values("lb.shop.example.", RecordType::A),
        ["192.0.2.31", "192.0.2.32"],
        "no AZ healthy: fail-open"
    );
    assert!(loc.ctl_json(&["status"])["fail_open"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "lb.shop.example. A"));
    // Multivalue: only the healthy members answer.
    set("m-1", "unhealthy");
    loc.wait_edges_current();
    assert_eq!(
        loc.values("mv.shop.example.", RecordType::AAAA),
        ["2001:db8::2", "2001:db8::3"]
    );
    // Weight 0: the CNAME set's zero-weight member answers only when web-any is down.
    let cname = |loc: &Location| {
        let msg = ask(
            loc.dns.unwrap(),
            "shop.shop.example.",
            RecordType::CNAME,
            Duration::from_secs(2),
            3,
        )
        .unwrap();
        format!("{:?}", msg.answers[0].data)
    };
    assert!(cname(&loc).contains("www.shop.example."));
    set("web-any", "unhealthy");
    loc.wait_edges_current();
    assert!(cname(&loc).contains("static.shop.example."));
    // Weighted fail-open: every member checked and down → by weight over all of them.
    fs::write(
        &zone,
        fs::read_to_string(&zone).unwrap().replace(
            "{ id = \"c\", weight = 20, values = [\"192.0.2.12\"] }",
            "{ id = \"c\", weight = 20, values = [\"192.0.2.12\"], health_check = \"m-2\" }",
        ),
    )
    .unwrap();
    loc.ctl_json(&["reload"]);
    for check in ["web-1", "web-2", "m-2"] {
        set(check, "unhealthy");
    }
    loc.wait_edges_current();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        seen.extend(loc.values("www.shop.example.", RecordType::A));
    }
    assert_eq!(seen.len(), 3, "fail-open answers from every member: {seen:?}");
    let explain = loc.ctl_json(&["explain", "www.shop.example", "A"]);
    assert_eq!(explain["fail_open"], true);
}

#[test]
fn unchecked_secondary_and_tcp_edge_endpoint() {
    // An edge on tcp:// follows control like a Unix one.
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("zones")).unwrap();
    fs::write(
        dir.path().join("zones/t.toml"),
        format!(
            "{ZONE_HEAD}{}",
            r#"[[health_check]]
id = "p"
type = "external"
[[rrset]]
name = "f"
type = "A"
policy = "failover"
members = [
  { id = "p", role = "primary", values = ["192.0.2.1"], health_check = "p" },
  { id = "s", role = "secondary", values = ["192.0.2.2"] },
]
"#
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    cmd.arg("--zones")
        .arg(dir.path().join("zones"))
        .arg("--socket")
        .arg(dir.path().join("c.sock"));
    cmd.arg("--state-dir")
        .arg(dir.path().join("cs"))
        .arg("--edge-socket")
        .arg(format!("tcp://127.0.0.1:{port}"));
    let control = common::Proc::spawn("control", cmd);
    control.wait_for("control socket ready");
    let mut cmd = std::process::Command::new(common::edge_bin());
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--control",
        &format!("tcp://127.0.0.1:{port}"),
    ]);
    cmd.arg("--state-dir").arg(dir.path().join("es"));
    let (_edge, addr) = common::spawn_edge(cmd);
    let a = |expect: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = values(&ask(addr, "f.t.example.", RecordType::A, Duration::from_secs(2), 3).unwrap());
            if got == [expect] {
                return;
            }
            assert!(Instant::now() < deadline, "wanted {expect}, got {got:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    a("192.0.2.1");
    let ctl = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_qdnsctl"))
            .arg("--socket")
            .arg(dir.path().join("c.sock"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    ctl(&["external", "p", "unhealthy"]);
    a("192.0.2.2"); // the unchecked secondary is always healthy
                    // A peer announcing a 2 MiB message (edges send a few KiB) is cut off before
                    // anything is allocated for it; the real edge keeps following.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut raw, &(2u32 << 20).to_be_bytes()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut drained = Vec::new();
    let closed = std::io::Read::read_to_end(&mut raw, &mut drained);
    assert!(closed.is_ok(), "control closes the connection: {closed:?}");
    ctl(&["external", "p", "healthy"]);
    a("192.0.2.1");
}

/// What `named-compilezone` (BIND's zone reader, Debian `bind9-utils`) makes of a master
/// file: its canonical text, the reference both sides of the round trip are compared in.
fn compiled(origin: &str, file: &std::path::Path) -> String {
    let out = std::process::Command::new("named-compilezone")
        .args([
            "-q", "-i", "none", "-k", "ignore", "-n", "ignore", "-s", "full", "-o", "-", origin,
        ])
        .arg(file)
        .output()
        .expect("named-compilezone (Debian bind9-utils, installed by scripts/setup-resolvers)");
    assert!(
        out.status.success(),
        "named-compilezone {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // Owners compared lowercased: qdns stores names lowercase (RFC 4343: DNS names
    // are case-insensitive); everything else must match exactly.
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| match line.split_once(char::is_whitespace) {
            Some((owner, rest)) => format!("{} {rest}", owner.to_ascii_lowercase()),
            None => line.to_owned(),
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Issue 12: load → `qdnsctl dump` → the same zone as BIND's reader sees it.
#[test]
fn dump_round_trips_a_master_file() {
    let mut loc = Location::control_only();
    let master = "$ORIGIN rt.example.\n$TTL 300\n\
        @ 3600 SOA ns1 hostmaster 7 7200 900 1209600 60\n@ NS ns1\n@ NS ns.other.example.\n\
        ns1 A 192.0.2.1\nns1 AAAA 2001:db8::1\n@ MX 10 mail\nmail A 192.0.2.25\n\
        txt TXT \"\\127\\128\\200\\255\" \"\\065 \\\"q\\\" \\\\\" plain\\032word\n\
        sp\\032ace A 192.0.2.32\ndot\\.ted A 192.0.2.46\nMiXeD TXT x\n\
        x TYPE65280 \\# 4 0a000001\ny A \\# 4 c0000263\nz TYPE65281 \\# 0\n\
        cut NS ns.cut\nns.cut A 192.0.2.153\ncut DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118\n\
        types CAA 0 issue \"ca.example.net; account=1\"\ntypes SSHFP 1 1 dd465c09cfa51fb45020cc83316fff21b9ec74ac\n\
        types TLSA 3 1 1 0c72ac70b745ac19998811b131d662c9ac69dbdbe7cb23e5b514b56664c5d3d6\n\
        types NAPTR 100 10 \"S\" \"SIP+D2U\" \"\" _sip._udp\ntypes HINFO \"PC\" \"Linux\"\n\
        types SVCB 1 ns1 alpn=h2,h3 port=8443 ipv4hint=192.0.2.1\ntypes HTTPS 1 . alpn=h2\n\
        types URI 10 1 \"https://example.net/\"\ntypes SPF \"v=spf1 -all\"\ntypes PTR ns1\n\
        _sip._tcp SRV 1 2 5060 ns1\nalias CNAME ns1\n*.w A 192.0.2.99\n";
    let input = loc.dir.path().join("rt.zone");
    fs::write(&input, master).unwrap();
    fs::copy(&input, loc.zones().join("rt.zone")).unwrap();
    fs::write(
        loc.zones().join("rt.toml"),
        "[zone]\norigin = \"rt.example.\"\ninclude = \"rt.zone\"\n",
    )
    .unwrap();
    let reload = loc.ctl_json(&["reload"]);
    assert!(reload.to_string().contains("rt.example."), "{reload}");
    let out = loc.ctl(&["dump", "rt.example."]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dumped = loc.dir.path().join("dumped.zone");
    fs::write(&dumped, &out.stdout).unwrap();
    assert_eq!(
        compiled("rt.example.", &dumped),
        compiled("rt.example.", &input),
        "dump:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A zone that does not exist is an error; policy sets are listed as comments.
    assert!(!loc.ctl(&["dump", "nothing.example."]).status.success());
    let shop = loc.ctl(&["dump", "shop.example."]);
    let text = String::from_utf8_lossy(&shop.stdout);
    assert!(text.contains("; www.shop.example. A: Weighted policy set"), "{text}");
    loc.control.take();
}

/// `policy = "geo"` (SPEC §10): control reads the MaxMind DB (`--geoip-db`), compiles
/// the zone's geo set into a prefix table and ships it; the edge, which never sees the
/// database, answers ECS queries by location with the scope of the network; explain
/// names the location; `qdnsctl reload` re-reads a refreshed database.
#[test]
fn geo_sets_compiled_by_control_answer_by_location_on_the_edge() {
    use qdns_testkit::mmdb::{write, GeoNet};
    let mut loc = Location::prepared();
    let db = loc.zones().parent().unwrap().join("geo.mmdb");
    let geo = |net, continent, country, subdivisions| GeoNet {
        net,
        continent,
        country,
        subdivisions,
    };
    write(
        &db,
        &[
            geo("198.51.100.0/24", "EU", "DE", &["BY"]),
            geo("203.0.113.0/24", "EU", "FR", &[]),
        ],
    );
    let zone = qdns_testkit::fixtures::geo_zone();
    std::fs::write(loc.zones().join("t.toml"), zone).unwrap();
    loc.start_control_with(&["--no-embedded-checker", "--geoip-db", db.to_str().unwrap()]);
    loc.start_edge();
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
    let dns = loc.dns.unwrap();
    let dig = |subnet: &str| {
        let out = std::process::Command::new("dig")
            .args([
                &format!("@{}", dns.ip()),
                "-p",
                &dns.port().to_string(),
                &format!("+subnet={subnet}"),
                "geo.t.example",
                "A",
            ])
            .output()
            .expect("dig");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (subnet, answer, echoed) in [
        ("198.51.100.0/24", "10.0.0.1", "198.51.100.0/24/24"),
        ("203.0.113.0/24", "10.0.0.2", "203.0.113.0/24/24"),
        ("192.0.2.0/24", "10.0.0.9", "192.0.2.0/24/6"),
    ] {
        let out = dig(subnet);
        assert!(
            out.contains(answer) && out.contains(&format!("CLIENT-SUBNET: {echoed}")),
            "{subnet}:\n{out}"
        );
    }
    let e = loc.ctl_json(&["explain", "geo.t.example", "A", "--client", "198.51.100.9/24"]);
    assert_eq!(
        (e["policy"].as_str(), e["client"]["matched"].as_str()),
        (Some("geo"), Some("DE-BY")),
        "{e}"
    );
    assert_eq!(
        e["client"]["chain"],
        serde_json::json!(["bavaria", "europe", "rest"]),
        "{e}"
    );
    // A refreshed database: that network is now in France (Europe).
    write(&db, &[geo("198.51.100.0/24", "EU", "FR", &[])]);
    loc.ctl_json(&["reload"]);
    loc.wait_edges_current();
    assert!(dig("198.51.100.0/24").contains("10.0.0.2"));
    let e = loc.ctl_json(&["explain", "geo.t.example", "A", "--client", "198.51.100.9/24"]);
    assert_eq!(e["client"]["matched"], "EU", "{e}");
    // A database that cannot be read: the reload is refused and the zones stay.
    std::fs::write(&db, b"not a database").unwrap();
    let out = loc.ctl(&["reload"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("geo.mmdb"), "{out:?}");
    assert!(dig("198.51.100.0/24").contains("10.0.0.2"));
}

/// The link's frame cap is checked before a body is read: an edge whose
/// `--max-snapshot-frame` is below the snapshot refuses it and says which flag to raise,
/// and takes it once the cap allows (issue 28 §3).
#[test]
fn a_snapshot_over_the_edges_frame_cap_is_refused_naming_the_flag() {
    use std::fmt::Write as _;
    let mut loc = Location::prepared();
    let mut zone = String::from(qdns_testkit::fixtures::ZONE_HEAD);
    // About 1.5 MiB of records: over a 1 MiB cap.
    for i in 0..12_000 {
        let _ = write!(
            zone,
            "\n[[rrset]]\nname = \"h{i}\"\ntype = \"TXT\"\nvalues = ['\"{}\"']\n",
            "x".repeat(100)
        );
    }
    std::fs::write(loc.zones().join("t.toml"), zone).unwrap();
    loc.start_control();
    loc.start_edge_with(&[], &["--max-snapshot-frame", "1048576"]);
    let line = loc
        .edge
        .as_ref()
        .unwrap()
        .wait_for("over the limit of 1048576 (--max-snapshot-frame)");
    assert!(line.contains("raise it"), "{line}");
    loc.edge.as_mut().unwrap().term();
    loc.start_edge_with(&[], &["--max-snapshot-frame", "16777216"]);
    loc.edge.as_ref().unwrap().wait_for("snapshot applied");
}
