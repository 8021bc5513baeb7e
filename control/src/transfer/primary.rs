//! A zone taken from a primary: what transfer-in follows and a catalog's members
//! inherit.
use std::net::SocketAddr;

/// A zone taken from a primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    /// The primary.
    pub addr: SocketAddr,
    /// The key requests are signed with.
    pub tsig: Option<String>,
    /// A catalog zone (RFC 9432): its members are taken, it is not served.
    pub catalog: bool,
}
