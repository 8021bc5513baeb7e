//! Query logs (SPEC §11, "Query logs"): with `--dnstap`, every query the user-space
//! path answers becomes a dnstap `AUTH_QUERY` and `AUTH_RESPONSE` pair (the messages
//! verbatim, the times, the client's address masked to `--dnstap-mask`, the edge's
//! address, the transport, and for a policy answer the set and members chosen) sent over
//! a bidirectional Frame Streams connection to a reader (`fstrm_capture`, the `dnstap`
//! tool, Vector, go-dnscollector).
//!
//! The answering threads never wait for it: each hands its event to a bounded queue
//! ([`QUEUE`]) with `try_send` and counts the event dropped when the queue is full
//! (`qdns_edge_dnstap_dropped_total{path="user"}`). One writer thread turns events into
//! frames and writes them; a reader that goes away or stops reading (a write not done in
//! [`WRITE_TIMEOUT`]) is left and connected again (backoff 0.1 s doubling to 5 s),
//! events meanwhile waiting in the queue or, once it is full, dropped and counted.
pub mod frames;
pub mod proto;

use std::{
    collections::HashMap,
    io::{self, BufWriter, Read, Write},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering},
        mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender},
        Arc,
    },
    time::{Duration, SystemTime},
};

use arc_swap::ArcSwap;
use prost::Message as _;

use crate::{answers::AnsweredMembers, Engine, Transport};

/// Events waiting for the writer at most.
pub const QUEUE: usize = 16_384;
/// Octets of queries and responses waiting for the writer at most (a TCP message may
/// be 64 KiB: the event count alone does not bound the memory a stopped reader costs).
pub const QUEUED_OCTETS: usize = 32 << 20;
/// Longest a write to the reader may take before the connection is given up.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the reader may take to answer READY (and STOP).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Events written between two flushes at most.
const FLUSH_EVERY: usize = 256;
/// How long the writer lets events gather after a write before it takes the next ones:
/// a worker's `try_send` wakes only a writer parked waiting, so at a moderate rate the
/// writer wakes and writes once per batch rather than once per query (measured in
/// docs/BENCHMARKS.md, "Query logs").
const GATHER: Duration = Duration::from_millis(1);

/// Where the reader listens: `unix:PATH` or `tcp:HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A Unix stream socket.
    Unix(PathBuf),
    /// A TCP address (a host name is resolved at each connection).
    Tcp(String),
}

impl Target {
    /// Reads `unix:PATH` or `tcp:HOST:PORT`.
    ///
    /// # Errors
    /// Anything else, said.
    pub fn parse(text: &str) -> Result<Target, String> {
        if let Some(path) = text.strip_prefix("unix:").filter(|p| !p.is_empty()) {
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("tcp:") {
            if addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            {
                return Ok(Target::Tcp(addr.to_owned()));
            }
        }
        Err(format!("{text:?} is not unix:PATH or tcp:HOST:PORT"))
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
            Target::Tcp(addr) => write!(f, "tcp:{addr}"),
        }
    }
}

/// Prefix lengths client addresses are masked to: `V4,V6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mask {
    /// IPv4 prefix length (32 keeps the address).
    pub v4: u8,
    /// IPv6 prefix length (128 keeps the address).
    pub v6: u8,
}

impl Default for Mask {
    fn default() -> Mask {
        Mask { v4: 24, v6: 56 }
    }
}

impl Mask {
    /// Reads `V4,V6` (`24,56`).
    ///
    /// # Errors
    /// Anything else, or a length past 32 / 128.
    pub fn parse(text: &str) -> Result<Mask, String> {
        let parsed = text
            .split_once(',')
            .and_then(|(v4, v6)| Some((v4.trim().parse::<u8>().ok()?, v6.trim().parse::<u8>().ok()?)));
        match parsed {
            Some((v4, v6)) if v4 <= 32 && v6 <= 128 => Ok(Mask { v4, v6 }),
            _ => Err(format!(
                "{text:?} is not V4,V6: two prefix lengths, at most 32 and 128 (24,56 by default)"
            )),
        }
    }

    /// `ip` with the bits past its family's prefix cleared, as dnstap carries it.
    #[must_use]
    pub fn apply(self, ip: IpAddr) -> Vec<u8> {
        match ip {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.v4)).unwrap_or(0);
                (u32::from(v4) & mask).to_be_bytes().to_vec()
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.v6)).unwrap_or(0);
                (u128::from(v6) & mask).to_be_bytes().to_vec()
            }
        }
    }
}

/// One answered query, as an answering thread hands it over.
#[derive(Debug)]
pub struct Event {
    /// The query, verbatim.
    pub query: Box<[u8]>,
    /// The response sent, verbatim.
    pub response: Box<[u8]>,
    /// Who asked.
    pub client: SocketAddr,
    /// Where it was asked.
    pub server: SocketAddr,
    /// How.
    pub transport: Transport,
    /// When the query was received.
    pub received: SystemTime,
    /// When the response was sent.
    pub answered: SystemTime,
    /// The policy members the answer came from.
    pub members: Option<AnsweredMembers>,
}

impl Event {
    /// The octets it holds (the budget [`QUEUED_OCTETS`] counts).
    fn octets(&self) -> usize {
        self.query.len() + self.response.len()
    }
}

/// The answering threads' side: the queue and the counters.
#[derive(Debug)]
pub struct Tap {
    queue: SyncSender<Event>,
    /// Events the queue could not take, and events the writer could not write.
    dropped: AtomicU64,
    /// Events written to a reader.
    sent: AtomicU64,
    /// Octets of the events queued now ([`QUEUED_OCTETS`] at most).
    queued: AtomicUsize,
    /// The [`Mask`] in force (IPv4 length in the high octet), changed on SIGHUP.
    mask: AtomicU16,
}

impl Tap {
    /// The mask client addresses are given now.
    #[must_use]
    pub fn mask(&self) -> Mask {
        let [v4, v6] = self.mask.load(Ordering::Relaxed).to_be_bytes();
        Mask { v4, v6 }
    }

    /// Masks client addresses so from the next event the writer takes.
    pub fn set_mask(&self, mask: Mask) {
        self.mask
            .store(u16::from_be_bytes([mask.v4, mask.v6]), Ordering::Relaxed);
    }

    /// Hands `event` to the writer; never waits (a full queue drops it, counted).
    pub fn log(&self, event: Event) {
        let octets = event.octets();
        if self.queued.fetch_add(octets, Ordering::Relaxed) + octets > QUEUED_OCTETS {
            self.queued.fetch_sub(octets, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.queue.try_send(event).is_err() {
            self.queued.fetch_sub(octets, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The writer took `event` off the queue.
    fn taken(&self, event: &Event) {
        self.queued.fetch_sub(event.octets(), Ordering::Relaxed);
    }

    /// Events dropped so far (queue full, or lost with a connection).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events written to a reader so far.
    #[must_use]
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// What every message carries.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `--nsid`'s value, else the host name.
    pub identity: Vec<u8>,
    /// Client addresses are masked so (at start; [`Tap::set_mask`] changes it).
    pub mask: Mask,
}

/// Starts the writer thread for `target`; the [`Tap`] to log to and the thread, which
/// ends (closing the stream with STOP) once `stop` is set.
///
/// # Errors
/// The thread could not be started.
pub fn start(
    target: Target,
    identity: Identity,
    engine: Arc<ArcSwap<Engine>>,
    stop: Arc<AtomicBool>,
) -> io::Result<(Arc<Tap>, std::thread::JoinHandle<()>)> {
    let (queue, events) = sync_channel(QUEUE);
    let tap = Arc::new(Tap {
        queue,
        dropped: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        queued: AtomicUsize::new(0),
        mask: AtomicU16::new(0),
    });
    tap.set_mask(identity.mask);
    let writer = Writer {
        target,
        identity,
        engine,
        stop,
        tap: Arc::clone(&tap),
        sets: Sets::default(),
    };
    let thread = std::thread::Builder::new()
        .name("qdns-dnstap".to_owned())
        .spawn(move || writer.run(&events))?;
    Ok((tap, thread))
}

/// A connection to the reader.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// The writer thread's state.
struct Writer {
    target: Target,
    identity: Identity,
    engine: Arc<ArcSwap<Engine>>,
    stop: Arc<AtomicBool>,
    tap: Arc<Tap>,
    sets: Sets,
}

impl Writer {
    fn run(mut self, events: &Receiver<Event>) {
        let mut backoff = Duration::from_millis(100);
        let mut said = false;
        while !self.stop.load(Ordering::Relaxed) {
            let mut stream = match self.connect() {
                Ok(stream) => {
                    if !said {
                        tracing::info!(target = %self.target, "dnstap: connected to the reader");
                    }
                    stream
                }
                Err(err) => {
                    if !said {
                        tracing::warn!(target = %self.target, %err, "dnstap: cannot reach the reader; trying again (events meanwhile wait, then are dropped and counted)");
                        said = true;
                    }
                    self.pause(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            let delivered = self.tap.sent();
            match self.pump(&mut stream, events) {
                Ok(()) => {
                    frames::close(&mut stream);
                    return;
                }
                Err(err) => {
                    // A reader that took events had its outage start now; one that takes
                    // the handshake and then fails is tried again no faster than one that
                    // refuses (and warned about once).
                    if self.tap.sent() > delivered {
                        backoff = Duration::from_millis(100);
                        said = false;
                    }
                    if !said {
                        tracing::warn!(target = %self.target, %err, "dnstap: the reader went away or stopped reading; connecting again");
                        said = true;
                    }
                    self.pause(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Sleeps `time`, or less once `stop` is set.
    fn pause(&self, time: Duration) {
        let until = std::time::Instant::now() + time;
        while !self.stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A new connection, its handshake done.
    fn connect(&self) -> io::Result<Box<dyn Stream>> {
        let mut stream: Box<dyn Stream> = match &self.target {
            Target::Unix(path) => {
                // Not UnixStream::connect: it waits without end while a stopped reader's
                // accept queue is full (each handshake that timed out leaves one there).
                let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
                socket.connect_timeout(&socket2::SockAddr::unix(path)?, HANDSHAKE_TIMEOUT)?;
                let stream = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(socket));
                stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
                stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
                Box::new(stream)
            }
            Target::Tcp(addr) => {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())?
                    .next()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
                let stream = std::net::TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
                stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
                stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
                stream.set_nodelay(true)?;
                Box::new(stream)
            }
        };
        frames::open(&mut stream)?;
        Ok(stream)
    }

    /// Writes events until `stop` (`Ok`) or the connection fails (`Err`; the event
    /// being written is counted dropped).
    fn pump(&mut self, stream: &mut Box<dyn Stream>, events: &Receiver<Event>) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(64 << 10, stream);
        loop {
            let first = match events.recv_timeout(Duration::from_millis(200)) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) if self.stop.load(Ordering::Relaxed) => return out.flush(),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return out.flush(),
            };
            let mut written = 0;
            let mut next = Some(first);
            while let Some(event) = next.take() {
                self.tap.taken(&event);
                if let Err(err) = self.write(&mut out, &event) {
                    self.tap.dropped.fetch_add(1 + written, Ordering::Relaxed);
                    return Err(err);
                }
                written += 1;
                if written < FLUSH_EVERY as u64 {
                    next = events.try_recv().ok();
                }
            }
            if let Err(err) = out.flush() {
                self.tap.dropped.fetch_add(written, Ordering::Relaxed);
                return Err(err);
            }
            self.tap.sent.fetch_add(written, Ordering::Relaxed);
            if written < FLUSH_EVERY as u64 {
                std::thread::sleep(GATHER);
            }
        }
    }

    /// Writes `event`'s two messages.
    fn write(&mut self, out: &mut impl Write, event: &Event) -> io::Result<()> {
        let policy = event
            .members
            .and_then(|members| self.sets.policy(&self.engine.load(), members));
        for message in messages(event, &self.identity.identity, self.tap.mask(), policy) {
            frames::data(out, &message.encode_to_vec())?;
        }
        Ok(())
    }
}

/// Seconds and nanoseconds since the epoch.
fn epoch(at: SystemTime) -> (u64, u32) {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (since.as_secs(), since.subsec_nanos())
}

/// The `AUTH_QUERY` and `AUTH_RESPONSE` messages of `event`.
fn messages(event: &Event, identity: &[u8], mask: Mask, policy: Option<proto::Policy>) -> [proto::Dnstap; 2] {
    let family = if event.client.is_ipv4() {
        proto::SocketFamily::Inet
    } else {
        proto::SocketFamily::Inet6
    };
    let protocol = match event.transport {
        Transport::Udp => proto::SocketProtocol::Udp,
        Transport::Tcp => proto::SocketProtocol::Tcp,
    };
    let asked = epoch(event.received);
    let answered = epoch(event.answered);
    let base = proto::Message {
        r#type: proto::MessageType::AuthQuery as i32,
        socket_family: Some(family as i32),
        socket_protocol: Some(protocol as i32),
        query_address: Some(mask.apply(event.client.ip())),
        response_address: Some(match event.server.ip() {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        }),
        query_port: Some(u32::from(event.client.port())),
        response_port: Some(u32::from(event.server.port())),
        query_time_sec: Some(asked.0),
        query_time_nsec: Some(asked.1),
        query_message: None,
        response_time_sec: None,
        response_time_nsec: None,
        response_message: None,
        policy: None,
    };
    let query = proto::Message {
        query_message: Some(event.query.to_vec()),
        ..base.clone()
    };
    let response = proto::Message {
        r#type: proto::MessageType::AuthResponse as i32,
        response_time_sec: Some(answered.0),
        response_time_nsec: Some(answered.1),
        response_message: Some(event.response.to_vec()),
        policy,
        ..base
    };
    [query, response].map(|message| proto::Dnstap {
        identity: Some(identity.to_vec()),
        version: Some(concat!("qdns ", env!("CARGO_PKG_VERSION")).as_bytes().to_vec()),
        extra: Some(b"path=user".to_vec()),
        r#type: proto::DnstapType::Message as i32,
        message: Some(message),
    })
}

/// The counted policy sets of the engine in force, by their first counter: what a
/// policy answer's members are called (rebuilt when the engine changes).
#[derive(Default)]
struct Sets {
    version: Option<u64>,
    by_counter: HashMap<u32, (String, Vec<String>)>,
}

impl Sets {
    /// The `Policy` naming the set and members of `members`.
    fn policy(&mut self, engine: &Engine, members: AnsweredMembers) -> Option<proto::Policy> {
        if self.version != Some(engine.version()) {
            self.by_counter = engine
                .counted_sets()
                .into_iter()
                .map(|(set, base, names)| (base, (set, names.into_iter().map(str::to_owned).collect())))
                .collect();
            self.version = Some(engine.version());
        }
        let (set, names) = self.by_counter.get(&members.counter)?;
        let chosen: Vec<&str> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < 64 && members.mask & (1u64 << i) != 0)
            .map(|(_, name)| name.as_str())
            .collect();
        Some(proto::Policy {
            r#type: Some("qdns".to_owned()),
            rule: Some(set.clone().into_bytes()),
            action: Some(proto::PolicyAction::LocalData as i32),
            r#match: Some(proto::PolicyMatch::Qname as i32),
            value: Some(chosen.join(",").into_bytes()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Mask, Target};

    #[test]
    fn targets_and_masks_read_and_apply() {
        assert_eq!(
            Target::parse("unix:/run/dnstap.sock"),
            Ok(Target::Unix("/run/dnstap.sock".into()))
        );
        assert_eq!(
            Target::parse("tcp:127.0.0.1:6000"),
            Ok(Target::Tcp("127.0.0.1:6000".into()))
        );
        assert_eq!(Target::parse("tcp:[::1]:6000"), Ok(Target::Tcp("[::1]:6000".into())));
        for bad in ["unix:", "tcp:host", "tcp::6000", "udp:1.2.3.4:5", "/run/x"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        let mask = Mask::parse("24,56").unwrap();
        assert_eq!(mask, Mask::default());
        assert_eq!(mask.apply("192.0.2.77".parse().unwrap()), [192, 0, 2, 0]);
        let v6 = mask.apply("2001:db8:1:2ff:1::1".parse().unwrap());
        assert_eq!(v6[..7], [0x20, 0x01, 0x0d, 0xb8, 0, 1, 2]);
        assert!(v6[7..].iter().all(|&b| b == 0));
        let keep = Mask::parse("32,128").unwrap();
        assert_eq!(keep.apply("192.0.2.77".parse().unwrap()), [192, 0, 2, 77]);
        assert_eq!(
            Mask::parse("0,0").unwrap().apply("192.0.2.77".parse().unwrap()),
            [0, 0, 0, 0]
        );
        for bad in ["33,56", "24,129", "24", "a,b"] {
            assert!(Mask::parse(bad).is_err(), "{bad}");
        }
    }
}
