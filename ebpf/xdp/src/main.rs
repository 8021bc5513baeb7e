//! The qdns XDP program.
//!
//! Foundation stage: it counts packets and passes every one of them to the kernel stack
//! (and so to the user-space responder). The fast path (parse → lookup → select →
//! respond) lands on top of this entry point; its default stays `XDP_PASS` with a
//! counted reason, so a well-formed query is never lost.
#![no_std]
#![no_main]

use aya_ebpf::{bindings::xdp_action, macros::map, macros::xdp, maps::PerCpuArray, programs::XdpContext};
use qdns_abi::Counter;

/// Per-CPU counters indexed by [`Counter`].
#[map(name = "QDNS_STATS_V1")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Adds one to a counter of this CPU.
#[inline(always)]
fn count(counter: Counter) {
    if let Some(slot) = STATS.get_ptr_mut(counter as u32) {
        // SAFETY: the pointer comes from the per-CPU array lookup, is non-null and
        // belongs to this CPU only, so no other writer races with the increment.
        unsafe { *slot += 1 };
    }
}

/// Entry point attached to the interface.
#[xdp]
pub fn qdns(_ctx: XdpContext) -> u32 {
    count(Counter::Seen);
    count(Counter::Pass);
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
