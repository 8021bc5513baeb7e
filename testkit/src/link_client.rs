//! A light edge for the control↔edge link: it says hello as an edge of a given
//! protocol version, reads what control sends, applies snapshots and deltas to a
//! snapshot it keeps (no engine, no DNS), and acknowledges versions as edges do. Many
//! of them stand in for a fleet; one speaking an older hello stands in for an edge
//! that predates a feature.
use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::Path,
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

/// A light edge connected to control over a Unix socket.
pub struct LinkClient {
    stream: UnixStream,
    /// The snapshot it holds (after applying what came).
    pub snapshot: Option<Snapshot>,
    /// Octets read (frames with their prefixes).
    pub received: u64,
    /// The health delta it holds.
    pub seq: u64,
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
        let mut stream = UnixStream::connect(path).expect("control's edge socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("a read timeout");
        let version = serving.map(|s| s.version);
        let hello = match extension {
            Some(extension) => protocol::encode_hello(name, version, &extension).expect("a hello"),
            None => protocol::encode(&ToControl::Hello {
                edge: name.to_owned(),
                serving: version,
            })
            .expect("a hello"),
        };
        stream.write_all(&hello).expect("the hello sent");
        LinkClient {
            stream,
            snapshot: serving.cloned(),
            received: 0,
            seq: 0,
        }
    }

    /// A version 3 extension (deltas) naming the zones of `serving` and their digests.
    #[must_use]
    pub fn takes_deltas(serving: Option<&Snapshot>) -> HelloExtension {
        HelloExtension {
            version: 3,
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
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).expect("a frame from control");
        let len = protocol::frame_len(prefix).expect("a frame length");
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).expect("the frame's body");
        self.received += len as u64 + 4;
        let (received, ack) = match protocol::decode_to_edge(&body).expect("a frame that decodes") {
            ToEdge::Snapshot { snapshot, seq } => {
                let ack = (snapshot.version, seq);
                self.snapshot = Some(*snapshot);
                (Received::Whole, Some(ack))
            }
            ToEdge::Delta(change) => {
                let base = self.snapshot.take().expect("a delta after a snapshot");
                let ack = (change.version, change.seq);
                self.snapshot = Some(delta::apply(base, *change).expect("the delta applies"));
                (Received::Delta, Some(ack))
            }
            ToEdge::Health(health) => {
                let snapshot = self.snapshot.as_mut().expect("health after a snapshot");
                for (index, word) in health.words {
                    snapshot.bitmap[index as usize] = word;
                }
                (Received::Health, Some((health.snapshot, health.seq)))
            }
            ToEdge::Keepalive | ToEdge::Cookies { .. } => (Received::Other, None),
        };
        if let Some((snapshot, seq)) = ack {
            self.seq = seq;
            let frame = protocol::encode(&ToControl::Applied { snapshot, seq }).expect("an ack");
            self.stream.write_all(&frame).expect("the ack sent");
        }
        received
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
