//! Geolocation sets (SPEC §10, `policy = "geo"`): a MaxMind DB file (GeoLite2 / GeoIP2 /
//! DB-IP, country or city) read once per load into a compact list of networks, then
//! reduced to one class table per zone ([`GeoTable`], [`crate::Zone::geo`]): only the
//! networks in a location some geo set of the zone names are kept, each tagged with the
//! named locations it is in, and aligned neighbours of one class merge. Each set keeps
//! its chain per class ([`crate::client::compile_classes`]), so edges get a table, never
//! the database.
use std::{
    collections::HashMap,
    net::IpAddr,
    path::{Path, PathBuf},
};

use maxminddb::Reader;
use serde::Deserialize;

use crate::client::{merge_blocks, GeoTable};

/// Continent codes as MaxMind DBs write them (`continent.code`).
pub const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// What a geo member matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GeoKey {
    /// A continent code (`EU`).
    Continent(String),
    /// An ISO 3166-1 country code (`DE`; `country:NA` for Namibia, whose code is also
    /// North America's).
    Country(String),
    /// An ISO 3166-2 subdivision (`US-CA`).
    Subdivision(String),
    /// Everyone else.
    Star,
}

impl GeoKey {
    /// The text a class names it by: `continent:EU`, `country:DE`, `DE-BY`, `*`.
    #[must_use]
    pub fn canonical(&self) -> String {
        match self {
            GeoKey::Continent(t) => format!("continent:{t}"),
            GeoKey::Country(t) => format!("country:{t}"),
            GeoKey::Subdivision(t) => t.clone(),
            GeoKey::Star => "*".to_owned(),
        }
    }

    /// Parses a member's `location`.
    pub fn parse(text: &str) -> Result<GeoKey, String> {
        let upper = text.to_ascii_uppercase();
        let letters = |s: &str, n: std::ops::RangeInclusive<usize>| {
            n.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
        };
        if text == "*" {
            return Ok(GeoKey::Star);
        }
        if let Some(country) = upper.strip_prefix("COUNTRY:") {
            if letters(country, 2..=2) {
                return Ok(GeoKey::Country(country.to_owned()));
            }
        } else if CONTINENTS.contains(&upper.as_str()) {
            return Ok(GeoKey::Continent(upper));
        } else if letters(&upper, 2..=2) {
            return Ok(GeoKey::Country(upper));
        } else if let Some((country, sub)) = upper.split_once('-') {
            if letters(country, 2..=2) && letters(sub, 1..=3) {
                return Ok(GeoKey::Subdivision(upper));
            }
        }
        Err(format!(
            "location {text:?}: use a continent (EU), a country (DE, country:NA), a subdivision (US-CA) or \"*\""
        ))
    }
}

/// One network of the database: interned location ids (0 = none).
#[derive(Clone, Copy)]
struct Network {
    start: u128,
    len: u8,
    v4: bool,
    continent: u32,
    country: u32,
    /// ISO 3166-2 codes (`US-CA`), largest first, as the database lists them.
    subdivisions: [u32; 2],
}

/// A database, read whole.
pub struct GeoDb {
    path: PathBuf,
    description: String,
    networks: Vec<Network>,
    /// Interned location texts; index 0 is "" (none).
    names: Vec<String>,
}

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    continent: Option<Code<'a>>,
    #[serde(borrow)]
    country: Option<Iso<'a>>,
    #[serde(borrow)]
    subdivisions: Option<Vec<Iso<'a>>>,
}

#[derive(Deserialize)]
struct Code<'a> {
    code: Option<&'a str>,
}

#[derive(Deserialize)]
struct Iso<'a> {
    iso_code: Option<&'a str>,
}

/// IPv6 ranges MaxMind DBs alias to the IPv4 tree (IPv4-compatible, IPv4-mapped,
/// 6to4, Teredo): skipped, the IPv4 networks stand for them.
fn aliased(start: u128, len: u8) -> bool {
    let in_prefix = |prefix: u128, plen: u8| len >= plen && (start ^ prefix) >> (128 - u32::from(plen)) == 0;
    in_prefix(0, 96) || in_prefix(0xffff << 32, 96) || in_prefix(0x2002 << 112, 16) || in_prefix(0x2001 << 112, 32)
}

impl GeoDb {
    /// Opens and reads `path`: every network with its continent, country and
    /// subdivisions.
    pub fn open(path: &Path) -> Result<GeoDb, String> {
        let reader = Reader::open_readfile(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut db = GeoDb {
            path: path.to_path_buf(),
            description: format!(
                "{} built {}",
                reader.metadata.database_type, reader.metadata.build_epoch
            ),
            networks: Vec::new(),
            names: vec![String::new()],
        };
        let mut ids: HashMap<String, u32> = HashMap::new();
        let roots: &[&str] = if reader.metadata.ip_version == 6 {
            &["0.0.0.0/0", "::/0"]
        } else {
            &["0.0.0.0/0"]
        };
        for root in roots {
            let net: ipnetwork::IpNetwork = root.parse().map_err(|e| format!("{root}: {e}"))?;
            let want_v4 = net.is_ipv4();
            let within = reader
                .within::<Record<'_>>(net)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            for item in within {
                let item = item.map_err(|e| format!("{}: {e}", path.display()))?;
                let (start, len, v4) = match item.ip_net {
                    ipnetwork::IpNetwork::V4(n) => (u128::from(u32::from(n.network())), n.prefix(), true),
                    ipnetwork::IpNetwork::V6(n) => (u128::from(n.network()), n.prefix(), false),
                };
                // The IPv6 walk meets the IPv4 tree again (returned as IPv4 networks)
                // and its aliases: the IPv4 walk has them.
                if v4 != want_v4 || (!v4 && aliased(start, len)) {
                    continue;
                }
                let record = item.info;
                let mut intern = |text: Option<String>| -> u32 {
                    let Some(text) = text.filter(|t| !t.is_empty()) else {
                        return 0;
                    };
                    let fresh = db.names.len() as u32;
                    *ids.entry(text.clone()).or_insert_with(|| {
                        db.names.push(text);
                        fresh
                    })
                };
                let country_code = record
                    .country
                    .as_ref()
                    .and_then(|c| c.iso_code)
                    .map(str::to_ascii_uppercase);
                let continent = intern(record.continent.and_then(|c| c.code).map(str::to_ascii_uppercase));
                let country = intern(country_code.clone());
                let mut subdivisions = [0u32; 2];
                for (slot, sub) in subdivisions
                    .iter_mut()
                    .zip(record.subdivisions.iter().flatten().filter_map(|s| s.iso_code))
                {
                    *slot = intern(
                        country_code
                            .as_ref()
                            .map(|c| format!("{c}-{}", sub.to_ascii_uppercase())),
                    );
                }
                db.networks.push(Network {
                    start,
                    len,
                    v4,
                    continent,
                    country,
                    subdivisions,
                });
            }
        }
        Ok(db)
    }

    /// A database with no networks: every geo set answers its `*` member (for readers
    /// that need a zone's checks, not its answers, such as checkers).
    #[must_use]
    pub fn empty() -> GeoDb {
        GeoDb {
            path: PathBuf::new(),
            description: "empty".to_owned(),
            networks: Vec::new(),
            names: vec![String::new()],
        }
    }

    /// The file and what its metadata says it is.
    #[must_use]
    pub fn describe(&self) -> String {
        format!("{} ({})", self.path.display(), self.description)
    }

    /// Networks read.
    #[must_use]
    pub fn network_count(&self) -> usize {
        self.networks.len()
    }

    /// The zone's class table for the locations its geo sets name (`used`): each
    /// network's class is the named locations it is in, most specific first; networks
    /// in none are left out, and aligned neighbours of one class merge.
    #[must_use]
    pub fn classify(&self, used: &std::collections::BTreeSet<GeoKey>) -> GeoTable {
        // Interned id (tagged with its level) → the key's canonical text.
        let mut named: HashMap<u32, String> = HashMap::new();
        for key in used {
            let text = match key {
                GeoKey::Star => continue,
                GeoKey::Continent(t) | GeoKey::Country(t) | GeoKey::Subdivision(t) => t,
            };
            if let Some(id) = self.names.iter().position(|n| n == text) {
                named.insert(level_key(key, id as u32), key.canonical());
            }
        }
        let mut class_ids: HashMap<Vec<String>, u32> = HashMap::new();
        let mut classes: Vec<Vec<String>> = Vec::new();
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for n in &self.networks {
            let mut class: Vec<String> = Vec::new();
            let levels = n
                .subdivisions
                .iter()
                .rev()
                .filter(|&&s| s != 0)
                .map(|&s| s | SUBDIVISION)
                .chain((n.country != 0).then_some(n.country | COUNTRY))
                .chain((n.continent != 0).then_some(n.continent | CONTINENT));
            for key in levels {
                if let Some(text) = named.get(&key) {
                    class.push(text.clone());
                }
            }
            if class.is_empty() {
                continue;
            }
            let next = classes.len() as u32;
            let id = *class_ids.entry(class.clone()).or_insert_with(|| {
                classes.push(class);
                next
            });
            if n.v4 {
                v4.push((n.start as u32, n.len, id));
            } else {
                v6.push((n.start, n.len, id));
            }
        }
        GeoTable {
            v4: merge_blocks(v4),
            v6: merge_blocks(v6),
            classes,
            index: None,
        }
    }

    /// What the database says of `addr`: (continent, country, subdivisions), for
    /// explain.
    #[must_use]
    pub fn locate(&self, addr: IpAddr) -> Option<(String, String, Vec<String>)> {
        let (v4, bits) = match addr {
            IpAddr::V4(a) => (true, u128::from(u32::from(a))),
            IpAddr::V6(a) => (false, u128::from(a)),
        };
        let width = if v4 { 32 } else { 128 };
        let n = self
            .networks
            .iter()
            .find(|n| n.v4 == v4 && (n.len == 0 || (bits ^ n.start) >> (width - u32::from(n.len)) == 0))?;
        let name = |id: u32| self.names.get(id as usize).cloned().unwrap_or_default();
        Some((
            name(n.continent),
            name(n.country),
            n.subdivisions.iter().filter(|&&s| s != 0).map(|&s| name(s)).collect(),
        ))
    }
}

const CONTINENT: u32 = 1 << 30;
const COUNTRY: u32 = 2 << 30;
const SUBDIVISION: u32 = 3 << 30;

/// A member key's lookup key: the interned id tagged with its level.
fn level_key(key: &GeoKey, id: u32) -> u32 {
    match key {
        GeoKey::Continent(_) => id | CONTINENT,
        GeoKey::Country(_) => id | COUNTRY,
        GeoKey::Subdivision(_) | GeoKey::Star => id | SUBDIVISION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_by_level() {
        assert_eq!(GeoKey::parse("EU"), Ok(GeoKey::Continent("EU".into())));
        assert_eq!(GeoKey::parse("de"), Ok(GeoKey::Country("DE".into())));
        assert_eq!(GeoKey::parse("NA"), Ok(GeoKey::Continent("NA".into())));
        assert_eq!(GeoKey::parse("country:NA"), Ok(GeoKey::Country("NA".into())));
        assert_eq!(GeoKey::parse("US-CA"), Ok(GeoKey::Subdivision("US-CA".into())));
        assert_eq!(GeoKey::parse("*"), Ok(GeoKey::Star));
        for bad in ["Europe", "D", "US-", "-CA", "US-CALI", ""] {
            assert!(GeoKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv4_aliases_in_the_ipv6_tree_are_recognised() {
        assert!(aliased(0, 96));
        assert!(aliased(0xffff_c000_0200, 120));
        assert!(aliased(0x2002u128 << 112, 24));
        assert!(aliased(0x2001u128 << 112, 32));
        assert!(!aliased(0x2001_0db8u128 << 96, 32));
        assert!(!aliased(0, 8));
    }
}
