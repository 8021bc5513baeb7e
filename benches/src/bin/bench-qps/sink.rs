//! The reply sink on the generator's end of the pair: a hand-assembled XDP program
//! (`xdp_asm.rs`) that drops every untagged IPv4 UDP datagram *from* the service port —
//! the servers' replies — and passes everything else (ARP, neighbour discovery). Attached
//! natively, so the kernel counts each dropped reply in the end's own statistics
//! (`rx_queue_0_xdp_drops` of `ethtool -S`): replies are counted by the kernel on the
//! client's interface, at any rate the pair carries, and never reach the client's stack
//! (no ICMP "port unreachable" back to the server). A native program on the peer end is
//! also what lets a native-mode server's `XDP_TX` answers be delivered on veth.
//!
//! Used with generators that do not receive replies themselves (trafgen); kxdpgun
//! attaches its own program to the end and counts its replies itself.
use super::xdp_asm::op::{EXIT, JNE_K, LDXH, MOV64_K};
use super::xdp_asm::{insn, ipv4_udp_checks, with_pass_exit, Attached, XDP_DROP};

/// The sink for replies from UDP port `port`.
pub fn program(port: u16) -> Vec<u64> {
    let mut code = ipv4_udp_checks(36); // through the UDP source port
    code.extend([
        (insn(LDXH, 5, 2, 34, 0), false), // source port
        (insn(JNE_K, 5, 0, 0, i32::from(port.swap_bytes())), true),
        (insn(MOV64_K, 0, 0, 0, XDP_DROP), false),
        (insn(EXIT, 0, 0, 0, 0), false),
    ]);
    with_pass_exit(code)
}

/// The sink attached natively to the client end; dropping it detaches it.
pub struct Sink(#[expect(dead_code, reason = "held for its drop, which detaches")] Attached);

impl Sink {
    /// Attaches the sink for replies from `port` natively to `iface` in `netns`.
    pub fn attach(netns: &str, iface: &str, port: u16) -> Result<Sink, String> {
        Attached::attach("reply sink", program(port), (netns, iface), true).map(Sink)
    }
}
