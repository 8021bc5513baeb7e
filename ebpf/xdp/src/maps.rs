//! Every map of the program, and the counter helper. Layouts and names come from
//! `qdns-abi`, so the loader in `qdns-edge` reads and writes the same bytes.
use aya_ebpf::{
    btf_maps::{self, ArrayOfMaps},
    macros::{btf_map, map},
    maps::{Array, PerCpuArray, ProgramArray},
};
use qdns_abi::{
    answer::{
        AnswerValue, HealthWords, LargeTail, LongName, MediumTail, PolicyValue, SmallTail, ANSWER_COUNTERS, BANKS,
        CONFIG_ACTIVE, CONFIG_COOKIE_CLOCK, CONFIG_COOKIE_SLOT, CONFIG_ENTRIES, CONFIG_LISTEN_SEED, CONFIG_MASK,
        CONFIG_MAX_MESSAGE, CONFIG_NSID, CONFIG_RRL, CONFIG_UDP_PAYLOAD, NO_ANSWER_COUNTER, POLICY_MEMBERS,
        RESPONSE_MAX,
    },
    client::{ClientBlock, ClientSet},
    cookie::{CookieSecrets, COOKIES_ON, COOKIE_SLOTS},
    denial::{Gap, Piece},
    rrl::{RrlBucket, RrlSettings, RRL_BUCKETS},
    slots::Bucket,
    Counter, ListenKey, LISTEN_PROBES, LISTEN_SLOTS, PORTS_ANY_V4, PORTS_ANY_V6, PORTS_ENTRIES,
};

/// Per-CPU counters indexed by [`Counter`].
#[map(name = "QDNS_STATS_V18")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Per-CPU answers per policy member (`qdns_abi::answer::ANSWERS_MAP`).
#[map(name = "QDNS_ANSWERS_V1")]
static ANSWERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(ANSWER_COUNTERS, 0);

/// The UDP ports the edge serves DNS on, and those it serves at every address of a
/// family (bitmaps, `qdns_abi::PORTS_MAP`), written by the loader.
#[map(name = "QDNS_PORTS_V3")]
static PORTS: Array<u64> = Array::with_max_entries(PORTS_ENTRIES, 0);

/// The addresses and ports the edge listens on (`qdns_abi::LISTEN_MAP`), written by
/// the loader.
#[map(name = "QDNS_LISTEN_V2")]
static LISTEN: Array<ListenKey> = Array::with_max_entries(LISTEN_SLOTS, 0);

/// `BPF_F_INNER_MAP`: the tables of a bank may differ in size from the template (each
/// is sized to its snapshot). It also keeps the kernel from inlining their lookups; the
/// call goes straight to the array's lookup, still far cheaper than a hash map's. And
/// `BPF_F_MMAPABLE`: the loader fills a new table through a shared mapping, one copy
/// instead of a `bpf()` call per element (lookups are unchanged). A bank's arrays must
/// carry the same flags (`edge/src/xdp/generation.rs`, `TABLE_FLAGS`).
const INNER: usize = 1 << 12 | 1 << 10;

/// One generation's slot table (see `qdns_abi::slots`).
pub type Slots = btf_maps::Array<Bucket, 1, INNER>;
/// One generation's records.
pub type Records = btf_maps::Array<AnswerValue, 1, INNER>;
/// One generation's policy sets.
pub type Policies = btf_maps::Array<PolicyValue, 1, INNER>;
/// One generation's large tails.
pub type Large = btf_maps::Array<LargeTail, 1, INNER>;
/// One generation's medium tails.
pub type Medium = btf_maps::Array<MediumTail, 1, INNER>;
/// One generation's small tails.
pub type Small = btf_maps::Array<SmallTail, 1, INNER>;
/// One generation's signed-NXDOMAIN gaps (`qdns_abi::denial`).
pub type Gaps = btf_maps::Array<Gap, 1, INNER>;
/// One generation's signed-NXDOMAIN pieces.
pub type Pieces = btf_maps::Array<Piece, 1, INNER>;
/// One generation's long names.
pub type LongNames = btf_maps::Array<LongName, 1, INNER>;
/// One generation's client-aware sets.
pub type ClientSets = btf_maps::Array<ClientSet, 1, INNER>;
/// One generation's client blocks.
pub type ClientBlocks = btf_maps::Array<ClientBlock, 1, INNER>;
/// One generation's class chains.
pub type ClassChains = btf_maps::Array<u32, 1, INNER>;
/// One generation's first-level block indexes.
pub type ClientIndex = btf_maps::Array<u32, 1, INNER>;

/// bank → slot table.
#[btf_map(name = "QDNS_SLOTS_V1")]
pub static SLOTS: ArrayOfMaps<Slots, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → records.
#[btf_map(name = "QDNS_RECORDS_V3")]
pub static RECORDS: ArrayOfMaps<Records, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → policy sets.
#[btf_map(name = "QDNS_POLICIES_V4")]
pub static POLICIES: ArrayOfMaps<Policies, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → tails over `SMALL_TAIL_MAX` octets (or with pointers to relocate).
#[btf_map(name = "QDNS_LARGE_V3")]
pub static LARGE: ArrayOfMaps<Large, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → tails over `SMALL_TAIL_MAX` octets and at most `MEDIUM_TAIL_MAX`, without pointers
/// to relocate.
#[btf_map(name = "QDNS_MEDIUM_V1")]
pub static MEDIUM: ArrayOfMaps<Medium, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → tails over `TAIL_MAX` octets and at most `SMALL_TAIL_MAX`, and node entries'
/// negative SOA records.
#[btf_map(name = "QDNS_SMALL_V1")]
pub static SMALL: ArrayOfMaps<Small, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → the gaps below the enclosers of signed zones (`qdns_abi::denial`).
#[btf_map(name = "QDNS_GAPS_V1")]
pub static GAPS: ArrayOfMaps<Gaps, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → the pre-signed pieces of their NXDOMAIN answers.
#[btf_map(name = "QDNS_PIECES_V1")]
pub static PIECES: ArrayOfMaps<Pieces, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → the front words of names over 64 octets.
#[btf_map(name = "QDNS_LONG_NAMES_V1")]
pub static LONG_NAMES: ArrayOfMaps<LongNames, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → client-aware sets (`qdns_abi::client`).
#[btf_map(name = "QDNS_CLIENT_SETS_V2")]
pub static CLIENT_SETS: ArrayOfMaps<ClientSets, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → the sets' sorted address blocks.
#[btf_map(name = "QDNS_CLIENT_BLOCKS_V1")]
pub static CLIENT_BLOCKS: ArrayOfMaps<ClientBlocks, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → geo sets' chain per class.
#[btf_map(name = "QDNS_CLASS_CHAINS_V1")]
pub static CLASS_CHAINS: ArrayOfMaps<ClassChains, { BANKS as usize }> = ArrayOfMaps::new();

/// bank → large block tables' first-level indexes (`qdns_abi::client::window`).
#[btf_map(name = "QDNS_CLIENT_INDEX_V1")]
pub static CLIENT_INDEX: ArrayOfMaps<ClientIndex, { BANKS as usize }> = ArrayOfMaps::new();

/// The two health buffers.
#[map(name = "QDNS_HEALTH_V1")]
pub static HEALTH: Array<HealthWords> = Array::with_max_entries(2, 0);

/// The active generation and health buffer, and our EDNS payload size.
#[map(name = "QDNS_CONFIG_V7")]
static CONFIG: Array<u64> = Array::with_max_entries(CONFIG_ENTRIES, 0);

/// The location's cookie secrets (`qdns_abi::cookie::COOKIE_MAP`), written by user
/// space when control sends new ones.
#[map(name = "QDNS_COOKIE_V3")]
static COOKIE: Array<CookieSecrets> = Array::with_max_entries(COOKIE_SLOTS, 0);

/// The cookie secrets in use and the cookie clock, when cookies are on.
#[inline(always)]
pub fn cookies() -> Option<(&'static CookieSecrets, u32)> {
    let slot = *CONFIG.get(CONFIG_COOKIE_SLOT)? as u32 & 1;
    let secrets = COOKIE.get(slot)?;
    if secrets.flags & COOKIES_ON == 0 {
        return None;
    }
    Some((secrets, *CONFIG.get(CONFIG_COOKIE_CLOCK)? as u32))
}

/// The rate limiter's buckets (`qdns_abi::rrl`), shared by every CPU.
#[map(name = "QDNS_RRL_V1")]
pub static RRL: Array<RrlBucket> = Array::with_max_entries(RRL_BUCKETS, 0);

/// Later stages of the program, tail-called by index.
#[map(name = "QDNS_STAGES_V1")]
static STAGES: ProgramArray = ProgramArray::with_max_entries(2, 0);

/// The rate-limit stage's index in `QDNS_STAGES_V1`.
pub const STAGE_RRL: u32 = 0;
/// The long-name stage's index in `QDNS_STAGES_V1`.
pub const STAGE_LONG: u32 = 1;

/// Tail-calls stage `index`; returns only when it is not installed.
#[inline(always)]
pub fn to_stage(ctx: &aya_ebpf::programs::XdpContext, index: u32) {
    // SAFETY: the context is the program's own; the helper returns on failure.
    unsafe { STAGES.tail_call(ctx, index) };
}

/// Whether the rate limiter is on.
#[inline(always)]
pub fn rrl_on() -> bool {
    CONFIG.get(CONFIG_RRL).is_some_and(|&interval| interval != 0)
}

/// Per-packet scratch space of this CPU (see [`crate::answer::Scratch`]).
#[map(name = "QDNS_SCRATCH_V3")]
pub static SCRATCH: PerCpuArray<crate::answer::Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Adds one to a counter of this CPU.
#[inline(always)]
pub fn count(counter: Counter) {
    count_index(counter as u32);
}

/// Adds one to the counter at `index` of this CPU (nothing when out of range).
#[inline(always)]
pub fn count_index(index: u32) {
    if let Some(slot) = STATS.get_ptr_mut(index) {
        // SAFETY: the pointer comes from the per-CPU array lookup, is non-null and
        // belongs to this CPU only, so no other writer races with the increment.
        unsafe { *slot += 1 };
    }
}

/// Adds one to the answer counter of each member in `mask` (bits 0..8) of the set whose
/// counters start at `base`, on this CPU (nothing for indexes out of range, as
/// `NO_ANSWER_COUNTER` is).
#[inline(always)]
pub fn count_answers(base: u32, mask: u64) {
    // A set without counters: `base + i` would wrap onto the first set's.
    if base == NO_ANSWER_COUNTER {
        return;
    }
    for i in 0..POLICY_MEMBERS as u32 {
        if mask >> i & 1 == 1 {
            if let Some(slot) = ANSWERS.get_ptr_mut(base.wrapping_add(i)) {
                // SAFETY: as in `count_index`: this CPU's element of a per-CPU array.
                unsafe { *slot += 1 };
            }
        }
    }
}

/// True when `port` (host order) is a DNS service port.
#[inline(always)]
pub fn is_service_port(port: u16) -> bool {
    port_bit(0, port)
}

/// Bit `port` of the port bitmap starting at word `base`.
#[inline(always)]
fn port_bit(base: u32, port: u16) -> bool {
    match PORTS.get(base + u32::from(port >> 6)) {
        Some(&word) => word >> (port & 63) & 1 == 1,
        None => false,
    }
}

/// True when the edge listens on `key`'s address and port, or at every address of its
/// family on that port. Two inlined array lookups for an address listened on (the
/// wildcard bitmap's word, then the key's slot), one for a wildcard listener; only for
/// UDP to a service port: other traffic was left at the port check.
#[inline(always)]
pub fn is_listen_address(key: &ListenKey) -> bool {
    let any = if key.version == 6 { PORTS_ANY_V6 } else { PORTS_ANY_V4 };
    if port_bit(any, key.port) {
        return true;
    }
    let seed = CONFIG.get(CONFIG_LISTEN_SEED).map_or(0, |&seed| seed as u32);
    let first = key.slot(seed);
    for probe in 0..LISTEN_PROBES {
        match LISTEN.get(first.wrapping_add(probe) & (LISTEN_SLOTS - 1)) {
            Some(slot) if slot.version == 0 => return false,
            Some(slot) if slot == key => return true,
            Some(_) => {}
            None => return false,
        }
    }
    false
}

/// The active word (generation | health buffer << 32), read once per packet.
#[inline(always)]
pub fn active() -> u64 {
    match CONFIG.get_ptr(CONFIG_ACTIVE) {
        // SAFETY: an array element is always present and 8-byte aligned; the loader
        // replaces it with one 8-byte store, so a volatile read sees the old or the new
        // word whole.
        Some(word) => unsafe { core::ptr::read_volatile(word) },
        None => 0,
    }
}

/// The bucket mask of `bank`'s slot table.
#[inline(always)]
pub fn bucket_mask(bank: u32) -> u32 {
    match CONFIG.get(CONFIG_MASK + (bank & 1)) {
        Some(&mask) => mask as u32,
        None => 0,
    }
}

/// 1 when queries with an NSID option go to user space, else 0.
#[inline(always)]
pub fn nsid_passes() -> u64 {
    match CONFIG.get(CONFIG_NSID) {
        Some(&on) => on & 1,
        None => 0,
    }
}

/// The largest DNS message the attached links carry in one frame (see
/// `qdns_abi::answer::CONFIG_MAX_MESSAGE`).
#[inline(always)]
pub fn max_message() -> usize {
    match CONFIG.get(CONFIG_MAX_MESSAGE) {
        Some(&size) if size != 0 => (size as usize).min(RESPONSE_MAX),
        _ => RESPONSE_MAX,
    }
}

/// The UDP payload size our OPT record advertises.
#[inline(always)]
pub fn udp_payload() -> u16 {
    match CONFIG.get(CONFIG_UDP_PAYLOAD) {
        Some(&size) => size as u16,
        None => 1232,
    }
}

/// The rate limiter's settings, or `None` when it is off.
#[inline(always)]
pub fn rrl_settings() -> Option<RrlSettings> {
    let interval_ns = *CONFIG.get(CONFIG_RRL)?;
    if interval_ns == 0 {
        return None;
    }
    Some(RrlSettings {
        interval_ns,
        slip: *CONFIG.get(CONFIG_RRL + 1)?,
        v4_mask: *CONFIG.get(CONFIG_RRL + 2)? as u32,
        v6_mask: *CONFIG.get(CONFIG_RRL + 3)?,
        seed: *CONFIG.get(CONFIG_RRL + 4)?,
    })
}
