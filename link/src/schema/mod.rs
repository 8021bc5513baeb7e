//! Link schema numbers: which form a frame's or a persisted file's body has.
//!
//! Every frame but the hello carries the number of the schema its body is written in
//! ([`crate::protocol::encode`]), every persisted file has it in its header; the hello
//! stays in the one form every control reads, and its extension says which schemas the
//! edge reads ([`crate::protocol::HelloExtension::schema`]). A body is decoded by its
//! number, once: as this build's types when it is [`SCHEMA`], else by the frozen forms
//! of that schema (`vN.rs`, one file per earlier schema, holding only the types that
//! changed after it, each with a conversion to today's).
//!
//! Changing the form of anything on the link or in a persisted file (a field added to a
//! type a [`crate::protocol::ToEdge`] holds, a variant…) is a new schema: copy the
//! changed types as they were into `vN.rs` for the current N, bump [`SCHEMA`], route N
//! here, and write the new golden files (`link/tests/schema.rs` says how). Variants are
//! only ever appended, so an unchanged message kind decodes as today's.
//!
//! | Schema | Change |
//! |---|---|
//! | 4 | The last form without a number: frames and files written before numbering (`QDNSSNP1` files) are read as 4. Releases before it (no DNSSEC, no client sets, no load figures) are not read: upgrade through the release that writes 4. |
//! | 5 | Frames and files carry their schema number; the hello's extension (version 4) says which schemas the edge reads, in TLV entries ([`crate::tlv`]). Bodies as 4. |
//! | 6 | The snapshot and its delta carry the deployment intent's revision (`v5.rs`). |
use serde::Deserialize;

use qdns_zone::Snapshot;

use crate::message::{ProtocolError, ToControl, ToEdge};

mod v5;

/// The schema this build writes.
pub const SCHEMA: u16 = 6;

/// The oldest schema this build reads.
pub const OLDEST: u16 = 4;

/// The schema of a frame or file that carries no number (written before numbering).
pub const UNNUMBERED: u16 = 4;

/// Refuses a schema this build does not read.
///
/// # Errors
/// [`ProtocolError::Schema`] for one older than [`OLDEST`] or newer than [`SCHEMA`].
pub fn check(schema: u16) -> Result<u16, ProtocolError> {
    if (OLDEST..=SCHEMA).contains(&schema) {
        Ok(schema)
    } else {
        Err(refused(schema))
    }
}

/// The refusal of a body written in `schema`.
#[must_use]
pub fn refused(schema: u16) -> ProtocolError {
    ProtocolError::Schema {
        schema,
        oldest: OLDEST,
        newest: SCHEMA,
    }
}

/// A control → edge body of schema `schema`.
pub(crate) fn to_edge(schema: u16, body: &[u8]) -> Result<ToEdge, ProtocolError> {
    match check(schema)? {
        SCHEMA => whole(body),
        _ => v5::to_edge(body),
    }
}

/// A control → edge message of [`SCHEMA`] (its body, after the number) in the form of
/// `schema`, for an edge that reads no newer one; `None` when that form is today's.
pub(crate) fn rewrite(schema: u16, message: &[u8]) -> Result<Option<Vec<u8>>, ProtocolError> {
    match check(schema)? {
        SCHEMA => Ok(None),
        _ => v5::rewrite(message),
    }
}

/// An edge → control body of schema `schema`.
pub(crate) fn to_control(schema: u16, body: &[u8]) -> Result<ToControl, ProtocolError> {
    check(schema)?;
    whole(body)
}

/// A persisted snapshot's body of schema `schema`.
pub(crate) fn snapshot(schema: u16, body: &[u8]) -> Result<Snapshot, ProtocolError> {
    match check(schema)? {
        SCHEMA => whole(body),
        _ => v5::snapshot(body),
    }
}

/// `body` decoded as a `T` that spans it exactly.
pub(crate) fn whole<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ProtocolError> {
    match postcard::take_from_bytes(body)? {
        (value, []) => Ok(value),
        (_, rest) => Err(ProtocolError::Trailing { octets: rest.len() }),
    }
}
