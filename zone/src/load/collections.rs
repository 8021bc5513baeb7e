//! `[[cidr_collection]]` tables (SPEC §10): named locations, each a list of prefixes,
//! inline or from a file of `PREFIX LOCATION` lines.
use std::{
    collections::{btree_map::Entry, BTreeMap, BTreeSet},
    net::IpAddr,
    path::Path,
};

use toml::Spanned;

use super::ZoneBuilder;
use crate::{
    client::{self, parse_prefix, ClientRules, GeoTable, Rule, RulesError},
    geo::GeoKey,
    master,
    schema::{CidrCollectionEntry, MemberEntry},
    ZoneError,
};

/// Locations of one collection: name → prefixes.
pub(crate) type Collection = BTreeMap<String, Vec<(IpAddr, u8)>>;

/// Most prefixes one zone's collections may hold (a country database compiles to
/// fewer; a corrupt or runaway file is refused rather than filling memory).
pub(crate) const MAX_PREFIXES: usize = 2_000_000;

impl ZoneBuilder<'_> {
    /// Reads every collection into `self.collections`.
    pub(crate) fn cidr_collections(&mut self, entries: &[CidrCollectionEntry]) -> Result<(), ZoneError> {
        let mut total = 0usize;
        for (c, entry) in entries.iter().enumerate() {
            let key = |field: &str| format!("cidr_collection[{c}].{field}");
            let id = entry.id.get_ref();
            if id.is_empty() || id.contains('/') || id == "*" {
                return Err(self.err(
                    &entry.id,
                    &key("id"),
                    format!("collection id {id:?} must be non-empty, without '/', not '*'"),
                ));
            }
            if self.collections.contains_key(id) {
                return Err(self.err(&entry.id, &key("id"), format!("duplicate collection id {id:?}")));
            }
            let mut collection = Collection::new();
            match (&entry.locations, &entry.file) {
                (Some(locations), None) => {
                    for (location, prefixes) in locations.get_ref() {
                        check_location(location).map_err(|why| self.err(locations, &key("locations"), why))?;
                        let list = collection.entry(location.clone()).or_default();
                        for (p, prefix) in prefixes.iter().enumerate() {
                            let parsed = parse_prefix(prefix.get_ref())
                                .map_err(|why| self.err(prefix, &key(&format!("locations.{location}[{p}]")), why))?;
                            list.push(parsed);
                        }
                    }
                }
                (None, Some(file)) => {
                    let base = self.path.parent().unwrap_or_else(|| Path::new("."));
                    let path = base.join(file.get_ref());
                    let text = master::read_bounded(&path)
                        .map_err(|e| self.err(file, &key("file"), format!("cannot read {}: {e}", path.display())))?;
                    read_file(&path, &text, &mut collection)?;
                }
                (Some(l), Some(_)) => {
                    return Err(self.err(l, &key("locations"), "a collection has locations or a file, not both"))
                }
                (None, None) => {
                    return Err(self.err(&entry.id, &key("locations"), "a collection needs locations or a file"))
                }
            }
            total += collection.values().map(Vec::len).sum::<usize>();
            if total > MAX_PREFIXES {
                return Err(self.err(
                    &entry.id,
                    &key("id"),
                    format!("more than {MAX_PREFIXES} prefixes in this zone's collections"),
                ));
            }
            self.collections.insert(id.clone(), collection);
        }
        Ok(())
    }
}

/// A location name: letters, digits, `-`, `_`, `.` (it is written in `cidr` keys and
/// shown by explain).
fn check_location(location: &str) -> Result<(), String> {
    if location.is_empty()
        || location == "*"
        || !location
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(format!("location {location:?}: use letters, digits, '-', '_' or '.'"));
    }
    Ok(())
}

/// `PREFIX LOCATION` lines; `#` starts a comment; a prefix listed twice must name one
/// location.
fn read_file(path: &Path, text: &[u8], collection: &mut Collection) -> Result<(), ZoneError> {
    let mut seen: BTreeMap<(IpAddr, u8), usize> = BTreeMap::new();
    let mut locations: Vec<String> = Vec::new();
    for (n, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line_no = n + 1;
        let fail = |why: String| ZoneError::invalid(path, Some(line_no), None, why);
        let line = std::str::from_utf8(raw).map_err(|_| fail("not UTF-8".to_owned()))?;
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(prefix), Some(location), None) = (words.next(), words.next(), words.next()) else {
            return Err(fail(format!("{line:?}: expected PREFIX LOCATION")));
        };
        check_location(location).map_err(fail)?;
        let parsed = parse_prefix(prefix).map_err(fail)?;
        let index = locations.iter().position(|l| l == location).unwrap_or_else(|| {
            locations.push(location.to_owned());
            locations.len() - 1
        });
        match seen.entry(parsed) {
            Entry::Occupied(e) if *e.get() != index => {
                return Err(fail(format!(
                    "{prefix} is already in location {:?}",
                    locations.get(*e.get()).map_or("", String::as_str)
                )))
            }
            Entry::Occupied(_) => continue,
            Entry::Vacant(e) => {
                e.insert(index);
            }
        }
        collection.entry(location.to_owned()).or_default().push(parsed);
    }
    Ok(())
}

impl ZoneBuilder<'_> {
    /// The rule table of an `ip` set from its members' `cidr` keys.
    pub(crate) fn ip_rules(
        &self,
        entries: &Spanned<Vec<Spanned<MemberEntry>>>,
        index: usize,
    ) -> Result<Box<ClientRules>, ZoneError> {
        let key = |m: usize| format!("rrset[{index}].members[{m}].cidr");
        let mut labels = Vec::new();
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let mut star = None;
        let mut used: BTreeMap<&str, usize> = BTreeMap::new();
        for (m, spanned) in entries.get_ref().iter().enumerate() {
            let entry = spanned.get_ref();
            let member = u8::try_from(m).map_err(|_| self.err(spanned, &key(m), "too many members"))?;
            let Some(cidr) = &entry.cidr else {
                return Err(self.err(
                    &entry.id,
                    &key(m),
                    "an ip member needs cidr = \"COLLECTION/LOCATION\" or \"*\"",
                ));
            };
            let text = cidr.get_ref().as_str();
            if let Some(other) = used.insert(text, m) {
                return Err(self.err(
                    cidr,
                    &key(m),
                    format!("{text:?} is already the cidr of members[{other}]"),
                ));
            }
            labels.push(text.to_owned());
            if text == "*" {
                star = Some(member);
                continue;
            }
            let Some((collection, location)) = text.split_once('/') else {
                return Err(self.err(cidr, &key(m), format!("{text:?}: use \"COLLECTION/LOCATION\" or \"*\"")));
            };
            let prefixes = self
                .collections
                .get(collection)
                .ok_or_else(|| self.err(cidr, &key(m), format!("unknown cidr_collection {collection:?}")))?
                .get(location)
                .ok_or_else(|| {
                    self.err(
                        cidr,
                        &key(m),
                        format!("cidr_collection {collection:?} has no location {location:?}"),
                    )
                })?;
            for &(addr, len) in prefixes {
                match addr {
                    IpAddr::V4(a) => v4.push(Rule {
                        start: u32::from(a),
                        len,
                        member,
                    }),
                    IpAddr::V6(a) => v6.push(Rule {
                        start: u128::from(a),
                        len,
                        member,
                    }),
                }
            }
        }
        if star.is_none() {
            return Err(self.err(
                entries,
                &format!("rrset[{index}].members"),
                "an ip set needs a member with cidr = \"*\" (the answer for every other client)",
            ));
        }
        let rules = client::compile(labels, v4, v6, star).map_err(|e| match e {
            RulesError::Conflict {
                prefix,
                members: (a, b),
            } => self.err(
                entries,
                &format!("rrset[{index}].members"),
                format!("{prefix} selects both members[{a}] and members[{b}]"),
            ),
        })?;
        Ok(Box::new(rules))
    }
}

/// A geo set waiting for the zone's class table.
pub(crate) struct PendingGeo {
    /// The set (owner wire, type).
    pub(crate) set: (Vec<u8>, u16),
    /// Member labels (`location` as written).
    labels: Vec<String>,
    /// Member keys.
    keys: Vec<GeoKey>,
}

impl PendingGeo {
    /// Keeps the members at `keep` (old indices, in order): the others are absent here.
    pub(crate) fn keep(&mut self, keep: &[usize]) {
        self.labels = keep.iter().filter_map(|&k| self.labels.get(k).cloned()).collect();
        self.keys = keep.iter().filter_map(|&k| self.keys.get(k).cloned()).collect();
    }

    /// Whether the set still has its `*` member.
    pub(crate) fn has_star(&self) -> bool {
        self.keys.contains(&GeoKey::Star)
    }
}

impl ZoneBuilder<'_> {
    /// Checks a `geo` set's members' `location` keys; its rules are compiled with the
    /// zone's class table once every set is read ([`ZoneBuilder::compile_geo`]).
    pub(crate) fn geo_members(
        &mut self,
        entries: &Spanned<Vec<Spanned<MemberEntry>>>,
        index: usize,
        set: (Vec<u8>, u16),
    ) -> Result<(), ZoneError> {
        let key = |m: usize| format!("rrset[{index}].members[{m}].location");
        let (mut labels, mut keys) = (Vec::new(), Vec::new());
        let mut used: BTreeMap<GeoKey, usize> = BTreeMap::new();
        for (m, spanned) in entries.get_ref().iter().enumerate() {
            let entry = spanned.get_ref();
            let Some(location) = &entry.location else {
                return Err(self.err(
                    &entry.id,
                    &key(m),
                    "a geo member needs location = \"EU\", \"DE\", \"US-CA\" or \"*\"",
                ));
            };
            let parsed = GeoKey::parse(location.get_ref()).map_err(|why| self.err(location, &key(m), why))?;
            if let Some(other) = used.insert(parsed.clone(), m) {
                return Err(self.err(
                    location,
                    &key(m),
                    format!("{:?} is already the location of members[{other}]", location.get_ref()),
                ));
            }
            labels.push(location.get_ref().clone());
            keys.push(parsed);
        }
        if !keys.contains(&GeoKey::Star) {
            return Err(self.err(
                entries,
                &format!("rrset[{index}].members"),
                "a geo set needs a member with location = \"*\" (the answer for every other client)",
            ));
        }
        if self.geo.is_none() {
            return Err(self.err(
                entries,
                &format!("rrset[{index}].policy"),
                "a geo set needs a geolocation database: give --geoip-db (file key geoip_db)",
            ));
        }
        self.pending_geo.push(PendingGeo { set, labels, keys });
        Ok(())
    }

    /// The zone's class table over every location its geo sets name, and each geo
    /// set's rules over it.
    pub(crate) fn compile_geo(&mut self) -> Option<Box<GeoTable>> {
        let pending = std::mem::take(&mut self.pending_geo);
        let geo = self.geo?;
        if pending.is_empty() {
            return None;
        }
        let used: BTreeSet<GeoKey> = pending.iter().flat_map(|p| p.keys.iter().cloned()).collect();
        let table = geo.classify(&used);
        for p in pending {
            let canonical: Vec<String> = p.keys.iter().map(GeoKey::canonical).collect();
            let keys: Vec<Option<&str>> = p
                .keys
                .iter()
                .zip(&canonical)
                .map(|(k, c)| (*k != GeoKey::Star).then_some(c.as_str()))
                .collect();
            let rules = client::compile_classes(p.labels, &keys, &table);
            let hash = self.sets.key_hash(&p.set.0, p.set.1);
            if let Some(policy) = self
                .sets
                .get_mut_hashed(hash, &p.set.0, p.set.1)
                .and_then(|s| s.policy.as_mut())
            {
                policy.client = Some(Box::new(rules));
            }
        }
        Some(Box::new(table))
    }
}
