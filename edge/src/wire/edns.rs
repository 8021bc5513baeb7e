//! EDNS(0) (RFC 6891): the OPT pseudo-record of a query and of our response.

/// UDP payload size this server advertises and uses as its ceiling by default
/// (DNS flag day 2020 value: avoids IP fragmentation).
pub const DEFAULT_UDP_PAYLOAD: u16 = 1232;
/// Smallest UDP payload an EDNS requestor may advertise; lower values count as 512
/// (RFC 6891 §6.2.5).
pub const MIN_UDP_PAYLOAD: u16 = 512;
/// Octets of an OPT record without options.
pub const OPT_LEN: usize = 11;
/// The DO bit in the OPT TTL flags (RFC 3225).
pub const DO_BIT: u16 = 0x8000;
/// The NSID option code (RFC 5001).
pub const OPTION_NSID: u16 = 3;
/// Longest server identifier sent in an NSID option.
pub const NSID_MAX: usize = 128;

/// The OPT record of a query, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    /// Requestor's UDP payload size (already raised to at least 512).
    pub udp_payload: u16,
    /// EDNS version.
    pub version: u8,
    /// The DO bit (copied into the response, RFC 3225 §3).
    pub dnssec_ok: bool,
    /// The query carried an NSID option (RFC 5001 §2.1: a request for our identifier).
    pub nsid: bool,
}

/// Writes our OPT record: payload `udp_payload`, extended RCODE bits, version 0, DO echoed.
#[must_use]
pub fn opt_record(udp_payload: u16, extended_rcode: u8, dnssec_ok: bool) -> [u8; OPT_LEN] {
    let [p0, p1] = udp_payload.to_be_bytes();
    let [f0, f1] = if dnssec_ok { DO_BIT } else { 0 }.to_be_bytes();
    [0, 0, 41, p0, p1, extended_rcode, 0, f0, f1, 0, 0]
}

/// The NSID option carrying `id` (RFC 5001 §2.3), written after an OPT record whose
/// RDLENGTH is then `4 + id.len()`.
#[must_use]
pub fn nsid_option_header(id: &[u8]) -> [u8; 4] {
    let [c0, c1] = OPTION_NSID.to_be_bytes();
    let [l0, l1] = (id.len().min(NSID_MAX) as u16).to_be_bytes();
    [c0, c1, l0, l1]
}
