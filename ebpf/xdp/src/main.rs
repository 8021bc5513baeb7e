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
mod cookie;
mod limit;
mod maps;
mod parse;
mod rewrite;
mod sections;
mod subnet;
mod tables;

use answer::Verdict;
use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use qdns_abi::{
    answer::{NAME_MAX, WIRE_NAME_MAX},
    name::{LONG_WORDS, NAME_WORDS},
    Counter,
};

/// Entry point attached to the interface.
#[xdp]
pub fn qdns(ctx: XdpContext) -> u32 {
    maps::count(Counter::Seen);
    let verdict = match parse::query::<NAME_MAX>(&ctx) {
        Ok(at) => answer::answer::<NAME_WORDS>(&ctx, &at),
        Err(Counter::PassLongName) => {
            // Over 64 octets: the long-name stage answers it (and counts its outcome);
            // passed as before if the stage is missing.
            maps::count(Counter::LongName);
            maps::to_stage(&ctx, maps::STAGE_LONG);
            Verdict::Pass(Counter::PassLongName)
        }
        Err(reason) => Verdict::Pass(reason),
    };
    send(&ctx, verdict)
}

/// The long-name stage (tail-called from [`qdns`] for names of 65 to 255 octets): the
/// same answer path with 32-word names, its own program so the common path's names stay
/// eight words and its verifier budget its own.
#[xdp]
pub fn qdns_long(ctx: XdpContext) -> u32 {
    let verdict = match parse::query::<WIRE_NAME_MAX>(&ctx) {
        Ok(at) => answer::answer::<LONG_WORDS>(&ctx, &at),
        Err(reason) => Verdict::Pass(reason),
    };
    send(&ctx, verdict)
}

/// The XDP action of a verdict.
#[inline(always)]
fn send(ctx: &XdpContext, verdict: Verdict) -> u32 {
    match verdict {
        // An answer with limiting on: to the rate-limit stage (it sends, slips or drops
        // it); sent as it is if the stage is missing.
        Verdict::Answered => {
            maps::to_stage(ctx, maps::STAGE_RRL);
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
