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
    /// The `[[health_check]]` tables.
    #[serde(default)]
    pub health_check: Vec<HealthCheckEntry>,
    /// The `[[rrset]]` tables.
    #[serde(default)]
    pub rrset: Vec<RrsetEntry>,
    /// The `[[cidr_collection]]` tables (SPEC §10).
    #[serde(default)]
    pub cidr_collection: Vec<CidrCollectionEntry>,
}

/// One `[[cidr_collection]]` table: named locations, each a list of prefixes, for
/// `policy = "ip"` members (`cidr = "COLLECTION/LOCATION"`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CidrCollectionEntry {
    /// Unique id within the zone file.
    pub id: Spanned<String>,
    /// Location name → prefixes (`ADDRESS/LEN`).
    pub locations: Option<Spanned<std::collections::BTreeMap<String, Vec<Spanned<String>>>>>,
    /// A file of `PREFIX LOCATION` lines, relative to the zone file (`#` starts a
    /// comment), for large lists.
    pub file: Option<Spanned<String>>,
}

/// One `[[health_check]]` table (SPEC §2, §4).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckEntry {
    /// Unique id within the zone file.
    pub id: Spanned<String>,
    /// `http`, `https`, `tcp`, `calculated` or `external`.
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    /// Target address (http, https, tcp).
    pub ip: Option<Spanned<String>>,
    /// Target port (default 80 / 443; required for tcp).
    pub port: Option<Spanned<i64>>,
    /// HTTP path (default `/`).
    pub path: Option<Spanned<String>>,
    /// HTTP Host header and TLS SNI (default the ip).
    pub host: Option<Spanned<String>>,
    /// Seconds between checks: 10 or 30 (default 30).
    pub interval: Option<Spanned<i64>>,
    /// Consecutive results to change state, 1..=10 (default 3).
    pub failure_threshold: Option<Spanned<i64>>,
    /// The body's first 5120 bytes must contain it (http, https).
    pub search_string: Option<Spanned<String>>,
    /// HTTPS: validate the server certificate (Mozilla roots plus `--tls-ca`) for `host`.
    pub tls_verify: Option<Spanned<bool>>,
    /// HTTP(S): read a load figure from each response (load shedding).
    pub load: Option<Spanned<LoadEntry>>,
    /// Healthy ↔ unhealthy.
    #[serde(default)]
    pub inverted: bool,
    /// Always healthy.
    #[serde(default)]
    pub disabled: bool,
    /// Children of a calculated check.
    pub children: Option<Spanned<Vec<Spanned<String>>>>,
    /// Healthy iff at least this many children are (calculated).
    pub healthy_threshold: Option<Spanned<i64>>,
}

/// A check's `load = { from, low, high }` (SPEC §10 "Load shedding").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadEntry {
    /// `header:NAME` or `json:/pointer`.
    pub from: String,
    /// Full weight at or below this figure.
    pub low: f64,
    /// No weight at or above this figure.
    pub high: f64,
}

/// One member of a policy record set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberEntry {
    /// Unique id within the record set.
    pub id: Spanned<String>,
    /// Weight 0..=255 (weighted).
    pub weight: Option<Spanned<i64>>,
    /// `primary` or `secondary` (failover).
    pub role: Option<Spanned<String>>,
    /// RDATA in presentation format (or `alias`).
    pub values: Option<Spanned<Vec<Spanned<String>>>>,
    /// Health check id; none = always healthy.
    pub health_check: Option<Spanned<String>>,
    /// Another record set of the zone, same type (instead of `values`).
    pub alias: Option<Spanned<String>>,
    /// Alias healthy iff its target has a healthy member.
    #[serde(default)]
    pub evaluate_target_health: bool,
    /// `COLLECTION/LOCATION` or `*` (ip sets).
    pub cidr: Option<Spanned<String>>,
    /// A continent, country or subdivision code, or `*` (geo sets).
    pub location: Option<Spanned<String>>,
    /// The locations (control's `--location`) where the member exists; elsewhere it is
    /// left out of the set (absent, not unhealthy).
    pub sites: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One availability zone of a zonal record set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AzEntry {
    /// AZ name, unique within the record set.
    pub az: Spanned<String>,
    /// The node addresses answered for this AZ.
    pub values: Spanned<Vec<Spanned<String>>>,
    /// Target group → health check ids of its targets in this AZ.
    pub targets: Spanned<std::collections::BTreeMap<String, Vec<Spanned<String>>>>,
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
    /// Sign the zone (in control; edges get signatures, never keys).
    pub dnssec: Option<Spanned<bool>>,
    /// `ECDSAP256SHA256` (default) or `ED25519`.
    pub dnssec_algorithm: Option<Spanned<String>>,
    /// Prefixes (`ADDRESS/LEN` or an address) that may transfer the zone from
    /// control's `--transfer-listen` (SPEC §10).
    pub transfer_allow: Option<Spanned<Vec<Spanned<String>>>>,
    /// The TSIG key (a name from control's `tsig_keys`) transfers and NOTIFY are
    /// signed with; a request without it is refused.
    pub transfer_tsig: Option<Spanned<String>>,
    /// Secondaries (`ADDRESS:PORT`) sent a NOTIFY at each serial change.
    pub notify: Option<Spanned<Vec<Spanned<String>>>>,
    /// A hidden primary (`ADDRESS:PORT`) the zone's records come from by AXFR (control
    /// only); the file adds health checks and policy sets on top.
    pub primary: Option<Spanned<String>>,
    /// The TSIG key (from control's `tsig_keys`) transfers from the primary and its
    /// NOTIFY are signed with.
    pub primary_tsig: Option<Spanned<String>>,
    /// A catalog zone (RFC 9432) from `primary`: not served; its member zones are
    /// taken from the same primary and served, added and removed as it changes.
    pub catalog: Option<Spanned<bool>>,
    /// `[[zone.update]]`: who may change which records by dynamic update (RFC 2136,
    /// SPEC §11), on control's `--transfer-listen`.
    pub update: Option<Vec<Spanned<UpdateEntry>>>,
}

/// One `[[zone.update]]` rule: a TSIG key may add and delete records of `types` at
/// names matching `names`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateEntry {
    /// The key's name (from control's `tsig_keys`).
    pub key: Spanned<String>,
    /// Owner patterns relative to the origin: `@` the apex, `*` exactly one label,
    /// `**` any number of labels (at least one).
    pub names: Spanned<Vec<Spanned<String>>>,
    /// Type mnemonics, or `["*"]` for any type UPDATE may change.
    pub types: Spanned<Vec<Spanned<String>>>,
    /// The key's UPDATEs to this zone, at most this many a minute (a burst of as many,
    /// refilled evenly); none: no limit.
    #[serde(default)]
    pub per_minute: Option<Spanned<u32>>,
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

/// One `[[rrset]]` table: plain (`values`) or with a routing policy (`policy`).
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
    /// RDATA of each record, in presentation format for the type (plain sets).
    pub values: Option<Spanned<Vec<Spanned<String>>>>,
    /// `weighted`, `failover`, `multivalue`, `zonal`, `ip` or `geo`; none = plain.
    pub policy: Option<Spanned<String>>,
    /// Members of a weighted, failover or multivalue set.
    pub members: Option<Spanned<Vec<Spanned<MemberEntry>>>>,
    /// AZs of a zonal set.
    pub zones: Option<Spanned<Vec<Spanned<AzEntry>>>>,
    /// Zonal: count targets in every AZ (default false).
    pub cross_zone: Option<bool>,
    /// Fail open when the healthy share is below this fraction (default 0.0).
    pub fail_open_below: Option<Spanned<f64>>,
    /// TTL while any candidate is unhealthy or the set fails open.
    pub degraded_ttl: Option<Spanned<i64>>,
    /// In a zone taken from a primary: this set takes the place of the primary's set of
    /// the same name and type (without it, a name in both is an error).
    pub replace: Option<Spanned<bool>>,
}
