//! A health change decided in control reaches the XDP program's answers (needs root, as
//! CI has): control with the example zones, an edge following it inside a network
//! namespace this test creates, with the XDP program on that namespace's loopback;
//! queries from a thread inside the namespace. An override flips the failover set's
//! primary; the answer the program sends follows, and its counters show it answered.
mod common;

use std::{process::Command, time::Duration};

use common::{ask, sample, values, Location};
use hickory_proto::rr::RecordType;
use qdns_testkit::{netns::Netns, require_root};

fn ns_values(dns: std::net::SocketAddr) -> Vec<String> {
    values(&ask(dns, "api.shop.example.", RecordType::A, Duration::from_secs(2), 3).expect("an answer"))
}

#[test]
fn an_override_in_control_changes_the_xdp_answer() {
    require_root("network namespaces, XDP");
    let ns = Netns::new("qdns-ctl-xdp");
    let mut loc = Location::prepared();
    let control_metrics = format!("127.0.0.1:{}", common::free_port());
    // The embedded checker runs (so the per-region metrics have samples), and the
    // failover set's two TCP checks (api-1, api-2) find real listeners: only the
    // override moves the answer.
    let _api = ["127.0.0.1:18083", "127.0.0.1:18084"].map(|a| std::net::TcpListener::bind(a).expect(a));
    loc.start_control_with(&[
        "--checker-id",
        "embedded-1",
        "--region",
        "test-region",
        "--metrics",
        &control_metrics,
    ]);
    loc.start_edge_with(
        &["ip", "netns", "exec", &ns.0],
        &["--xdp", "lo", "--xdp-mode", "generic", "--metrics", "127.0.0.1:9153"],
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
    let flipped = common::ns_values_until(&ns, dns, "api.shop.example.", &["198.51.100.20"]);
    assert_eq!(
        flipped,
        ["198.51.100.20"],
        "secondary once control marks the primary down"
    );

    loc.ctl_json(&["override", "clear", "api-1"]);
    loc.wait_edges_current();
    let back = common::ns_values_until(&ns, dns, "api.shop.example.", &["192.0.2.20"]);
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

    assert_metrics(&ns, &control_metrics);

    let edge = loc.edge.as_mut().unwrap();
    assert!(edge.term().success());
    let detach = edge.seen("detaching XDP");
    let failover = qdns_testkit::fixtures::logged_count(&detach, "answered_failover");
    assert!(failover >= 3, "the XDP program gave the answers: {detach}");
}

/// Each `qdns_…` name in contrib/grafana/qdns.json's queries is a family in `scrapes`
/// (a sample line, or its `# TYPE` line: counters are declared without `_total`).
fn assert_dashboard_metrics_exist(scrapes: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/grafana/qdns.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("qdns_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                names.insert(name);
            }
        }
    }
    assert!(names.len() >= 12, "{names:?}");
    for name in &names {
        let family = name.strip_suffix("_total").unwrap_or(name);
        let found = scrapes.lines().any(|line| {
            line.strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                || line.strip_prefix("# TYPE ").and_then(|l| l.split_whitespace().next()) == Some(family)
        });
        assert!(
            found,
            "the dashboard queries {name}, which neither daemon exposes:\n{scrapes}"
        );
    }
}

/// Every metric the Grafana dashboard in contrib/ queries is exposed by one of the two
/// daemons (the edge's with XDP on), and the edge counted the failover set's XDP
/// answers per member: the primary before and after the override, the secondary during.
fn assert_metrics(ns: &Netns, control_metrics: &str) {
    // The per-region series have samples once the embedded checker's first reports are
    // in (its first round of probes may still be running).
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !common::scrape(control_metrics).contains("qdns_check_region_healthy{") {
        assert!(
            std::time::Instant::now() < deadline,
            "no checker report reached control's metrics"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let edge_metrics = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "curl",
            "-s",
            "http://127.0.0.1:9153/metrics",
        ])
        .output()
        .unwrap();
    let scrapes = format!(
        "{}\n{}",
        common::scrape(control_metrics),
        String::from_utf8_lossy(&edge_metrics.stdout)
    );
    assert_dashboard_metrics_exist(&scrapes);
    let edge_text = String::from_utf8_lossy(&edge_metrics.stdout);
    for member in ["p", "s"] {
        let series =
            format!("qdns_edge_answers_total{{rrset=\"api.shop.example. A\",member=\"{member}\",path=\"xdp\"}} ");
        let n: u64 = edge_text
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in\n{edge_text}"));
        assert!(n >= 1, "{series}{n}");
    }
}

/// A health change that arrives while the edge builds the XDP tables of a new snapshot
/// (seconds for a large zone) reaches the program's answers at once, on the tables in
/// force — a reload does not hold back a failover in the fast path.
#[test]
fn a_failover_during_a_table_build_reaches_the_xdp_answers() {
    require_root("network namespaces, XDP");
    let ns = Netns::new("qdns-ctl-xdp-build");
    let mut loc = Location::prepared();
    // 150,000 names: the debug edge builds their tables in about 4 s.
    let names = 150_000;
    let body = qdns_testkit::fixtures::write_big_zone(&loc.zones(), names);
    loc.start_control_with(&["--no-embedded-checker"]);
    let metrics = "127.0.0.1:9153";
    loc.start_edge_with(
        &["ip", "netns", "exec", &ns.0],
        &["--xdp", "lo", "--xdp-mode", "generic", "--metrics", metrics],
    );
    let edge = loc.edge.as_ref().unwrap();
    edge.wait_for("snapshot applied");
    edge.wait_for("XDP tables installed");
    let dns = loc.dns.unwrap();
    assert_eq!(ns.run(move || ns_values(dns)), ["192.0.2.20"], "primary while healthy");
    let scrape = |ns: &Netns| ns.run(move || common::scrape(metrics));
    let first = sample(&scrape(&ns), "qdns_edge_xdp_table_snapshot_version");

    // One record edited and a delegation added (a zone cut, which a table patch does
    // not cover): the edge takes the reload as a delta and starts building the new
    // tables whole; the override comes while they are built.
    let zone = loc.zones().join("big.example.zone");
    let edited = body.replacen(
        "h7 IN A 10.0.0.7\n",
        "h7 IN A 192.0.2.77\nsub7 IN NS ns.example.net.\n",
        1,
    );
    std::fs::write(&zone, edited).unwrap();
    let reloaded = loc.ctl_json(&["reload"])["snapshot_version"].as_u64().unwrap();
    let applied = edge.wait_for("snapshot applied");
    assert!(applied.contains("delta"), "{applied}");
    let failovers =
        |text: &str| sample(text, "qdns_edge_xdp_packets_total{counter=\"answered_failover\"}").unwrap_or(0);
    let answered = failovers(&scrape(&ns));
    loc.ctl_json(&["override", "set", "api-1", "unhealthy", "--expires", "30m"]);
    let flipped = common::ns_values_until(&ns, dns, "api.shop.example.", &["198.51.100.20"]);
    assert_eq!(
        flipped,
        ["198.51.100.20"],
        "secondary once control marks the primary down"
    );
    // Still the old tables, and it was the program that answered from them.
    let text = scrape(&ns);
    assert_eq!(
        sample(&text, "qdns_edge_xdp_table_snapshot_version"),
        first,
        "the build of {reloaded} was still running (raise the zone's names if this machine is faster)"
    );
    let now = failovers(&text);
    assert!(now > answered, "the program answered the failover: {answered} -> {now}");
    // Once the new tables are in, they answer the edit and keep the override.
    edge.wait_for("XDP tables installed");
    assert_eq!(
        sample(&scrape(&ns), "qdns_edge_xdp_table_snapshot_version"),
        Some(reloaded)
    );
    assert_eq!(ns.run(move || ns_values(dns)), ["198.51.100.20"]);
    let edited = ns.run(move || {
        values(&ask(dns, "h7.big.example.", RecordType::A, Duration::from_secs(2), 3).expect("an answer"))
    });
    assert_eq!(edited, ["192.0.2.77"]);
}
