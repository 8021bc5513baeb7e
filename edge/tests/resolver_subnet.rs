//! Unbound with its `subnetcache` module in front of the edge (SPEC §10, RFC 7871): it
//! sends each client's /24 as ECS, the edge answers per prefix with the scope of the
//! answer, and Unbound's cache keeps the answers of two prefixes apart — asked again,
//! each client still gets its own answer, from the cache, without a query to the edge.
//! Clients are loopback addresses in different /24s (all of 127/8 is local).
mod common;

use std::{
    fmt::Write as _,
    fs,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::Edge;
use qdns_testkit::fixtures::{free_port, scrape_from, ZONE_HEAD};

/// Unbound, killed by its PID on drop.
struct Unbound(Child);

impl Drop for Unbound {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `dig` from `source` to the resolver on 127.0.0.1:`port`: the answer's addresses.
fn ask(source: &str, port: u16, name: &str) -> String {
    let out = Command::new("dig")
        .args([
            "-b",
            source,
            "@127.0.0.1",
            "-p",
            &port.to_string(),
            "+tries=2",
            "+time=2",
            "+short",
            name,
            "A",
        ])
        .output()
        .expect("dig is required (scripts/setup installs it)");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn unbound_subnetcache_keeps_the_answers_of_two_prefixes_apart() {
    let zones = tempfile::tempdir().unwrap();
    let body = r#"
[[cidr_collection]]
id = "lo"
[cidr_collection.locations]
one = ["127.0.1.0/24"]
two = ["127.0.2.0/24"]

[[rrset]]
name = "near"
type = "A"
ttl = 300
policy = "ip"
members = [
  { id = "one", cidr = "lo/one", values = ["10.0.0.1"] },
  { id = "two", cidr = "lo/two", values = ["10.0.0.2"] },
  { id = "rest", cidr = "*", values = ["10.0.0.99"] },
]
"#;
    fs::write(zones.path().join("t.toml"), format!("{ZONE_HEAD}{body}")).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let edge = Edge::start_with(zones.path(), &["--metrics", &metrics]);
    // Responses the edge sent, every transport and RCODE.
    let user_answers = || -> u64 {
        let text = scrape_from("127.0.0.1".parse().unwrap(), metrics.parse().unwrap());
        text.lines()
            .filter(|l| l.starts_with("qdns_edge_responses_total{path=\"user\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = qdns_testkit::resolvers::unbound_server_on(
        dir.path(),
        port,
        &[
            "access-control: 127.0.0.0/8 allow",
            "do-not-query-localhost: no",
            "module-config: \"subnetcache iterator\"",
            "send-client-subnet: 127.0.0.1",
            "max-client-subnet-ipv4: 24",
        ],
    );
    let _ = writeln!(
        conf,
        "stub-zone:\n    name: \"t.example\"\n    stub-addr: 127.0.0.1@{}",
        edge.v4.port()
    );
    let conf_path = dir.path().join("unbound.conf");
    fs::write(&conf_path, conf).unwrap();
    let log = fs::File::create(dir.path().join("unbound.log")).unwrap();
    let _unbound = Unbound(
        Command::new("unbound")
            .args(["-d", "-c"])
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("unbound is required (scripts/setup-resolvers installs it)"),
    );
    let unbound_log = || fs::read_to_string(dir.path().join("unbound.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ask("127.0.0.1", port, "near.t.example.").is_empty() {
        assert!(Instant::now() < deadline, "unbound did not answer:\n{}", unbound_log());
        std::thread::sleep(Duration::from_millis(200));
    }

    let clients = [
        ("127.0.1.5", "10.0.0.1"),
        ("127.0.2.5", "10.0.0.2"),
        ("127.0.3.5", "10.0.0.99"),
    ];
    for (source, want) in clients {
        assert_eq!(
            ask(source, port, "near.t.example."),
            want,
            "from {source}:\n{}",
            unbound_log()
        );
    }
    // Again, and from other addresses of the same /24s: each prefix's own answer, all
    // from Unbound's cache (the edge answers nothing more).
    let before = user_answers();
    for (source, want) in clients {
        for again in [source.to_owned(), source.replace(".5", ".77")] {
            assert_eq!(ask(&again, port, "near.t.example."), want, "from {again} (cached)");
        }
    }
    assert_eq!(user_answers(), before, "every repeat came from Unbound's cache");
    assert!(before >= 3, "the edge answered each prefix once at least: {before}");
}
