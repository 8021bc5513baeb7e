//! A light edge for the control↔edge link: it says hello as an edge of a given
//! protocol version, reads what control sends, applies snapshots and deltas to a
//! snapshot it keeps (no engine, no DNS), and acknowledges versions as edges do. Many
//! of them stand in for a fleet; one speaking an older hello stands in for an edge
//! that predates a feature.
use std::{
    io::{Read, Write},
    net::{IpAddr, SocketAddr},
    os::unix::net::UnixStream,
    path::Path,
    sync::Arc,
    time::Duration,
};

use qdns_link::{
    delta,
    protocol::{self, HelloExtension, ToControl, ToEdge},
};
use qdns_zone::Snapshot;

/// What the light edge received last, by form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A whole snapshot.
    Whole,
    /// A delta.
    Delta,
    /// A health delta.
    Health,
    /// Anything else (keepalive, cookies).
    Other,
}

/// A byte stream to control: a Unix socket, or mutual TLS over TCP.
pub trait Link: Read + Write + Send {}
impl<T: Read + Write + Send> Link for T {}

/// A light edge connected to control.
pub struct LinkClient {
    stream: Box<dyn Link>,
    /// Whether it applies what comes (else it only follows versions, as a fleet of
    /// thousands must: no snapshot copy each).
    keeps: bool,
    /// The snapshot it holds (after applying what came), when it keeps one.
    pub snapshot: Option<Snapshot>,
    /// Octets read (frames with their prefixes).
    pub received: u64,
    /// The snapshot version it acknowledged last.
    pub version: Option<u64>,
    /// The health delta it holds.
    pub seq: u64,
    /// Frames that folded several health deltas into one.
    pub folded: u64,
    /// The link schema of the last frame read.
    pub schema: u16,
}

/// Files and names for a light edge on a `tls://` link.
pub struct TlsEdge<'a> {
    /// The location CA's directory (`qdnsctl pki`): `ca.pem`, `NAME.pem`, `NAME.key`.
    pub pki: &'a Path,
    /// The edge's name (its certificate's, and its hello's).
    pub name: &'a str,
    /// Control's address.
    pub control: SocketAddr,
    /// The loopback address to connect from (control caps connections per source).
    pub source: IpAddr,
}

impl LinkClient {
    /// Connects to control's edge socket at `path` and says hello as edge `name` with
    /// hello extension `extension` (`None`: an edge from before extensions), serving
    /// `serving`.
    ///
    /// # Panics
    /// When control cannot be reached.
    #[must_use]
    pub fn connect(
        path: &Path,
        name: &str,
        serving: Option<&Snapshot>,
        extension: Option<HelloExtension>,
    ) -> LinkClient {
        let stream = UnixStream::connect(path).expect("control's edge socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("a read timeout");
        let mut client = LinkClient {
            stream: Box::new(stream),
            keeps: true,
            snapshot: serving.cloned(),
            received: 0,
            version: serving.map(|s| s.version),
            seq: 0,
            folded: 0,
            schema: 0,
        };
        client.hello(name, extension);
        client
    }

    /// Connects to control's `tls://` edge socket as `edge` (mutual TLS with its
    /// certificate), says hello serving version `serving` with `extension`, and follows
    /// versions without keeping a snapshot.
    ///
    /// # Panics
    /// When control cannot be reached or the handshake fails.
    #[must_use]
    pub fn connect_tls(edge: &TlsEdge<'_>, serving: Option<u64>, extension: HelloExtension) -> LinkClient {
        let files = qdns_link::tls::TlsFiles {
            cert: edge.pki.join(format!("{}.pem", edge.name)),
            key: edge.pki.join(format!("{}.key", edge.name)),
            ca: edge.pki.join("ca.pem"),
            crl: None,
        };
        let config = qdns_link::tls::client_config(&files).expect("the edge's TLS files");
        let server = rustls::pki_types::ServerName::from(edge.control.ip());
        let connection = rustls::ClientConnection::new(Arc::new(config), server).expect("a TLS client");
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
        socket
            .bind(&SocketAddr::new(edge.source, 0).into())
            .expect("the source address");
        socket.connect(&edge.control.into()).expect("control's edge socket");
        // No read timeout: a fleet member waits for control as long as control is up.
        let tcp: std::net::TcpStream = socket.into();
        let mut client = LinkClient {
            stream: Box::new(rustls::StreamOwned::new(connection, tcp)),
            keeps: false,
            snapshot: None,
            received: 0,
            version: serving,
            seq: 0,
            folded: 0,
            schema: 0,
        };
        client.hello(edge.name, Some(extension));
        client
    }

    /// Says hello as edge `name` serving the version it holds.
    fn hello(&mut self, name: &str, extension: Option<HelloExtension>) {
        let version = self.version;
        let hello = match extension {
            Some(extension) => protocol::encode_hello(name, version, &extension).expect("a hello"),
            None => protocol::encode_in(
                qdns_link::schema::UNNUMBERED,
                &ToControl::Hello {
                    edge: name.to_owned(),
                    serving: version,
                },
            )
            .expect("a hello"),
        };
        self.stream.write_all(&hello).expect("the hello sent");
        self.stream.flush().expect("the hello sent");
    }

    /// This build's extension (deltas, the current link schema) naming the zones of
    /// `serving` and their digests.
    #[must_use]
    pub fn takes_deltas(serving: Option<&Snapshot>) -> HelloExtension {
        HelloExtension {
            version: protocol::HELLO_EXTENSION_VERSION,
            schema: qdns_link::schema::SCHEMA,
            keepalive_secs: 0,
            cookies: false,
            deltas: true,
            zones: serving.map_or_else(Vec::new, |s| {
                s.zones
                    .iter()
                    .map(|z| (z.origin.clone(), delta::zone_digest(z)))
                    .collect()
            }),
        }
    }

    /// Reads one frame and applies it; acknowledges a snapshot or delta as an edge does.
    ///
    /// # Panics
    /// When the link fails, a frame does not decode, or a delta does not apply.
    pub fn read_frame(&mut self) -> Received {
        self.try_read_frame().expect("a frame from control")
    }

    /// [`LinkClient::read_frame`], `None` when the link ends or fails.
    ///
    /// # Panics
    /// When a frame does not decode, or a delta does not apply.
    pub fn try_read_frame(&mut self) -> Option<Received> {
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).ok()?;
        let len = protocol::frame_len(prefix).expect("a frame length");
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).ok()?;
        self.received += len as u64 + 4;
        let (schema, message) = protocol::decode_to_edge(&body).expect("a frame that decodes");
        self.schema = schema;
        let (received, ack) = match message {
            ToEdge::Snapshot { snapshot, seq } => {
                let ack = (snapshot.version, seq);
                self.snapshot = self.keeps.then_some(*snapshot);
                (Received::Whole, Some(ack))
            }
            ToEdge::Delta(change) => {
                let ack = (change.version, change.seq);
                assert_eq!(self.version, Some(change.base), "a delta from the version held");
                if self.keeps {
                    let base = self.snapshot.take().expect("a delta after a snapshot");
                    self.snapshot = Some(delta::apply(base, *change).expect("the delta applies"));
                }
                (Received::Delta, Some(ack))
            }
            ToEdge::Health(health) => {
                assert_eq!(health.seq, self.seq + 1, "health deltas in sequence");
                self.take_health(health)
            }
            ToEdge::HealthSince { since, delta } => {
                assert_eq!(since, self.seq, "folded health deltas from the one held");
                self.folded += 1;
                self.take_health(delta)
            }
            ToEdge::Keepalive | ToEdge::Cookies { .. } => (Received::Other, None),
        };
        if let Some((snapshot, seq)) = ack {
            self.version = Some(snapshot);
            self.seq = seq;
            let frame = protocol::encode_in(schema, &ToControl::Applied { snapshot, seq }).expect("an ack");
            self.stream.write_all(&frame).ok()?;
            self.stream.flush().ok()?;
        }
        Some(received)
    }

    /// Writes a health delta's words into the snapshot held.
    fn take_health(&mut self, health: protocol::HealthDelta) -> (Received, Option<(u64, u64)>) {
        if let Some(snapshot) = self.snapshot.as_mut() {
            for (index, word) in health.words {
                snapshot.bitmap[index as usize] = word;
            }
        }
        (Received::Health, Some((health.snapshot, health.seq)))
    }

    /// Reads frames until one of `form` came; what came before it, in order.
    pub fn until(&mut self, form: Received) -> Vec<Received> {
        let mut seen = Vec::new();
        loop {
            let got = self.read_frame();
            seen.push(got);
            if got == form {
                return seen;
            }
        }
    }
}
