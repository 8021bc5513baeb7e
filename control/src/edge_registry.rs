//! Who is linked: the edges connected now, with what each acknowledged, the connections
//! refused and why, and the snapshot frame every newly connected edge gets (encoded once
//! per version and delta). The state holds it; `crate::edges` serves the links that fill it.
use std::sync::Arc;

use qdns_link::protocol;
use serde::{Deserialize, Serialize};

/// An encoded frame for every edge.
pub type Frame = Arc<Vec<u8>>;

/// Health delta `seq` of snapshot `version`, encoded, and its words (to fold queued
/// deltas into one frame for a slow edge).
#[derive(Debug, Clone)]
pub struct HealthUpdate {
    /// The snapshot version.
    pub version: u64,
    /// The delta's sequence number.
    pub seq: u64,
    /// `ToEdge::Health`.
    pub frame: Frame,
    /// Its words.
    pub words: Arc<Vec<(u32, u64)>>,
}

/// What goes to every linked edge, in order. Each connection knows what it sent last
/// and skips what that already holds (a full snapshot taken later than an update).
#[derive(Debug, Clone)]
pub enum Update {
    /// A health delta.
    Health(HealthUpdate),
    /// A new snapshot version.
    Snapshot(SnapshotUpdate),
}

/// Snapshot `version` (at health delta `seq`) replaced `base`: `delta` goes to an edge
/// that takes deltas and was sent `base`; the others get the full snapshot, encoded once
/// when the first of them needs it.
#[derive(Debug, Clone)]
pub struct SnapshotUpdate {
    /// The version replaced.
    pub base: u64,
    /// The new version.
    pub version: u64,
    /// Health deltas folded into it.
    pub seq: u64,
    /// `ToEdge::Delta` from `base` (none when it could not be encoded).
    pub delta: Option<Frame>,
}

/// A connected edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeInfo {
    /// Its name.
    pub name: String,
    /// Snapshot version it acknowledged.
    pub snapshot: Option<u64>,
    /// Health delta it acknowledged.
    pub seq: u64,
    /// Unix seconds of the connection.
    pub connected_at: u64,
    /// Its XDP fast path, as last reported (none without `--xdp`).
    pub xdp: Option<protocol::XdpReport>,
}

/// The edges connected now (by connection id) and the connections refused before a
/// snapshot was sent, by reason.
#[derive(Debug, Default)]
pub struct EdgeRegistry {
    connected: std::collections::BTreeMap<u64, EdgeInfo>,
    refused: std::collections::BTreeMap<&'static str, u64>,
    /// The snapshot frame last sent, with the version and delta it holds: every edge
    /// connecting until either moves gets these octets, encoded once.
    snapshot_frame: Option<(u64, u64, Frame)>,
    /// The digests of the zones of a snapshot version, in order (`qdns_link::delta`):
    /// what an edge's hello says it serves is compared with them.
    digests: Option<(u64, Arc<Vec<u64>>)>,
}

impl EdgeRegistry {
    /// Connection `id` is edge `info`.
    pub fn connect(&mut self, id: u64, info: EdgeInfo) {
        self.connected.insert(id, info);
    }

    /// Connection `id` ended; what it was.
    pub fn disconnect(&mut self, id: u64) -> Option<EdgeInfo> {
        self.connected.remove(&id)
    }

    /// Connection `id`, to record what it acknowledged.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut EdgeInfo> {
        self.connected.get_mut(&id)
    }

    /// The connected edges, oldest connection first.
    pub fn connected(&self) -> impl Iterator<Item = &EdgeInfo> {
        self.connected.values()
    }

    /// Connections open now that name edge `name`.
    #[must_use]
    pub fn named(&self, name: &str) -> usize {
        self.connected.values().filter(|info| info.name == name).count()
    }

    /// The full-snapshot frame for `snapshot` at delta `seq`: encoded once per version
    /// and delta, however many edges connect (a thousand edges reconnecting after a
    /// restart cost one encoding and one frame's memory, not a thousand).
    pub fn snapshot_frame(
        &mut self,
        snapshot: &qdns_zone::Snapshot,
        seq: u64,
    ) -> Result<Frame, protocol::ProtocolError> {
        if let Some((version, at, frame)) = &self.snapshot_frame {
            if *version == snapshot.version && *at == seq {
                return Ok(Arc::clone(frame));
            }
        }
        // The old frame goes first: at most one is held.
        self.snapshot_frame = None;
        let frame: Frame = Arc::new(protocol::encode_snapshot(snapshot, seq)?);
        self.snapshot_frame = Some((snapshot.version, seq, Arc::clone(&frame)));
        Ok(frame)
    }

    /// Lets go of the full-snapshot frame unless it holds `version`: after a new version
    /// went out as deltas, the old frame (tens of MiB for a large zone set) would
    /// otherwise stay until an edge next needs a whole snapshot.
    pub fn retire_frame(&mut self, version: u64) {
        if self.snapshot_frame.as_ref().is_some_and(|(v, _, _)| *v != version) {
            self.snapshot_frame = None;
        }
    }

    /// The digest of each zone of `snapshot`, computed once per version.
    pub fn zone_digests(&mut self, snapshot: &qdns_zone::Snapshot) -> Arc<Vec<u64>> {
        if let Some((version, digests)) = &self.digests {
            if *version == snapshot.version {
                return Arc::clone(digests);
            }
        }
        let digests = Arc::new(qdns_link::delta::zone_digests(snapshot));
        self.digests = Some((snapshot.version, Arc::clone(&digests)));
        digests
    }

    /// Counts a connection refused for `reason`.
    pub fn refuse(&mut self, reason: &'static str) {
        *self.refused.entry(reason).or_default() += 1;
    }

    /// Connections refused, by reason.
    pub fn refused(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.refused.iter().map(|(reason, n)| (*reason, *n))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::EdgeRegistry;

    #[test]
    fn the_snapshot_frame_is_encoded_once_per_version_and_delta() {
        let mut registry = EdgeRegistry::default();
        let snapshot = qdns_zone::Snapshot::new(7, Vec::new(), vec![u64::MAX]);
        let first = registry.snapshot_frame(&snapshot, 0).unwrap();
        let again = registry.snapshot_frame(&snapshot, 0).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same octets, not a second encoding");
        let later = registry.snapshot_frame(&snapshot, 1).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &later) && first != later,
            "a delta later: a new frame"
        );
        drop((first, again));
        assert_eq!(Arc::strong_count(&later), 2, "the registry holds only the newest");
    }
}
