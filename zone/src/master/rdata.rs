//! RDATA from presentation format, per type (RFC 1035 §3.3, RFC 3596, RFC 2782,
//! RFC 3403, RFC 4034 §5.3, RFC 4255, RFC 6698, RFC 7929, RFC 8659, RFC 7553, RFC 9460),
//! and the RFC 3597 §5 generic form `\# LEN HEX` for any type.
//!
//! Names inside RDATA are written lowercase and uncompressed (the engine follows CNAME
//! and NS targets by comparing wire names); everything else keeps its octets exactly.
use super::{lexer::Token, svcb, text, types};

/// The fields of one record's RDATA, read left to right.
pub(super) struct Fields<'t, 'a> {
    tokens: &'t [Token<'a>],
    next: usize,
    /// Origin for relative names (lowercase wire).
    pub origin: &'t [u8],
}

impl<'t, 'a> Fields<'t, 'a> {
    pub(super) fn new(tokens: &'t [Token<'a>], origin: &'t [u8]) -> Fields<'t, 'a> {
        Fields {
            tokens,
            next: 0,
            origin,
        }
    }

    /// The next field, or an error naming what was expected.
    pub(super) fn token(&mut self, what: &str) -> Result<Token<'a>, String> {
        let token = self
            .tokens
            .get(self.next)
            .copied()
            .ok_or_else(|| format!("missing {what}"))?;
        self.next += 1;
        Ok(token)
    }

    fn word(&mut self, what: &str) -> Result<&'a [u8], String> {
        let token = self.token(what)?;
        if token.quoted {
            return Err(format!("{what} must not be quoted"));
        }
        Ok(token.text)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        text::number(self.word(what)?, what)
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        text::number(self.word(what)?, what)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        text::number(self.word(what)?, what)
    }

    fn name(&mut self, what: &str) -> Result<Vec<u8>, String> {
        let raw = self.word(what)?;
        text::name(raw, self.origin).map_err(|e| format!("{what}: {e}"))
    }

    /// The fields not read yet.
    pub(super) fn rest(&mut self) -> &'t [Token<'a>] {
        let rest = self.tokens.get(self.next..).unwrap_or_default();
        self.next = self.tokens.len();
        rest
    }

    /// The remaining fields joined (hex and base64 may be split by blanks).
    fn joined(&mut self, what: &str) -> Result<Vec<u8>, String> {
        let rest = self.rest();
        if rest.is_empty() {
            return Err(format!("missing {what}"));
        }
        let mut out = Vec::new();
        for token in rest {
            if token.quoted {
                return Err(format!("{what} must not be quoted"));
            }
            out.extend_from_slice(token.text);
        }
        Ok(out)
    }

    fn done(&self) -> Result<(), String> {
        match self.tokens.get(self.next) {
            None => Ok(()),
            Some(extra) => Err(format!(
                "unexpected {:?} after the record data",
                String::from_utf8_lossy(extra.text)
            )),
        }
    }
}

/// The wire RDATA of a record of `rtype` from `fields`.
pub(super) fn encode(rtype: u16, fields: &mut Fields<'_, '_>) -> Result<Vec<u8>, String> {
    let generic = fields
        .tokens
        .get(fields.next)
        .is_some_and(|t| !t.quoted && t.text == b"\\#");
    let rdata = if generic {
        fields.next += 1;
        let rdata = generic_form(fields)?;
        check_generic(rtype, &rdata)?
    } else {
        let rdata = known_form(rtype, fields)?;
        fields.done()?;
        rdata
    };
    if rdata.len() > usize::from(u16::MAX) {
        return Err("RDATA longer than 65535 octets".to_owned());
    }
    Ok(rdata)
}

/// RFC 3597 §5: `\# LENGTH HEX…`.
fn generic_form(fields: &mut Fields<'_, '_>) -> Result<Vec<u8>, String> {
    let len: u16 = fields.u16("the RDATA length after \\#")?;
    if len == 0 {
        fields.done()?;
        return Ok(Vec::new());
    }
    let data = text::hex(&fields.joined("the hex RDATA")?)?;
    if data.len() != usize::from(len) {
        return Err(format!("\\# says {len} octets but the hex holds {}", data.len()));
    }
    Ok(data)
}

/// Generic-form RDATA of a known type must be that type's valid RDATA (RFC 3597 §5); the
/// names in it are lowercased like those written in the type's own form.
fn check_generic(rtype: u16, rdata: &[u8]) -> Result<Vec<u8>, String> {
    types::refuse(rtype)?;
    let bad = |what: &str| Err(format!("\\# data is not valid {} RDATA: {what}", types::name(rtype)));
    let fixed_then_names = |fixed: usize, names: usize, tail: usize| -> Option<Vec<u8>> {
        let mut out = rdata.get(..fixed)?.to_vec();
        let mut pos = fixed;
        for _ in 0..names {
            let end = pos + wire_name_len(rdata.get(pos..)?)?;
            out.extend(rdata.get(pos..end)?.iter().map(u8::to_ascii_lowercase));
            pos = end;
        }
        (rdata.len() == pos + tail).then(|| {
            out.extend_from_slice(rdata.get(pos..).unwrap_or_default());
            out
        })
    };
    let shape = match rtype {
        types::A => (rdata.len() == 4).then(|| rdata.to_vec()),
        types::AAAA => (rdata.len() == 16).then(|| rdata.to_vec()),
        types::NS | types::CNAME | types::PTR | types::DNAME => fixed_then_names(0, 1, 0),
        types::MX | types::KX | types::AFSDB => fixed_then_names(2, 1, 0),
        types::SRV => fixed_then_names(6, 1, 0),
        types::RP => fixed_then_names(0, 2, 0),
        types::SOA => fixed_then_names(0, 2, 20),
        types::SVCB | types::HTTPS => {
            // Priority, TargetName (lowercased like the own form's), then the params.
            let end = rdata.get(2..).and_then(wire_name_len).map(|n| n + 2);
            end.map(|end| {
                let mut out = rdata.to_vec();
                out[2..end].make_ascii_lowercase();
                out
            })
        }
        types::TXT | types::SPF => strings_cover(rdata, 1).then(|| rdata.to_vec()),
        types::HINFO => (strings_cover(rdata, 2) && string_count(rdata) == Some(2)).then(|| rdata.to_vec()),
        _ => Some(rdata.to_vec()),
    };
    match shape {
        Some(out) => Ok(out),
        None => bad("wrong length or a malformed name/string"),
    }
}

/// Length of the uncompressed wire name at the start of `wire`.
fn wire_name_len(wire: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let len = usize::from(*wire.get(pos)?);
        if len == 0 {
            return (pos < text::NAME_MAX).then_some(pos + 1);
        }
        if len > 63 {
            return None;
        }
        pos += 1 + len;
    }
}

fn string_count(rdata: &[u8]) -> Option<usize> {
    let (mut pos, mut count) = (0, 0);
    while pos < rdata.len() {
        pos += 1 + usize::from(*rdata.get(pos)?);
        count += 1;
    }
    (pos == rdata.len()).then_some(count)
}

fn strings_cover(rdata: &[u8], at_least: usize) -> bool {
    string_count(rdata).is_some_and(|n| n >= at_least)
}

/// The type's own presentation form.
fn known_form(rtype: u16, f: &mut Fields<'_, '_>) -> Result<Vec<u8>, String> {
    types::refuse(rtype)?;
    let mut out = Vec::new();
    match rtype {
        types::A => {
            let raw = f.word("an IPv4 address")?;
            let addr: std::net::Ipv4Addr = parse_str(raw, "IPv4 address")?;
            out.extend_from_slice(&addr.octets());
        }
        types::AAAA => {
            let raw = f.word("an IPv6 address")?;
            let addr: std::net::Ipv6Addr = parse_str(raw, "IPv6 address")?;
            out.extend_from_slice(&addr.octets());
        }
        types::NS | types::CNAME | types::PTR | types::DNAME => out = f.name("the target name")?,
        types::MX | types::KX | types::AFSDB => {
            out.extend_from_slice(&f.u16("the preference")?.to_be_bytes());
            out.extend(f.name("the exchange name")?);
        }
        types::RP => {
            out.extend(f.name("the mailbox name")?);
            out.extend(f.name("the TXT name")?);
        }
        types::SOA => {
            out.extend(f.name("MNAME")?);
            out.extend(f.name("RNAME")?);
            out.extend_from_slice(&f.u32("SERIAL")?.to_be_bytes());
            for field in ["REFRESH", "RETRY", "EXPIRE", "MINIMUM"] {
                let raw = f.word(field)?;
                let value = text::ttl(raw).map_err(|e| format!("{field}: {e}"))?;
                out.extend_from_slice(&value.to_be_bytes());
            }
        }
        types::TXT | types::SPF => {
            let rest = f.rest();
            if rest.is_empty() {
                return Err("missing the text".to_owned());
            }
            for token in rest {
                text::character_string(token.text, &mut out)?;
            }
        }
        types::HINFO => {
            text::character_string(f.token("the CPU")?.text, &mut out)?;
            text::character_string(f.token("the OS")?.text, &mut out)?;
        }
        types::SRV => {
            for field in ["the priority", "the weight", "the port"] {
                out.extend_from_slice(&f.u16(field)?.to_be_bytes());
            }
            out.extend(f.name("the target")?);
        }
        types::NAPTR => {
            out.extend_from_slice(&f.u16("the order")?.to_be_bytes());
            out.extend_from_slice(&f.u16("the preference")?.to_be_bytes());
            for field in ["the flags", "the services", "the regexp"] {
                text::character_string(f.token(field)?.text, &mut out)?;
            }
            out.extend(f.name("the replacement")?);
        }
        _ => return keys_and_strings(rtype, f),
    }
    Ok(out)
}

/// Digests, keys, certificates and the types whose data is the rest of the RDATA.
fn keys_and_strings(rtype: u16, f: &mut Fields<'_, '_>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match rtype {
        types::DS | types::CDS => {
            out.extend_from_slice(&f.u16("the key tag")?.to_be_bytes());
            out.push(f.u8("the algorithm")?);
            out.push(f.u8("the digest type")?);
            out.extend(text::hex(&f.joined("the digest")?)?);
        }
        types::CDNSKEY => {
            out.extend_from_slice(&f.u16("the flags")?.to_be_bytes());
            out.push(f.u8("the protocol")?);
            out.push(f.u8("the algorithm")?);
            out.extend(text::base64(&f.joined("the public key")?)?);
        }
        types::SSHFP => {
            out.push(f.u8("the algorithm")?);
            out.push(f.u8("the fingerprint type")?);
            out.extend(text::hex(&f.joined("the fingerprint")?)?);
        }
        types::TLSA | types::SMIMEA => {
            out.push(f.u8("the usage")?);
            out.push(f.u8("the selector")?);
            out.push(f.u8("the matching type")?);
            out.extend(text::hex(&f.joined("the certificate data")?)?);
        }
        types::OPENPGPKEY => out.extend(text::base64(&f.joined("the key")?)?),
        types::URI => {
            out.extend_from_slice(&f.u16("the priority")?.to_be_bytes());
            out.extend_from_slice(&f.u16("the weight")?.to_be_bytes());
            // RFC 7553 §4.5: the target is the rest of the RDATA, no length octet.
            let target = f.token("the target")?;
            if !target.quoted {
                return Err("the URI target must be quoted".to_owned());
            }
            out.extend(text::unescape(target.text)?);
        }
        types::CAA => {
            out.push(f.u8("the flags")?);
            let tag = f.word("the tag")?;
            if tag.is_empty() || tag.len() > 255 || !tag.iter().all(u8::is_ascii_alphanumeric) {
                return Err(format!(
                    "CAA tag {:?} must be 1–255 letters or digits",
                    String::from_utf8_lossy(tag)
                ));
            }
            out.push(tag.len() as u8);
            out.extend_from_slice(tag);
            // RFC 8659 §4.1.1: the value is the rest of the RDATA, no length octet.
            out.extend(text::unescape(f.token("the value")?.text)?);
        }
        types::SVCB | types::HTTPS => out = svcb::encode(f)?,
        other => {
            return Err(format!(
                "{} has no presentation-format reader here; write it in the RFC 3597 generic form (\\# LENGTH HEX)",
                types::name(other)
            ))
        }
    }
    Ok(out)
}

fn parse_str<T: std::str::FromStr>(raw: &[u8], what: &str) -> Result<T, String> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{:?} is not an {what}", String::from_utf8_lossy(raw)))
}

#[cfg(test)]
mod tests {
    use super::super::lexer::Lexer;
    use super::*;

    const ORIGIN: &[u8] = b"\x07example\x00";

    fn rdata(rtype: u16, value: &str) -> Result<Vec<u8>, String> {
        let entry = Lexer::new(value.as_bytes()).next_entry().unwrap().unwrap();
        encode(rtype, &mut Fields::new(&entry.tokens, ORIGIN))
    }

    #[test]
    fn txt_escapes_are_single_octets() {
        assert_eq!(
            rdata(types::TXT, r#""\127\128\200\255""#).unwrap(),
            [4, 127, 128, 200, 255]
        );
        assert_eq!(rdata(types::TXT, r#""\065" b"#).unwrap(), b"\x01A\x01b");
        assert_eq!(rdata(types::TXT, r#""a\"b""#).unwrap(), b"\x03a\"b");
    }

    #[test]
    fn generic_form() {
        assert_eq!(rdata(65280, r"\# 4 0a000001").unwrap(), [10, 0, 0, 1]);
        assert_eq!(rdata(types::A, r"\# 4 c0000263").unwrap(), [192, 0, 2, 99]);
        assert_eq!(rdata(65280, r"\# 0").unwrap(), b"");
        assert_eq!(rdata(65280, r"\# 3 0a 0000").unwrap(), [10, 0, 0]);
        assert!(rdata(types::A, r"\# 3 c00002").is_err());
        assert!(rdata(65280, r"\# 4 0a00").is_err());
        assert_eq!(rdata(types::CNAME, r"\# 5 0358595a00").unwrap(), b"\x03xyz\x00");
        assert_eq!(
            rdata(types::SVCB, r"\# 7 0001015800abcd").unwrap(),
            b"\x00\x01\x01x\x00\xab\xcd"
        );
        assert!(rdata(types::CNAME, r"\# 4 0358595a").is_err());
        assert!(
            rdata(65280, "0a000001").is_err(),
            "an unknown type has only the generic form"
        );
    }

    #[test]
    fn types() {
        assert_eq!(
            rdata(types::DS, "60485 5 1 2BB183AF5F22588179A53B0A 98631FAD1A292118").unwrap(),
            [
                &[0xec, 0x45, 5, 1][..],
                &[0x2b, 0xb1, 0x83, 0xaf, 0x5f, 0x22, 0x58, 0x81, 0x79, 0xa5, 0x3b, 0x0a],
                &[0x98, 0x63, 0x1f, 0xad, 0x1a, 0x29, 0x21, 0x18]
            ]
            .concat()
        );
        assert_eq!(rdata(types::MX, "10 Mail").unwrap(), b"\x00\x0a\x04mail\x07example\x00");
        assert_eq!(
            rdata(types::SOA, "ns hostmaster 1 1h 15m 1w 300").unwrap()[32..],
            [0, 0, 0, 1, 0, 0, 0x0e, 0x10, 0, 0, 3, 0x84, 0, 9, 0x3a, 0x80, 0, 0, 1, 0x2c]
        );
        assert_eq!(
            rdata(types::CAA, r#"0 issue "ca.example; x""#).unwrap(),
            b"\x00\x05issueca.example; x"
        );
        assert_eq!(
            rdata(types::SRV, "1 2 443 svc.other.").unwrap(),
            b"\x00\x01\x00\x02\x01\xbb\x03svc\x05other\x00"
        );
        assert_eq!(
            rdata(types::NAPTR, r#"10 20 "S" "SIP+D2U" "" _sip._udp"#).unwrap(),
            b"\x00\x0a\x00\x14\x01S\x07SIP+D2U\x00\x04_sip\x04_udp\x07example\x00"
        );
        assert!(rdata(types::A, "192.0.2.1 extra").is_err());
        assert!(rdata(types::A, "192.0.2").is_err());
        assert!(rdata(types::NSEC, "a A").unwrap_err().contains("signed"));
        assert!(rdata(29, "52 22 23.000 N").unwrap_err().contains("generic"));
    }
}
