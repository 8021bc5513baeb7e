//! The qdns XDP program: answers the common queries in the driver from BPF maps.
//!
//! Parse (Ethernet, one VLAN tag, IPv4/IPv6, UDP to a service port, a simple DNS query)
//! → look the lowercase name up in the answer table of the active generation → select
//! policy members over the active health buffer → rewrite the frame in place and
//! `XDP_TX`. Anything the tables do not answer exactly as user space would goes to the
//! kernel stack untouched (`XDP_PASS`) with one counted reason, so a well-formed query
//! is never lost.
#![no_std]
#![no_main]

mod answer;
mod limit;
mod maps;
mod parse;
mod rewrite;
mod sections;
mod tables;

use answer::Verdict;
use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use qdns_abi::Counter;

/// Entry point attached to the interface.
#[xdp]
pub fn qdns(ctx: XdpContext) -> u32 {
    maps::count(Counter::Seen);
    let verdict = match parse::query(&ctx) {
        Ok(at) => answer::answer(&ctx, &at),
        Err(reason) => Verdict::Pass(reason),
    };
    match verdict {
        // An answer with limiting on: to the rate-limit stage (it sends, slips or drops
        // it); sent as it is if the stage is missing.
        Verdict::Answered => {
            maps::to_stage(&ctx, maps::STAGE_RRL);
            xdp_action::XDP_TX
        }
        Verdict::Tx | Verdict::Sent => xdp_action::XDP_TX,
        Verdict::Pass(reason) => {
            maps::count(reason);
            xdp_action::XDP_PASS
        }
        Verdict::Abort => xdp_action::XDP_ABORTED,
    }
}

/// The rate-limit stage (tail-called from [`qdns`]; its own program, so its checks do
/// not count against the answer path's verifier budget).
#[xdp]
pub fn qdns_rrl(ctx: XdpContext) -> u32 {
    limit::stage(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
