//! The zone file schema (SPEC §2): one TOML file per zone.
//!
//! Spans are kept on every value an operator may get wrong, so a rejection can name the
//! line as well as the key. Unknown keys are rejected (a typo must not be ignored).
use serde::Deserialize;
use toml::Spanned;

/// Default TTL of a zone whose `[zone]` table has no `ttl`.
pub const DEFAULT_TTL: u32 = 3600;

/// A whole zone file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneFile {
    /// The `[zone]` table.
    pub zone: ZoneSection,
    /// The `[[rrset]]` tables.
    #[serde(default)]
    pub rrset: Vec<RrsetEntry>,
}

/// `[zone]`: origin, default TTL, optional master file, SOA and apex NS.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneSection {
    /// Absolute apex name, e.g. `example.com.`.
    pub origin: Spanned<String>,
    /// Default TTL of the records below, and the SOA record's TTL.
    pub ttl: Option<Spanned<i64>>,
    /// RFC 1035 master file with static records, relative to this file.
    pub include: Option<Spanned<String>>,
    /// `[zone.soa]`; may instead come from the included master file.
    pub soa: Option<Spanned<SoaSection>>,
    /// `[zone.ns]`; may instead come from the included master file.
    pub ns: Option<Spanned<NsSection>>,
}

/// `[zone.soa]` (RFC 1035 §3.3.13).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoaSection {
    /// Primary name server.
    pub mname: Spanned<String>,
    /// Mailbox of the person responsible, as a domain name.
    pub rname: Spanned<String>,
    /// Zone serial.
    pub serial: Spanned<i64>,
    /// Secondary refresh interval (seconds).
    pub refresh: Spanned<i64>,
    /// Secondary retry interval (seconds).
    pub retry: Spanned<i64>,
    /// Secondary expiry (seconds).
    pub expire: Spanned<i64>,
    /// Negative-caching TTL (RFC 2308).
    pub minimum: Spanned<i64>,
}

/// `[zone.ns]`: the apex name servers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NsSection {
    /// Absolute or relative server names.
    pub names: Vec<Spanned<String>>,
}

/// One `[[rrset]]` table (plain record set).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RrsetEntry {
    /// Owner: relative to origin, `@` for the apex, or absolute with a trailing dot.
    pub name: Spanned<String>,
    /// RR type mnemonic (`A`, `AAAA`, `MX`, ...).
    #[serde(rename = "type")]
    pub rtype: Spanned<String>,
    /// TTL; the zone's `ttl` when absent.
    pub ttl: Option<Spanned<i64>>,
    /// RDATA of each record, in presentation format for the type.
    pub values: Spanned<Vec<Spanned<String>>>,
}
