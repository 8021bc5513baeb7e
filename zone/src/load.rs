//! Loading and validating zones: a directory of `*.toml` files → [`Snapshot`].
//!
//! Validation (RFC 1034 §4.2, RFC 2181, RFC 1912 §2.4): names inside the origin, one
//! SOA at the apex, NS at the apex, a CNAME alone at its name and never at the apex,
//! no record set defined twice, TTLs ≤ 2^31−1, only glue (A/AAAA) below a delegation.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use hickory_proto::rr::{Name, RecordType};
use toml::Spanned;

use crate::{
    master,
    name::{self, is_at_or_below},
    schema::{self, HealthCheckEntry, RrsetEntry, ZoneFile},
    RecordSet, Snapshot, Zone, ZoneError,
};

/// Largest TTL allowed (RFC 2181 §8).
pub const MAX_TTL: u32 = 0x7fff_ffff;

const TYPE_SOA: u16 = 6;
const TYPE_NS: u16 = 2;
const TYPE_CNAME: u16 = 5;
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// Loads every `*.toml` file of `dir` (one zone each) into a snapshot of `version`.
/// Zones with `policy = "geo"` sets need [`load_dir_with`] and a database.
pub fn load_dir(dir: &Path, version: u64) -> Result<Snapshot, ZoneError> {
    load_dir_with(dir, version, &LoadContext::default())
}

/// What a load reads besides the zone files, and where it is for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources<'a> {
    /// The MaxMind DB that `policy = "geo"` sets are compiled from (read by the load:
    /// a reload reads a refreshed file).
    pub geoip_db: Option<&'a Path>,
    /// This location (control's `--location`): members whose `sites` do not name it are
    /// left out. `None`: every member is kept (checkers, tools).
    pub location: Option<&'a str>,
    /// Where control keeps the copies of zones taken from a primary (`[zone] primary`);
    /// `None`: such zones are refused (only control transfers).
    pub secondary_dir: Option<&'a Path>,
    /// Where control keeps the records added by dynamic update (RFC 2136): a master
    /// file a zone, named as a secondary copy is ([`secondary_copy_name`]), read as if
    /// the zone included it. `None`: none.
    pub dynamic_dir: Option<&'a Path>,
}

/// The file a zone taken from a primary is kept in, under the secondary directory.
#[must_use]
pub fn secondary_copy_name(origin: &[u8]) -> String {
    format!("{}zone", name::to_text(origin))
}

/// What the zone builder is given: the database opened, the location.
#[derive(Clone, Copy, Default)]
pub struct LoadContext<'a> {
    /// The geolocation database, for `policy = "geo"` sets.
    pub geo: Option<&'a crate::geo::GeoDb>,
    /// See [`Sources::location`].
    pub location: Option<&'a str>,
    /// See [`Sources::secondary_dir`].
    pub secondary_dir: Option<&'a Path>,
    /// See [`Sources::dynamic_dir`].
    pub dynamic_dir: Option<&'a Path>,
}

/// [`load_dir`] with `sources`.
pub fn load_dir_from(dir: &Path, version: u64, sources: Sources<'_>) -> Result<Snapshot, ZoneError> {
    let (snapshot, pending) = load_dir_pending(dir, version, sources)?;
    first_pending(snapshot, pending)
}

/// `snapshot`, or the first zone that waits for its copy as the error.
fn first_pending(snapshot: Snapshot, pending: Vec<Pending>) -> Result<Snapshot, ZoneError> {
    match pending.into_iter().next() {
        Some(p) => Err(ZoneError::NotTransferred {
            path: p.path,
            origin: p.origin,
            primary: p.primary,
            tsig: p.tsig,
            catalog: p.catalog,
        }),
        None => Ok(snapshot),
    }
}

/// A zone taken from a primary that has no copy yet (see [`ZoneError::NotTransferred`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The zone file.
    pub path: PathBuf,
    /// Origin, text.
    pub origin: String,
    /// The primary.
    pub primary: std::net::SocketAddr,
    /// The key.
    pub tsig: Option<String>,
    /// A catalog zone: never served, its members are.
    pub catalog: bool,
}

/// Where, under the secondary directory, control writes a zone file for each member
/// of a catalog zone (an operator's file for the same origin takes its place).
pub const CATALOG_MEMBERS_DIR: &str = "members";

/// [`load_dir_from`], leaving out (and listing) the zones taken from a primary that
/// have no copy yet instead of failing.
pub fn load_dir_pending(dir: &Path, version: u64, sources: Sources<'_>) -> Result<(Snapshot, Vec<Pending>), ZoneError> {
    let geo = sources
        .geoip_db
        .map(|path| {
            crate::geo::GeoDb::open(path)
                .map_err(|why| ZoneError::invalid(path, None, Some("geoip_db".to_owned()), why))
        })
        .transpose()?;
    let ctx = LoadContext {
        geo: geo.as_ref(),
        location: sources.location,
        secondary_dir: sources.secondary_dir,
        dynamic_dir: sources.dynamic_dir,
    };
    load_dir_parts(dir, version, &ctx)
}

/// [`load_dir`] with the database opened and the location given in `ctx`.
pub fn load_dir_with(dir: &Path, version: u64, ctx: &LoadContext<'_>) -> Result<Snapshot, ZoneError> {
    let (snapshot, pending) = load_dir_parts(dir, version, ctx)?;
    first_pending(snapshot, pending)
}

/// True when `origin` is at or below a zone of `zones` or `pending` (strictly below:
/// equal origins are handled as a member the operator's file takes over).
fn below_operator_zone(origin: &[u8], zones: &[Zone], pending: &[Pending]) -> bool {
    zones
        .iter()
        .any(|z| z.origin != origin && name::is_at_or_below(origin, &z.origin))
        || pending.iter().any(|p| {
            master::parse_name_wire(&p.origin, b"\0")
                .is_ok_and(|apex| apex != origin && name::is_at_or_below(origin, &apex))
        })
}

/// The zone files to load: the operator's in `dir` (sorted), then the catalog
/// members' under the secondary directory (sorted); and how many are the operator's.
fn zone_files(dir: &Path, ctx: &LoadContext<'_>) -> Result<(Vec<PathBuf>, usize), ZoneError> {
    let io = |source| ZoneError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    files.retain(|path| path.extension().is_some_and(|ext| ext == "toml") && path.is_file());
    files.sort();
    if files.is_empty() {
        return Err(ZoneError::invalid(
            dir,
            None,
            None,
            "no *.toml zone file in this directory",
        ));
    }
    let operator_files = files.len();
    if let Some(members) = ctx.secondary_dir.map(|d| d.join(CATALOG_MEMBERS_DIR)) {
        let mut more: Vec<PathBuf> = fs::read_dir(&members)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        more.retain(|path| path.extension().is_some_and(|ext| ext == "toml") && path.is_file());
        more.sort();
        files.extend(more);
    }
    Ok((files, operator_files))
}

/// How a zone of a directory names its file: relative to the directory (a catalog
/// member's under `members/`), so that the same files loaded from another directory —
/// another control's copy of the same intent revision — make the same zone, octet for
/// octet (issue 54 §2).
fn source_name(path: &Path, member: bool) -> String {
    let file = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
    if member {
        format!("{CATALOG_MEMBERS_DIR}/{file}")
    } else {
        file
    }
}

fn load_dir_parts(dir: &Path, version: u64, ctx: &LoadContext<'_>) -> Result<(Snapshot, Vec<Pending>), ZoneError> {
    let (files, operator_files) = zone_files(dir, ctx)?;
    let mut zones: Vec<Zone> = Vec::with_capacity(files.len());
    let mut pending: Vec<Pending> = Vec::new();
    // How many of `zones` and `pending` came from operator files (they come first):
    // counted when the first member file is reached.
    let (mut operator_zones, mut operator_pending) = (usize::MAX, usize::MAX);
    for (i, path) in files.iter().enumerate() {
        let member = i >= operator_files;
        if member && operator_zones == usize::MAX {
            (operator_zones, operator_pending) = (zones.len(), pending.len());
        }
        let zone = match load_zone_file_with(path, ctx) {
            Ok(mut zone) => {
                zone.source = source_name(path, member);
                zone
            }
            Err(ZoneError::NotTransferred {
                path,
                origin,
                primary,
                tsig,
                catalog,
            }) => {
                // A member below an operator's zone is not even fetched (see below).
                let below = member
                    && master::parse_name_wire(&origin, b"\0").is_ok_and(|wire| {
                        below_operator_zone(
                            &wire,
                            &zones[..operator_zones.min(zones.len())],
                            &pending[..operator_pending.min(pending.len())],
                        )
                    });
                if below {
                    continue;
                }
                if !(member && pending.iter().any(|p| p.origin == origin)) {
                    pending.push(Pending {
                        path,
                        origin,
                        primary,
                        tsig,
                        catalog,
                    });
                }
                continue;
            }
            Err(err) => return Err(err),
        };
        let text = name::to_text(&zone.origin);
        // A catalog member whose zone an operator's file defines: the file's (it adds
        // health on top of the same primary's records).
        if member && (zones.iter().any(|z| z.origin == zone.origin) || pending.iter().any(|p| p.origin == text)) {
            continue;
        }
        // A catalog member below a zone an operator's file defines would answer in its
        // place for its names (a primary's catalog listing `login.example.com` under
        // the operator's `example.com`): never taken (issue 53 §5).
        if member
            && below_operator_zone(
                &zone.origin,
                &zones[..operator_zones.min(zones.len())],
                &pending[..operator_pending.min(pending.len())],
            )
        {
            continue;
        }
        if let Some(other) = zones.iter().find(|z| z.origin == zone.origin) {
            return Err(ZoneError::invalid(
                path,
                None,
                Some("zone.origin".to_owned()),
                format!(
                    "zone {} is already defined in {}",
                    name::to_text(&zone.origin),
                    other.source
                ),
            ));
        }
        zones.push(zone);
    }
    zones.sort_by(|a, b| a.origin.cmp(&b.origin));
    let mut base = 0u32;
    for zone in &mut zones {
        zone.slot_base = base;
        base += zone.slots.len() as u32;
    }
    let bitmap = crate::evaluate::all_checks_healthy(&zones);
    Ok((Snapshot::new(version, zones, bitmap), pending))
}

/// Loads and validates one zone file.
pub fn load_zone_file(path: &Path) -> Result<Zone, ZoneError> {
    load_zone_file_with(path, &LoadContext::default())
}

/// [`load_zone_file`] with `ctx`. The file is read in passes, never whole in memory
/// ([`source`]), unless its layout needs one TOML document ([`chunks`]).
pub fn load_zone_file_with(path: &Path, ctx: &LoadContext<'_>) -> Result<Zone, ZoneError> {
    let mut file = source::FileSource::open(path)?;
    let read = (|| match file.scan()? {
        Some((split, lines)) => parse_in_chunks(path, &mut Source::File(&mut file), &split, &lines, ctx),
        None => parse_whole(path, &file.whole()?, ctx),
    })();
    // A file written while it was read says so, rather than with what its halves made.
    file.unchanged()?;
    read
}

/// Validates the text of one zone file read from `path` (`path` names it in errors and
/// anchors its `include`).
pub fn parse_zone_text(path: &Path, text: &str) -> Result<Zone, ZoneError> {
    parse_zone_text_with(path, text, &LoadContext::default())
}

/// [`parse_zone_text`] with `ctx`.
pub fn parse_zone_text_with(path: &Path, text: &str, ctx: &LoadContext<'_>) -> Result<Zone, ZoneError> {
    match chunks::split(text) {
        Some(split) => parse_in_chunks(path, &mut Source::Text(text), &split, &LineIndex::new(text), ctx),
        None => parse_whole(path, text, ctx),
    }
}

/// The file as one TOML document (every layout TOML allows).
fn parse_whole(path: &Path, text: &str, ctx: &LoadContext<'_>) -> Result<Zone, ZoneError> {
    let lines = LineIndex::new(text);
    let mut file: ZoneFile = toml::from_str(text).map_err(|err| toml_error(path, &lines, |at| at, &err))?;
    let checks = std::mem::take(&mut file.health_check);
    let mut builder = ZoneBuilder::new(path, (&lines, &NO_HEAD_MAP), &file, ctx)?;
    builder.expect_tables(file.rrset.len());
    builder.head(&file, checks.into_iter().map(|entry| Ok((0, entry))))?;
    for (index, entry) in file.rrset.iter().enumerate() {
        builder.any_rrset(index, entry)?;
    }
    builder.finish()
}

/// The head, then one `[[health_check]]` and one `[[rrset]]` table at a time
/// ([`chunks`]) from `source`: what is parsed of one lives only while it is compiled
/// into the builder. `lines` indexes the newlines of the whole text. A head that holds
/// record sets or checks itself (inline arrays at the root, which are no table
/// headers) is read whole instead.
fn parse_in_chunks(
    path: &Path,
    source: &mut Source<'_>,
    split: &chunks::Split,
    lines: &LineIndex,
    ctx: &LoadContext<'_>,
) -> Result<Zone, ZoneError> {
    let file: ZoneFile =
        toml::from_str(&split.head).map_err(|err| toml_error(path, lines, |at| split.head_map.original(at), &err))?;
    if !file.health_check.is_empty() || !file.rrset.is_empty() {
        drop(file);
        let text = source.whole()?;
        return parse_whole(path, &text, ctx);
    }
    // The head map first: the builder reports mistakes of `[zone]` as it starts.
    let mut builder = ZoneBuilder::new(path, (lines, &split.head_map), &file, ctx)?;
    builder.expect_tables(split.rrsets.len());
    // One body at a time, in order (an exact size hint: the checks' room is made up front).
    let checks = split.health_checks.iter().map(|&body| {
        source.body(body).and_then(|text| {
            toml::from_str(text)
                .map(|entry| (body.start(), entry))
                .map_err(|err| toml_error(path, lines, |at| body.start() + at, &err))
        })
    });
    builder.head(&file, checks)?;
    for (index, &body) in split.rrsets.iter().enumerate() {
        let entry: RrsetEntry =
            toml::from_str(source.body(body)?).map_err(|err| toml_error(path, lines, |at| body.start() + at, &err))?;
        builder.base = body.start();
        builder.any_rrset(index, &entry)?;
        builder.base = 0;
    }
    builder.finish()
}

/// A TOML error whose span starts at `place(start)` in the text `lines` indexes.
fn toml_error(path: &Path, lines: &LineIndex, place: impl Fn(usize) -> usize, err: &toml::de::Error) -> ZoneError {
    let line = err.span().map(|span| lines.line(place(span.start)));
    ZoneError::invalid(path, line, None, err.message().trim().to_owned())
}

/// A TOML settings file's parse error as `line N (`the line`): reason`, so a daemon's
/// config error names the key as well as the file (the error's own message does not).
#[must_use]
pub fn toml_reason(text: &str, err: &toml::de::Error) -> String {
    let reason = err.message().trim();
    match err.span() {
        Some(span) => {
            let line = line_of(text, span.start);
            let shown = text.lines().nth(line - 1).unwrap_or_default().trim();
            format!("line {line} (`{shown}`): {reason}")
        }
        None => reason.to_owned(),
    }
}

/// 1-based line of byte `offset` in `text` (error path; the builder keeps an index).
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |head| head.bytes().filter(|&b| b == b'\n').count() + 1)
}

/// Offsets of the newlines of a text, for line numbers in O(log n): a zone file of
/// 100,000 record sets asks for one per set. `u32` offsets sized exactly (a zone file is
/// at most [`master::MAX_FILE`], 2³² octets): for a file of 8 million lines the index was
/// 67 MB of grown `usize`s, a tenth of the loader's peak.
pub(crate) struct LineIndex(Vec<u32>);

impl LineIndex {
    /// The index of `newlines`, offsets in increasing order.
    pub(crate) fn from_newlines(newlines: Vec<u32>) -> LineIndex {
        LineIndex(newlines)
    }

    pub(crate) fn new(text: &str) -> LineIndex {
        let mut newlines = Vec::with_capacity(memchr::memchr_iter(b'\n', text.as_bytes()).count());
        newlines.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|at| u32::try_from(at).unwrap_or(u32::MAX)));
        LineIndex(newlines)
    }

    /// 1-based line of byte `offset`.
    pub(crate) fn line(&self, offset: usize) -> usize {
        let offset = u32::try_from(offset).unwrap_or(u32::MAX);
        self.0.partition_point(|&newline| newline < offset) + 1
    }
}

/// The head map of a file read whole: the identity.
static NO_HEAD_MAP: chunks::HeadMap = chunks::HeadMap::EMPTY;

/// Where one record set came from, for error messages: 16 octets. (It was an `Arc`'d
/// path, a line and a key string, 56 octets: 56 MB of a million-set zone's load.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The file, as its index in [`sets::SetMap::path`]'s list (0: the zone file).
    pub(crate) file: u32,
    /// 1-based line; 0: not known.
    line: u32,
    key: OriginKey,
}

/// The key an [`Origin`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OriginKey {
    /// A record of a master file (its line says it all).
    None,
    /// `zone.soa`.
    ZoneSoa,
    /// `zone.ns`.
    ZoneNs,
    /// `rrset[i]`.
    Rrset(u32),
}

impl OriginKey {
    /// `rrset[index]`.
    pub(crate) fn rrset(index: usize) -> OriginKey {
        OriginKey::Rrset(u32::try_from(index).unwrap_or(u32::MAX))
    }
}

impl Origin {
    /// A set of the zone file itself at line `at`, key `key`.
    pub(crate) fn in_zone_file(at: Option<usize>, key: OriginKey) -> Origin {
        Origin::new(0, at, key)
    }

    pub(crate) fn new(file: u32, line: Option<usize>, key: OriginKey) -> Origin {
        Origin {
            file,
            line: line.map_or(0, |line| u32::try_from(line).unwrap_or(u32::MAX)),
            key,
        }
    }

    /// The line, when known.
    pub(crate) fn line(self) -> Option<usize> {
        (self.line != 0).then_some(self.line as usize)
    }

    /// The key, as an error names it.
    pub(crate) fn key(self) -> Option<String> {
        match self.key {
            OriginKey::None => None,
            OriginKey::ZoneSoa => Some("zone.soa".to_owned()),
            OriginKey::ZoneNs => Some("zone.ns".to_owned()),
            OriginKey::Rrset(index) => Some(format!("rrset[{index}]")),
        }
    }
}

pub(crate) struct ZoneBuilder<'a> {
    pub(crate) path: &'a Path,
    pub(crate) lines: &'a LineIndex,
    /// Where the table being read starts in the file (its spans count from there); 0
    /// while the head is read, whose spans `head_map` places.
    pub(crate) base: usize,
    /// Where the pieces of the head stand in the file (empty: the head is the file).
    pub(crate) head_map: &'a chunks::HeadMap,
    pub(crate) origin: Name,
    pub(crate) origin_wire: Vec<u8>,
    pub(crate) ttl: u32,
    pub(crate) sets: sets::SetMap,
    /// Health slots in evaluation order.
    pub(crate) slots: Vec<crate::Slot>,
    /// Check id → slot.
    pub(crate) checks: BTreeMap<String, u32>,
    /// Alias members to resolve once every set is known.
    pub(crate) aliases: Vec<crate::policy::PendingAlias>,
    /// `zone.dnssec`: the algorithm to sign with, when asked.
    pub(crate) dnssec: Option<crate::dnssec::Algorithm>,
    /// `[[cidr_collection]]` id → its locations.
    pub(crate) collections: BTreeMap<String, collections::Collection>,
    /// The geolocation database, for `policy = "geo"` sets.
    pub(crate) geo: Option<&'a crate::geo::GeoDb>,
    /// Geo sets read, compiled at the end over the zone's class table.
    pub(crate) pending_geo: Vec<collections::PendingGeo>,
    /// This location, for members' `sites` (`None`: keep every member).
    pub(crate) location: Option<&'a str>,
    /// Members with `sites`, applied once every set is read.
    pub(crate) sites: Vec<crate::sites::SiteRule>,
    /// `transfer_allow`, `transfer_tsig`, `notify`, `primary`, when any is set.
    pub(crate) transfer: Option<Box<crate::snapshot::Transfer>>,
    /// Where copies of zones taken from a primary are kept.
    pub(crate) secondary_dir: Option<&'a Path>,
    /// Where the records added by dynamic update are kept.
    pub(crate) dynamic_dir: Option<&'a Path>,
    /// The copy of a zone taken from a primary, once read.
    pub(crate) copy: Option<Arc<Path>>,
    /// The `[[rrset]]` being read has `replace = true`.
    pub(crate) replacing: bool,
    /// How many `[[rrset]]` tables the file holds: an included master file's room is
    /// made for them too (and for the SOA and apex NS the head adds after it).
    pub(crate) tables: usize,
}

impl<'a> ZoneBuilder<'a> {
    /// A builder for the zone file at `path` whose newlines `lines` indexes and whose
    /// head's pieces `head_map` places; reads `[zone]` from `file`.
    fn new(
        path: &'a Path,
        (lines, head_map): (&'a LineIndex, &'a chunks::HeadMap),
        file: &ZoneFile,
        ctx: &LoadContext<'a>,
    ) -> Result<Self, ZoneError> {
        let mut builder = ZoneBuilder {
            path,
            lines,
            base: 0,
            head_map,
            origin: Name::root(),
            origin_wire: vec![0],
            ttl: schema::DEFAULT_TTL,
            sets: sets::SetMap::new(Arc::from(path)),
            slots: Vec::new(),
            checks: BTreeMap::new(),
            aliases: Vec::new(),
            dnssec: None,
            collections: BTreeMap::new(),
            geo: ctx.geo,
            pending_geo: Vec::new(),
            location: ctx.location,
            sites: Vec::new(),
            transfer: None,
            secondary_dir: ctx.secondary_dir,
            dynamic_dir: ctx.dynamic_dir,
            copy: None,
            replacing: false,
            tables: 0,
        };
        let origin_text = file.zone.origin.get_ref();
        if !origin_text.ends_with('.') {
            return Err(builder.err(
                &file.zone.origin,
                "zone.origin",
                format!("origin {origin_text:?} must be absolute (end with '.')"),
            ));
        }
        builder.origin = master::parse_name(origin_text, &Name::root())
            .map_err(|e| builder.err(&file.zone.origin, "zone.origin", format!("bad name: {e}")))?;
        builder.origin_wire = name::to_wire(&builder.origin);
        if let Some(ttl) = &file.zone.ttl {
            builder.ttl = builder.ttl_value(ttl, "zone.ttl")?;
        }
        let algorithm = match &file.zone.dnssec_algorithm {
            Some(text) => Some(crate::dnssec::Algorithm::parse(text.get_ref()).ok_or_else(|| {
                builder.err(
                    text,
                    "zone.dnssec_algorithm",
                    format!("unknown algorithm {:?}: use ECDSAP256SHA256 or ED25519", text.get_ref()),
                )
            })?),
            None => None,
        };
        if file.zone.dnssec.as_ref().is_some_and(|on| *on.get_ref()) {
            builder.dnssec = Some(algorithm.unwrap_or(crate::dnssec::Algorithm::EcdsaP256Sha256));
        } else if let Some(text) = &file.zone.dnssec_algorithm {
            return Err(builder.err(text, "zone.dnssec_algorithm", "set without `dnssec = true`"));
        }
        builder.transfer = builder.transfer_settings(&file.zone)?;
        Ok(builder)
    }

    /// A TSIG key name (lowercase, no trailing dot).
    fn key_name(&self, key: Option<&Spanned<String>>, field: &str) -> Result<Option<String>, ZoneError> {
        let Some(key) = key else { return Ok(None) };
        let text = key.get_ref().trim().trim_end_matches('.').to_ascii_lowercase();
        if text.is_empty() || master::parse_name(&format!("{text}."), &Name::root()).is_err() {
            return Err(self.err(key, field, format!("{:?} is not a key name", key.get_ref())));
        }
        Ok(Some(text))
    }

    /// `transfer_allow`, `transfer_tsig`, `notify`, `primary` and `primary_tsig` (SPEC
    /// §10), checked.
    fn transfer_settings(
        &self,
        zone: &schema::ZoneSection,
    ) -> Result<Option<Box<crate::snapshot::Transfer>>, ZoneError> {
        if zone.transfer_allow.is_none()
            && zone.transfer_tsig.is_none()
            && zone.notify.is_none()
            && zone.primary.is_none()
            && zone.primary_tsig.is_none()
            && zone.catalog.is_none()
            && zone.update.is_none()
        {
            return Ok(None);
        }
        let mut transfer = crate::snapshot::Transfer::default();
        for prefix in zone.transfer_allow.iter().flat_map(toml::Spanned::get_ref) {
            let parsed = crate::client::parse_prefix(prefix.get_ref())
                .map_err(|reason| self.err(prefix, "zone.transfer_allow", reason))?;
            transfer.allow.push(parsed);
        }
        transfer.tsig = self.key_name(zone.transfer_tsig.as_ref(), "zone.transfer_tsig")?;
        transfer.primary_tsig = self.key_name(zone.primary_tsig.as_ref(), "zone.primary_tsig")?;
        for (i, rule) in zone.update.iter().flatten().enumerate() {
            transfer.update.push(self.update_rule(i, rule.get_ref())?);
        }
        if let Some(primary) = &zone.primary {
            transfer.primary = Some(primary.get_ref().trim().parse().map_err(|_| {
                self.err(
                    primary,
                    "zone.primary",
                    format!("{:?} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT)", primary.get_ref()),
                )
            })?);
            if let Some(include) = &zone.include {
                return Err(self.err(
                    include,
                    "zone.include",
                    "a zone taken from a primary gets its records from it: remove `include` or `primary`",
                ));
            }
            if self.secondary_dir.is_none() {
                return Err(self.err(
                    primary,
                    "zone.primary",
                    "only qdns-control takes zones from a primary (SPEC §10); give this zone to control",
                ));
            }
        } else if let Some(key) = &zone.primary_tsig {
            return Err(self.err(key, "zone.primary_tsig", "set without `primary`"));
        }
        if let Some(catalog) = zone.catalog.as_ref().filter(|c| *c.get_ref()) {
            let Some(primary) = transfer.primary else {
                return Err(self.err(catalog, "zone.catalog", "a catalog zone comes from a `primary`"));
            };
            // Not served: only its members are (see the secondary side in control).
            return Err(ZoneError::NotTransferred {
                path: self.path.to_path_buf(),
                origin: self.origin.to_string(),
                primary,
                tsig: transfer.primary_tsig,
                catalog: true,
            });
        }
        for target in zone.notify.iter().flat_map(toml::Spanned::get_ref) {
            let addr = target.get_ref().trim().parse::<std::net::SocketAddr>().map_err(|_| {
                self.err(
                    target,
                    "zone.notify",
                    format!("{:?} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT)", target.get_ref()),
                )
            })?;
            transfer.notify.push(addr);
        }
        if transfer.allow.is_empty() && !transfer.notify.is_empty() {
            let at = zone.notify.as_ref().map_or(0, |n| n.span().start);
            return Err(ZoneError::invalid(
                self.path,
                Some(self.line(at)),
                Some("zone.notify".to_owned()),
                "secondaries that are notified must be allowed to transfer: add them to `transfer_allow`",
            ));
        }
        Ok(Some(Box::new(transfer)))
    }

    /// The `i`th `[[zone.update]]` rule, checked.
    fn update_rule(&self, i: usize, rule: &schema::UpdateEntry) -> Result<crate::update::Rule, ZoneError> {
        let field = |name: &str| format!("zone.update[{i}].{name}");
        let key = self.key_name(Some(&rule.key), &field("key"))?.unwrap_or_default();
        let mut names = Vec::new();
        for text in rule.names.get_ref() {
            names.push(
                crate::update::Pattern::parse(text.get_ref()).map_err(|why| self.err(text, &field("names"), why))?,
            );
        }
        if names.is_empty() {
            return Err(self.err(
                &rule.names,
                &field("names"),
                "no name: give at least one (`@` for the apex)",
            ));
        }
        let types = if rule.types.get_ref().iter().any(|t| t.get_ref().trim() == "*") {
            None
        } else {
            let mut types = Vec::new();
            for text in rule.types.get_ref() {
                let code = master::type_code(text.get_ref().trim())
                    .ok_or_else(|| self.err(text, &field("types"), format!("unknown type {:?}", text.get_ref())))?;
                if crate::update::NEVER.contains(&code) || master::refused_type(code).is_err() {
                    return Err(self.err(
                        text,
                        &field("types"),
                        format!("{} records are never changed by UPDATE", text.get_ref().trim()),
                    ));
                }
                types.push(code);
            }
            if types.is_empty() {
                return Err(self.err(&rule.types, &field("types"), "no type: give at least one, or [\"*\"]"));
            }
            Some(types)
        };
        let per_minute = match &rule.per_minute {
            Some(limit) if *limit.get_ref() == 0 => {
                return Err(self.err(
                    limit,
                    &field("per_minute"),
                    "0 would refuse every UPDATE of the key: remove the rule instead",
                ))
            }
            limit => limit.as_ref().map(|l| *l.get_ref()),
        };
        Ok(crate::update::Rule {
            key,
            names,
            types,
            per_minute,
        })
    }

    /// 1-based line of span offset `offset` of the table being read.
    pub(crate) fn line(&self, offset: usize) -> usize {
        self.lines.line(match self.base {
            0 => self.head_map.original(offset),
            base => base + offset,
        })
    }

    pub(crate) fn err<T>(&self, at: &Spanned<T>, key: &str, reason: impl Into<String>) -> ZoneError {
        ZoneError::invalid(
            self.path,
            Some(self.line(at.span().start)),
            Some(key.to_owned()),
            reason,
        )
    }

    pub(crate) fn ttl_value(&self, ttl: &Spanned<i64>, key: &str) -> Result<u32, ZoneError> {
        u32::try_from(*ttl.get_ref())
            .ok()
            .filter(|&t| t <= MAX_TTL)
            .ok_or_else(|| self.err(ttl, key, format!("TTL {} is outside 0..={MAX_TTL}", ttl.get_ref())))
    }

    pub(crate) fn u32_value(&self, value: &Spanned<i64>, key: &str) -> Result<u32, ZoneError> {
        u32::try_from(*value.get_ref())
            .map_err(|_| self.err(value, key, format!("{} is outside 0..=4294967295", value.get_ref())))
    }

    /// Resolves an owner or target name: `@`, relative, or absolute.
    pub(crate) fn name(&self, text: &Spanned<String>, key: &str) -> Result<Name, ZoneError> {
        let raw = text.get_ref().trim();
        if raw.is_empty() {
            return Err(self.err(text, key, "empty name"));
        }
        if raw == "@" {
            return Ok(self.origin.clone());
        }
        master::parse_name(raw, &self.origin).map_err(|e| self.err(text, key, format!("bad name {raw:?}: {e}")))
    }

    pub(crate) fn insert(&mut self, set: RecordSet, origin: Origin) -> Result<(), ZoneError> {
        let from_copy = |first: &Origin| {
            self.copy
                .as_deref()
                .is_some_and(|copy| *self.sets.path(first.file) == *copy)
        };
        if let Some((_, first)) = self.sets.get(&set.name, set.rtype) {
            if self.replacing && from_copy(&first) {
                self.sets.replace(set, origin);
                return Ok(());
            }
            return Err(self.origin_error(
                origin,
                format!(
                    "{} {} is defined twice (also at {}{}); {}",
                    name::to_text(&set.name),
                    type_name(set.rtype),
                    self.sets.path(first.file).display(),
                    first.line().map(|l| format!(":{l}")).unwrap_or_default(),
                    if from_copy(&first) {
                        "the primary has it: set `replace = true` on this [[rrset]] to answer it from here"
                    } else {
                        "merge the values into one set"
                    }
                ),
            ));
        }
        if !self.sets.add(set, origin) {
            return Err(ZoneError::invalid(self.path, None, None, "more than 2^32 record sets"));
        }
        Ok(())
    }

    /// An error at `origin`.
    pub(crate) fn origin_error(&self, origin: Origin, reason: String) -> ZoneError {
        ZoneError::invalid(self.sets.path(origin.file), origin.line(), origin.key(), reason)
    }

    /// The file holds `tables` `[[rrset]]` tables: room for them and the SOA and apex NS
    /// (an included master file makes room for its own records beside them).
    fn expect_tables(&mut self, tables: usize) {
        self.tables = tables;
        self.sets.reserve(tables + 2);
    }

    /// What comes before the record sets: the included master file, SOA, apex NS and
    /// the health checks (record sets refer to them, wherever they stand in the file).
    fn head(
        &mut self,
        file: &ZoneFile,
        checks: impl IntoIterator<Item = Result<(usize, HealthCheckEntry), ZoneError>>,
    ) -> Result<(), ZoneError> {
        if let Some(include) = &file.zone.include {
            self.include(include)?;
        }
        if let Some(dir) = self.dynamic_dir {
            // Records added by UPDATE (control keeps them, one master file a zone).
            let dynamic = dir.join(secondary_copy_name(&self.origin_wire));
            if dynamic.is_file() {
                self.include_master(&dynamic, &file.zone.origin, "dynamic update")?;
            }
        }
        if let (Some(primary), Some(at)) = (self.transfer.as_ref().and_then(|t| t.primary), &file.zone.primary) {
            let dir = self.secondary_dir.unwrap_or_else(|| Path::new("."));
            let copy = dir.join(secondary_copy_name(&self.origin_wire));
            if !copy.is_file() {
                return Err(ZoneError::NotTransferred {
                    path: self.path.to_path_buf(),
                    origin: self.origin.to_string(),
                    primary,
                    tsig: self.transfer.as_ref().and_then(|t| t.primary_tsig.clone()),
                    catalog: false,
                });
            }
            self.include_master(&copy, at, "zone.primary")?;
            self.copy = Some(Arc::from(copy.as_path()));
        }
        self.soa(file)?;
        self.apex_ns(file)?;
        self.health_checks(checks)?;
        self.cidr_collections(&file.cidr_collection)
    }

    /// The `index`th `[[rrset]]` table.
    fn any_rrset(&mut self, index: usize, entry: &RrsetEntry) -> Result<(), ZoneError> {
        self.replacing = false;
        if let Some(replace) = entry.replace.as_ref().filter(|r| *r.get_ref()) {
            if self.copy.is_none() {
                return Err(self.err(
                    replace,
                    &format!("rrset[{index}].replace"),
                    "`replace` applies in a zone taken from a primary (`[zone] primary`)",
                ));
            }
            self.replacing = true;
        }
        if entry.policy.is_some() {
            self.policy_rrset(index, entry)
        } else {
            self.rrset(index, entry)
        }
    }

    /// Aliases resolved, the zone validated, and built.
    fn finish(mut self) -> Result<Zone, ZoneError> {
        // Absent members first: the alias slots (evaluate_target_health) then read only
        // the members that exist here.
        self.apply_sites()?;
        self.resolve_aliases()?;
        let geo_table = self.compile_geo();
        // Sorted once: validation walks each owner's sets together, and the snapshot
        // lists sets by (owner, type).
        let order = self.sets.sorted();
        self.validate(&order)?;
        let soa = self.sets.get(&self.origin_wire, TYPE_SOA).map(|(set, _)| set.clone());
        let Some(soa) = soa else {
            return Err(ZoneError::invalid(
                self.path,
                None,
                Some("zone.soa".to_owned()),
                "the zone has no SOA",
            ));
        };
        let rdata = soa.rdata.first().map(Vec::as_slice).unwrap_or_default();
        let fixed = rdata.len().saturating_sub(20);
        let field = |i: usize| {
            rdata
                .get(fixed + 4 * i..fixed + 4 * i + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (serial, minimum) = (field(0), field(4));
        Ok(Zone {
            origin: self.origin_wire,
            source: self.path.display().to_string(),
            serial,
            negative_ttl: soa.ttl.min(minimum),
            rrsets: self.sets.into_sets(order),
            slot_base: 0,
            slots: self.slots,
            dnssec: self.dnssec.map(|a| Box::new(crate::dnssec::Signatures::requested(a))),
            geo: geo_table,
            transfer: self.transfer,
        })
    }

    fn include(&mut self, include: &Spanned<String>) -> Result<(), ZoneError> {
        let base = self.path.parent().unwrap_or_else(|| Path::new("."));
        let master_path = base.join(include.get_ref());
        self.include_master(&master_path, include, "zone.include")
    }

    /// Reads the master file at `master_path` into the zone's sets (`at`, `key`: what
    /// named it, for errors).
    fn include_master(&mut self, master_path: &Path, at: &Spanned<String>, key: &str) -> Result<(), ZoneError> {
        // The file is read twice in pieces, never held whole: once for its newlines
        // (the room below), once for its records.
        let lines = master::count_lines(master_path)
            .map_err(|e| self.err(at, key, format!("cannot read {}: {e}", master_path.display())))?;
        // Records go straight into the zone's sets as they are read (no list of parsed
        // sets beside them): records of one owner and type merge (smallest TTL,
        // duplicates dropped, RFC 2181 §5), where the set is first seen is its origin.
        // About a set per line in a large file (one record per owner): room up front
        // rather than a doubling copy of a million sets — room for the sets the zone's
        // own file adds after these too (the SOA and apex NS, its `[[rrset]]` tables):
        // one more set past the room doubled the whole array (at 1,000,000 sets,
        // ≈ 125 MB copied into as many fresh pages, a third of an edge's start-up).
        self.sets.reserve(lines + self.tables + 2);
        let (origin, ttl, sets) = (&self.origin, self.ttl, &mut self.sets);
        master::parse_file_each(master_path, origin, ttl, &mut |record| {
            if record.ttl > MAX_TTL {
                return Err(format!("TTL {} is above {MAX_TTL}", record.ttl));
            }
            // One hash for the look-up and, for a new set, the insertion.
            let key = sets.key_hash(&record.name, record.rtype);
            if let Some(set) = sets.get_mut_hashed(key, &record.name, record.rtype) {
                set.ttl = set.ttl.min(record.ttl);
                if !set.rdata.contains(&record.rdata) {
                    set.rdata.push(record.rdata);
                }
                return Ok(());
            }
            let set = RecordSet {
                name: record.name,
                rtype: record.rtype,
                ttl: record.ttl,
                rdata: vec![record.rdata],
                policy: None,
            };
            let origin = Origin::new(sets.file(record.path), Some(record.line), OriginKey::None);
            if !sets.add_hashed(key, set, origin) {
                return Err("more than 2^32 record sets".to_owned());
            }
            Ok(())
        })
    }

    fn soa(&mut self, file: &ZoneFile) -> Result<(), ZoneError> {
        let Some(soa) = &file.zone.soa else {
            return Ok(());
        };
        if let Some((_, first)) = self.sets.get(&self.origin_wire, TYPE_SOA) {
            return Err(self.err(
                soa,
                "zone.soa",
                format!(
                    "the SOA is also in {}; keep one of the two",
                    self.sets.path(first.file).display()
                ),
            ));
        }
        let soa = soa.get_ref();
        let mut rdata = name::to_wire(&self.name(&soa.mname, "zone.soa.mname")?);
        rdata.extend(name::to_wire(&self.name(&soa.rname, "zone.soa.rname")?));
        for (value, key) in [
            (&soa.serial, "zone.soa.serial"),
            (&soa.refresh, "zone.soa.refresh"),
            (&soa.retry, "zone.soa.retry"),
            (&soa.expire, "zone.soa.expire"),
            (&soa.minimum, "zone.soa.minimum"),
        ] {
            rdata.extend(self.u32_value(value, key)?.to_be_bytes());
        }
        let line = Some(self.line(file.zone.soa.as_ref().map_or(0, |s| s.span().start)));
        let set = RecordSet {
            name: self.origin_wire.clone(),
            rtype: TYPE_SOA,
            ttl: self.ttl,
            rdata: vec![rdata],
            policy: None,
        };
        let origin = Origin::in_zone_file(line, OriginKey::ZoneSoa);
        self.insert(set, origin)
    }

    fn apex_ns(&mut self, file: &ZoneFile) -> Result<(), ZoneError> {
        let Some(ns) = &file.zone.ns else {
            return Ok(());
        };
        if let Some((_, first)) = self.sets.get(&self.origin_wire, TYPE_NS) {
            return Err(self.err(
                ns,
                "zone.ns",
                format!(
                    "the apex NS set is also in {}; keep one of the two",
                    self.sets.path(first.file).display()
                ),
            ));
        }
        let mut rdata = Vec::new();
        for (i, target) in ns.get_ref().names.iter().enumerate() {
            rdata.push(name::to_wire(&self.name(target, &format!("zone.ns.names[{i}]"))?));
        }
        if rdata.is_empty() {
            return Err(self.err(ns, "zone.ns.names", "at least one name server is required"));
        }
        let set = RecordSet {
            name: self.origin_wire.clone(),
            rtype: TYPE_NS,
            ttl: self.ttl,
            rdata,
            policy: None,
        };
        let origin = Origin::in_zone_file(Some(self.line(ns.span().start)), OriginKey::ZoneNs);
        self.insert(set, origin)
    }

    fn rrset(&mut self, index: usize, entry: &RrsetEntry) -> Result<(), ZoneError> {
        let key = |field: &str| format!("rrset[{index}].{field}");
        let (owner, owner_wire, rtype) = self.owner_and_type(entry, index)?;
        let ttl = match &entry.ttl {
            Some(ttl) => self.ttl_value(ttl, &key("ttl"))?,
            None => self.ttl,
        };
        if let Some(members) = &entry.members {
            return Err(self.err(
                members,
                &key("members"),
                "members need a policy (weighted, failover, multivalue)",
            ));
        }
        if let Some(zones) = &entry.zones {
            return Err(self.err(zones, &key("zones"), "zones need policy = \"zonal\""));
        }
        let Some(values_spanned) = &entry.values else {
            return Err(self.err(&entry.name, &key("values"), "a plain record set needs values"));
        };
        let values = values_spanned.get_ref();
        if values.is_empty() {
            return Err(self.err(values_spanned, &key("values"), "at least one value is required"));
        }
        let rdata = self.values(&owner, rtype, values, &key("values"))?;
        let set = RecordSet {
            name: owner_wire,
            rtype: u16::from(rtype),
            ttl,
            rdata,
            policy: None,
        };
        let origin = Origin::in_zone_file(Some(self.line(entry.name.span().start)), OriginKey::rrset(index));
        self.insert(set, origin)
    }

    /// Parses presentation-format `values` of `rtype` owned by `owner` (`key` prefixes
    /// the error keys).
    pub(crate) fn values(
        &self,
        owner: &Name,
        rtype: RecordType,
        values: &[Spanned<String>],
        key: &str,
    ) -> Result<Vec<Vec<u8>>, ZoneError> {
        let mut rdata: Vec<Vec<u8>> = Vec::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            let wire = master::parse_value(&self.origin, owner, rtype, value.get_ref()).map_err(|reason| {
                self.err(
                    value,
                    &format!("{key}[{i}]"),
                    format!(
                        "invalid {} value {:?}: {reason}",
                        type_name(u16::from(rtype)),
                        value.get_ref()
                    ),
                )
            })?;
            if rdata.contains(&wire) {
                return Err(self.err(value, &format!("{key}[{i}]"), "duplicate value"));
            }
            rdata.push(wire);
        }
        Ok(rdata)
    }

    /// Resolves and checks an rrset's owner name and type.
    pub(crate) fn owner_and_type(
        &self,
        entry: &RrsetEntry,
        index: usize,
    ) -> Result<(Name, Vec<u8>, RecordType), ZoneError> {
        let key = |field: &str| format!("rrset[{index}].{field}");
        let owner = self.name(&entry.name, &key("name"))?;
        let owner_wire = name::to_wire(&owner);
        if !is_at_or_below(&owner_wire, &self.origin_wire) {
            return Err(self.err(
                &entry.name,
                &key("name"),
                format!("{owner} is outside the zone {}", self.origin),
            ));
        }
        let code = master::type_code(entry.rtype.get_ref())
            .filter(|&t| is_data_type(t))
            .ok_or_else(|| {
                self.err(
                    &entry.rtype,
                    &key("type"),
                    format!("unknown or non-data RR type {:?}", entry.rtype.get_ref()),
                )
            })?;
        master::refused_type(code).map_err(|reason| self.err(&entry.rtype, &key("type"), reason))?;
        let rtype = RecordType::from(code);
        if rtype == RecordType::SOA {
            return Err(self.err(
                &entry.rtype,
                &key("type"),
                "the SOA comes from [zone.soa] or the included master file",
            ));
        }
        Ok((owner, owner_wire, rtype))
    }

    /// Whole-zone rules, once every set is in.
    fn validate(&self, order: &[u32]) -> Result<(), ZoneError> {
        let fail = |origin: Origin, reason: String| self.origin_error(origin, reason);
        if !self.sets.contains(&self.origin_wire, TYPE_NS) {
            return Err(ZoneError::invalid(
                self.path,
                None,
                Some("zone.ns".to_owned()),
                "the zone has no NS records at its apex",
            ));
        }
        let cuts: BTreeSet<&[u8]> = self
            .sets
            .iter()
            .filter(|(set, _)| set.rtype == TYPE_NS && set.name != self.origin_wire)
            .map(|(set, _)| set.name.as_slice())
            .collect();
        for (i, (set, origin)) in order.iter().filter_map(|&at| self.sets.at(at)).enumerate() {
            let (owner, rtype) = (&set.name, &set.rtype);
            // Only an error names the owner: text is made when one is reported.
            let text = || name::to_text(owner);
            if !is_at_or_below(owner, &self.origin_wire) {
                return Err(fail(origin, format!("{} is outside the zone {}", text(), self.origin)));
            }
            if *rtype == TYPE_SOA && *owner != self.origin_wire {
                return Err(fail(
                    origin,
                    format!("SOA at {}: an SOA belongs at the apex only", text()),
                ));
            }
            if *rtype == TYPE_SOA && set.rdata.len() != 1 {
                return Err(fail(origin, "the zone must have exactly one SOA record".to_owned()));
            }
            if *rtype == TYPE_CNAME {
                if *owner == self.origin_wire {
                    return Err(fail(
                        origin,
                        "a CNAME cannot be at the zone apex (RFC 1912 §2.4)".to_owned(),
                    ));
                }
                if set.rdata.len() > 1 {
                    return Err(fail(
                        origin,
                        format!(
                            "{} has {} CNAME records; one is allowed (RFC 2181 §10.1)",
                            text(),
                            set.rdata.len()
                        ),
                    ));
                }
                // The owner's sets are together in `order`: the first of them that is
                // not this CNAME.
                let same_owner = |at: &u32| self.sets.at(*at).is_some_and(|(s, _)| s.name == *owner);
                let run_start = order
                    .get(..i)
                    .unwrap_or_default()
                    .iter()
                    .rposition(|at| !same_owner(at))
                    .map_or(0, |p| p + 1);
                if let Some(other) = order
                    .get(run_start..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|at| same_owner(at))
                    .filter_map(|&at| self.sets.at(at))
                    .map(|(s, _)| s.rtype)
                    .find(|&t| t != TYPE_CNAME)
                {
                    return Err(fail(
                        origin,
                        format!(
                            "{} has a CNAME and other data ({}); a CNAME must be alone (RFC 1034 §3.6.2)",
                            text(),
                            type_name(other)
                        ),
                    ));
                }
            }
            // Data at or below a zone cut is occluded, except the cut's NS and glue. The
            // cuts that can hold the owner are its ancestors (and itself): a look-up per
            // label, not a pass over every delegation for every set.
            for cut in ancestors(owner).filter(|a| cuts.contains(a)) {
                let at_cut = owner.as_slice() == cut;
                let glue = matches!(*rtype, TYPE_A | TYPE_AAAA);
                if (at_cut && !matches!(*rtype, TYPE_NS | 43)) || (!at_cut && !glue) {
                    return Err(fail(origin, format!(
                        "{} {} is at or below the delegation {}; only NS (and DS) at the cut and A/AAAA glue below it are allowed",
                        text(),
                        type_name(*rtype),
                        name::to_text(cut)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// False for meta and question-only types (RFC 6895 §3.1), which never sit in a zone.
fn is_data_type(rtype: u16) -> bool {
    !matches!(rtype, 0 | 41 | 128..=255)
}

/// `wire` (an uncompressed name in wire form) and each of its ancestors up to the root,
/// as suffixes of it.
fn ancestors(wire: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = Some(0usize);
    std::iter::from_fn(move || {
        let start = at?;
        let rest = wire.get(start..)?;
        let len = usize::from(*rest.first()?);
        at = (len != 0).then_some(start + 1 + len);
        Some(rest)
    })
}

use crate::master::type_name;

mod chunks;
mod collections;
mod sets;
mod source;
use source::Source;

#[cfg(test)]
mod tests;
