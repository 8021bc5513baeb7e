//! Writing the tables: a new generation's arrays built, placed under the inactive bank
//! and made active, the old bank's emptied after a grace period; the health buffers;
//! the answer-size bound from the links' MTU.
use std::os::fd::AsFd as _;

use aya::maps::{Array, ArrayOfMaps, MapData};
use qdns_abi::{
    answer::{
        AnswerValue, HealthWords, LargeTail, LongName, MediumTail, PolicyValue, SmallTail, ACTIVE_BANK_SHIFT,
        CONFIG_MASK, CONFIG_MAX_MESSAGE, HEALTH_MAP, HEALTH_WORDS, LARGE_MAP, LARGE_MAX, LONG_NAMES_MAP, MEDIUM_MAP,
        MEDIUM_MAX, POLICIES_MAP, POLICIES_MAX, RECORDS_MAP, SLOTS_MAP, SMALL_MAP,
    },
    client::{ClientBlock, ClientSet, CLASS_CHAINS_MAP, CLIENT_BLOCKS_MAP, CLIENT_INDEX_MAP, CLIENT_SETS_MAP},
    denial::{Gap, Piece, GAPS_MAP, PIECES_MAP},
    name::FRONT_WORDS,
    slots::Bucket,
};

use super::{interface::interface_mtu, map_error, pack, table, Installed, TableStats, XdpProgram, XdpTableError};
use crate::engine::Engine;

impl XdpProgram {
    /// Holds the tables' answers to what the smallest MTU of `interfaces` carries (XDP
    /// cannot fragment): an answer whose IP packet could be larger — with the longest
    /// question, IPv4 options and the UDP header — is left to user space and the kernel.
    /// Call before [`XdpProgram::install`]; an MTU changed later is not followed.
    /// The program checks the same bound on every answer (the long-name stage answers
    /// questions longer than the compiler allowed for).
    pub fn fit_links(&mut self, interfaces: &[String]) -> Result<(), XdpTableError> {
        match interfaces.iter().filter_map(|iface| interface_mtu(iface)).min() {
            // IPv4 with the largest header (60) and UDP (8).
            Some(mtu) => self.set_max_message((mtu as usize).saturating_sub(68)),
            None => Ok(()),
        }
    }

    /// Holds every answer the program sends to `max` octets of DNS message (at most
    /// 1,232): larger ones pass (`pass_large`). [`XdpProgram::fit_links`] sets it from
    /// the links' MTU.
    pub fn set_max_message(&mut self, max: usize) -> Result<(), XdpTableError> {
        self.max_message = max.min(qdns_abi::answer::RESPONSE_MAX);
        self.set_config(CONFIG_MAX_MESSAGE, self.max_message as u64)
    }

    /// Compiles `engine` into a new generation of the tables and makes it active, with
    /// the engine's current health. On failure the program passes every query.
    pub fn install(&mut self, engine: &Engine) -> Result<TableStats, XdpTableError> {
        let built = Built::new(engine, self.next_build());
        self.install_built(built, &engine.health())
    }

    /// What the next generation is built with ([`Built::new`]): its number and the
    /// links' bound on a message.
    #[must_use]
    pub fn next_build(&self) -> (u32, usize) {
        let generation = match self.installed.generation.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        (generation, self.max_message)
    }

    /// Writes `built` (made from [`XdpProgram::next_build`], with no install in
    /// between: one thread installs) and makes it active with `bitmap`. On failure the
    /// program passes every query.
    pub fn install_built(&mut self, built: Built, bitmap: &[u64]) -> Result<TableStats, XdpTableError> {
        let old = std::mem::take(&mut self.installed);
        let Built {
            table,
            packed,
            generation,
            snapshot,
            took: _,
        } = built;
        // The bank queries do not read (the first install takes bank 1).
        let bank = 1 - old.bank;
        let mut stats = table.stats();
        let health = 1 - old.health;
        let mut packed_len = (0, table.small.len(), 0);
        let result = packed.map_err(XdpTableError::from).and_then(|packed| {
            packed_len = (packed.records.len(), table.small.len(), packed.mask());
            self.write_generation(&table, &packed, bitmap, (health, generation, bank))
        });
        match result {
            Ok((crowded, bytes, arrays)) => {
                stats.crowded = crowded;
                stats.bytes = bytes;
                // Once every program run that read the old active word has ended, no
                // query reads the old bank: its arrays can go, and the next install can
                // fill it without a reader ever seeing a table change under it.
                grace_period();
                let _ = self.clear_bank(old.bank);
                self.installed = Installed {
                    generation,
                    health,
                    bank,
                    stats,
                    snapshot,
                    tables: Some(Tables {
                        arrays,
                        records: packed_len.0,
                        small: packed_len.1,
                        large: table.large.len(),
                        medium: table.medium.len(),
                        mask: packed_len.2,
                        entries: table.answers.len(),
                        negatives: table.negatives,
                        garbage: 0,
                        other_bank_shares: false,
                    }),
                };
                Ok(stats)
            }
            Err(err) => {
                // Everything passes: the old generation answers for a snapshot the edge
                // no longer serves, and the new one is incomplete.
                let _ = self.set_active(0);
                grace_period();
                let _ = self.clear_bank(bank);
                let _ = self.clear_bank(old.bank);
                Err(err)
            }
        }
    }

    fn write_generation(
        &mut self,
        table: &table::Table,
        packed: &pack::Packed,
        bitmap: &[u64],
        (health, generation, bank): (u32, u32, u32),
    ) -> Result<(usize, usize, BankArrays), XdpTableError> {
        if table.policies.len() > POLICIES_MAX as usize
            || table.large.len() > LARGE_MAX as usize
            || table.medium.len() > MEDIUM_MAX as usize
        {
            return Err(XdpTableError::TooLarge {
                policies: table.policies.len(),
                large: table.large.len(),
            });
        }
        self.write_health(health, bitmap)?;
        let client = &table.client;
        // Entry 0: the all-zero front of every name of at most 64 octets.
        let long_names = std::iter::once(LongName {
            front: [0; FRONT_WORDS],
        })
        .chain(table.long_names.iter().copied());
        let arrays = BankArrays {
            policies: filled(
                POLICIES_MAP,
                table.policies.len(),
                table.policies.iter().map(|(_, v)| *v),
            )?,
            large: filled(LARGE_MAP, table.large.len(), table.large.iter().map(|(_, v)| v.large()))?,
            medium: filled(
                MEDIUM_MAP,
                table.medium.len(),
                table.medium.iter().map(|(_, v)| v.medium()),
            )?,
            small: filled(SMALL_MAP, table.small.len(), table.small.iter().map(|(_, v)| v.small()))?,
            pieces: filled(PIECES_MAP, table.pieces.len(), table.pieces.iter().copied())?,
            gaps: filled(GAPS_MAP, table.gaps.len(), table.gaps.iter().copied())?,
            long_names: filled(LONG_NAMES_MAP, table.long_names.len() + 1, long_names)?,
            client_blocks: filled(CLIENT_BLOCKS_MAP, client.blocks.len(), client.blocks.iter().copied())?,
            class_chains: filled(
                CLASS_CHAINS_MAP,
                client.class_chains.len(),
                client.class_chains.iter().copied(),
            )?,
            client_index: filled(CLIENT_INDEX_MAP, client.index.len(), client.index.iter().copied())?,
            client_sets: filled(CLIENT_SETS_MAP, client.sets.len(), client.sets.iter().copied())?,
            records: filled(RECORDS_MAP, packed.records.len(), packed.records.iter().copied())?,
            buckets: filled(SLOTS_MAP, packed.buckets.len(), packed.buckets.iter().copied())?,
        };
        self.place_bank(bank, &arrays, packed.mask())?;
        self.set_active(u64::from(generation) | u64::from(health) << 32 | u64::from(bank) << ACTIVE_BANK_SHIFT)?;
        let bytes = packed.records.len() * size_of::<AnswerValue>()
            + packed.buckets.len() * size_of::<Bucket>()
            + table.policies.len() * size_of::<PolicyValue>()
            + table.large.len() * size_of::<LargeTail>()
            + table.medium.len() * size_of::<MediumTail>()
            + table.small.len() * size_of::<SmallTail>()
            + table.gaps.len() * size_of::<Gap>()
            + table.pieces.len() * size_of::<Piece>()
            + (table.long_names.len() + 1) * size_of::<LongName>()
            + client.bytes();
        Ok((packed.crowded, bytes, arrays))
    }

    /// Places `arrays` under `bank` with the slot mask `mask`: each array is full before
    /// it is placed, and the slot table goes last, so a query of the generation finds
    /// everything it points to.
    pub(super) fn place_bank(&mut self, bank: u32, arrays: &BankArrays, mask: u32) -> Result<(), XdpTableError> {
        self.place(POLICIES_MAP, bank, &arrays.policies)?;
        self.place(LARGE_MAP, bank, &arrays.large)?;
        self.place(MEDIUM_MAP, bank, &arrays.medium)?;
        self.place(SMALL_MAP, bank, &arrays.small)?;
        self.place(PIECES_MAP, bank, &arrays.pieces)?;
        self.place(GAPS_MAP, bank, &arrays.gaps)?;
        self.place(LONG_NAMES_MAP, bank, &arrays.long_names)?;
        self.place(CLIENT_BLOCKS_MAP, bank, &arrays.client_blocks)?;
        self.place(CLASS_CHAINS_MAP, bank, &arrays.class_chains)?;
        self.place(CLIENT_INDEX_MAP, bank, &arrays.client_index)?;
        self.place(CLIENT_SETS_MAP, bank, &arrays.client_sets)?;
        self.place(RECORDS_MAP, bank, &arrays.records)?;
        self.place(SLOTS_MAP, bank, &arrays.buckets)?;
        self.set_config(CONFIG_MASK + bank, u64::from(mask))
    }

    /// Puts one-element empty arrays (generation 0, which no query reads) under `bank`,
    /// so the kernel frees that bank's tables.
    pub(super) fn clear_bank(&mut self, bank: u32) -> Result<(), XdpTableError> {
        self.place_bank(bank, &BankArrays::empty()?, 0)
    }

    /// Makes `array` the table `name` of `bank`.
    pub(super) fn place<V: aya::Pod>(
        &mut self,
        name: &'static str,
        bank: u32,
        array: &Array<MapData, V>,
    ) -> Result<(), XdpTableError> {
        let mut outer = ArrayOfMaps::<_, Array<MapData, V>>::try_from(self.map(name)?).map_err(map_error(name))?;
        outer.set(bank, array, 0).map_err(map_error(name))
    }

    /// Makes `bitmap` the health the program reads: written to the inactive buffer,
    /// then flipped to.
    pub fn set_health(&mut self, bitmap: &[u64]) -> Result<(), XdpTableError> {
        if self.installed.generation == 0 {
            return Ok(());
        }
        let next = 1 - self.installed.health;
        self.write_health(next, bitmap)?;
        let bank = u64::from(self.installed.bank) << ACTIVE_BANK_SHIFT;
        self.set_active(u64::from(self.installed.generation) | u64::from(next) << 32 | bank)?;
        self.installed.health = next;
        Ok(())
    }

    pub(super) fn write_health(&mut self, index: u32, bitmap: &[u64]) -> Result<(), XdpTableError> {
        let mut words: Box<HealthWords> = Box::new([0; HEALTH_WORDS]);
        for (word, &value) in words.iter_mut().zip(bitmap) {
            *word = value;
        }
        let mut health = Array::<_, HealthWords>::try_from(self.map(HEALTH_MAP)?).map_err(map_error(HEALTH_MAP))?;
        health.set(index, *words, 0).map_err(map_error(HEALTH_MAP))
    }
}

/// One generation's tables compiled and packed from an engine, not yet written: built
/// without the program's lock (seconds at 1,000,000 names, while metrics, the link's
/// reports and health wait for nothing), then installed under it
/// ([`XdpProgram::install_built`]).
pub struct Built {
    table: table::Table,
    packed: Result<pack::Packed, pack::PackError>,
    generation: u32,
    snapshot: u64,
    /// How long the compile and the pack took (the install's log says them).
    pub took: BuildTimes,
}

/// Where an install's time went (milliseconds), for the install's log line.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct BuildTimes {
    /// Compiling the engine into entries.
    pub compile_ms: u64,
    /// Packing them into slot and record arrays.
    pub pack_ms: u64,
    /// Writing the arrays and making them active (0 until installed).
    pub write_ms: u64,
}

/// For log lines: `compile_ms=… pack_ms=… write_ms=…`.
impl std::fmt::Display for BuildTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "compile_ms={} pack_ms={} write_ms={}",
            self.compile_ms, self.pack_ms, self.write_ms
        )
    }
}

impl Built {
    /// Compiles and packs `engine`'s tables as generation `generation`, holding every
    /// answer to `max_message` octets ([`XdpProgram::next_build`] gives both).
    #[must_use]
    pub fn new(engine: &Engine, (generation, max_message): (u32, usize)) -> Built {
        let started = std::time::Instant::now();
        let table = table::compile(engine, generation, max_message);
        let compiled = started.elapsed();
        let packed = pack::pack(&table);
        Built {
            table,
            packed,
            generation,
            snapshot: engine.version(),
            took: BuildTimes {
                compile_ms: compiled.as_millis() as u64,
                pack_ms: started.elapsed().saturating_sub(compiled).as_millis() as u64,
                write_ms: 0,
            },
        }
    }
}

/// Waits until every XDP program run that started before the call has ended.
///
/// XDP runs inside an RCU read-side section, and `membarrier(MEMBARRIER_CMD_GLOBAL)` is
/// `synchronize_rcu()` on a multi-CPU kernel (kernel/sched/membarrier.c). Kernels with
/// `nohz_full` refuse that command; then a pause far longer than any program run (its
/// work is bounded: tens of microseconds at the very worst) stands in, with a warning.
pub(super) fn grace_period() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0 as libc::c_long) };
    if rc != 0 {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "membarrier(GLOBAL) refused (nohz_full?): XDP table swaps wait 50 ms instead of an RCU grace period"
            );
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One generation's arrays, kept while it is installed: a patch (`patch.rs`) copies its
/// records, slots and small tails and places the others under the next bank as they are.
pub(super) struct BankArrays {
    pub(super) policies: Array<MapData, PolicyValue>,
    pub(super) large: Array<MapData, LargeTail>,
    pub(super) medium: Array<MapData, MediumTail>,
    pub(super) small: Array<MapData, SmallTail>,
    pub(super) pieces: Array<MapData, Piece>,
    pub(super) gaps: Array<MapData, Gap>,
    pub(super) long_names: Array<MapData, LongName>,
    pub(super) client_blocks: Array<MapData, ClientBlock>,
    pub(super) class_chains: Array<MapData, u32>,
    pub(super) client_index: Array<MapData, u32>,
    pub(super) client_sets: Array<MapData, ClientSet>,
    pub(super) records: Array<MapData, AnswerValue>,
    pub(super) buckets: Array<MapData, Bucket>,
}

impl BankArrays {
    /// One-element zeroed arrays: what a bank holds when no generation is there.
    pub(super) fn empty() -> Result<BankArrays, XdpTableError> {
        fn empty<V: aya::Pod>(name: &'static str) -> Result<Array<MapData, V>, XdpTableError> {
            filled(name, 0, std::iter::empty())
        }
        Ok(BankArrays {
            policies: empty(POLICIES_MAP)?,
            large: empty(LARGE_MAP)?,
            medium: empty(MEDIUM_MAP)?,
            small: empty(SMALL_MAP)?,
            pieces: empty(PIECES_MAP)?,
            gaps: empty(GAPS_MAP)?,
            long_names: empty(LONG_NAMES_MAP)?,
            client_blocks: empty(CLIENT_BLOCKS_MAP)?,
            class_chains: empty(CLASS_CHAINS_MAP)?,
            client_index: empty(CLIENT_INDEX_MAP)?,
            client_sets: empty(CLIENT_SETS_MAP)?,
            records: empty(RECORDS_MAP)?,
            buckets: empty(SLOTS_MAP)?,
        })
    }
}

/// What a patch needs of the installed generation besides its arrays.
pub(super) struct Tables {
    pub(super) arrays: BankArrays,
    /// Records in use (record 0, the empty one, included).
    pub(super) records: usize,
    /// Small tails.
    pub(super) small: usize,
    /// Large and medium tails.
    pub(super) large: usize,
    pub(super) medium: usize,
    /// The slot table's bucket mask.
    pub(super) mask: u32,
    /// Entries (keys) the slot table was given: at most two a bucket from a build.
    pub(super) entries: usize,
    /// Each zone's negative SOA entry in the small table.
    pub(super) negatives: table::Negatives,
    /// Records no slot points at any more (patches leave the replaced ones).
    pub(super) garbage: usize,
    /// The other bank holds this generation's arrays a patch does not copy (policies,
    /// client tables, denials, long names): a patch there places only what it copies.
    pub(super) other_bank_shares: bool,
}

/// `BPF_F_INNER_MAP` (a bank's arrays may differ in size from the object's template)
/// and `BPF_F_MMAPABLE` (a new array is filled through a shared mapping: one copy of
/// the values, where a `bpf()` update per element took ≈ 6 s for the 566 MB of a
/// 1,000,000-name zone). They must equal the templates' flags (`ebpf/xdp/src/maps.rs`,
/// `INNER`): the kernel refuses an inner map whose flags differ.
pub(super) const TABLE_FLAGS: u32 = 1 << 12 | 1 << 10;

/// A new array for the table `name` holding `values` (`len` of them; at least one
/// element, zeroed when there are none).
pub(super) fn filled<V: aya::Pod>(
    name: &'static str,
    len: usize,
    values: impl Iterator<Item = V>,
) -> Result<Array<MapData, V>, XdpTableError> {
    let (array, mut mapped) = new_array(name, len)?;
    mapped.fill(values);
    Ok(array)
}

/// A new zeroed array of `len` values (at least one) for the table `name`, and its
/// values mapped for the loader's writes.
pub(super) fn new_array<V: aya::Pod>(
    name: &'static str,
    len: usize,
) -> Result<(Array<MapData, V>, MappedValues<V>), XdpTableError> {
    let entries = u32::try_from(len.max(1)).map_err(|_| XdpTableError::Map {
        map: name,
        source: Box::new(aya::maps::MapError::OutOfBounds {
            index: u32::MAX,
            max_entries: u32::MAX,
        }),
    })?;
    let array = Array::<MapData, V>::create(entries, TABLE_FLAGS).map_err(map_error(name))?;
    let fd = aya::maps::IterableMap::map(&array).fd().as_fd();
    let mapped = MappedValues::<V>::new(fd, entries as usize).map_err(mmap_error(name))?;
    Ok((array, mapped))
}

/// The error of mapping the values of the table `name`.
pub(super) fn mmap_error(name: &'static str) -> impl Fn(std::io::Error) -> XdpTableError {
    move |source| XdpTableError::Map {
        map: name,
        source: Box::new(aya::maps::MapError::SyscallError(aya::sys::SyscallError {
            call: "mmap",
            io_error: source,
        })),
    }
}

/// The values of a new `BPF_F_MMAPABLE` array, mapped shared into this process for the
/// loader's one write, unmapped on drop. Hand-written over `libc::mmap`: aya maps no
/// map's values, and this is the bulk path of every table install.
pub(super) struct MappedValues<V> {
    base: std::ptr::NonNull<u8>,
    len: usize,
    entries: usize,
    values: std::marker::PhantomData<V>,
}

impl<V: aya::Pod> MappedValues<V> {
    /// The kernel lays an array's elements out every `size_of::<V>()` rounded up to 8
    /// octets, from the start of the mapping (`kernel/bpf/arraymap.c`).
    const STRIDE: usize = size_of::<V>().next_multiple_of(8);

    fn new(fd: std::os::fd::BorrowedFd<'_>, entries: usize) -> std::io::Result<MappedValues<V>> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = (entries * Self::STRIDE).next_multiple_of(page.max(1));
        // SAFETY: a new shared mapping of the array's values (the kernel checks `len`
        // against the array's size); nothing else in this process aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = std::ptr::NonNull::new(base.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap at 0"))?;
        Ok(MappedValues {
            base,
            len,
            entries,
            values: std::marker::PhantomData,
        })
    }

    /// The values of `array` (a table array, `BPF_F_MMAPABLE`), mapped for reading
    /// and writing.
    pub(super) fn of(array: &Array<MapData, V>) -> std::io::Result<MappedValues<V>> {
        let map = aya::maps::IterableMap::map(array);
        let entries = map.info().map_err(std::io::Error::other)?.max_entries() as usize;
        MappedValues::new(map.fd().as_fd(), entries)
    }

    /// The values as a slice: the kernel's stride is the value's size for the table
    /// values this is used for (records, buckets, small tails: multiples of 8 octets).
    pub(super) fn values(&mut self) -> &mut [V] {
        const { assert!(Self::STRIDE == size_of::<V>()) };
        // SAFETY: the mapping holds `entries` values back to back (stride = size),
        // page-aligned (so aligned for V), and lives as long as `self`; V is plain bytes
        // (`Pod`), so any contents are a valid V; nothing else in this process aliases
        // the mapping while the borrow lasts.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().cast::<V>(), self.entries) }
    }

    /// Writes `values` from element 0 on (at most the array's length of them).
    fn fill(&mut self, values: impl Iterator<Item = V>) {
        for (index, value) in values.take(self.entries).enumerate() {
            // SAFETY: index < entries, so the element lies within entries × STRIDE ≤
            // len octets of the mapping; V is plain bytes (`Pod`), written unaligned.
            unsafe {
                self.base
                    .as_ptr()
                    .add(index * Self::STRIDE)
                    .cast::<V>()
                    .write_unaligned(value);
            }
        }
    }
}

impl<V> Drop for MappedValues<V> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; nothing refers to it after.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
