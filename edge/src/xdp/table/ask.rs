//! Asking the engine: the synthesised query for a name and type, and the engine's
//! answer to it checked to be one answer for every client that can take it (the bytes
//! the tables hold are user space's own).
use super::{opt_record, Engine, Transport, Under, OPT_LEN};

/// How the synthesised query carries EDNS.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Edns {
    /// No OPT record.
    None,
    /// OPT with DO=0.
    Plain,
    /// OPT with DO=1.
    DnssecOk,
}

/// A query for `name`/`rtype` as the program would see it (lowercase, RD=0).
pub(super) fn query(name: &[u8], rtype: u16, edns: Edns) -> Vec<u8> {
    let mut msg = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns != Edns::None)];
    msg.extend_from_slice(name);
    msg.extend_from_slice(&rtype.to_be_bytes());
    msg.extend_from_slice(&1u16.to_be_bytes());
    if edns != Edns::None {
        msg.extend_from_slice(&opt_record(4096, 0, edns == Edns::DnssecOk));
    }
    msg
}

/// What user space answers for a name and type, checked to be one answer for every
/// client that can take it.
pub(super) enum Answer {
    /// The message without our OPT record (ARCOUNT counts the records only).
    Fits(Vec<u8>),
    /// Truncated even at our own UDP limit.
    Truncated,
}

/// The engine's response to an EDNS query (so up to our limit), compared with the DO=1
/// response (the program echoes DO but must send the same sections) and, where it fits
/// 512 octets, with the no-EDNS response; `None` when they differ.
pub(super) fn engine_answer(engine: &Engine, name: &[u8], rtype: u16, out: &mut [u8]) -> Option<Answer> {
    let with_edns = engine.respond_with_draw(&query(name, rtype, Edns::Plain), out, Transport::Udp, 0)?;
    if with_edns.truncated {
        return Some(Answer::Truncated);
    }
    let full = out.get(..with_edns.len)?.to_vec();
    let message = without_opt(&full, engine.max_udp_payload(), false)?;
    // DO=1: the same sections; only our OPT's DO bit differs — except in a signed zone,
    // whose DO=1 answers are the entries' signed variants (`engine_answer_signed`).
    if !engine.signs(name) {
        let dnssec_ok = engine.respond_with_draw(&query(name, rtype, Edns::DnssecOk), out, Transport::Udp, 0)?;
        let with_do = out.get(..dnssec_ok.len)?;
        let body_len = full.len() - OPT_LEN;
        if with_do.get(..body_len) != full.get(..body_len)
            || with_do.get(body_len..) != Some(&opt_record(engine.max_udp_payload(), 0, true)[..])
        {
            return None;
        }
    }
    // Without EDNS: the same message when it fits 512 octets (the program passes larger
    // answers to such clients, and user space truncates or trims them).
    if message.len() <= 512 {
        let classic = engine.respond_with_draw(&query(name, rtype, Edns::None), out, Transport::Udp, 0)?;
        if out.get(..classic.len) != Some(&message[..]) {
            return None;
        }
    }
    Some(Answer::Fits(message))
}

/// The engine's response to a DO=1 query (without our OPT), for a signed zone's variant:
/// under the health, draw and client given, or the engine's own.
pub(super) fn engine_answer_signed(
    engine: &Engine,
    name: &[u8],
    rtype: u16,
    out: &mut [u8],
    under: Option<Under<'_>>,
) -> Option<Answer> {
    let msg = query(name, rtype, Edns::DnssecOk);
    let dnssec_ok = match under {
        Some(under) => engine.respond_under(
            &msg,
            out,
            crate::engine::Asked {
                transport: Transport::Udp,
                draw: under.draw,
                source: under.client,
            },
            under.bitmap,
        )?,
        None => engine.respond_with_draw(&msg, out, Transport::Udp, 0)?,
    };
    if dnssec_ok.truncated {
        return Some(Answer::Truncated);
    }
    let full = out.get(..dnssec_ok.len)?;
    without_opt(full, engine.max_udp_payload(), true).map(Answer::Fits)
}

/// `response` without the OPT record the engine ends it with (ours: `payload`, DO as
/// given; `None` when it ends otherwise), ARCOUNT lowered by one: the program writes
/// its own OPT.
pub(super) fn without_opt(response: &[u8], payload: u16, dnssec_ok: bool) -> Option<Vec<u8>> {
    let body_len = response.len().checked_sub(OPT_LEN)?;
    if response.get(body_len..) != Some(&opt_record(payload, 0, dnssec_ok)[..]) {
        return None;
    }
    let mut message = response.get(..body_len)?.to_vec();
    let arcount = u16::from_be_bytes([*message.get(10)?, *message.get(11)?]).checked_sub(1)?;
    message.get_mut(10..12)?.copy_from_slice(&arcount.to_be_bytes());
    Some(message)
}

/// True when each of the `count` records of `tail` is owned by the question name
/// (pointer 0xc00c), none has an RDATA name (user space compresses those against the
/// question, so their bytes depend on its length) and the tail holds nothing else: the
/// tail answers a question of any length.
pub(super) fn owned_by_question(tail: &[u8], count: u16) -> bool {
    let mut pos = 0;
    for _ in 0..count {
        if tail.get(pos..pos + 2) != Some(&[0xc0, 0x0c]) {
            return false;
        }
        // NS, CNAME, PTR, MX: the types whose RDATA names are compressed.
        if matches!(tail.get(pos + 2..pos + 4), Some([0, 2 | 5 | 12 | 15]) | None) {
            return false;
        }
        let Some(rdlen) = tail.get(pos + 10..pos + 12) else {
            return false;
        };
        pos += 12 + usize::from(u16::from_be_bytes([rdlen[0], rdlen[1]]));
    }
    pos == tail.len()
}
