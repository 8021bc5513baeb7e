//! Every map of the program, and the counter helper.
use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use qdns_abi::{Counter, MAX_PORTS};

/// Per-CPU counters indexed by [`Counter`].
#[map(name = "QDNS_STATS_V2")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// The UDP ports the edge serves DNS on, written by the loader.
#[map(name = "QDNS_PORTS_V1")]
static PORTS: HashMap<u16, u8> = HashMap::with_max_entries(MAX_PORTS, 0);

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
    // SAFETY: the value is a plain u8 read once; the map is only ever written whole
    // by the loader before attaching.
    unsafe { PORTS.get(&port).is_some() }
}
