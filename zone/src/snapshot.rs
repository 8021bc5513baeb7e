//! The snapshot model: what an edge needs to answer, and nothing it must parse.
//!
//! Names are absolute, lowercase, uncompressed wire format; RDATA is wire format with
//! uncompressed names (RFC 3597 §4 style), so the edge copies it into answers as is.
use serde::{Deserialize, Serialize};

/// A whole, validated, versioned set of zones. Edges swap it in atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Monotonic version; a newer snapshot has a larger one.
    pub version: u64,
    /// The zones, each validated on its own.
    pub zones: Vec<Zone>,
    /// Health of every slot of every zone (bit set = healthy), `slot_count` bits.
    pub bitmap: Vec<u64>,
    /// The deployment intent's etcd revision it was made from (0: not from an intent).
    pub intent_revision: u64,
}

impl Snapshot {
    /// Snapshot `version` of `zones` with health `bitmap` (the fields a later schema
    /// adds take their defaults, so a new one changes no caller).
    #[must_use]
    pub fn new(version: u64, zones: Vec<Zone>, bitmap: Vec<u64>) -> Snapshot {
        Snapshot {
            version,
            zones,
            bitmap,
            intent_revision: 0,
        }
    }

    /// Total health slots over all zones.
    #[must_use]
    pub fn slot_count(&self) -> u32 {
        self.zones
            .iter()
            .map(|z| z.slot_base + z.slots.len() as u32)
            .max()
            .unwrap_or(0)
    }
}

/// One authoritative zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    /// Apex name (wire format, lowercase).
    pub origin: Vec<u8>,
    /// The file the zone came from (for status and errors): its name in the zones
    /// directory (`members/NAME` for a catalog member) when loaded with the directory,
    /// the path as given when loaded alone.
    pub source: String,
    /// SOA serial, for status output.
    pub serial: u32,
    /// Negative-caching TTL (RFC 2308 §5): min(SOA TTL, SOA MINIMUM).
    pub negative_ttl: u32,
    /// Every record set of the zone, the apex SOA and NS included.
    pub rrsets: Vec<RecordSet>,
    /// First global health slot of this zone: local slot `i` is bit `slot_base + i`.
    pub slot_base: u32,
    /// Health slots, in evaluation order (every slot after the slots it depends on).
    pub slots: Vec<Slot>,
    /// The zone's signatures when control signed it (`dnssec = true`); the DNSKEY and
    /// NSEC sets are in `rrsets`. Edges get signatures, never keys.
    pub dnssec: Option<Box<crate::dnssec::Signatures>>,
    /// The geolocation classes of the zone's `geo` sets, shared by all of them: one
    /// prefix table however many sets there are.
    pub geo: Option<Box<crate::client::GeoTable>>,
    /// Who may transfer the zone from control, and whom control notifies (SPEC §10).
    /// Control's alone: never sent to edges.
    #[serde(skip)]
    pub transfer: Option<Box<Transfer>>,
}

/// A zone's transfer settings (`[zone] transfer_allow`, `transfer_tsig`, `notify`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Transfer {
    /// Prefixes allowed to transfer: (address, prefix length).
    pub allow: Vec<(std::net::IpAddr, u8)>,
    /// The TSIG key name every request must be signed with (lowercase text, no dot).
    pub tsig: Option<String>,
    /// Secondaries to notify.
    pub notify: Vec<std::net::SocketAddr>,
    /// The hidden primary the zone's records come from (`[zone] primary`).
    pub primary: Option<std::net::SocketAddr>,
    /// The key transfers from the primary are signed with.
    pub primary_tsig: Option<String>,
    /// A catalog zone (RFC 9432), not served.
    pub catalog: bool,
    /// `[[zone.update]]`: who may change which records by dynamic update.
    pub update: Vec<crate::update::Rule>,
}

impl Transfer {
    /// True when control's transfer listener serves the zone: someone may transfer it
    /// (`transfer_allow`) or change it by UPDATE (`[[zone.update]]`, which needs no
    /// `transfer_allow`: the rules' keys are the ACL).
    #[must_use]
    pub fn served(&self) -> bool {
        !self.allow.is_empty() || !self.update.is_empty()
    }

    /// True when `addr` is inside an allowed prefix.
    #[must_use]
    pub fn allows(&self, addr: std::net::IpAddr) -> bool {
        let addr = match addr {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, std::net::IpAddr::V4),
            v4 @ std::net::IpAddr::V4(_) => v4,
        };
        self.allow.iter().any(|&(net, len)| match (net, addr) {
            (std::net::IpAddr::V4(n), std::net::IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (std::net::IpAddr::V6(n), std::net::IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        })
    }
}

/// One bit of health: a check, or a status derived from others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Display name: the check id, or `rrset/member`, `rrset@az`.
    pub name: String,
    /// How its status is found.
    pub rule: SlotRule,
}

/// How a slot's status is found. Slot numbers inside are local to the zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotRule {
    /// A probed check (http, https, tcp) or an `external` one (status set by operators).
    Check {
        /// Probe settings; `None` for `external`.
        probe: Option<Probe>,
        /// Healthy ↔ unhealthy.
        inverted: bool,
        /// Always healthy.
        disabled: bool,
    },
    /// Healthy iff at least `threshold` of `children` are.
    Calculated {
        /// Child slots.
        children: Vec<u32>,
        /// Threshold.
        threshold: u32,
    },
    /// Alias with evaluate-target-health: healthy iff any of `members` is (the target
    /// set's member or AZ slots; empty = a plain target, always healthy).
    AliasTarget {
        /// Slots of the target's candidates.
        members: Vec<u32>,
    },
    /// An AZ of a zonal set: healthy iff every target group has a healthy target (in
    /// this AZ unless `cross_zone`), and not shifted away.
    Az {
        /// Owner of the record set (wire).
        rrset: Vec<u8>,
        /// Type of the record set.
        rtype: u16,
        /// AZ name.
        az: String,
        /// This AZ's index in the set.
        index: u32,
        /// (AZ index, group index, check slot) of every target of the set.
        targets: Vec<(u32, u32, u32)>,
        /// Number of target groups.
        groups: u32,
        /// Count targets in every AZ.
        cross_zone: bool,
    },
    /// A member of a `latency` set: healthy iff it is the set's choice — of the members
    /// healthy by `health`, the one the location prefers (control: the lowest smoothed
    /// round trip, with hysteresis; without control: the first listed).
    Latency {
        /// Owner of the record set (wire).
        rrset: Vec<u8>,
        /// Type of the record set.
        rtype: u16,
        /// This member's index in the set.
        member: u32,
        /// Health slot of every member of the set, in order (`ALWAYS_HEALTHY`: none).
        health: Vec<u32>,
    },
}

/// What a checker probes (SPEC §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// `http`, `https` or `tcp`.
    pub kind: ProbeKind,
    /// Target address.
    pub ip: std::net::IpAddr,
    /// Target port.
    pub port: u16,
    /// HTTP path.
    pub path: String,
    /// HTTP Host / SNI.
    pub host: String,
    /// Seconds between probes (10 or 30).
    pub interval: u32,
    /// Consecutive results to flip (1..=10).
    pub failure_threshold: u32,
    /// Required body text.
    pub search_string: Option<String>,
    /// HTTPS: validate the certificate for `host`.
    pub tls_verify: bool,
    /// HTTP(S): the load figure to read from each response, for load shedding.
    pub load: Option<LoadGauge>,
}

/// Where a check reads its endpoint's load, and the band over which a weighted member
/// sheds it (SPEC §10 "Load shedding"): at or below `low` a member keeps its weight, at
/// or above `high` it has none, linearly in between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadGauge {
    /// Where the figure is.
    pub from: LoadSource,
    /// Full weight at or below this figure, in thousandths (0.7 → 700).
    pub low_milli: u32,
    /// No weight at or above this figure, in thousandths; above `low_milli`.
    pub high_milli: u32,
}

impl LoadGauge {
    /// The share of its weight a member keeps at load `milli`, in tenths (10 = all):
    /// linear from `low` to `high`, rounded to the nearest tenth so a figure that moves
    /// a little does not change the answer's weights.
    #[must_use]
    pub fn keep_tenths(&self, milli: u32) -> u32 {
        if milli <= self.low_milli {
            return 10;
        }
        if milli >= self.high_milli {
            return 0;
        }
        let band = u64::from(self.high_milli - self.low_milli);
        let left = u64::from(self.high_milli - milli);
        // round(10 × left / band)
        u32::try_from((20 * left + band) / (2 * band)).unwrap_or(10).min(10)
    }
}

/// Where in an HTTP response a load figure is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadSource {
    /// A response header holding a number (`header:X-Load`), lowercase.
    Header(String),
    /// A number in a JSON body, by JSON pointer (RFC 6901, `json:/load/cpu`).
    Json(String),
}

impl std::fmt::Display for LoadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadSource::Header(name) => write!(f, "header:{name}"),
            LoadSource::Json(pointer) => write!(f, "json:{pointer}"),
        }
    }
}

/// Probe protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeKind {
    /// HTTP.
    Http,
    /// HTTPS.
    Https,
    /// TCP connect.
    Tcp,
}

/// One `RRset`: all records of one owner name and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSet {
    /// Owner name (wire format, lowercase).
    pub name: Vec<u8>,
    /// RR type code.
    pub rtype: u16,
    /// TTL of every record of the set (RFC 2181 §5.2).
    pub ttl: u32,
    /// RDATA of each record, wire format, names uncompressed. Never empty for a plain
    /// set; empty for a policy set.
    pub rdata: Vec<Vec<u8>>,
    /// The routing policy, for a policy set. Boxed: most sets are plain, and inline it
    /// made every set 32 octets larger (a million sets: 32 MB in the snapshot alone).
    pub policy: Option<Box<Policy>>,
}

/// A routing policy (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Which policy.
    pub kind: PolicyKind,
    /// Candidates: members, or AZs for zonal (in order).
    pub members: Vec<Member>,
    /// Fail open below this healthy share, in thousandths.
    pub fail_open_below_permille: u32,
    /// TTL while degraded or failing open.
    pub degraded_ttl: Option<u32>,
    /// Client-aware sets (`ip`, `geo`): which members a client's address selects.
    pub client: Option<Box<crate::client::ClientRules>>,
}

/// Routing policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    /// One member, by weight.
    Weighted,
    /// Primary (member 0) unless unhealthy, then secondary (member 1, if any).
    Failover,
    /// Up to 8 healthy members.
    Multivalue,
    /// Every healthy AZ.
    Zonal,
    /// By the client's address: the member of the longest matching prefix, falling
    /// back to broader matches, then `*` (SPEC §10).
    Ip,
    /// By the client's location in a geolocation database: subdivision, country,
    /// continent, then `*` (SPEC §10); compiled to the same prefix table as `Ip`.
    Geo,
    /// The healthy member with the lowest round trip as this location's checkers
    /// measure it (SPEC §10). Control chooses; each member's slot is a
    /// [`SlotRule::Latency`] slot, healthy iff it is the choice, and edges answer the
    /// first member whose slot is set (none: the first member, fail-open).
    Latency,
}

impl PolicyKind {
    /// `Ip` and `Geo`: the answer depends on the client's address.
    #[must_use]
    pub fn is_client_aware(self) -> bool {
        matches!(self, PolicyKind::Ip | PolicyKind::Geo)
    }
}

/// One candidate of a policy set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Member id (or AZ name).
    pub id: String,
    /// Weight (weighted), else 0.
    pub weight: u32,
    /// Health slot, local to the zone, or `qdns_abi::health::ALWAYS_HEALTHY`.
    pub slot: u32,
    /// The check or derived slot's display name, for explain (`None` = no check).
    pub check: Option<String>,
    /// What it answers.
    pub answer: Answer,
}

/// What a member answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// These records (wire RDATA).
    Values(Vec<Vec<u8>>),
    /// Whatever the record set `target` (same zone and type) answers.
    Alias {
        /// Owner of the target set (wire).
        target: Vec<u8>,
    },
}

impl Zone {
    /// The record set of `name` and `rtype`, if any.
    #[must_use]
    pub fn rrset(&self, name: &[u8], rtype: u16) -> Option<&RecordSet> {
        self.rrsets.iter().find(|set| set.name == name && set.rtype == rtype)
    }
}
