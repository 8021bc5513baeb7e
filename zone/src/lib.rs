//! qdns-zone: zone files in, validated snapshot out.
//!
//! ```text
//!   zones/*.toml ──schema (serde, spans)──┐
//!   [zone] include = master file ─master─┴─► validate ─► Snapshot { version, zones }
//! ```
//!
//! Both daemons use it: `qdns-control` compiles zones into snapshots and pushes them to
//! edges, and `qdns-edge --zones DIR` (standalone mode) loads them itself. The
//! [`snapshot`] module is the model the edge consumes; it holds names and RDATA in
//! uncompressed wire format so the edge can precompute answers without parsing text.
//! Every rejection names the file, the line or key, and the reason ([`ZoneError`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod checks;
pub mod client;
pub mod dnssec;
pub mod error;
pub mod evaluate;
pub mod geo;
pub mod load;
pub mod master;
pub mod name;
pub mod policy;
pub mod schema;
pub mod sites;
pub mod snapshot;
pub mod update;

pub use error::ZoneError;
pub use load::{
    load_dir, load_dir_from, load_dir_pending, load_dir_with, load_zone_file, parse_zone_text, parse_zone_text_with,
    secondary_copy_name, LoadContext, Pending, Sources, CATALOG_MEMBERS_DIR,
};
pub use snapshot::{Answer, Member, Policy, PolicyKind, RecordSet, Slot, SlotRule, Snapshot, Zone};
