//! Patching the installed generation for a snapshot delta: the entries of the names the
//! delta changed — with their ancestors, and every name whose answers read them —
//! replaced in copies of the record, slot and small-tail arrays, which take the other
//! bank; the other arrays are placed there as they are. A query reads the old
//! generation or the new one whole, as after a full install (the flip is the same
//! one-word write), and an edit of one name in a 1,000,000-name zone costs a copy of its
//! arrays instead of a compile of every name.
//!
//! What a patch covers: names of unsigned zones, off any zone cut, of at most 64
//! octets, without DNAME or routing policy, whose entries before and after are plain
//! answers and node entries (records and small, medium and large tails). Anything
//! else — a delta over another version than the tables', a new health layout or zone
//! list, more than [`PATCH_NAMES_MAX`] names to redo, or a quarter of the records left
//! unused by earlier patches (when over [`GARBAGE_MIN`]) — and the whole generation is
//! rebuilt.
//!
//! Which names a change reaches: its owner; each ancestor up to the apex (a new or
//! removed empty non-terminal, a wildcard's encloser); and, repeatedly, the owners of
//! sets whose answer reads a name at or below one that was changed, appeared or
//! vanished — a CNAME chain's next name, an MX/NS/SRV target whose addresses go in the
//! additional section (in the engines before and after). A changed SOA (a serial) is
//! rewritten in its zone's one small-table entry, with the records carrying it, and
//! makes every CNAME owner of the zone a changed name (a chain ending in NODATA or
//! NXDOMAIN carries the SOA).
use std::collections::HashSet;

use aya::maps::Array;
use qdns_abi::{
    answer::{fold, sum_words, AnswerKey, AnswerValue, KIND_NODE, KIND_PASS, KIND_PLAIN, NAME_MAX, RECORDS_MAX},
    slots::{home, tag, Bucket, BUCKET_SLOTS, CROWDED},
};

use super::{
    generation::{mmap_error, new_array, BankArrays, MappedValues, Tables},
    pack, table, Installed, TableStats, XdpProgram, XdpTableError,
};
use crate::engine::{export::NameSet, ChangedName, Engine};
use qdns_abi::answer::{
    LargeTail, MediumTail, ACTIVE_BANK_SHIFT, LARGE_MAP, LARGE_MAX, MEDIUM_MAP, MEDIUM_MAX, PLAIN_LARGE, PLAIN_MEDIUM,
    RECORDS_MAP, SLOTS_MAP, SMALL_MAP, SMALL_TAIL_MAX,
};

/// Most names one patch redoes: past this a full build is as quick.
pub const PATCH_NAMES_MAX: usize = 50_000;

/// Unused records patches may leave in any table before a whole build (1.25 MiB); past
/// it, a quarter of the records.
const GARBAGE_MIN: usize = 10_000;

/// What a patch is planned from: the installed generation and its small table.
pub struct Seed {
    /// The installed generation the patch applies to.
    generation: u32,
    /// The generation the patch makes and the links' bound on a message.
    next: (u32, usize),
    /// Small, large and medium tails installed (the patch's follow).
    small: usize,
    large: usize,
    medium: usize,
    /// Each zone's negative SOA entry.
    negatives: table::Negatives,
}

/// A planned patch: the entries to take out and the ones to put in.
pub struct Patch {
    seed_generation: u32,
    /// The installed small, large and medium tail counts it follows.
    firsts: (usize, usize, usize),
    next: u32,
    /// The snapshot version of the engine it is planned for.
    snapshot: u64,
    /// The names redone.
    names: usize,
    removed: Vec<(AnswerKey, AnswerValue)>,
    added: table::Table,
}

impl Patch {
    /// How many names the patch redoes.
    #[must_use]
    pub fn names(&self) -> usize {
        self.names
    }
}

impl XdpProgram {
    /// What a patch of the installed generation is planned from; `None` when nothing is
    /// installed, or earlier patches left a quarter of its records unused (and more
    /// than [`GARBAGE_MIN`]): time for a whole build.
    #[must_use]
    pub fn patch_seed(&self) -> Option<Seed> {
        let tables = self.installed.tables.as_ref()?;
        if self.installed.generation == 0 || tables.garbage > (tables.records / 4).max(GARBAGE_MIN) {
            return None;
        }
        Some(Seed {
            generation: self.installed.generation,
            next: self.next_build(),
            small: tables.small,
            large: tables.large,
            medium: tables.medium,
            negatives: tables.negatives.clone(),
        })
    }
}

/// The patch that turns the tables of `old` (installed: `seed`) into `new`'s, or why
/// the whole generation must be built instead.
pub fn plan(old: &Engine, new: &Engine, seed: Seed) -> Result<Patch, &'static str> {
    let changes = new.changes().ok_or("not compiled from a delta")?;
    if changes.base != old.version() {
        return Err("the delta is over another version than the tables'");
    }
    if old.health_layout() != new.health_layout() {
        return Err("the health layout changed");
    }
    if !old.zones().map(|(apex, _)| apex).eq(new.zones().map(|(apex, _)| apex)) {
        return Err("the zone list changed");
    }
    if changes.names.len() > PATCH_NAMES_MAX {
        return Err("too many names changed");
    }
    let dirty = reached(old, new, &changes.names)?;
    if dirty.len() > PATCH_NAMES_MAX {
        return Err("too many names to redo");
    }
    let names: Vec<Box<[u8]>> = dirty.into_iter().collect();
    let before = old.export_names(&names);
    let after = new.export_names(&names);
    for view in before.iter().chain(&after) {
        if view.signed {
            return Err("a signed zone");
        }
        if view.below_cut {
            return Err("a name at or below a zone cut");
        }
        if view.name.len() > NAME_MAX {
            return Err("a name over 64 octets");
        }
        if view
            .sets
            .iter()
            .any(|(rtype, policy)| *rtype == DNAME || policy.is_some())
        {
            return Err("a DNAME or a routing policy");
        }
    }
    let removed = table::compile_nodes(old, &before, seed.next, (0, table::Negatives::new())).answers;
    let small_first = u32::try_from(seed.small).map_err(|_| "small table full")?;
    let mut added = table::compile_nodes(new, &after, seed.next, (small_first, seed.negatives));
    let only_plain = |answers: &[(AnswerKey, AnswerValue)]| {
        answers
            .iter()
            .all(|(_, v)| matches!(v.kind, KIND_PLAIN | KIND_NODE | KIND_PASS) && v.long_name == 0)
    };
    let other_tables = !added.policies.is_empty()
        || !added.long_names.is_empty()
        || !added.gaps.is_empty()
        || !added.client.sets.is_empty();
    if other_tables || !only_plain(&added.answers) || !only_plain(&removed) {
        return Err("entries in tables a patch does not write");
    }
    if seed.large + added.large.len() > LARGE_MAX as usize || seed.medium + added.medium.len() > MEDIUM_MAX as usize {
        return Err("the large or medium tail table is full");
    }
    // The large and medium tails follow the installed ones.
    for (_, value) in added.answers.iter_mut().filter(|(_, v)| v.kind == KIND_PLAIN) {
        if value.node_flags & PLAIN_LARGE != 0 {
            value.policy += seed.large as u32;
        } else if value.node_flags & PLAIN_MEDIUM != 0 {
            value.policy += seed.medium as u32;
        }
    }
    Ok(Patch {
        firsts: (seed.small, seed.large, seed.medium),
        seed_generation: seed.generation,
        next: seed.next.0,
        snapshot: new.version(),
        names: names.len(),
        removed,
        added,
    })
}

/// The names a change of `changed` reaches (see the module's comment): the changed
/// names, their ancestors, and the readers of what changed, round after round.
fn reached(old: &Engine, new: &Engine, changed: &[ChangedName]) -> Result<HashSet<Box<[u8]>>, &'static str> {
    let mut dirty: HashSet<Box<[u8]>> = HashSet::new();
    // Whose readers must be redone: names whose sets changed (`exact`), and names that
    // appeared or vanished, or whose wildcard child did or changed (`under`: what is
    // below them is found otherwise now).
    let (mut exact, mut under): (NameSet, NameSet) = (HashSet::new(), HashSet::new());
    let mut zones: Vec<Box<[u8]>> = Vec::new();
    for (origin, name) in changed {
        let apex = new.apex_of(name).ok_or("a name outside every zone")?;
        if old.apex_of(name) != Some(apex) {
            return Err("a name moved between zones");
        }
        // A parent's delegation or glue at or below a hosted child's apex: the names it
        // reaches are the parent's, which the child hides from the lookups here.
        if **origin != *apex {
            return Err("a change of a parent zone at or below a hosted zone");
        }
        if !zones.iter().any(|z| **z == *apex) {
            zones.push(apex.into());
        }
        exact.insert(name.clone());
        let suffixes: Vec<&[u8]> = crate::wire::name::label_starts(name)
            .filter_map(|start| name.get(start..))
            .take_while(|s| s.len() >= apex.len())
            .collect();
        for (i, suffix) in suffixes.iter().enumerate() {
            dirty.insert((*suffix).into());
            let appeared_or_vanished = old.has_name(suffix) != new.has_name(suffix);
            if appeared_or_vanished {
                under.insert((*suffix).into());
                // A sibling wildcard's entries are relocated answers made by asking
                // for names beside it (`table::plain`): redone when one comes or goes.
                if let Some(parent) = suffixes.get(i + 1) {
                    let wildcard: Box<[u8]> = [&b"\x01*"[..], parent].concat().into();
                    if old.has_name(&wildcard) || new.has_name(&wildcard) {
                        dirty.insert(wildcard);
                    }
                }
            }
            // A wildcard changed, or appearing or vanishing (an empty non-terminal one
            // too): its parent synthesises otherwise now.
            let wildcard = suffix.starts_with(b"\x01*") && (i == 0 || appeared_or_vanished);
            if let (true, Some(parent)) = (wildcard, suffixes.get(i + 1)) {
                under.insert((*parent).into());
            }
        }
    }
    for apex in &zones {
        let soa = |engine: &Engine| {
            engine
                .export_names(std::slice::from_ref(apex))
                .first()
                .map(|view| view.negative_soa.to_vec())
        };
        let (before, after) = (soa(old), soa(new));
        // The node entries hold the SOA only while it fits the small table (else they
        // pass): a patch cannot move the zone's names across that line.
        let fits = |soa: &Option<Vec<u8>>| soa.as_ref().is_some_and(|s| s.len() + 2 <= SMALL_TAIL_MAX);
        if fits(&before) != fits(&after) {
            return Err("the SOA no longer fits the tables, or now does");
        }
        let soa_changed = before != after;
        // A zone cut's DS entry is a NODATA carrying the SOA in its own tail; cuts make
        // a patch refuse, so a changed SOA there is a whole build.
        if soa_changed && (old.has_cuts(apex) || new.has_cuts(apex)) {
            return Err("the SOA of a zone with delegations changed");
        }
        // Each round takes the readers of the last one's names; a chain is at most
        // MAX_CNAME_CHAIN long, so the rounds are too.
        for round in 0.. {
            if round > 12 {
                return Err("reader chains too long");
            }
            let readers = old
                .dependents(apex, (&exact, &under), soa_changed)
                .into_iter()
                .chain(new.dependents(apex, (&exact, &under), soa_changed));
            let mut grew = false;
            for name in readers {
                // A wildcard reader answers for every name it synthesises: their
                // readers are below its parent.
                if let Some(parent) = name.strip_prefix(b"\x01*") {
                    grew |= under.insert(parent.into());
                }
                dirty.insert(name.clone());
                grew |= exact.insert(name);
            }
            if !grew || dirty.len() > PATCH_NAMES_MAX {
                break;
            }
        }
    }
    Ok(dirty)
}

/// The DNAME type (RFC 6672).
const DNAME: u16 = 39;

impl XdpProgram {
    /// Places the arrays a patch copies (records, slots, tails) under `bank`, whose
    /// other arrays are `arrays`' already; the slot table last.
    fn place_patched(&mut self, bank: u32, arrays: &BankArrays, mask: u32) -> Result<(), XdpTableError> {
        self.place(SMALL_MAP, bank, &arrays.small)?;
        self.place(LARGE_MAP, bank, &arrays.large)?;
        self.place(MEDIUM_MAP, bank, &arrays.medium)?;
        self.place(RECORDS_MAP, bank, &arrays.records)?;
        self.place(SLOTS_MAP, bank, &arrays.buckets)?;
        self.set_config(qdns_abi::answer::CONFIG_MASK + bank, u64::from(mask))
    }

    /// Empties the arrays of `bank` a patch copies (the kernel frees them); the others
    /// stay, shared with the active bank.
    fn clear_patched(&mut self, bank: u32) -> Result<(), XdpTableError> {
        self.place_patched(bank, &BankArrays::empty()?, 0)
    }

    /// Writes `patch` (planned from [`XdpProgram::patch_seed`] with no install in
    /// between) into copies of the installed record, slot and small arrays and makes
    /// them, with the other arrays as they are, the active generation with `bitmap`. On
    /// failure the installed generation stays active (the caller then builds the whole
    /// generation).
    pub fn apply_patch(&mut self, patch: Patch, bitmap: &[u64]) -> Result<TableStats, XdpTableError> {
        let stale = |what: &'static str| XdpTableError::Patch(what);
        let tables = self
            .installed
            .tables
            .as_ref()
            .filter(|t| {
                self.installed.generation == patch.seed_generation && (t.small, t.large, t.medium) == patch.firsts
            })
            .ok_or(stale("the tables changed since the patch was planned"))?;
        // A build gives the slot table at most two entries a bucket; past three, build.
        let entries = (tables.entries + patch.added.answers.len()).saturating_sub(patch.removed.len());
        if entries > (tables.mask as usize + 1) * 3 {
            return Err(XdpTableError::Patch(
                "the slot table would hold over three entries a bucket",
            ));
        }
        let written = write_patch(tables, &patch)?;
        let bank = 1 - self.installed.bank;
        let health = 1 - self.installed.health;
        self.write_health(health, bitmap)?;
        let Some(old) = self.installed.tables.take() else {
            return Err(stale("the tables changed since the patch was planned"));
        };
        let arrays = BankArrays {
            records: written.records,
            buckets: written.buckets,
            small: written.small,
            large: written.large,
            medium: written.medium,
            ..old.arrays
        };
        if old.other_bank_shares {
            // The other bank holds the arrays a patch does not copy already.
            self.place_patched(bank, &arrays, old.mask)?;
        } else {
            self.place_bank(bank, &arrays, old.mask)?;
        }
        self.set_active(u64::from(patch.next) | u64::from(health) << 32 | u64::from(bank) << ACTIVE_BANK_SHIFT)?;
        let old_bank = self.installed.bank;
        let mut stats = self.installed.stats;
        let before = table::Table {
            answers: patch.removed,
            ..table::Table::default()
        }
        .stats();
        let after = patch.added.stats();
        stats.plain = (stats.plain + after.plain).saturating_sub(before.plain);
        stats.nodes = (stats.nodes + after.nodes).saturating_sub(before.nodes);
        stats.pass = (stats.pass + after.pass).saturating_sub(before.pass);
        stats.small = written.small_len;
        stats.large = old.large + patch.added.large.len();
        stats.medium = old.medium + patch.added.medium.len();
        stats.crowded += written.crowded;
        stats.bytes += (written.records_len - old.records) * size_of::<AnswerValue>()
            + (written.small_len - old.small) * size_of::<qdns_abi::answer::SmallTail>()
            + patch.added.large.len() * size_of::<LargeTail>()
            + patch.added.medium.len() * size_of::<MediumTail>();
        super::generation::grace_period();
        // The copied arrays of the old bank go; the shared ones stay for the next patch.
        let _ = self.clear_patched(old_bank);
        self.installed = Installed {
            generation: patch.next,
            health,
            bank,
            stats,
            snapshot: patch.snapshot,
            tables: Some(Tables {
                arrays,
                records: written.records_len,
                small: written.small_len,
                large: old.large + patch.added.large.len(),
                medium: old.medium + patch.added.medium.len(),
                mask: old.mask,
                entries,
                negatives: patch.added.negatives,
                garbage: old.garbage + written.retired,
                other_bank_shares: true,
            }),
        };
        Ok(stats)
    }
}

/// A patch written into new arrays, not yet placed.
struct Written {
    records: Array<aya::maps::MapData, AnswerValue>,
    buckets: Array<aya::maps::MapData, Bucket>,
    small: Array<aya::maps::MapData, qdns_abi::answer::SmallTail>,
    large: Array<aya::maps::MapData, LargeTail>,
    medium: Array<aya::maps::MapData, MediumTail>,
    records_len: usize,
    small_len: usize,
    /// New entries left without a slot.
    crowded: usize,
    /// Records no slot points at any more.
    retired: usize,
}

/// The values of `array` (the table `name`), mapped.
fn mapped<V: aya::Pod>(
    name: &'static str,
    array: &Array<aya::maps::MapData, V>,
) -> Result<MappedValues<V>, XdpTableError> {
    MappedValues::of(array).map_err(mmap_error(name))
}

/// A new array of `len` values (at least one) for the table `name`, its first values
/// copied from `from` (the installed array, `copied` of its values), mapped for writing.
fn copy_of<V: aya::Pod>(
    name: &'static str,
    from: &Array<aya::maps::MapData, V>,
    copied: usize,
    len: usize,
) -> Result<(Array<aya::maps::MapData, V>, MappedValues<V>), XdpTableError> {
    let (array, mut to) = new_array(name, len)?;
    let mut source = mapped(name, from)?;
    let (Some(to_values), Some(from_values)) = (to.values().get_mut(..copied), source.values().get(..copied)) else {
        return Err(XdpTableError::Patch(
            "the installed arrays are shorter than their count",
        ));
    };
    to_values.copy_from_slice(from_values);
    Ok((array, to))
}

fn write_patch(tables: &Tables, patch: &Patch) -> Result<Written, XdpTableError> {
    // Records: the installed ones, then the patch's, identical ones once (as `pack`).
    let mut dedup = pack::RecordDedup::new(Vec::new(), tables.records, patch.added.answers.len());
    let record_of: Vec<u32> = patch
        .added
        .answers
        .iter()
        .map(|(_, value)| dedup.index_of(value))
        .collect();
    let appended = dedup.records;
    let records_len = tables.records + appended.len();
    if records_len >= RECORDS_MAX as usize {
        return Err(XdpTableError::Patch("more records than one generation holds"));
    }
    let (records, mut records_map) = copy_of(RECORDS_MAP, &tables.arrays.records, tables.records, records_len)?;
    let values = records_map.values();
    for (slot, value) in values.iter_mut().skip(tables.records).zip(&appended) {
        *slot = *value;
    }
    // A zone's SOA changed: its entry's length and sum in every record carrying it.
    for &id in &patch.added.rewritten {
        let Some((_, bytes)) = patch.added.negatives.values().find(|(at, _)| *at == id) else {
            continue;
        };
        let len = u16::try_from(bytes.len()).map_err(|_| XdpTableError::Patch("an SOA too long"))?;
        let sum = fold(sum_words(bytes, 0));
        for record in values.iter_mut().take(tables.records) {
            if record.negative_len != 0 && record.tail_id == id {
                record.negative_len = len;
                record.negative_sum = sum;
            }
        }
    }
    let tails = write_tails(tables, patch)?;
    // Slots: the removed entries' cleared (found by tag and name), the added ones put in
    // as `pack` puts them.
    let buckets_len = tables.mask as usize + 1;
    let (buckets, mut buckets_map) = copy_of(SLOTS_MAP, &tables.arrays.buckets, buckets_len, buckets_len)?;
    let slots = buckets_map.values();
    let mut retired: HashSet<u32> = HashSet::new();
    for (key, value) in &patch.removed {
        let hash = pack::hash_of(key);
        let Some(bucket) = slots.get_mut(home(hash, tables.mask) as usize) else {
            continue;
        };
        for slot in 0..BUCKET_SLOTS {
            let record = bucket.record[slot] & !CROWDED;
            let named = values
                .get(record as usize)
                .is_some_and(|r| r.name == value.name && r.long_name == 0);
            if record != 0 && bucket.tag[slot] == tag(hash) && named {
                bucket.record[slot] &= CROWDED;
                retired.insert(record);
            }
        }
    }
    let mut crowded = 0;
    for ((key, _), &record) in patch.added.answers.iter().zip(&record_of) {
        let hash = pack::hash_of(key);
        let placed = slots
            .get_mut(home(hash, tables.mask) as usize)
            .is_some_and(|bucket| pack::slot_in(bucket, hash, record));
        if !placed {
            crowded += 1;
        }
    }
    Ok(Written {
        records,
        buckets,
        small: tails.small,
        large: tails.large,
        medium: tails.medium,
        records_len,
        small_len: tails.small_len,
        crowded,
        retired: retired.len(),
    })
}

/// The tail arrays of a patch, written.
struct WrittenTails {
    small: Array<aya::maps::MapData, qdns_abi::answer::SmallTail>,
    large: Array<aya::maps::MapData, LargeTail>,
    medium: Array<aya::maps::MapData, MediumTail>,
    small_len: usize,
}

/// Copies of the installed tail arrays with the patch's tails after them, and the
/// rewritten negative SOAs in place.
fn write_tails(tables: &Tables, patch: &Patch) -> Result<WrittenTails, XdpTableError> {
    // Small tails: the installed ones, the rewritten SOAs in place, then the patch's.
    let small_len = tables.small + patch.added.small.len();
    let (small, mut small_map) = copy_of(SMALL_MAP, &tables.arrays.small, tables.small, small_len)?;
    let tails = small_map.values();
    for &id in &patch.added.rewritten {
        if let (Some((_, bytes)), Some(slot)) = (
            patch.added.negatives.values().find(|(at, _)| *at == id),
            tails.get_mut(id as usize),
        ) {
            *slot = table::tails_small(bytes);
        }
    }
    for (slot, (_, tail)) in tails.iter_mut().skip(tables.small).zip(&patch.added.small) {
        *slot = tail.small();
    }
    // Large and medium tails: the installed ones, then the patch's.
    let (large, mut large_map) = copy_of(
        LARGE_MAP,
        &tables.arrays.large,
        tables.large,
        tables.large + patch.added.large.len(),
    )?;
    for (slot, (_, tail)) in large_map.values().iter_mut().skip(tables.large).zip(&patch.added.large) {
        *slot = tail.large();
    }
    let (medium, mut medium_map) = copy_of(
        MEDIUM_MAP,
        &tables.arrays.medium,
        tables.medium,
        tables.medium + patch.added.medium.len(),
    )?;
    for (slot, (_, tail)) in medium_map
        .values()
        .iter_mut()
        .skip(tables.medium)
        .zip(&patch.added.medium)
    {
        *slot = tail.medium();
    }
    Ok(WrittenTails {
        small,
        large,
        medium,
        small_len,
    })
}
