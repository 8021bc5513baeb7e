//! The rate-limit stage (`qdns_abi::rrl`): a separate program the answer path tail-calls
//! with a finished answer in the frame, addressed to the client. It charges the client's
//! prefix and sends the answer, drops it, or shrinks it to the slipped form — the
//! answer's header with TC=1 and no records, the question, our OPT — and seals it again.
//! A stage of its own because the answer path has no verifier budget left for it.
use aya_ebpf::{
    bindings::xdp_action,
    helpers::{bpf_ktime_get_ns, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len},
    programs::XdpContext,
};
use qdns_abi::{
    answer::WIRE_NAME_MAX,
    rrl::{decide, index, key_v4, key_v6, RrlOutcome},
    Counter,
};

use crate::{
    answer::DO_BIT,
    maps,
    parse::{Offsets, Window},
    rewrite::seal,
    sections::{write_cookie, write_echo, write_opt, OPT_LEN},
    subnet::ECHO_WORDS,
};

/// TC in the header flags.
const TC: u16 = 0x0200;

/// What the answer path left in scratch.
struct Sent {
    at: Offsets,
    end: usize,
    question_sum: u64,
    edns: bool,
    dnssec_ok: u16,
    /// Octets of the Client Subnet echo (0: none).
    ecs_len: usize,
    /// The echo.
    ecs: [u64; ECHO_WORDS],
    /// Octets of the COOKIE option (0: none).
    cookie_len: usize,
    /// The option.
    cookie: [u64; ECHO_WORDS],
}

#[inline(always)]
fn sent() -> Option<Sent> {
    let scratch = maps::SCRATCH.get_ptr(0)?;
    // SAFETY: this CPU's element, written by the answer path of this same packet (a
    // tail call runs on the same CPU, unpreempted).
    let scratch = unsafe { &*scratch };
    let [l3, l4, dns] = scratch.offsets();
    // SAFETY: as above.
    let [end, question_sum, bits] = unsafe { core::ptr::read_volatile(&scratch.stage) };
    // The bounds the answer path checked (see `answer::launder`), again for the verifier.
    if l3 > 18 || l4 > 18 + 60 || dns != l4 + 8 {
        return None;
    }
    // `l4 + 8` (checked equal) is the register the verifier has bounds for.
    let dns = l4 + 8;
    if end < dns + 12 + 5 || end > dns + 12 + WIRE_NAME_MAX as u64 + 4 {
        return None;
    }
    Some(Sent {
        at: Offsets {
            l3: l3 as usize,
            ipv6: bits >> 32 & 1 == 1,
            l4: l4 as usize,
            dns: dns as usize,
            qname_len: 0,
        },
        end: end as usize,
        question_sum,
        edns: bits & 1 == 1,
        dnssec_ok: bits as u16 & DO_BIT,
        ecs_len: (bits >> 40) as usize & 0x1f,
        // SAFETY: as above.
        ecs: unsafe { core::ptr::read_volatile(&scratch.ecs) },
        cookie_len: (bits >> 48) as usize & 0x1f,
        // SAFETY: as above.
        cookie: unsafe { core::ptr::read_volatile(&scratch.cookie) },
    })
}

/// The stage's verdict on the answer in the frame.
#[inline(always)]
pub fn stage(ctx: &XdpContext) -> u32 {
    let (Some(settings), Some(sent)) = (maps::rrl_settings(), sent()) else {
        return xdp_action::XDP_TX;
    };
    // The client is the answer's destination now.
    let key = if sent.at.ipv6 {
        match Window::<8>::at(ctx, sent.at.l3 + 24) {
            Ok(client) => key_v6(client.get64_le(0).swap_bytes(), &settings),
            Err(_) => return xdp_action::XDP_TX,
        }
    } else {
        match Window::<4>::at(ctx, sent.at.l3 + 16) {
            Ok(client) => key_v4(client.get32_le(0).swap_bytes(), &settings),
            Err(_) => return xdp_action::XDP_TX,
        }
    };
    let Some(bucket) = maps::RRL.get_ptr_mut(index(key, &settings)) else {
        return xdp_action::XDP_TX;
    };
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: an element of the shared array. CPUs may race on it; the rule tolerates
    // that (a lost update lets one more response through).
    match decide(unsafe { &mut *bucket }, key, now, &settings) {
        RrlOutcome::Allow => xdp_action::XDP_TX,
        RrlOutcome::Slip if slip(ctx, &sent).is_some() => {
            maps::count(Counter::RrlSlipped);
            xdp_action::XDP_TX
        }
        // A drop, or a slip that could not be made: nothing goes out.
        RrlOutcome::Slip | RrlOutcome::Drop => {
            maps::count(Counter::RrlDropped);
            xdp_action::XDP_DROP
        }
    }
}

/// Shrinks the answer to its slipped form and seals it.
#[inline(always)]
fn slip(ctx: &XdpContext, sent: &Sent) -> Option<()> {
    let udp = sent.at.l4;
    let mut sum = sent.question_sum;
    let mut end = sent.end;
    let mut arcount = 0;
    if sent.edns {
        sum += write_opt(ctx, end, udp, sent.dnssec_ok, (sent.ecs_len + sent.cookie_len) as u16)?;
        sum += write_echo(ctx, end + OPT_LEN, udp, &sent.ecs, sent.ecs_len)?;
        sum += write_cookie(ctx, end + OPT_LEN + sent.ecs_len, udp, &sent.cookie, sent.cookie_len)?;
        end += OPT_LEN + sent.ecs_len + sent.cookie_len;
        arcount = 1;
    }
    let header = Window::<12>::at(ctx, sent.at.dns).ok()?;
    let flags = header.get16(2) | TC;
    header.set16(2, flags);
    header.set16(6, 0);
    header.set16(8, 0);
    header.set16(10, arcount);
    sum += u64::from(header.get16(0)) + u64::from(flags) + u64::from(header.get16(4)) + u64::from(arcount);
    // SAFETY: reads the context only.
    let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) };
    if len > 0xffff || (len as usize) < end {
        return None;
    }
    let delta = end as i64 - len as i64;
    // SAFETY: the helper checks the new size itself.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta as i32) } != 0 {
        return None;
    }
    seal(ctx, &sent.at, (end - udp) as u16, sum)
}
