//! The qdns XDP program.
//!
//! Today it parses each packet far enough to know what it is — Ethernet (one VLAN tag),
//! IPv4 (any IHL) or IPv6, UDP to the service port, a DNS query header and its question
//! name — and passes every packet to the kernel stack with one counted reason. The
//! answer path (lookup → select → respond, issue 5) will sit between the parse and the
//! pass; the default stays `XDP_PASS` with a counted reason, so a well-formed query is
//! never lost.
#![no_std]
#![no_main]

mod maps;
mod parse;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use qdns_abi::Counter;

/// Entry point attached to the interface.
#[xdp]
pub fn qdns(ctx: XdpContext) -> u32 {
    maps::count(Counter::Seen);
    let reason = match parse::query(&ctx) {
        Ok(_) => Counter::PassToUserSpace,
        Err(reason) => reason,
    };
    maps::count(reason);
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
