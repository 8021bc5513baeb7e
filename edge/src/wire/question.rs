//! Reading a query: header, the one question, and the OPT record (RFC 1035 §4.1.2,
//! RFC 6891 §6.1.1, RFC 9619 for QDCOUNT = 1). Allocation-free; the result is `Copy`.
use super::{
    edns::{ClientSubnet, CookieOption, Edns, MIN_UDP_PAYLOAD, OPTION_COOKIE, OPTION_ECS, OPTION_NSID},
    header::{Header, HEADER_LEN},
    name::{self, NameBuf},
    rcode::Rcode,
    rtype,
};

/// A query that can be answered: its header, lowercased question and EDNS state.
#[derive(Clone, Copy)]
pub struct Query {
    /// The query header.
    pub header: Header,
    /// QNAME, lowercased.
    pub qname: NameBuf,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// Offset just past the question: `msg[12..question_end]` is echoed as is (0x20 case).
    pub question_end: usize,
    /// The query's OPT record, if any.
    pub edns: Option<Edns>,
}

/// A query that gets no normal answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Not answerable at all (shorter than a header, or a response): dropped and counted.
    Drop,
    /// Answered with `rcode` alone. `question_end` > 12 when the question was readable
    /// and is echoed; `edns` when a valid OPT was read.
    Respond {
        /// The response code.
        rcode: Rcode,
        /// Offset past the echoed question (12 when none is echoed).
        question_end: usize,
        /// The query's OPT record, when it was valid.
        edns: Option<Edns>,
    },
}

impl Reject {
    fn formerr(question_end: usize, edns: Option<Edns>) -> Reject {
        Reject::Respond {
            rcode: Rcode::FormErr,
            question_end,
            edns,
        }
    }
}

/// Parses `msg` as a query.
pub fn parse_query(msg: &[u8]) -> Result<Query, Reject> {
    let mut query = Query::EMPTY;
    query.read(msg)?;
    Ok(query)
}

impl Query {
    /// No query yet: what [`Query::read`] fills in place.
    pub const EMPTY: Query = Query {
        header: Header {
            id: 0,
            flags: 0,
            qdcount: 0,
            ancount: 0,
            nscount: 0,
            arcount: 0,
        },
        qname: NameBuf::EMPTY,
        qtype: 0,
        qclass: 0,
        question_end: 0,
        edns: None,
    };

    /// Reads `msg` as a query into `self`, in place: the query path's form of
    /// [`parse_query`] (a `Query` is about 420 octets, and building one and moving it
    /// through the `Result` cost the user-space answer three copies of it). After an
    /// error `self` is partly written: not a query to use.
    pub fn read(&mut self, msg: &[u8]) -> Result<(), Reject> {
        let header = Header::read(msg).ok_or(Reject::Drop)?;
        if header.is_response() {
            return Err(Reject::Drop);
        }
        if header.qdcount != 1 {
            let rcode = if header.opcode() == 0 {
                Rcode::FormErr
            } else {
                Rcode::NotImp
            };
            return Err(Reject::Respond {
                rcode,
                question_end: HEADER_LEN,
                edns: None,
            });
        }
        let Ok(after_name) = self.qname.read(msg, HEADER_LEN) else {
            return Err(Reject::formerr(HEADER_LEN, None));
        };
        let (Some(qtype), Some(qclass)) = (read_u16(msg, after_name), read_u16(msg, after_name + 2)) else {
            return Err(Reject::formerr(HEADER_LEN, None));
        };
        let question_end = after_name + 4;
        if header.opcode() != 0 {
            return Err(Reject::Respond {
                rcode: Rcode::NotImp,
                question_end,
                edns: None,
            });
        }
        if header.ancount != 0 || header.nscount != 0 {
            return Err(Reject::formerr(question_end, None));
        }
        let end = read_additional(msg, question_end, header.arcount, &mut self.edns);
        if end != Some(msg.len()) || matches!(qtype, rtype::OPT | rtype::TSIG | rtype::TKEY | 0) {
            return Err(Reject::formerr(question_end, self.edns));
        }
        self.header = header;
        self.qtype = qtype;
        self.qclass = qclass;
        self.question_end = question_end;
        Ok(())
    }
}

/// Walks the additional section, writing the OPT record (if any) into `edns`; returns
/// the end offset, or `None` when the section is malformed (then `edns` holds the OPT
/// read so far, so FORMERR can still carry one).
fn read_additional(msg: &[u8], mut pos: usize, count: u16, edns: &mut Option<Edns>) -> Option<usize> {
    *edns = None;
    for _ in 0..count {
        let owner = pos;
        pos = name::skip(msg, pos).ok()?;
        let fixed = msg.get(pos..pos + 10)?;
        let rr_type = u16::from_be_bytes([fixed[0], fixed[1]]);
        let class = u16::from_be_bytes([fixed[2], fixed[3]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let rdata = msg.get(pos + 10..pos + 10 + rdlen)?;
        pos += 10 + rdlen;
        if rr_type != rtype::OPT {
            continue;
        }
        // One OPT, owned by the root (RFC 6891 §6.1.1), with well-formed options.
        let Options {
            nsid,
            ecs,
            cookie,
            bad_cookie,
        } = options(rdata).filter(|_| edns.is_none() && msg.get(owner) == Some(&0))?;
        *edns = Some(Edns {
            udp_payload: class.max(MIN_UDP_PAYLOAD),
            version: (ttl >> 16) as u8,
            dnssec_ok: ttl & 0x8000 != 0,
            nsid,
            ecs,
            cookie,
            bad_cookie,
        });
    }
    Some(pos)
}

/// The options of an OPT record the edge acts on.
struct Options {
    nsid: bool,
    ecs: Option<ClientSubnet>,
    cookie: Option<CookieOption>,
    bad_cookie: bool,
}

/// When the OPT RDATA is a sequence of complete {code, length, data} options: whether
/// one of them is NSID, the Client Subnet option and the first COOKIE option. `None`
/// when malformed, including an ECS option that breaks RFC 7871 §6 or a second one
/// (§7.1.2: FORMERR). A first COOKIE option of a length RFC 7873 §5.2.2 forbids is
/// marked: the engine answers FORMERR when cookies are on.
fn options(mut rdata: &[u8]) -> Option<Options> {
    let mut found = Options {
        nsid: false,
        ecs: None,
        cookie: None,
        bad_cookie: false,
    };
    let mut first_cookie = true;
    while !rdata.is_empty() {
        let code = read_u16(rdata, 0)?;
        let len = usize::from(read_u16(rdata, 2)?);
        let data = rdata.get(4..4 + len)?;
        found.nsid |= code == OPTION_NSID;
        if code == OPTION_ECS {
            if found.ecs.is_some() {
                return None;
            }
            found.ecs = Some(ClientSubnet::parse(data)?);
        }
        if code == OPTION_COOKIE && first_cookie {
            first_cookie = false;
            found.cookie = CookieOption::parse(data);
            found.bad_cookie = found.cookie.is_none();
        }
        rdata = rdata.get(4 + len..)?;
    }
    Some(found)
}

fn read_u16(msg: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[u8], qtype: u16, extra: &[u8], arcount: u16) -> Vec<u8> {
        let mut msg = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0];
        msg.extend(arcount.to_be_bytes());
        msg.extend(name);
        msg.extend(qtype.to_be_bytes());
        msg.extend(1u16.to_be_bytes());
        msg.extend(extra);
        msg
    }

    const OPT: &[u8] = &[0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0];

    #[test]
    fn parses_plain_and_edns_queries() {
        let q = parse_query(&query(b"\x03WWW\x07example\x03com\x00", 1, &[], 0))
            .ok()
            .unwrap();
        assert_eq!(q.qname.as_wire(), b"\x03www\x07example\x03com\x00");
        assert_eq!((q.qtype, q.qclass, q.question_end), (1, 1, 33));
        assert!(q.edns.is_none());
        let q = parse_query(&query(b"\x00", 2, OPT, 1)).ok().unwrap();
        assert_eq!(
            q.edns,
            Some(Edns {
                udp_payload: 4096,
                version: 0,
                dnssec_ok: true,
                nsid: false,
                ecs: None,
                cookie: None,
                bad_cookie: false,
            })
        );
        // With a COOKIE and an NSID request.
        let opt = [&OPT[..9], &[0, 16], &[0, 10, 0, 8], &[7; 8], &[0, 3, 0, 0]].concat();
        let q = parse_query(&query(b"\x00", 2, &opt, 1)).ok().unwrap();
        assert!(q.edns.is_some_and(|e| e.nsid));
    }

    #[test]
    fn rejects() {
        assert_eq!(parse_query(b"\x00\x01").err(), Some(Reject::Drop));
        let mut response = query(b"\x00", 1, &[], 0);
        response[2] |= 0x80;
        assert_eq!(parse_query(&response).err(), Some(Reject::Drop));
        let mut notify = query(b"\x00", 6, &[], 0);
        notify[2] |= 4 << 3;
        assert!(matches!(
            parse_query(&notify),
            Err(Reject::Respond {
                rcode: Rcode::NotImp,
                question_end: 17,
                ..
            })
        ));
        let trailing = query(b"\x00", 1, b"junk", 0);
        assert!(matches!(
            parse_query(&trailing),
            Err(Reject::Respond {
                rcode: Rcode::FormErr,
                ..
            })
        ));
        let two_opts = query(b"\x00", 1, &[OPT, OPT].concat(), 2);
        assert!(matches!(
            parse_query(&two_opts),
            Err(Reject::Respond {
                rcode: Rcode::FormErr,
                ..
            })
        ));
        let bad_option = query(b"\x00", 1, &[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0], 1);
        assert!(matches!(
            parse_query(&bad_option),
            Err(Reject::Respond {
                rcode: Rcode::FormErr,
                ..
            })
        ));
        let pointer = query(b"\xc0\x0c", 1, &[], 0);
        assert!(matches!(
            parse_query(&pointer),
            Err(Reject::Respond {
                rcode: Rcode::FormErr,
                question_end: 12,
                ..
            })
        ));
    }
}
