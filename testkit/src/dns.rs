//! One DNS client for the tests of every crate: queries built and responses parsed by
//! hickory-proto (independently of the edge's own wire code), sent over UDP (retried
//! as dig retries) or TCP.
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    time::Duration,
};

use hickory_proto::{
    op::{Edns, Message, Query},
    rr::{Name, RecordType},
};

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

/// The address a client socket for `server` binds: loopback for a loopback server, else
/// any (a server at the far end of a test's veth pair, asked from inside a namespace).
fn local_for(server: SocketAddr) -> &'static str {
    match (server.is_ipv4(), server.ip().is_loopback()) {
        (true, true) => "127.0.0.1:0",
        (true, false) => "0.0.0.0:0",
        (false, true) => "[::1]:0",
        (false, false) => "[::]:0",
    }
}

/// Sends `query` over UDP and returns the raw response. Like dig, it tries three
/// times (UDP is lossy: a full socket queue drops datagrams); a server that stalls
/// still fails.
pub fn udp_raw(addr: SocketAddr, query: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind(local_for(addr)).unwrap();
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

/// Asks over UDP without EDNS, up to `tries` times each waiting `timeout`; `None` when
/// nothing came back.
pub fn ask_udp(addr: SocketAddr, name: &str, qtype: RecordType, timeout: Duration, tries: u32) -> Option<Message> {
    let q = query(
        name,
        qtype,
        Ask {
            edns: None,
            ..Ask::default()
        },
    );
    let socket = UdpSocket::bind(local_for(addr)).unwrap();
    socket.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..tries {
        socket.send_to(&q, addr).unwrap();
        if let Ok((len, _)) = socket.recv_from(&mut buf) {
            return Some(parse_response(&q, &buf[..len]));
        }
    }
    None
}
