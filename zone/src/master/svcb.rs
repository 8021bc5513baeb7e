//! SVCB and HTTPS RDATA from presentation format (RFC 9460 §2.1, appendix A).
use super::{rdata::Fields, text};

const MANDATORY: u16 = 0;
const ALPN: u16 = 1;
const NO_DEFAULT_ALPN: u16 = 2;
const PORT: u16 = 3;
const IPV4HINT: u16 = 4;
const ECH: u16 = 5;
const IPV6HINT: u16 = 6;

const KEYS: &[(u16, &str)] = &[
    (MANDATORY, "mandatory"),
    (ALPN, "alpn"),
    (NO_DEFAULT_ALPN, "no-default-alpn"),
    (PORT, "port"),
    (IPV4HINT, "ipv4hint"),
    (ECH, "ech"),
    (IPV6HINT, "ipv6hint"),
];

/// `SvcPriority TargetName SvcParams…`, params sorted by key in the wire form.
pub(super) fn encode(f: &mut Fields<'_, '_>) -> Result<Vec<u8>, String> {
    let priority: u16 = text::number(f.token("the priority")?.text, "the priority")?;
    let target = f.token("the target name")?;
    let mut out = priority.to_be_bytes().to_vec();
    out.extend(text::name(target.text, f.origin)?);
    let mut params: Vec<(u16, Vec<u8>)> = Vec::new();
    let tokens = f.rest();
    let mut i = 0;
    while let Some(token) = tokens.get(i) {
        i += 1;
        // `key=value`, `key="value"` (the lexer splits the quoted part off), or `key`.
        let (key_text, mut value) = match token.text.iter().position(|&b| b == b'=') {
            Some(eq) => (&token.text[..eq], Some(token.text[eq + 1..].to_vec())),
            None => (token.text, None),
        };
        if value.as_deref() == Some(b"") {
            if let Some(next) = tokens.get(i).filter(|t| t.quoted) {
                value = Some(next.text.to_vec());
                i += 1;
            }
        }
        let key = key_code(key_text)?;
        if params.iter().any(|(k, _)| *k == key) {
            return Err(format!("SvcParam {} appears twice", key_label(key)));
        }
        params.push((key, param_value(key, value.as_deref())?));
    }
    if priority == 0 && !params.is_empty() {
        return Err("an AliasMode record (priority 0) has no SvcParams".to_owned());
    }
    // RFC 9460 §8: every key `mandatory` lists is present; §7.1.1: no-default-alpn
    // only beside alpn.
    if let Some((_, listed)) = params.iter().find(|(k, _)| *k == MANDATORY) {
        for key in listed.chunks(2).map(|k| u16::from_be_bytes([k[0], k[1]])) {
            if !params.iter().any(|(k, _)| *k == key) {
                return Err(format!("mandatory lists {}, which is not there", key_label(key)));
            }
        }
    }
    let has = |key: u16| params.iter().any(|(k, _)| *k == key);
    if has(NO_DEFAULT_ALPN) && !has(ALPN) {
        return Err("no-default-alpn needs alpn".to_owned());
    }
    params.sort_by_key(|(k, _)| *k);
    for (key, value) in params {
        out.extend_from_slice(&key.to_be_bytes());
        let len = u16::try_from(value.len()).map_err(|_| "a SvcParam value is too long".to_owned())?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend(value);
    }
    Ok(out)
}

fn key_code(text: &[u8]) -> Result<u16, String> {
    let shown = String::from_utf8_lossy(text);
    if let Some((code, _)) = KEYS.iter().find(|(_, n)| n.as_bytes() == text) {
        return Ok(*code);
    }
    text.strip_prefix(b"key")
        .and_then(|digits| text::number::<u16>(digits, "key").ok())
        .filter(|&code| code != 65535)
        .ok_or_else(|| format!("unknown SvcParam key {shown:?}"))
}

fn key_label(key: u16) -> String {
    KEYS.iter()
        .find(|(c, _)| *c == key)
        .map_or_else(|| format!("key{key}"), |(_, n)| (*n).to_owned())
}

/// Items of a comma-separated value list: the value is decoded as a character-string
/// first, then `\,` is a comma and `\\` a backslash inside an item (appendix A.1).
fn value_list(raw: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let decoded = text::unescape(raw)?;
    let mut items = vec![Vec::new()];
    let mut bytes = decoded.iter();
    while let Some(&byte) = bytes.next() {
        let literal = match byte {
            b',' => {
                items.push(Vec::new());
                continue;
            }
            b'\\' => *bytes.next().ok_or("'\\' at the end of a value")?,
            other => other,
        };
        if let Some(item) = items.last_mut() {
            item.push(literal);
        }
    }
    if items.iter().any(Vec::is_empty) {
        return Err("empty item in a value list".to_owned());
    }
    Ok(items)
}

fn param_value(key: u16, value: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let need = || value.ok_or_else(|| format!("SvcParam {} needs a value", key_label(key)));
    let mut out = Vec::new();
    match key {
        NO_DEFAULT_ALPN => {
            if value.is_some() {
                return Err("no-default-alpn takes no value".to_owned());
            }
        }
        MANDATORY => {
            let mut keys = Vec::new();
            for item in value_list(need()?)? {
                let key = key_code(&item)?;
                // RFC 9460 §8: not itself, and no key twice.
                if key == MANDATORY || keys.contains(&key) {
                    return Err(format!("mandatory lists {} twice or itself", key_label(key)));
                }
                keys.push(key);
            }
            keys.sort_unstable();
            for k in keys {
                out.extend_from_slice(&k.to_be_bytes());
            }
        }
        ALPN => {
            for item in value_list(need()?)? {
                let len = u8::try_from(item.len()).map_err(|_| "an ALPN id is longer than 255 octets".to_owned())?;
                out.push(len);
                out.extend(item);
            }
        }
        PORT => out.extend_from_slice(&text::number::<u16>(need()?, "port")?.to_be_bytes()),
        IPV4HINT => {
            for item in value_list(need()?)? {
                let addr: std::net::Ipv4Addr = std::str::from_utf8(&item)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("ipv4hint holds a bad IPv4 address")?;
                out.extend_from_slice(&addr.octets());
            }
        }
        IPV6HINT => {
            for item in value_list(need()?)? {
                let addr: std::net::Ipv6Addr = std::str::from_utf8(&item)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("ipv6hint holds a bad IPv6 address")?;
                out.extend_from_slice(&addr.octets());
            }
        }
        ECH => out = text::base64(need()?)?,
        _ => {
            if let Some(raw) = value {
                out = text::unescape(raw)?;
            }
        }
    }
    Ok(out)
}

/// The `SvcParams` of wire RDATA (after the target name) in presentation form, each
/// with a leading blank; `None` when they are not well-formed (the caller then writes
/// the generic form).
pub(super) fn params_text(mut wire: &[u8]) -> Option<String> {
    use base64::Engine as _;
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut last: Option<u16> = None;
    while !wire.is_empty() {
        let key = u16::from_be_bytes([*wire.first()?, *wire.get(1)?]);
        let len = usize::from(u16::from_be_bytes([*wire.get(2)?, *wire.get(3)?]));
        let value = wire.get(4..4 + len)?;
        wire = wire.get(4 + len..)?;
        if last.is_some_and(|l| l >= key) {
            return None;
        }
        last = Some(key);
        let label = key_label(key);
        match key {
            NO_DEFAULT_ALPN if value.is_empty() => {
                let _ = write!(out, " {label}");
            }
            MANDATORY => {
                if value.is_empty() || value.len() % 2 != 0 {
                    return None;
                }
                let keys: Vec<String> = value
                    .chunks(2)
                    .map(|k| key_label(u16::from_be_bytes([k[0], k[1]])))
                    .collect();
                let _ = write!(out, " {label}={}", keys.join(","));
            }
            ALPN => {
                let mut items = Vec::new();
                let mut rest = value;
                while let Some((&n, tail)) = rest.split_first() {
                    let item = tail.get(..usize::from(n))?;
                    rest = tail.get(usize::from(n)..)?;
                    let mut escaped = Vec::new();
                    for &b in item {
                        if b == b',' || b == b'\\' {
                            escaped.push(b'\\');
                        }
                        escaped.push(b);
                    }
                    items.push(escaped);
                }
                if items.is_empty() || items.iter().any(Vec::is_empty) {
                    return None;
                }
                let _ = write!(out, " {label}={}", super::present::quoted(&items.join(&b',')));
            }
            PORT if value.len() == 2 => {
                let _ = write!(out, " {label}={}", u16::from_be_bytes([value[0], value[1]]));
            }
            IPV4HINT if !value.is_empty() && value.len() % 4 == 0 => {
                let addrs: Vec<String> = value
                    .chunks(4)
                    .map(|a| std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string())
                    .collect();
                let _ = write!(out, " {label}={}", addrs.join(","));
            }
            IPV6HINT if !value.is_empty() && value.len() % 16 == 0 => {
                let addrs: Vec<String> = value
                    .chunks(16)
                    .map(|a| std::net::Ipv6Addr::from(<[u8; 16]>::try_from(a).unwrap_or_default()).to_string())
                    .collect();
                let _ = write!(out, " {label}={}", addrs.join(","));
            }
            ECH if !value.is_empty() => {
                let _ = write!(
                    out,
                    " {label}={}",
                    base64::engine::general_purpose::STANDARD.encode(value)
                );
            }
            NO_DEFAULT_ALPN | PORT | IPV4HINT | IPV6HINT | ECH => return None,
            _ if value.is_empty() => {
                let _ = write!(out, " {label}");
            }
            _ => {
                let _ = write!(out, " {label}={}", super::present::quoted(value));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::{lexer::Lexer, rdata, types};
    use super::*;

    fn svcb(value: &str) -> Result<Vec<u8>, String> {
        let entry = Lexer::new(value.as_bytes()).next_entry().unwrap().unwrap();
        rdata::encode(types::SVCB, &mut Fields::new(&entry.tokens, b"\x07example\x00"))
    }

    #[test]
    fn rfc9460_appendix_d_vectors() {
        // D.1: AliasMode.
        assert_eq!(
            svcb("0 foo.example.com.").unwrap(),
            b"\x00\x00\x03foo\x07example\x03com\x00"
        );
        // D.2: port, then a generic key, then sorted keys with a value list.
        assert_eq!(
            svcb("16 foo.example.com. port=53").unwrap(),
            b"\x00\x10\x03foo\x07example\x03com\x00\x00\x03\x00\x02\x00\x35"
        );
        assert_eq!(
            svcb(r#"1 foo.example.com. key667="hello\210qoo""#).unwrap(),
            b"\x00\x01\x03foo\x07example\x03com\x00\x02\x9b\x00\x09hello\xd2qoo"
        );
        assert_eq!(
            svcb("16 foo.example.org. alpn=h2,h3-19 mandatory=ipv4hint,alpn ipv4hint=192.0.2.1").unwrap(),
            [
                &b"\x00\x10\x03foo\x07example\x03org\x00"[..],
                b"\x00\x00\x00\x04\x00\x01\x00\x04",
                b"\x00\x01\x00\x09\x02h2\x05h3-19",
                b"\x00\x04\x00\x04\xc0\x00\x02\x01",
            ]
            .concat()
        );
        assert_eq!(
            svcb(r#"16 foo.example.org. alpn="f\\\\oo\\,bar,h2""#).unwrap()[19..],
            *b"\x00\x01\x00\x0c\x08f\\oo,bar\x02h2"
        );
        assert!(svcb("0 foo. port=53").is_err());
        assert!(svcb("1 foo. port=53 port=54").is_err());
        assert!(svcb("1 foo. bogus=1").is_err());
        // RFC 9460 appendix D.3 failure cases.
        assert!(svcb("1 foo. mandatory=mandatory").is_err());
        assert!(svcb("1 foo. mandatory=key123").is_err());
        assert!(svcb("1 foo. alpn=h2 mandatory=alpn,alpn").is_err());
        assert!(svcb("1 foo. no-default-alpn").is_err());
        assert!(svcb("1 foo. alpn=h2 no-default-alpn mandatory=alpn").is_ok());
    }
}
