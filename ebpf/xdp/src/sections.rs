//! Writing the sections after the question: the shape of each kind of answer (header
//! counts and tail length), its tail from the record, policy members or large tail
//! (pointers of relocated referrals moved), and our OPT record — each returning the
//! one's-complement sum of what it wrote for the UDP checksum.
use aya_ebpf::{helpers::bpf_xdp_store_bytes, programs::XdpContext};
use qdns_abi::{
    answer::{
        fold, placed, LargeTail, FIXUPS_MAX, LARGE_TAIL_MAX, MEDIUM_TAIL_MAX, MEMBER_BLOB, POLICY_MEMBERS,
        SMALL_TAIL_MAX, TAIL_MAX,
    },
    denial::{Piece, GAP_PIECES, PIECE_INTERNAL, PIECE_MAX},
    Counter,
};

use crate::{
    answer::{Body, DO_BIT, TYPE_OPT},
    maps,
    parse::Window,
    subnet::{self, ECHO_WORDS},
};

/// OPT record without options.
pub const OPT_LEN: usize = 11;

/// The header fields and tail length of `body`: (flags, ANCOUNT, NSCOUNT, ARCOUNT,
/// tail octets), or why it cannot be sent.
#[inline(always)]
pub fn shape(body: &Body<'_>, qlen: usize) -> Result<(u16, u16, u16, u16, usize), Counter> {
    match *body {
        Body::Plain(v, _) => {
            let len = usize::from(v.tail_len);
            // A referral's tail was written for a question of `apex_len` octets (the
            // cut's name); the question is the cut or below it.
            if len > LARGE_TAIL_MAX || usize::from(v.apex_len) > qlen {
                return Err(Counter::PassNotCached);
            }
            Ok((v.flags, v.ancount, v.nscount, v.arcount, len))
        }
        Body::Medium(v, _) => {
            let len = usize::from(v.tail_len);
            if len > MEDIUM_TAIL_MAX {
                return Err(Counter::PassNotCached);
            }
            Ok((v.flags, v.ancount, v.nscount, v.arcount, len))
        }
        Body::Small(v, _, negative) => {
            let len = usize::from(if negative.is_some() { v.negative_len } else { v.tail_len });
            if len < 2 || len > SMALL_TAIL_MAX {
                return Err(Counter::PassNotCached);
            }
            match negative {
                Some(rcode) if usize::from(v.apex_len) <= qlen => Ok((v.flags | rcode, 0, 1, 0, len)),
                Some(_) => Err(Counter::PassNotCached),
                None => Ok((v.flags, v.ancount, v.nscount, v.arcount, len)),
            }
        }
        // Made a `Small` body once its SOA is looked up (`answer::tails`).
        Body::Negative(..) => Err(Counter::PassNotLoaded),
        Body::Denial {
            value,
            rcode,
            nscount,
            pieces,
            used,
        } => {
            let mut len = 0;
            for (i, piece) in pieces.iter().enumerate() {
                if i < used {
                    len += usize::from(piece.len).min(PIECE_MAX);
                }
            }
            Ok((value.flags | rcode, value.ancount, nscount, 0, len))
        }
        Body::Policy { policy, mask, ttl } => {
            let (mut len, mut count) = (0usize, 0u16);
            for i in 0..POLICY_MEMBERS {
                if mask >> i & 1 == 1 {
                    let member = usize::from(policy.lens[i][ttl & 1]);
                    if member > MEMBER_BLOB {
                        return Err(Counter::PassNotCached);
                    }
                    len += member;
                    count += policy.counts[i];
                }
            }
            Ok((0x8400, count, 0, 0, len))
        }
    }
}

/// Writes the tail of `body` at `offset` (from the frame start; `udp` is the UDP header
/// offset) and returns the sum of what it wrote.
#[inline(always)]
pub fn write_tail(ctx: &XdpContext, body: &Body<'_>, offset: usize, udp: usize, qlen: usize) -> Option<u64> {
    match *body {
        Body::Plain(v, large) => {
            let len = usize::from(v.tail_len);
            match large {
                Some(t) if len > 0 && len <= LARGE_TAIL_MAX => {
                    store::<LARGE_TAIL_MAX>(ctx, offset, t.tail.as_ptr(), len)?;
                    let delta = qlen.wrapping_sub(usize::from(v.apex_len)) & 0xff;
                    return Some(placed(v.tail_sum, offset - udp) + relocate(ctx, t, offset, udp, delta)?);
                }
                // Every tail over TAIL_MAX is in another table (`answer::tails`).
                None if len > TAIL_MAX => return None,
                None if len > 0 => copy_in(ctx, offset, &v.tail, len)?,
                _ => {}
            }
            Some(placed(v.tail_sum, offset - udp))
        }
        Body::Medium(v, t) => {
            let len = usize::from(v.tail_len);
            if !(1..=MEDIUM_TAIL_MAX).contains(&len) {
                return None;
            }
            // The helper: 64 words of direct stores took the verifier past its million
            // instructions.
            store::<MEDIUM_TAIL_MAX>(ctx, offset, t.tail.as_ptr(), len)?;
            Some(placed(v.tail_sum, offset - udp))
        }
        Body::Small(v, t, negative) => {
            let (len, sum) = match negative {
                None => (v.tail_len, v.tail_sum),
                Some(_) => (v.negative_len, v.negative_sum),
            };
            let len = usize::from(len);
            if !(2..=SMALL_TAIL_MAX).contains(&len) {
                return None;
            }
            copy_in(ctx, offset, &t.tail, len)?;
            if negative.is_none() {
                return Some(placed(sum, offset - udp));
            }
            // The SOA's owner: the apex, inside the question.
            let pointer = 0xc000 | (12 + qlen - usize::from(v.apex_len)) as u16;
            Window::<2>::at(ctx, offset).ok()?.set16(0, pointer);
            Some(placed(sum, offset - udp) + placed(pointer, offset - udp))
        }
        Body::Negative(..) => None,
        Body::Denial { pieces, used, .. } => {
            // Each piece's pointers were written as for a question of length 0 and the
            // piece at the message's start: those into the question move by its
            // length, those into the piece by where it lands.
            let mut at = offset;
            let mut sum = 0u64;
            for (i, piece) in pieces.iter().enumerate() {
                if i >= used || i >= GAP_PIECES {
                    break;
                }
                // Masked as well as checked: the sum of the lengths bounds `at` for the
                // verifier.
                let len = usize::from(piece.len) & (2 * PIECE_MAX - 1);
                if !(1..=PIECE_MAX).contains(&len) {
                    return None;
                }
                // The helper: direct stores here, a loop of pieces over, took the
                // verifier past its million instructions.
                store::<PIECE_MAX>(ctx, at, piece.bytes.as_ptr(), len)?;
                sum += placed(piece.sum, at - udp) + relocate_piece(ctx, piece, at, udp, qlen & 0xff)?;
                at += len;
            }
            Some(sum)
        }
        Body::Policy { policy, mask, ttl } => {
            let mut at = offset;
            let mut sum = 0u64;
            for i in 0..POLICY_MEMBERS {
                if mask >> i & 1 == 1 {
                    let len = usize::from(policy.lens[i][ttl & 1]);
                    if len > 0 && len <= MEMBER_BLOB {
                        // The helper: direct stores here, eight members over, took the
                        // verifier past its million instructions.
                        store::<MEMBER_BLOB>(ctx, at, policy.blobs[i][ttl & 1].as_ptr(), len)?;
                        sum += placed(policy.sums[i][ttl & 1], at - udp);
                        at += len;
                    }
                }
            }
            Some(sum)
        }
    }
}

/// Adds `delta` (the question's length beyond the one the tail was written for) to each
/// compression pointer of a relocatable tail written at `offset`; returns the change
/// to the checksum sum. A pointer stays below 0x4000 (the loader checked the room), so
/// its word grows by `delta` exactly and, in one's-complement arithmetic, a word at an
/// odd offset by `delta` with its octets swapped (RFC 1071 §2(B)).
#[inline(always)]
fn relocate(ctx: &XdpContext, t: &LargeTail, offset: usize, udp: usize, delta: usize) -> Option<u64> {
    let n = usize::from(t.fixups_len);
    for (i, &fixup) in t.fixups.iter().enumerate() {
        if i >= n {
            break;
        }
        let at = offset + (usize::from(fixup) & (LARGE_TAIL_MAX - 1));
        let pointer = Window::<2>::at(ctx, at).ok()?;
        pointer.set16(0, pointer.get16(0).wrapping_add(delta as u16));
    }
    let odd = u64::from(t.fixups_odd).min(FIXUPS_MAX as u64);
    let even = (n.min(FIXUPS_MAX) as u64).saturating_sub(odd);
    Some(even * placed(delta as u16, offset - udp) + odd * placed(delta as u16, offset - udp + 1))
}

/// Moves the pointers of `piece`, written at `offset`: one marked [`PIECE_INTERNAL`] by
/// the piece's offset in the DNS message, others by the question length `qlen`; returns
/// the change to the checksum sum (see [`relocate`]).
#[inline(always)]
fn relocate_piece(ctx: &XdpContext, piece: &Piece, offset: usize, udp: usize, qlen: usize) -> Option<u64> {
    let n = usize::from(piece.fixups_len);
    // The DNS message starts after the 8-octet UDP header.
    let within = (offset - udp - 8) & 0xfff;
    let mut sum = 0u64;
    for (i, &fixup) in piece.fixups.iter().enumerate() {
        if i >= n {
            break;
        }
        let delta = if fixup & PIECE_INTERNAL != 0 { within } else { qlen };
        let rel = usize::from(fixup) & (PIECE_MAX - 1);
        let at = offset + rel;
        let pointer = Window::<2>::at(ctx, at).ok()?;
        pointer.set16(0, pointer.get16(0).wrapping_add(delta as u16));
        sum += placed(delta as u16, at - udp);
    }
    Some(sum)
}

/// Writes our OPT record at `offset` (DO echoed from the query, `options` octets of
/// options to follow) and returns its sum.
#[inline(always)]
pub fn write_opt(ctx: &XdpContext, offset: usize, udp: usize, dnssec_ok: u16, options: u16) -> Option<u64> {
    let payload = maps::udp_payload();
    let flags = dnssec_ok & DO_BIT;
    // Root owner, TYPE 41, CLASS = payload size, TTL = no extended RCODE, version 0 and
    // the flags, RDLENGTH.
    let opt = Window::<OPT_LEN>::at(ctx, offset).ok()?;
    opt.set8(0, 0);
    opt.set16(1, TYPE_OPT);
    opt.set16(3, payload);
    opt.set16(5, 0);
    opt.set16(7, flags);
    opt.set16(9, options);
    // From an even offset the octets 00 | 00 29 | pp pp | 00 00 | ff ff | ll ll sum to
    // 0x2900 plus the payload size, the flags and the length, each with its octets
    // swapped.
    Some(placed(
        fold(
            0x2900 + u64::from(payload.swap_bytes()) + u64::from(flags.swap_bytes()) + u64::from(options.swap_bytes()),
        ),
        offset - udp,
    ))
}

/// Writes the Client Subnet echo (`len` octets of `echo`, 0: none) at `offset` and
/// returns its sum.
#[inline(always)]
pub fn write_echo(ctx: &XdpContext, offset: usize, udp: usize, echo: &[u64; ECHO_WORDS], len: usize) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    if len > 8 * ECHO_WORDS {
        return None;
    }
    store::<{ 8 * ECHO_WORDS }>(ctx, offset, echo.as_ptr().cast(), len)?;
    Some(placed(subnet::sum(echo), offset - udp))
}

/// Writes the COOKIE option (`len` octets of `cookie`: 0, none, or
/// [`qdns_abi::cookie::ECHO_LEN`]) at `offset` and returns its sum. Stored through a
/// checked window rather than the helper: its length is fixed (measured: the helper
/// call cost 20 ns more).
#[inline(always)]
pub fn write_cookie(
    ctx: &XdpContext,
    offset: usize,
    udp: usize,
    cookie: &[u64; ECHO_WORDS],
    len: usize,
) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    let window = Window::<{ qdns_abi::cookie::ECHO_LEN }>::at(ctx, offset).ok()?;
    window.set64_le(0, cookie[0]);
    window.set64_le(8, cookie[1]);
    window.set64_le(16, cookie[2]);
    window.set32_le(24, cookie[3] as u32);
    Some(placed(subnet::sum(cookie), offset - udp))
}

/// The largest frame offset a tail is written at (far above any answer's).
const FRAME_OFFSET_MAX: usize = 4096;

/// Copies `len` octets (1..=`MAX`) of `src` into the frame at `offset`: with direct
/// stores from eight octets on ([`write_words`]), else with the helper ([`store`]).
#[inline(always)]
fn copy_in<const MAX: usize>(ctx: &XdpContext, offset: usize, src: &[u8; MAX], len: usize) -> Option<()> {
    if len >= 8 {
        write_words(ctx, offset, src, len)
    } else {
        store::<MAX>(ctx, offset, src.as_ptr(), len)
    }
}

/// Copies `len` octets (8..=`MAX`) of `src` into the frame at `offset` with direct
/// stores — the whole words, then the last eight octets again when `len` is not a
/// multiple of eight (they overlap what is written; the octets are the same). A helper
/// call ([`store`]) cost more than the copy: the XDP bench's plain A, NODATA and
/// NXDOMAIN answers took 30–70 ns less each without it (docs/BENCHMARKS.md).
#[inline(always)]
fn write_words<const MAX: usize>(ctx: &XdpContext, offset: usize, src: &[u8; MAX], len: usize) -> Option<()> {
    const { assert!(MAX % 8 == 0 && MAX >= 8) };
    // A bound the verifier keeps (the helper checked offsets itself): a packet pointer
    // whose offset may pass 64 KiB gets no range. Every answer ends within RESPONSE_MAX
    // of the frame's start plus its headers.
    if offset > FRAME_OFFSET_MAX {
        return None;
    }
    let word = |at: usize| -> u64 {
        // SAFETY: `at <= MAX - 8` at every call, inside `src`.
        u64::from_le(unsafe { src.as_ptr().add(at).cast::<u64>().read_unaligned() })
    };
    for i in 0..MAX / 8 {
        if 8 * i + 8 > len {
            break;
        }
        Window::<8>::at(ctx, offset + 8 * i).ok()?.set64_le(0, word(8 * i));
    }
    if len % 8 != 0 {
        // Read back through a volatile load so LLVM cannot drop the bound (the callers'
        // checks imply it; the verifier would not know it).
        // SAFETY: a read of a local.
        let last = unsafe { core::ptr::read_volatile(&len) }.saturating_sub(8).min(MAX - 8);
        Window::<8>::at(ctx, offset + last).ok()?.set64_le(0, word(last));
    }
    Some(())
}

/// `bpf_xdp_store_bytes`: copies `len` octets into the frame; callers check
/// `1 <= len <= MAX` and `MAX` (a power of two) is the size of the source.
#[inline(always)]
fn store<const MAX: usize>(ctx: &XdpContext, offset: usize, src: *const u8, len: usize) -> Option<()> {
    // The same value for 1..=MAX, written so the verifier sees the bound in the
    // register passed (LLVM reuses the unbounded register after a range check).
    // The volatile read hides the callers' check from LLVM, which would otherwise fold
    // the mask away.
    // SAFETY: a read of a local.
    let len = unsafe { core::ptr::read_volatile(&len) };
    let len = (len.wrapping_sub(1) & (MAX - 1)) + 1;
    // SAFETY: `src` points at `MAX` readable octets and `len <= MAX`; the helper checks
    // the frame range and fails rather than write outside it.
    let rc = unsafe { bpf_xdp_store_bytes(ctx.ctx, offset as u32, src as *mut _, len as u32) };
    (rc == 0).then_some(())
}
