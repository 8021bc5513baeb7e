//! Schema 5 (and 4: the same forms without a number), frozen: the types that changed
//! after it, as they were. Schema 6 added [`Now::intent_revision`] to the snapshot and
//! its delta; every other message kind is today's.
//!
//! A message is its kind (postcard's varint variant index, one octet below 128) then
//! the variant's fields in order, so only kinds 0 (`Snapshot`) and 4 (`Delta`) differ.
use qdns_zone::{Snapshot as Now, Zone};

use super::whole;
use crate::{
    delta::{SnapshotDelta as DeltaNow, ZoneChange},
    message::{ProtocolError, ToEdge},
};

/// Schema 5's `Snapshot`: version, zones, bitmap (postcard writes a struct's fields in
/// order, as a tuple's).
type Snapshot = (u64, Vec<Zone>, Vec<u64>);

/// Schema 5's `SnapshotDelta`: base, version, seq, bitmap, zones.
type SnapshotDelta = (u64, u64, u64, Vec<u64>, Vec<ZoneChange>);

/// A persisted snapshot of schema 5.
pub(super) fn snapshot(body: &[u8]) -> Result<Now, ProtocolError> {
    let (version, zones, bitmap): Snapshot = whole(body)?;
    Ok(Now::new(version, zones, bitmap))
}

/// A control → edge message of schema 5.
pub(super) fn to_edge(message: &[u8]) -> Result<ToEdge, ProtocolError> {
    Ok(match message.split_first() {
        Some((0, fields)) => {
            let ((version, zones, bitmap), seq): (Snapshot, u64) = whole(fields)?;
            let snapshot = Box::new(Now::new(version, zones, bitmap));
            ToEdge::Snapshot { snapshot, seq }
        }
        Some((4, fields)) => {
            let (base, version, seq, bitmap, zones): SnapshotDelta = whole(fields)?;
            let intent_revision = 0;
            let delta = DeltaNow {
                base,
                version,
                seq,
                bitmap,
                intent_revision,
                zones,
            };
            ToEdge::Delta(Box::new(delta))
        }
        _ => whole(message)?,
    })
}

/// A message of today's schema in schema 5's form (4's is the same): kinds 0 and 4 as
/// they were (the kind as one octet, then the fields), `None` for the others.
pub(super) fn rewrite(message: &[u8]) -> Result<Option<Vec<u8>>, ProtocolError> {
    if !matches!(message.first(), Some(0 | 4)) {
        return Ok(None);
    }
    Ok(match whole(message)? {
        ToEdge::Snapshot { snapshot, seq } => {
            let Now {
                version, zones, bitmap, ..
            } = *snapshot;
            Some(postcard::to_stdvec(&(0u8, (version, zones, bitmap), seq))?)
        }
        ToEdge::Delta(delta) => {
            let DeltaNow {
                base,
                version,
                seq,
                bitmap,
                zones,
                ..
            } = *delta;
            Some(postcard::to_stdvec(&(4u8, (base, version, seq, bitmap, zones)))?)
        }
        _ => None,
    })
}
