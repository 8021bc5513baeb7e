//! DNS wire format (RFC 1035 §4, RFC 6891): what the hot path needs, hand-written.
//!
//! Hand-written rather than taken from `domain`/`hickory-proto` because the query path
//! must be zero-copy and allocation-free: a query is parsed in place into a small `Copy`
//! view, and the response is written into a caller-owned buffer from precomputed bytes.
//! The zone side (master files, presentation format) uses hickory-proto in `qdns-zone`.
pub mod builder;
pub mod edns;
pub mod header;
pub mod name;
pub mod question;
pub mod rcode;
pub mod rtype;

pub use builder::{Builder, Full};
pub use edns::Edns;
pub use header::Header;
pub use name::NameBuf;
pub use question::{parse_query, Query, Reject};
pub use rcode::Rcode;
