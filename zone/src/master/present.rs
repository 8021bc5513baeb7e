//! Writing record sets back in master-file form (`qdnsctl dump`): the types' own
//! presentation forms where this module has one, the RFC 3597 generic form otherwise,
//! so whatever was loaded reads back to the same octets.
use std::fmt::Write as _;

use super::{svcb, types};
use crate::snapshot::{Answer, RecordSet, Zone};

/// The zone as a master file: every plain set, then each policy set's member records as
/// comments (what health may choose from, not one answer), absolute names throughout.
#[must_use]
pub fn zone_text(zone: &Zone) -> String {
    let mut out = format!(
        "; zone {} serial {} (from {})\n$ORIGIN {}\n",
        name_text(&zone.origin),
        zone.serial,
        zone.source,
        name_text(&zone.origin)
    );
    let mut sets: Vec<&RecordSet> = zone.rrsets.iter().collect();
    // SOA first (RFC 1035 §5.2: a zone file starts with it), then by owner and type.
    sets.sort_by_key(|set| (set.rtype != types::SOA, set.name.clone(), set.rtype));
    for set in sets {
        let owner = name_text(&set.name);
        let rtype = types::name(set.rtype);
        match &set.policy {
            None => {
                for rdata in &set.rdata {
                    let _ = writeln!(out, "{owner} {} IN {rtype} {}", set.ttl, rdata_text(set.rtype, rdata));
                }
            }
            Some(policy) => {
                let _ = writeln!(out, "; {owner} {rtype}: {:?} policy set", policy.kind);
                for member in &policy.members {
                    match &member.answer {
                        Answer::Values(values) => {
                            for rdata in values {
                                let _ = writeln!(
                                    out,
                                    ";   member {}: {owner} {} IN {rtype} {}",
                                    member.id,
                                    set.ttl,
                                    rdata_text(set.rtype, rdata)
                                );
                            }
                        }
                        Answer::Alias { target } => {
                            let _ = writeln!(out, ";   member {}: alias of {}", member.id, name_text(target));
                        }
                    }
                }
            }
        }
    }
    out
}

/// A wire name in presentation form, every octet a master file would misread escaped.
#[must_use]
pub fn name_text(wire: &[u8]) -> String {
    crate::name::to_text(wire)
}

/// RDATA in presentation form; the generic form when the bytes do not parse as the type
/// or their own form would not read back to the same octets (a `\#`-loaded SVCB with
/// unsorted keys, an upper-case name, …).
#[must_use]
pub fn rdata_text(rtype: u16, rdata: &[u8]) -> String {
    native(rtype, rdata)
        .filter(|text| reads_back(rtype, text, rdata))
        .unwrap_or_else(|| generic(rdata))
}

/// RDATA in its type's own presentation form, reading back to the same octets; `None`
/// when the octets do not parse as the type, or it has no form of its own here (what
/// dynamic update takes: a record of another form is refused, not kept as `\#`).
#[must_use]
pub fn native_text(rtype: u16, rdata: &[u8]) -> Option<String> {
    native(rtype, rdata).filter(|text| reads_back(rtype, text, rdata))
}

/// True when `text` parses (relative names need none: ours are absolute) to `rdata`.
fn reads_back(rtype: u16, text: &str, rdata: &[u8]) -> bool {
    let mut lexer = super::lexer::Lexer::new(text.as_bytes());
    let Ok(Some(entry)) = lexer.next_entry() else {
        return false;
    };
    super::rdata::encode(rtype, &mut super::rdata::Fields::new(&entry.tokens, b"\0")).is_ok_and(|wire| wire == rdata)
}

/// RFC 3597 §5: `\# LENGTH HEX`.
fn generic(rdata: &[u8]) -> String {
    let mut out = format!("\\# {}", rdata.len());
    if !rdata.is_empty() {
        out.push(' ');
        out.push_str(&hex(rdata));
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Reads RDATA left to right.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.data.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        loop {
            let len = usize::from(self.u8()?);
            if len == 0 {
                break;
            }
            if len > 63 {
                return None;
            }
            self.take(len)?;
        }
        Some(name_text(self.data.get(start..self.pos)?))
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::from(self.u8()?);
        Some(quoted(self.take(len)?))
    }

    fn rest(&mut self) -> &'a [u8] {
        let out = self.data.get(self.pos..).unwrap_or_default();
        self.pos = self.data.len();
        out
    }

    fn done(&self) -> bool {
        self.pos == self.data.len()
    }
}

/// `"…"` with `"` and `\` escaped and octets outside printable ASCII as `\DDD`.
pub(super) fn quoted(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &byte in bytes {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "\\{byte:03}");
            }
        }
    }
    out.push('"');
    out
}

fn native(rtype: u16, rdata: &[u8]) -> Option<String> {
    let mut r = Reader { data: rdata, pos: 0 };
    let text = match rtype {
        types::A => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(r.take(4)?).ok()?).to_string(),
        types::AAAA => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(r.take(16)?).ok()?).to_string(),
        types::NS | types::CNAME | types::PTR => r.name()?,
        types::MX | types::KX | types::AFSDB => format!("{} {}", r.u16()?, r.name()?),
        types::RP => format!("{} {}", r.name()?, r.name()?),
        types::SOA => format!(
            "{} {} {} {} {} {} {}",
            r.name()?,
            r.name()?,
            r.u32()?,
            r.u32()?,
            r.u32()?,
            r.u32()?,
            r.u32()?
        ),
        types::TXT | types::SPF => {
            let mut parts = Vec::new();
            while !r.done() {
                parts.push(r.string()?);
            }
            if parts.is_empty() {
                return None;
            }
            parts.join(" ")
        }
        types::HINFO => format!("{} {}", r.string()?, r.string()?),
        types::SRV => format!("{} {} {} {}", r.u16()?, r.u16()?, r.u16()?, r.name()?),
        types::NAPTR => format!(
            "{} {} {} {} {} {}",
            r.u16()?,
            r.u16()?,
            r.string()?,
            r.string()?,
            r.string()?,
            r.name()?
        ),
        types::DS | types::CDS => format!("{} {} {} {}", r.u16()?, r.u8()?, r.u8()?, hex_nonempty(r.rest())?),
        types::SSHFP => format!("{} {} {}", r.u8()?, r.u8()?, hex_nonempty(r.rest())?),
        types::TLSA | types::SMIMEA => format!("{} {} {} {}", r.u8()?, r.u8()?, r.u8()?, hex_nonempty(r.rest())?),
        types::CAA => {
            let flags = r.u8()?;
            let len = usize::from(r.u8()?);
            let tag = r.take(len)?;
            if tag.is_empty() || !tag.iter().all(u8::is_ascii_alphanumeric) {
                return None;
            }
            format!("{flags} {} {}", String::from_utf8_lossy(tag), quoted(r.rest()))
        }
        types::URI => format!("{} {} {}", r.u16()?, r.u16()?, quoted(r.rest())),
        types::SVCB | types::HTTPS => {
            let priority = r.u16()?;
            let target = r.name()?;
            let params = svcb::params_text(r.rest())?;
            format!("{priority} {target}{params}")
        }
        _ => return None,
    };
    r.done().then_some(text)
}

fn hex_nonempty(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| hex(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::{lexer::Lexer, rdata};
    use super::*;

    const ORIGIN: &[u8] = b"\x07example\x00";

    fn wire(rtype: u16, text: &str) -> Vec<u8> {
        let entry = Lexer::new(text.as_bytes()).next_entry().unwrap().unwrap();
        rdata::encode(rtype, &mut rdata::Fields::new(&entry.tokens, ORIGIN)).unwrap()
    }

    #[test]
    fn every_form_reads_back_to_the_same_octets() {
        let cases: &[(u16, &str)] = &[
            (types::A, "192.0.2.1"),
            (types::AAAA, "2001:db8::1"),
            (types::NS, "ns.example."),
            (types::CNAME, "sp\\032a\\;ce\\.x.example."),
            (types::MX, "10 mail.example."),
            (
                types::TXT,
                "\"\\127\\128\\200\\255\" \"a \\\"quoted\\\" \\\\ string\" \"\"",
            ),
            (types::SOA, "ns.example. h.example. 1 7200 900 1209600 30"),
            (types::SRV, "1 2 443 svc.example."),
            (types::NAPTR, "100 10 \"S\" \"SIP+D2U\" \"\" _sip._udp.example."),
            (types::CAA, "0 issue \"ca.example.net; account=\\\"1\\\"\""),
            (types::DS, "60485 5 1 2bb183af5f22588179a53b0a98631fad1a292118"),
            (types::SSHFP, "1 1 dd465c09cfa51fb45020cc83316fff21b9ec74ac"),
            (types::TLSA, "3 1 1 0c72ac70b745ac19998811b131d662c9"),
            (types::HINFO, "\"PC\" \"Linux\""),
            (types::URI, "10 1 \"https://example.net/\""),
            (
                types::SVCB,
                "1 host.example. alpn=h2,h3 port=8443 ipv4hint=192.0.2.1,192.0.2.2",
            ),
            (
                types::HTTPS,
                "1 . alpn=\"f\\\\\\\\oo\\\\,bar,h2\" key667=\"hello\\210qoo\"",
            ),
            (types::HTTPS, "0 alias.example."),
            (65280, "\\# 4 0a000001"),
            (65281, "\\# 0"),
            (29, "\\# 16 0012161300899b0d8218a1230000000a"),
        ];
        for &(rtype, text) in cases {
            let first = wire(rtype, text);
            let shown = rdata_text(rtype, &first);
            assert_eq!(wire(rtype, &shown), first, "{} {text} → {shown}", types::name(rtype));
        }
        assert_eq!(rdata_text(types::A, &[192, 0, 2, 1]), "192.0.2.1");
        assert_eq!(
            rdata_text(types::A, &[1, 2, 3]),
            "\\# 3 010203",
            "not an A: generic form"
        );
        assert_eq!(rdata_text(types::TXT, b"\x02a\x80"), "\"a\\128\"");
        // Bytes whose own form would read back differently: generic form.
        assert_eq!(rdata_text(types::CNAME, b"\x01X\x00"), "\\# 3 015800");
        assert_eq!(
            rdata_text(types::SVCB, b"\x00\x00\x00\x00\x03\x00\x02\x00\x35"),
            "\\# 9 000000000300020035"
        );
    }
}
