//! Reading transfer requests and writing their answers.
//!
//! Hand-written: a request is read once, bounded (a message is at most 65,535 octets,
//! a name 255, 128 compression pointers), before anything else is done with it; what
//! is needed of it is a handful of fields and where its TSIG record starts (the MAC
//! covers the octets before it). Answers are written from records already in wire
//! form, names uncompressed (RFC 5936 §3.4 leaves compression to the server).
use super::tsig::{Tsig, TYPE_TSIG};

/// RR and query types used here.
pub mod rtype {
    /// SOA.
    pub const SOA: u16 = 6;
    /// OPT.
    pub const OPT: u16 = 41;
    /// IXFR.
    pub const IXFR: u16 = 251;
    /// AXFR.
    pub const AXFR: u16 = 252;
}

/// Opcodes.
pub mod opcode {
    /// QUERY.
    pub const QUERY: u8 = 0;
    /// NOTIFY.
    pub const NOTIFY: u8 = 4;
    /// UPDATE (RFC 2136).
    pub const UPDATE: u8 = 5;
}

/// RCODEs.
pub mod rcode {
    /// No error.
    pub const NOERROR: u8 = 0;
    /// Format error.
    pub const FORMERR: u8 = 1;
    /// Not implemented.
    pub const NOTIMP: u8 = 4;
    /// Refused.
    pub const REFUSED: u8 = 5;
    /// Not authorized / not authoritative.
    pub const NOTAUTH: u8 = 9;
    /// Server failure.
    pub const SERVFAIL: u8 = 2;
    /// A name that should exist does not (RFC 2136 prerequisites).
    pub const NXDOMAIN: u8 = 3;
    /// A name that should not exist does (RFC 2136).
    pub const YXDOMAIN: u8 = 6;
    /// An `RRset` that should not exist does (RFC 2136).
    pub const YXRRSET: u8 = 7;
    /// An `RRset` that should exist does not (RFC 2136).
    pub const NXRRSET: u8 = 8;
    /// A name outside the zone (RFC 2136).
    pub const NOTZONE: u8 = 10;
}

/// The most octets an answer message carries before the TSIG record (Knot and BIND
/// send messages of this order; 64 KiB is the ceiling).
pub const MESSAGE_TARGET: usize = 16_384;

/// A request, as far as a transfer listener cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// ID.
    pub id: u16,
    /// Opcode.
    pub opcode: u8,
    /// Question name, wire, lowercase.
    pub qname: Vec<u8>,
    /// Question name as sent (case kept), for the answer's question.
    pub qname_sent: Vec<u8>,
    /// Question type.
    pub qtype: u16,
    /// Question class.
    pub qclass: u16,
    /// IXFR: the serial of the SOA in the authority section.
    pub serial: Option<u32>,
    /// The TSIG record and where it starts.
    pub tsig: Option<(Tsig, usize)>,
    /// The request has an OPT record (EDNS): the answer has one too (RFC 6891 §6.1.1).
    pub edns: bool,
    /// Its DO bit, copied into the answer's OPT (RFC 3225 §3).
    pub dnssec_ok: bool,
}

/// Why a request cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Too short, or not a query, or a name or record runs past the end.
    Format,
}

struct Reader<'m> {
    msg: &'m [u8],
    pos: usize,
}

impl<'m> Reader<'m> {
    fn u8(&mut self) -> Result<u8, Malformed> {
        let b = *self.msg.get(self.pos).ok_or(Malformed::Format)?;
        self.pos += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from(self.u8()?) << 8 | u16::from(self.u8()?))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from(self.u16()?) << 16 | u32::from(self.u16()?))
    }

    fn bytes(&mut self, n: usize) -> Result<&'m [u8], Malformed> {
        let out = self.msg.get(self.pos..self.pos + n).ok_or(Malformed::Format)?;
        self.pos += n;
        Ok(out)
    }

    /// A name (compression followed), as sent; the reader moves past it.
    fn name(&mut self) -> Result<Vec<u8>, Malformed> {
        let (name, next) = read_name(self.msg, self.pos)?;
        self.pos = next;
        Ok(name)
    }
}

/// The name at `pos` (pointers followed, at most 128) and where the data after it
/// starts.
fn read_name(msg: &[u8], mut pos: usize) -> Result<(Vec<u8>, usize), Malformed> {
    let mut out = Vec::with_capacity(32);
    let mut after = None;
    for _ in 0..128 {
        let len = *msg.get(pos).ok_or(Malformed::Format)?;
        match len {
            0 => {
                out.push(0);
                if out.len() > 255 {
                    return Err(Malformed::Format);
                }
                return Ok((out, after.unwrap_or(pos + 1)));
            }
            1..=63 => {
                let label = msg.get(pos..=pos + usize::from(len)).ok_or(Malformed::Format)?;
                out.extend_from_slice(label);
                if out.len() > 255 {
                    return Err(Malformed::Format);
                }
                pos += 1 + usize::from(len);
            }
            0xc0..=0xff => {
                let low = *msg.get(pos + 1).ok_or(Malformed::Format)?;
                after.get_or_insert(pos + 2);
                pos = usize::from(len & 0x3f) << 8 | usize::from(low);
            }
            _ => return Err(Malformed::Format),
        }
    }
    Err(Malformed::Format)
}

/// `name` with ASCII letters lowercased.
#[must_use]
pub fn lowercase(name: &[u8]) -> Vec<u8> {
    name.iter().map(u8::to_ascii_lowercase).collect()
}

/// Reads the TSIG record starting at `at`: it and the end of its RDATA.
pub fn read_tsig(msg: &[u8], at: usize) -> Result<(Tsig, usize), Malformed> {
    let mut r = Reader { msg, pos: at };
    let key = lowercase(&r.name()?);
    if r.u16()? != TYPE_TSIG {
        return Err(Malformed::Format);
    }
    let (_class, _ttl, rdlen) = (r.u16()?, r.u32()?, usize::from(r.u16()?));
    let end = r.pos + rdlen;
    let algorithm = lowercase(&r.name()?);
    let time = u64::from(r.u16()?) << 32 | u64::from(r.u32()?);
    let fudge = r.u16()?;
    let mac_len = usize::from(r.u16()?);
    let mac = r.bytes(mac_len)?.to_vec();
    let original_id = r.u16()?;
    let error = r.u16()?;
    let other_len = usize::from(r.u16()?);
    let other = r.bytes(other_len)?.to_vec();
    if r.pos != end {
        return Err(Malformed::Format);
    }
    Ok((
        Tsig {
            key,
            algorithm,
            time,
            fudge,
            mac,
            original_id,
            error,
            other,
        },
        end,
    ))
}

/// Reads a request: header, one question, the records after it (an IXFR's SOA; a
/// TSIG, which must be the last record). Responses are not requests.
pub fn read_request(msg: &[u8]) -> Result<Request, Malformed> {
    let (request, _) = read_message(msg, false)?;
    Ok(request)
}

/// Reads any message (a request, or with `response` the answer to a NOTIFY) and its
/// RCODE.
pub fn read_message(msg: &[u8], response: bool) -> Result<(Request, u8), Malformed> {
    let mut r = Reader { msg, pos: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    if (flags & 0x8000 != 0) != response {
        return Err(Malformed::Format);
    }
    let counts = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
    if counts[0] != 1 {
        return Err(Malformed::Format);
    }
    let qname_sent = r.name()?;
    let (qtype, qclass) = (r.u16()?, r.u16()?);
    let records = usize::from(counts[1]) + usize::from(counts[2]) + usize::from(counts[3]);
    let mut serial = None;
    let mut tsig = None;
    let mut edns = false;
    let mut dnssec_ok = false;
    for i in 0..records {
        let start = r.pos;
        if tsig.is_some() {
            return Err(Malformed::Format);
        }
        let _owner = r.name()?;
        let (rt, _class, ttl, rdlen) = (r.u16()?, r.u16()?, r.u32()?, usize::from(r.u16()?));
        let rdata_at = r.pos;
        r.bytes(rdlen)?;
        let in_authority = i >= usize::from(counts[1]) && i < usize::from(counts[1]) + usize::from(counts[2]);
        if rt == rtype::SOA && in_authority {
            let (_, rname_at) = read_name(msg, rdata_at)?;
            let (_, serial_at) = read_name(msg, rname_at)?;
            let mut s = Reader { msg, pos: serial_at };
            serial = Some(s.u32()?);
        } else if rt == rtype::OPT && i >= usize::from(counts[1]) + usize::from(counts[2]) {
            edns = true;
            dnssec_ok = ttl & 0x8000 != 0;
        } else if rt == TYPE_TSIG {
            if i + 1 != records {
                return Err(Malformed::Format);
            }
            tsig = Some((read_tsig(msg, start)?.0, start));
        }
    }
    Ok((
        Request {
            id,
            opcode: ((flags >> 11) & 0xf) as u8,
            qname: lowercase(&qname_sent),
            qname_sent,
            qtype,
            qclass,
            serial,
            tsig,
            edns,
            dnssec_ok,
        },
        (flags & 0xf) as u8,
    ))
}

/// One record of a response: names written out (lowercase owner), RDATA names of the
/// types that may be compressed (RFC 3597 §4) written out too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rr {
    /// Owner, wire, lowercase.
    pub owner: Vec<u8>,
    /// Type.
    pub rtype: u16,
    /// Class.
    pub class: u16,
    /// TTL.
    pub ttl: u32,
    /// RDATA, uncompressed.
    pub rdata: Vec<u8>,
}

/// A response as a transfer client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// ID.
    pub id: u16,
    /// RCODE (the header's four bits).
    pub rcode: u8,
    /// The answer section.
    pub answers: Vec<Rr>,
    /// The TSIG record and where it starts.
    pub tsig: Option<(Tsig, usize)>,
}

/// Where a type's RDATA holds names: a name, or so many octets.
#[derive(Clone, Copy)]
enum Field {
    Name,
    Fixed(usize),
}

fn rdata_layout(rtype: u16) -> Option<&'static [Field]> {
    use Field::{Fixed, Name};
    Some(match rtype {
        2..=5 | 7..=9 | 12 | 39 => &[Name],
        6 => &[Name, Name, Fixed(20)],
        14 | 17 => &[Name, Name],
        15 | 18 | 21 | 36 => &[Fixed(2), Name],
        26 => &[Fixed(2), Name, Name],
        33 => &[Fixed(6), Name],
        _ => return None,
    })
}

/// RDATA at `start..start + len` of `msg`, its names written out.
fn rdata_of(msg: &[u8], rtype: u16, start: usize, len: usize) -> Result<Vec<u8>, Malformed> {
    let end = start + len;
    let raw = msg.get(start..end).ok_or(Malformed::Format)?;
    let Some(layout) = rdata_layout(rtype) else {
        return Ok(raw.to_vec());
    };
    let mut out = Vec::with_capacity(len + 32);
    let mut pos = start;
    for field in layout {
        match *field {
            Field::Name => {
                let (name, next) = read_name(msg, pos)?;
                out.extend_from_slice(&name);
                pos = next;
            }
            Field::Fixed(n) => {
                out.extend_from_slice(msg.get(pos..pos + n).ok_or(Malformed::Format)?);
                pos += n;
            }
        }
        if pos > end {
            return Err(Malformed::Format);
        }
    }
    if pos == end {
        Ok(out)
    } else {
        Err(Malformed::Format)
    }
}

/// Reads a response: its questions skipped, every answer record, a TSIG last.
pub fn read_response(msg: &[u8]) -> Result<Response, Malformed> {
    let mut r = Reader { msg, pos: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    if flags & 0x8000 == 0 {
        return Err(Malformed::Format);
    }
    let counts = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
    for _ in 0..counts[0] {
        r.name()?;
        r.bytes(4)?;
    }
    let records = usize::from(counts[1]) + usize::from(counts[2]) + usize::from(counts[3]);
    let mut answers = Vec::with_capacity(usize::from(counts[1]));
    let mut tsig = None;
    for i in 0..records {
        let start = r.pos;
        if tsig.is_some() {
            return Err(Malformed::Format);
        }
        let owner = lowercase(&r.name()?);
        let (rtype, class, ttl, rdlen) = (r.u16()?, r.u16()?, r.u32()?, usize::from(r.u16()?));
        let rdata_at = r.pos;
        r.bytes(rdlen)?;
        if rtype == TYPE_TSIG {
            if i + 1 != records {
                return Err(Malformed::Format);
            }
            tsig = Some((read_tsig(msg, start)?.0, start));
        } else if i < usize::from(counts[1]) {
            answers.push(Rr {
                owner,
                rtype,
                class,
                ttl,
                rdata: rdata_of(msg, rtype, rdata_at, rdlen)?,
            });
        }
    }
    Ok(Response {
        id,
        rcode: (flags & 0xf) as u8,
        answers,
        tsig,
    })
}

/// An UPDATE message (RFC 2136 §2) as read: the zone section is the request's
/// question; the prerequisite and update sections' records (names lowercase, RDATA
/// names written out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The request: ID, zone (`qname`), its type and class, the TSIG.
    pub request: Request,
    /// The prerequisite section.
    pub prerequisites: Vec<Rr>,
    /// The update section.
    pub updates: Vec<Rr>,
}

/// Reads an UPDATE: exactly one zone, its prerequisites and updates, additional
/// records only a TSIG (last).
pub fn read_update(msg: &[u8]) -> Result<Update, Malformed> {
    let (request, _) = read_message(msg, false)?;
    let mut r = Reader { msg, pos: 6 };
    let counts = [r.u16()?, r.u16()?, r.u16()?];
    r.name()?;
    r.bytes(4)?;
    let mut sections = [Vec::new(), Vec::new()];
    for (section, &count) in sections.iter_mut().zip(&counts) {
        for _ in 0..count {
            let owner = lowercase(&r.name()?);
            let (rtype, class, ttl, rdlen) = (r.u16()?, r.u16()?, r.u32()?, usize::from(r.u16()?));
            let rdata_at = r.pos;
            r.bytes(rdlen)?;
            section.push(Rr {
                owner,
                rtype,
                class,
                ttl,
                rdata: rdata_of(msg, rtype, rdata_at, rdlen)?,
            });
        }
    }
    // Additional: only the TSIG, which read_message checked is last.
    if usize::from(counts[2]) != usize::from(request.tsig.is_some()) {
        return Err(Malformed::Format);
    }
    let [prerequisites, updates] = sections;
    Ok(Update {
        request,
        prerequisites,
        updates,
    })
}

/// A query for `name` (wire) of `qtype`, class IN; with `soa` (IXFR) its SOA RR in
/// the authority section.
#[must_use]
pub fn query(id: u16, name: &[u8], qtype: u16, soa: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, u8::from(soa.is_some()), 0, 0]);
    out.extend_from_slice(name);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    if let Some(soa) = soa {
        out.extend_from_slice(soa);
    }
    out
}

/// The header and question of an answer to `request` with `rcode`, no records yet.
#[must_use]
pub fn answer_head(request: &Request, rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&request.id.to_be_bytes());
    // QR, the request's opcode, AA when answered.
    let aa = if rcode == rcode::NOERROR { 0x0400 } else { 0 };
    let flags: u16 = 0x8000 | u16::from(request.opcode) << 11 | aa | u16::from(rcode);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&request.qname_sent);
    out.extend_from_slice(&request.qtype.to_be_bytes());
    out.extend_from_slice(&request.qclass.to_be_bytes());
    out
}

/// The UDP payload size the listener's OPT record advertises.
pub const OPT_PAYLOAD: u16 = 1232;
/// EDE INFO-CODE 18, Prohibited (RFC 8914 §4.19).
pub const EDE_PROHIBITED: u16 = 18;

/// Appends an OPT record (EDNS version 0; DO as `dnssec_ok`) to the additional section
/// of `message`, with an Extended DNS Error option of INFO-CODE `ede` when given.
pub fn push_opt(message: &mut Vec<u8>, ede: Option<u16>, dnssec_ok: bool) {
    message.push(0);
    message.extend_from_slice(&rtype::OPT.to_be_bytes());
    message.extend_from_slice(&OPT_PAYLOAD.to_be_bytes());
    message.extend_from_slice(&(if dnssec_ok { 0x8000u32 } else { 0 }).to_be_bytes());
    match ede {
        Some(code) => {
            message.extend_from_slice(&6u16.to_be_bytes());
            message.extend_from_slice(&15u16.to_be_bytes());
            message.extend_from_slice(&2u16.to_be_bytes());
            message.extend_from_slice(&code.to_be_bytes());
        }
        None => message.extend_from_slice(&0u16.to_be_bytes()),
    }
    if message.len() >= 12 {
        let count = u16::from_be_bytes([message[10], message[11]]).saturating_add(1);
        message[10..12].copy_from_slice(&count.to_be_bytes());
    }
}

/// Appends `record` (a whole RR in wire form) to the answer section.
pub fn push_answer(message: &mut Vec<u8>, record: &[u8]) {
    message.extend_from_slice(record);
    if message.len() >= 12 {
        let count = u16::from_be_bytes([message[6], message[7]]).saturating_add(1);
        message[6..8].copy_from_slice(&count.to_be_bytes());
    }
}

/// Appends `record` (wire form) to the authority section of `message`, whose answer
/// section is complete, and counts it.
pub fn push_authority(message: &mut Vec<u8>, record: &[u8]) {
    message.extend_from_slice(record);
    if message.len() >= 12 {
        let count = u16::from_be_bytes([message[8], message[9]]).saturating_add(1);
        message[8..10].copy_from_slice(&count.to_be_bytes());
    }
}

/// One RR in wire form: owner (uncompressed), type, class IN, TTL, RDATA.
#[must_use]
pub fn record(owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(owner.len() + 10 + rdata.len());
    out.extend_from_slice(owner);
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
    out
}

/// A NOTIFY for `origin` carrying `soa` (RFC 1996 §3.7: the SOA in the answer section).
#[must_use]
pub fn notify(id: u16, origin: &[u8], soa: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + soa.len());
    out.extend_from_slice(&id.to_be_bytes());
    let flags: u16 = u16::from(opcode::NOTIFY) << 11 | 0x0400;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0]);
    out.extend_from_slice(origin);
    out.extend_from_slice(&rtype::SOA.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(soa);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axfr(name: &[u8]) -> Vec<u8> {
        let mut m = vec![0xab, 0xcd, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(name);
        m.extend_from_slice(&[0, 252, 0, 1]);
        m
    }

    #[test]
    fn requests_read_and_bounded() {
        let m = axfr(b"\x04Shop\x07example\x00");
        let r = read_request(&m).unwrap();
        assert_eq!((r.id, r.qtype, r.qclass), (0xabcd, rtype::AXFR, 1));
        assert_eq!(r.qname, b"\x04shop\x07example\x00");
        // IXFR with the SOA's owner a pointer to the question.
        let mut m = axfr(b"\x01a\x00");
        m[9] = 1;
        m[17] = 251;
        let soa = record(
            &[0xc0, 12],
            rtype::SOA,
            0,
            b"\x00\x00\x00\x00\x00\x2a\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        );
        m.extend_from_slice(&soa);
        assert_eq!(read_request(&m).unwrap().serial, Some(42));
        // Truncated, a pointer loop, a response, two questions.
        assert!(read_request(&m[..m.len() - 3]).is_err());
        let mut looped = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 252, 0, 1];
        assert!(read_request(&looped).is_err());
        looped[2] = 0x80;
        assert!(read_request(&looped).is_err());
        let mut two = axfr(b"\x01a\x00");
        two[5] = 2;
        assert!(read_request(&two).is_err());
    }

    /// A primary's answer with compressed names, in owners and in RDATA (MX, SOA).
    #[test]
    fn responses_read_with_names_written_out() {
        let mut m = vec![0, 7, 0x84, 0, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend_from_slice(b"\x02In\x07example\x00\x00\xfc\x00\x01");
        // @ SOA: mname ns.<12>, rname h.<12>, 20 octets.
        m.extend_from_slice(&[0xc0, 12, 0, 6, 0, 1, 0, 0, 0, 60, 0, 29]);
        m.extend_from_slice(&[2, b'n', b's', 0xc0, 12, 1, b'h', 0xc0, 12]);
        m.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4]);
        // mail MX 10 mx.<12>
        m.extend_from_slice(&[4, b'm', b'a', b'i', b'l', 0xc0, 12, 0, 15, 0, 1, 0, 0, 0, 60, 0, 7]);
        m.extend_from_slice(&[0, 10, 2, b'm', b'x', 0xc0, 12]);
        let r = read_response(&m).unwrap();
        assert_eq!(r.answers.len(), 2);
        assert_eq!(r.answers[0].owner, b"\x02in\x07example\x00");
        assert_eq!(&r.answers[0].rdata[..15], b"\x02ns\x02In\x07example\x00");
        assert_eq!(r.answers[0].rdata.len(), 15 + 14 + 20);
        assert_eq!(r.answers[1].rdata, b"\x00\x0a\x02mx\x02In\x07example\x00");
        // RDLENGTH that ends inside the MX's name: refused.
        let mut bent = m.clone();
        let at = bent.len() - 8;
        bent[at] = 5;
        assert!(read_response(&bent).is_err());
    }

    #[test]
    fn every_prefix_of_a_request_is_refused_or_read() {
        let mut m = axfr(b"\x01a\x00");
        m[9] = 1;
        m.extend_from_slice(&record(&[0xc0, 12], rtype::SOA, 0, &[0u8; 22]));
        for end in 0..m.len() {
            assert!(read_request(&m[..end]).is_err(), "{end}");
        }
    }
}
