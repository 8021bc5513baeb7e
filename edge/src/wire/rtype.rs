//! RR type and class codes the responder treats specially (RFC 1035 §3.2.2, §3.2.4).

/// IPv4 address.
pub const A: u16 = 1;
/// Name server.
pub const NS: u16 = 2;
/// Canonical name.
pub const CNAME: u16 = 5;
/// Start of authority.
pub const SOA: u16 = 6;
/// Domain name pointer.
pub const PTR: u16 = 12;
/// Mail exchange.
pub const MX: u16 = 15;
/// Text strings.
pub const TXT: u16 = 16;
/// IPv6 address.
pub const AAAA: u16 = 28;
/// Service locator.
pub const SRV: u16 = 33;
/// EDNS OPT pseudo-record.
pub const OPT: u16 = 41;
/// Naming authority pointer (RFC 3403).
pub const NAPTR: u16 = 35;
/// Delegation signer (answered from the parent side of a cut).
pub const DS: u16 = 43;
/// DNSSEC signature (RFC 4034 §3); may stand beside a CNAME.
pub const RRSIG: u16 = 46;
/// DNSSEC next secure (RFC 4034 §4); may stand beside a CNAME.
pub const NSEC: u16 = 47;
/// Service binding (RFC 9460).
pub const SVCB: u16 = 64;
/// HTTPS service binding (RFC 9460).
pub const HTTPS: u16 = 65;
/// Transaction key / signature (meta types, never asked for).
pub const TKEY: u16 = 249;
/// Transaction signature.
pub const TSIG: u16 = 250;
/// Incremental zone transfer.
pub const IXFR: u16 = 251;
/// Zone transfer.
pub const AXFR: u16 = 252;
/// Obsolete mailbox queries.
pub const MAILB: u16 = 253;
/// Obsolete mail agent queries.
pub const MAILA: u16 = 254;
/// Any type (RFC 8482).
pub const ANY: u16 = 255;

/// Certification authority authorization (RFC 8659).
pub const CAA: u16 = 257;

/// Class IN.
pub const CLASS_IN: u16 = 1;
/// QCLASS ANY (RFC 1035 §3.2.5).
pub const CLASS_ANY: u16 = 255;

/// A query of this class is answered from our (class IN) zones: IN itself, and ANY,
/// which knotd, NSD and BIND answer with their IN data (the records say IN; the
/// question keeps the class asked).
#[must_use]
pub fn answers_class(qclass: u16) -> bool {
    qclass == CLASS_IN || qclass == CLASS_ANY
}
