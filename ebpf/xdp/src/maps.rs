//! Every map of the program, and the counter helper. Layouts and names come from
//! `qdns-abi`, so the loader in `qdns-edge` reads and writes the same bytes.
use aya_ebpf::{
    bindings::BPF_F_NO_PREALLOC,
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use qdns_abi::{
    answer::{
        AnswerKey, AnswerValue, HealthWords, LargeTail, PolicyKey, PolicyValue, ANSWERS_MAX, CONFIG_ACTIVE,
        CONFIG_ENTRIES, CONFIG_NSID, CONFIG_UDP_PAYLOAD, LARGE_MAX, POLICIES_MAX,
    },
    Counter, PORT_WORDS,
};

/// Per-CPU counters indexed by [`Counter`].
#[map(name = "QDNS_STATS_V9")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// The UDP ports the edge serves DNS on (a bitmap), written by the loader.
#[map(name = "QDNS_PORTS_V2")]
static PORTS: Array<u64> = Array::with_max_entries(PORT_WORDS, 0);

/// (generation, qtype, name) → answer.
#[map(name = "QDNS_ANSWERS_V2")]
pub static ANSWERS: HashMap<AnswerKey, AnswerValue> = HashMap::with_max_entries(ANSWERS_MAX, BPF_F_NO_PREALLOC);

/// (generation, id) → policy set.
#[map(name = "QDNS_POLICIES_V1")]
pub static POLICIES: HashMap<PolicyKey, PolicyValue> = HashMap::with_max_entries(POLICIES_MAX, BPF_F_NO_PREALLOC);

/// (generation, id) → a tail over `TAIL_MAX` octets.
#[map(name = "QDNS_LARGE_V2")]
pub static LARGE: HashMap<PolicyKey, LargeTail> = HashMap::with_max_entries(LARGE_MAX, BPF_F_NO_PREALLOC);

/// The two health buffers.
#[map(name = "QDNS_HEALTH_V1")]
pub static HEALTH: Array<HealthWords> = Array::with_max_entries(2, 0);

/// The active generation and health buffer, and our EDNS payload size.
#[map(name = "QDNS_CONFIG_V2")]
static CONFIG: Array<u64> = Array::with_max_entries(CONFIG_ENTRIES, 0);

/// Per-packet scratch space of this CPU (see [`crate::answer::Scratch`]).
#[map(name = "QDNS_SCRATCH_V1")]
pub static SCRATCH: PerCpuArray<crate::answer::Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Adds one to a counter of this CPU.
#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = STATS.get_ptr_mut(counter as u32) {
        // SAFETY: the pointer comes from the per-CPU array lookup, is non-null and
        // belongs to this CPU only, so no other writer races with the increment.
        unsafe { *slot += 1 };
    }
}

/// True when `port` (host order) is a DNS service port.
#[inline(always)]
pub fn is_service_port(port: u16) -> bool {
    match PORTS.get(u32::from(port >> 6)) {
        Some(&word) => word >> (port & 63) & 1 == 1,
        None => false,
    }
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

/// 1 when queries with an NSID option go to user space, else 0.
#[inline(always)]
pub fn nsid_passes() -> u64 {
    match CONFIG.get(CONFIG_NSID) {
        Some(&on) => on & 1,
        None => 0,
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
