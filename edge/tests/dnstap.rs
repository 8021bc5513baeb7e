//! Query logs (SPEC §11, "Query logs") read by real readers: `fstrm_capture` (Debian
//! `fstrm-bin`) takes the edge's Frame Streams connection and writes the frames to a
//! file, the `dnstap` tool (Debian `golang-github-dnstap-golang-dnstap-cli`) decodes
//! them, and `protoc --decode_raw` shows the `policy` field the tool does not print.
//! A reader stopped in the middle (SIGSTOP) makes drops counted, never lost answers.
mod common;

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{example_zones, Edge};
use qdns_testkit::{
    daemon::Daemon,
    fixtures::{free_port, sample, scrape_from},
};

/// `fstrm_capture` reading dnstap on `socket`, writing the frames to `file`.
fn capture(socket: &Path, file: &Path) -> Daemon {
    let mut command = Command::new("fstrm_capture");
    command
        .args(["-t", "protobuf:dnstap.Dnstap", "-u"])
        .arg(socket)
        .arg("-w")
        .arg(file);
    let daemon = Daemon::spawn("fstrm_capture", command);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "fstrm_capture did not open {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon
}

/// `dig +short` at `server` from `source` (`+tcp` when `tcp`).
fn dig(server: SocketAddr, source: &str, tcp: bool, name: &str, qtype: &str) -> String {
    let (at, port) = (format!("@{}", server.ip()), server.port().to_string());
    let out = Command::new("dig")
        .args([
            at.as_str(),
            "-p",
            &port,
            "-b",
            source,
            if tcp { "+tcp" } else { "+notcp" },
            "+short",
            "+time=2",
            "+tries=1",
            name,
            qtype,
        ])
        .output()
        .expect("dig");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The data frames of a Frame Streams file (control frames skipped).
fn data_frames(file: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(file).unwrap();
    let mut frames = Vec::new();
    let mut at = 0;
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    while at + 4 <= bytes.len() {
        let len = word(at);
        at += 4;
        if len == 0 {
            at += 4 + word(at);
            continue;
        }
        frames.push(bytes[at..at + len].to_vec());
        at += len;
    }
    frames
}

#[test]
fn every_user_space_query_is_logged_with_its_fields() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, file) = (dir.path().join("dnstap.sock"), dir.path().join("dnstap.fstrm"));
    let mut reader = capture(&socket, &file);
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let edge = Edge::start_with(
        &example_zones(),
        &[
            "--dnstap",
            &format!("unix:{}", socket.display()),
            "--nsid",
            "edge-fra-1",
            "--metrics",
            &metrics.to_string(),
        ],
    );
    edge.wait_for_log("dnstap: connected to the reader", Duration::from_secs(10));
    // A weighted set over UDP from 127.0.0.77, a failover set over TCP, a plain name
    // over IPv6.
    assert!(!dig(edge.v4, "127.0.0.77", false, "www.shop.example", "A").is_empty());
    assert!(!dig(edge.v4, "127.0.0.1", true, "api.shop.example", "A").is_empty());
    assert!(!dig(edge.v6, "::1", false, "www.example.com", "A").is_empty());
    let page = scrape_from([127, 0, 0, 1].into(), metrics);
    let (v4, v6) = (edge.v4, edge.v6);
    assert_eq!(edge.stop().code(), Some(0));
    assert_eq!(reader.term().code(), Some(0), "fstrm_capture");

    // What the dnstap tool reads: three queries, each an AUTH_QUERY and AUTH_RESPONSE
    // pair, with the identity, transport, masked client and the edge's address.
    let out = Command::new("dnstap")
        .arg("-r")
        .arg(&file)
        .arg("-j")
        .output()
        .expect("dnstap");
    let text = String::from_utf8_lossy(&out.stdout);
    let messages: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(messages.len(), 6, "{text}");
    for (pair, (name, protocol, client, server)) in messages.chunks(2).zip([
        ("www.shop.example.", "UDP", "127.0.0.0", v4),
        ("api.shop.example.", "TCP", "127.0.0.0", v4),
        ("www.example.com.", "UDP", "::", v6),
    ]) {
        let (query, response) = (&pair[0]["message"], &pair[1]["message"]);
        assert_eq!(pair[0]["identity"], "edge-fra-1");
        assert_eq!(query["type"], "AUTH_QUERY");
        assert_eq!(response["type"], "AUTH_RESPONSE");
        for message in [query, response] {
            assert_eq!(message["socket_protocol"], protocol, "{message}");
            assert_eq!(message["query_address"], client, "masked to 24,56: {message}");
            assert_eq!(message["response_address"], server.ip().to_string());
            assert_eq!(message["response_port"], server.port());
        }
        assert!(query["query_message"].as_str().unwrap().contains(name), "{query}");
        let answer = response["response_message"].as_str().unwrap();
        assert!(
            answer.contains("status: NOERROR") && answer.contains("ANSWER SECTION"),
            "{answer}"
        );
        assert!(response["response_time"].as_str() >= query["query_time"].as_str());
    }

    // The policy field (the dnstap tool does not print it; protoc reads it raw): the
    // weighted set and the member, the one the per-member counter counted.
    let frames = data_frames(&file);
    assert_eq!(frames.len(), 6);
    let mut decode = Command::new("protoc")
        .arg("--decode_raw")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("protoc (scripts/setup-clients)");
    std::io::Write::write_all(&mut decode.stdin.take().unwrap(), &frames[1]).unwrap();
    let raw = String::from_utf8(decode.wait_with_output().unwrap().stdout).unwrap();
    assert!(
        raw.contains("1: \"qdns\"") && raw.contains("2: \"www.shop.example. A\""),
        "{raw}"
    );
    let policy = raw.split_once("15 {").map_or("", |(_, rest)| rest);
    let member = policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("5: \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no member in {raw}"));
    let counted = sample(
        &page,
        &format!("qdns_edge_answers_total{{rrset=\"www.shop.example. A\",member=\"{member}\",path=\"user\"}}"),
    );
    assert_eq!(counted, Some(1), "member {member:?}: {page}");
    assert_eq!(sample(&page, "qdns_edge_dnstap_dropped_total{path=\"user\"}"), Some(0));
}

/// A reader that stops reading (SIGSTOP) under a steady load: the edge's writer gives
/// the connection up and tries again while the queue fills, then drops events, counted;
/// the answering threads never wait for it (dnsperf loses nothing). The reader going on
/// (SIGCONT) gets the events again.
#[test]
fn a_reader_that_stops_reading_costs_drops_not_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, file) = (dir.path().join("dnstap.sock"), dir.path().join("dnstap.fstrm"));
    let mut reader = capture(&socket, &file);
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let edge = Edge::start_with(
        &example_zones(),
        &[
            "--dnstap",
            &format!("unix:{}", socket.display()),
            "--metrics",
            &metrics.to_string(),
        ],
    );
    edge.wait_for_log("dnstap: connected to the reader", Duration::from_secs(10));
    let counter = |name: &str| {
        let page = scrape_from([127, 0, 0, 1].into(), metrics);
        sample(&page, &format!("qdns_edge_dnstap_{name}_total{{path=\"user\"}}")).unwrap_or(0)
    };
    reader.signal("STOP");
    let queries = dir.path().join("queries.txt");
    std::fs::write(&queries, "www.shop.example A\nwww.example.com A\n").unwrap();
    // 5,000 a second for 8 s: more than the queue holds while the writer waits out
    // the stopped reader's write and handshake timeouts.
    let out = Command::new("dnsperf")
        .args(["-s", "127.0.0.1", "-p", &edge.v4.port().to_string()])
        .arg("-d")
        .arg(&queries)
        .args(["-l", "8", "-Q", "5000", "-c", "4", "-t", "2"])
        .output()
        .expect("dnsperf (scripts/setup-peers)");
    let report = String::from_utf8_lossy(&out.stdout);
    let number = |label: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {label} in {report}"))
    };
    let (sent, lost) = (number("Queries sent:"), number("Queries lost:"));
    assert!(sent >= 30_000, "{report}");
    assert_eq!(lost, 0, "an answer waited for the query log: {report}");
    let dropped = counter("dropped");
    assert!(dropped > 0, "nothing dropped while the reader was stopped");
    // The reader reads again: the writer connects again and events flow.
    reader.signal("CONT");
    let before = counter("sent");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(!dig(edge.v4, "127.0.0.1", false, "www.example.com", "A").is_empty());
        if counter("sent") > before {
            break;
        }
        assert!(Instant::now() < deadline, "no event sent after the reader went on");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(edge.stop().code(), Some(0));
    reader.term();
}

/// The mask changes without a restart (SIGHUP re-reads the `--config` file): a client
/// at 127.0.0.77 logged as 127.0.0.0 under `24,56`, then whole under `32,128`.
#[test]
fn the_mask_changes_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, file) = (dir.path().join("dnstap.sock"), dir.path().join("dnstap.fstrm"));
    let mut reader = capture(&socket, &file);
    let settings = dir.path().join("edge.toml");
    std::fs::write(&settings, "dnstap_mask = \"24,56\"\n").unwrap();
    let edge = Edge::start_with(
        &example_zones(),
        &[
            "--dnstap",
            &format!("unix:{}", socket.display()),
            "--config",
            settings.to_str().unwrap(),
        ],
    );
    edge.wait_for_log("dnstap: connected to the reader", Duration::from_secs(10));
    assert!(!dig(edge.v4, "127.0.0.77", false, "www.example.com", "A").is_empty());
    std::fs::write(&settings, "dnstap_mask = \"32,128\"\n").unwrap();
    edge.signal("HUP");
    edge.wait_for_log("masked to new prefix lengths", Duration::from_secs(10));
    assert!(!dig(edge.v4, "127.0.0.77", false, "www.example.com", "A").is_empty());
    assert_eq!(edge.stop().code(), Some(0));
    reader.term();
    let out = Command::new("dnstap")
        .arg("-r")
        .arg(&file)
        .arg("-j")
        .output()
        .expect("dnstap");
    let text = String::from_utf8_lossy(&out.stdout);
    let clients: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["message"]["query_address"].to_string())
        .collect();
    assert_eq!(
        clients,
        ["\"127.0.0.0\"", "\"127.0.0.0\"", "\"127.0.0.77\"", "\"127.0.0.77\""],
        "{text}"
    );
}
