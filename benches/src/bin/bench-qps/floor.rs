//! The driver's floor (issue 31 §4): a bench-only XDP responder that does no DNS work.
//! It checks the frame is an untagged IPv4 UDP datagram (no IP options) to the DNS
//! port, swaps the MAC and IP addresses and the ports, marks the message a response
//! (QR and AA set, RCODE 3; the question echoed, nothing added or removed), zeroes the
//! UDP checksum (IPv4 allows it: swapping addresses and ports leaves the IP checksum as
//! it was) and sends the frame back with `XDP_TX`; everything else passes. The harness
//! measures it like the servers, on the same veth, native and generic, with the same
//! generator: what answering costs there before any DNS work, which each server's
//! figures divide by — and the XDP rows' reference where knotd's XDP mode cannot run.
//!
//! Hand-assembled (38 instructions, `xdp_asm.rs`).
use super::xdp_asm::op::{EXIT, JNE_K, LDXB, LDXH, LDXW, MOV64_K, OR64_K, STB, STH, STXB, STXH, STXW};
use super::xdp_asm::{insn, ipv4_udp_checks, with_pass_exit, Attached, XDP_TX};

/// The responder for UDP port `port`.
pub fn program(port: u16) -> Vec<u64> {
    // (instruction, jumps to the pass exit)
    let mut code = ipv4_udp_checks(46); // through the DNS flags
    code.extend([
        (insn(LDXH, 5, 2, 36, 0), false), // destination port
        (insn(JNE_K, 5, 0, 0, i32::from(port.swap_bytes())), true),
        (insn(LDXW, 5, 2, 0, 0), false), // MAC addresses
        (insn(LDXW, 6, 2, 6, 0), false),
        (insn(STXW, 2, 6, 0, 0), false),
        (insn(STXW, 2, 5, 6, 0), false),
        (insn(LDXH, 5, 2, 4, 0), false),
        (insn(LDXH, 6, 2, 10, 0), false),
        (insn(STXH, 2, 6, 4, 0), false),
        (insn(STXH, 2, 5, 10, 0), false),
        (insn(LDXW, 5, 2, 26, 0), false), // IP addresses
        (insn(LDXW, 6, 2, 30, 0), false),
        (insn(STXW, 2, 6, 26, 0), false),
        (insn(STXW, 2, 5, 30, 0), false),
        (insn(LDXH, 5, 2, 34, 0), false), // ports
        (insn(LDXH, 6, 2, 36, 0), false),
        (insn(STXH, 2, 6, 34, 0), false),
        (insn(STXH, 2, 5, 36, 0), false),
        (insn(STH, 2, 0, 40, 0), false),  // no UDP checksum
        (insn(LDXB, 5, 2, 44, 0), false), // QR, AA
        (insn(OR64_K, 5, 0, 0, 0x84), false),
        (insn(STXB, 2, 5, 44, 0), false),
        (insn(STB, 2, 0, 45, 3), false), // RCODE 3
        (insn(MOV64_K, 0, 0, 0, XDP_TX), false),
        (insn(EXIT, 0, 0, 0, 0), false),
    ]);
    with_pass_exit(code)
}

/// The responder attached to an interface in another namespace; dropping it detaches it.
pub struct Floor(#[expect(dead_code, reason = "held for its drop, which detaches")] Attached);

impl Floor {
    /// Attaches the responder for `port` to `iface` in the namespace `netns`, natively or
    /// in generic mode.
    pub fn attach(netns: &str, iface: &str, port: u16, native: bool) -> Result<Floor, String> {
        Attached::attach("floor", program(port), (netns, iface), native).map(Floor)
    }
}
