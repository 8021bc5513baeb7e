//! Helpers for the edge's integration tests: start the real `qdns-edge` binary on
//! loopback, and talk to it as a DNS client (hickory-proto builds and parses messages,
//! independently of the edge's own wire code).
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod frames;
pub mod knot;
pub mod netns;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    path::Path,
    process::Command,
    time::Duration,
};

use qdns_testkit::daemon::Daemon;

use hickory_proto::{
    op::{Edns, Message, Query},
    rr::{Name, RecordType},
};

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::fixtures::{copy_examples, example_zones};

/// A running `qdns-edge` (a [`Daemon`]: its log collected, killed by its PID on drop).
pub struct Edge {
    daemon: Daemon,
    /// IPv4 service address.
    pub v4: SocketAddr,
    /// IPv6 service address.
    pub v6: SocketAddr,
}

impl Edge {
    /// True when the edge has logged a line containing `needle`.
    pub fn history_has(&self, needle: &str) -> bool {
        self.daemon.history_has(needle)
    }

    /// Starts the edge on ephemeral loopback ports with the example zones.
    pub fn start() -> Edge {
        Edge::start_with(&example_zones(), &[])
    }

    /// Starts the edge on ephemeral loopback ports serving `zones`, with `extra` flags.
    pub fn start_with(zones: &Path, extra: &[&str]) -> Edge {
        Edge::start_in(&[], zones, extra)
    }

    /// Like [`Edge::start_with`], run through `prefix` (e.g. `ip netns exec NS`, which
    /// execs the edge, so the PID stays the edge's).
    pub fn start_in(prefix: &[&str], zones: &Path, extra: &[&str]) -> Edge {
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_qdns-edge"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_qdns-edge")),
        };
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--listen",
                "[::1]:0",
                "--workers",
                "2",
                "--zones",
            ])
            .arg(zones)
            .args(extra);
        let daemon = Daemon::spawn("qdns-edge", command);
        // One `listening udp=ADDR …` line per listener, in --listen order.
        let [v4, v6] = [(); 2].map(|()| {
            let line = daemon.wait_for_within("udp=", Duration::from_secs(30));
            let addr = line
                .split("udp=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next());
            addr.and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no address in {line:?}"))
        });
        Edge { daemon, v4, v6 }
    }

    /// Both service addresses.
    pub fn addrs(&self) -> [SocketAddr; 2] {
        [self.v4, self.v6]
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// Sends a signal to the edge.
    pub fn signal(&self, signal: &str) {
        self.daemon.signal(signal);
    }

    /// Waits for a log line containing `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        self.daemon.wait_for_within(needle, timeout)
    }

    /// Waits until a log line containing each of `needles` was seen, in any order.
    pub fn wait_for_logs(&self, needles: &[&str], timeout: Duration) {
        self.daemon.wait_for_all(needles, timeout);
    }

    /// Stops the edge with SIGTERM; returns its exit status and the log lines it wrote
    /// that no earlier `wait_for_log` consumed.
    pub fn stop_with_log(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.daemon.stop_with_log()
    }

    /// Stops the edge with SIGTERM and returns its exit status.
    pub fn stop(self) -> std::process::ExitStatus {
        self.stop_with_log().0
    }

    /// Waits for the edge to exit on its own (after handing over); its status.
    pub fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        self.daemon.wait_exit(timeout)
    }
}

/// Options of a test query.
#[derive(Clone, Copy)]
pub struct Ask {
    /// EDNS payload size, or no EDNS.
    pub edns: Option<u16>,
    /// EDNS version.
    pub version: u8,
    /// DO bit.
    pub dnssec_ok: bool,
    /// RD bit.
    pub recursion_desired: bool,
}

impl Default for Ask {
    fn default() -> Self {
        Ask {
            edns: Some(1232),
            version: 0,
            dnssec_ok: false,
            recursion_desired: false,
        }
    }
}

/// Wire bytes of a query for `name`/`qtype`.
pub fn query(name: &str, qtype: RecordType, ask: Ask) -> Vec<u8> {
    let mut msg = Message::query();
    msg.metadata.id = rand_id();
    msg.metadata.recursion_desired = ask.recursion_desired;
    msg.add_query(Query::query(name_of(name), qtype));
    if let Some(payload) = ask.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(payload);
        edns.set_version(ask.version);
        edns.set_dnssec_ok(ask.dnssec_ok);
        msg.set_edns(edns);
    }
    msg.to_vec().unwrap()
}

/// A name in presentation form with RFC 1035 §5.1 escapes (`\.`, decimal `\DDD`): hickory's
/// own reader takes `\DDD` as octal, so escaped names are decoded here.
pub fn name_of(text: &str) -> Name {
    if !text.contains('\\') {
        return Name::from_ascii(text).unwrap();
    }
    let bytes = text.as_bytes();
    let (mut labels, mut label, mut i) = (Vec::new(), Vec::new(), 0);
    while i < bytes.len() {
        match bytes[i] {
            b'.' => labels.push(std::mem::take(&mut label)),
            b'\\' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                label.push(
                    std::str::from_utf8(&bytes[i + 1..i + 4])
                        .unwrap()
                        .parse::<u8>()
                        .unwrap(),
                );
                i += 3;
            }
            b'\\' => {
                label.push(bytes[i + 1]);
                i += 1;
            }
            other => label.push(other),
        }
        i += 1;
    }
    if !label.is_empty() {
        labels.push(label);
    }
    let mut name = Name::from_labels(labels).unwrap();
    name.set_fqdn(true);
    name
}

fn rand_id() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now()) as u16
}

/// Parses a response, checking it answers `query` (same ID, QR set).
pub fn parse_response(query: &[u8], response: &[u8]) -> Message {
    let msg = Message::from_vec(response).unwrap_or_else(|e| panic!("unparseable response {response:02x?}: {e}"));
    assert_eq!(msg.metadata.id, u16::from_be_bytes([query[0], query[1]]), "ID echoed");
    assert_eq!(msg.metadata.message_type, hickory_proto::op::MessageType::Response);
    msg
}

/// Sends `query` over UDP and returns the raw response. Like dig, it tries three
/// times (UDP is lossy: a full socket queue drops datagrams); a server that stalls
/// still fails.
pub fn udp_raw(addr: SocketAddr, query: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind(if addr.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" }).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = vec![0u8; 65_535];
    for _ in 0..3 {
        socket.send_to(query, addr).unwrap();
        if let Ok((len, from)) = socket.recv_from(&mut buf) {
            assert_eq!(from, addr);
            buf.truncate(len);
            return buf;
        }
    }
    panic!("no UDP response from {addr} after 3 tries");
}

/// Sends `query` over TCP (one connection) and returns the raw response.
pub fn tcp_raw(addr: SocketAddr, query: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write_framed(&mut stream, query);
    read_framed(&mut stream)
}

/// Writes one length-prefixed message.
pub fn write_framed(stream: &mut TcpStream, msg: &[u8]) {
    let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(msg);
    stream.write_all(&framed).unwrap();
}

/// Reads one length-prefixed message.
pub fn read_framed(stream: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// The transports a behaviour is checked over.
#[derive(Clone, Copy, Debug)]
pub enum Via {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

/// Asks over `via` at `addr` and parses the answer.
pub fn ask(addr: SocketAddr, via: Via, name: &str, qtype: RecordType, opts: Ask) -> Message {
    let q = query(name, qtype, opts);
    let raw = match via {
        Via::Udp => udp_raw(addr, &q),
        Via::Tcp => tcp_raw(addr, &q),
    };
    parse_response(&q, &raw)
}

/// Every (address, transport) pair of an edge.
pub fn every_path(edge: &Edge) -> Vec<(SocketAddr, Via)> {
    let mut out = Vec::new();
    for addr in edge.addrs() {
        out.push((addr, Via::Udp));
        out.push((addr, Via::Tcp));
    }
    out
}

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::Rng;
