//! Decoding presentation-format fields: names, character strings, numbers, TTLs,
//! hex and base64 (RFC 1035 §5.1, RFC 3597 §5, RFC 4648).
use base64::Engine as _;

/// Longest wire name (RFC 1035 §3.1).
pub(super) const NAME_MAX: usize = 255;
/// Longest label.
const LABEL_MAX: usize = 63;

/// `raw` with `\X` and `\DDD` decoded: each escape is one octet (RFC 1035 §5.1).
pub(super) fn unescape(raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&byte) = raw.get(i) {
        if byte != b'\\' {
            out.push(byte);
            i += 1;
            continue;
        }
        let (octet, used) = escape_at(raw, i)?;
        out.push(octet);
        i += used;
    }
    Ok(out)
}

/// The octet of the escape starting at `raw[at]` (a `\`) and its length.
fn escape_at(raw: &[u8], at: usize) -> Result<(u8, usize), String> {
    let digits = raw.get(at + 1..at + 4).filter(|d| d.iter().all(u8::is_ascii_digit));
    if let Some(d) = digits {
        let value = d.iter().fold(0u32, |v, &c| v * 10 + u32::from(c - b'0'));
        return u8::try_from(value)
            .map(|octet| (octet, 4))
            .map_err(|_| format!("\\{} is not an octet (0–255)", String::from_utf8_lossy(d)));
    }
    match raw.get(at + 1) {
        Some(c) if c.is_ascii_digit() => Err("\\ followed by a digit needs three digits (\\DDD)".to_owned()),
        Some(&c) => Ok((c, 2)),
        None => Err("'\\' at the end of a field".to_owned()),
    }
}

/// A domain name, lowercased wire form: `@` is `origin`, a name without a final
/// (unescaped) dot is relative to it. Escaped octets are allowed in labels (RFC 2181 §11).
pub(super) fn name(raw: &[u8], origin: &[u8]) -> Result<Vec<u8>, String> {
    if raw == b"@" {
        return Ok(origin.to_vec());
    }
    if raw.is_empty() {
        return Err("empty name".to_owned());
    }
    let shown = || String::from_utf8_lossy(raw).into_owned();
    let mut wire = Vec::with_capacity(raw.len() + origin.len() + 1);
    if raw == b"." {
        wire.push(0);
        return Ok(wire);
    }
    let mut label: Vec<u8> = Vec::with_capacity(LABEL_MAX);
    let mut absolute = false;
    let mut i = 0;
    while let Some(&byte) = raw.get(i) {
        match byte {
            b'.' => {
                push_label(&mut wire, &label).map_err(|e| format!("{}: {e}", shown()))?;
                label.clear();
                i += 1;
                if i == raw.len() {
                    absolute = true;
                }
            }
            b'\\' => {
                let (octet, used) = escape_at(raw, i).map_err(|e| format!("{}: {e}", shown()))?;
                label.push(octet);
                i += used;
            }
            _ => {
                label.push(byte);
                i += 1;
            }
        }
    }
    if absolute {
        wire.push(0);
    } else {
        push_label(&mut wire, &label).map_err(|e| format!("{}: {e}", shown()))?;
        wire.extend_from_slice(origin);
    }
    if wire.len() > NAME_MAX {
        return Err(format!("{} is longer than {NAME_MAX} octets in wire form", shown()));
    }
    Ok(wire)
}

fn push_label(wire: &mut Vec<u8>, label: &[u8]) -> Result<(), String> {
    if label.is_empty() {
        return Err("empty label".to_owned());
    }
    if label.len() > LABEL_MAX {
        return Err(format!("a label is {} octets; at most {LABEL_MAX}", label.len()));
    }
    wire.push(label.len() as u8);
    wire.extend(label.iter().map(u8::to_ascii_lowercase));
    Ok(())
}

/// A `<character-string>`: length octet then the decoded octets (≤ 255).
pub(super) fn character_string(raw: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let bytes = unescape(raw)?;
    let len = u8::try_from(bytes.len()).map_err(|_| {
        format!(
            "a character-string is {} octets; at most 255 (split it into several strings)",
            bytes.len()
        )
    })?;
    out.push(len);
    out.extend_from_slice(&bytes);
    Ok(())
}

/// An unsigned decimal that fits `T`.
pub(super) fn number<T: TryFrom<u64>>(raw: &[u8], what: &str) -> Result<T, String> {
    let shown = String::from_utf8_lossy(raw);
    if raw.is_empty() || raw.len() > 20 || !raw.iter().all(u8::is_ascii_digit) {
        return Err(format!("{what} {shown:?} is not an unsigned number"));
    }
    let value = raw
        .iter()
        .try_fold(0u64, |v, &c| v.checked_mul(10)?.checked_add(u64::from(c - b'0')));
    value
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| format!("{what} {shown} is out of range"))
}

/// A TTL: seconds, or BIND's units (`1h30m`, `2w`; case-insensitive), ≤ 2^32 − 1.
pub(super) fn ttl(raw: &[u8]) -> Result<u32, String> {
    let shown = || String::from_utf8_lossy(raw).into_owned();
    if raw.iter().all(u8::is_ascii_digit) {
        return number::<u32>(raw, "TTL");
    }
    let mut total = 0u64;
    let mut value: Option<u64> = None;
    for &c in raw {
        if c.is_ascii_digit() {
            let v = value
                .unwrap_or(0)
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')));
            value = Some(v.ok_or_else(|| format!("TTL {} is out of range", shown()))?);
            continue;
        }
        let unit = match c.to_ascii_lowercase() {
            b's' => 1,
            b'm' => 60,
            b'h' => 3600,
            b'd' => 86_400,
            b'w' => 604_800,
            _ => return Err(format!("TTL {:?}: not a number or a duration like 1h30m", shown())),
        };
        let v = value
            .take()
            .ok_or_else(|| format!("TTL {:?}: a unit needs a number before it", shown()))?;
        total = total.saturating_add(v.saturating_mul(unit));
    }
    if value.is_some() || raw.is_empty() {
        return Err(format!("TTL {:?}: every number needs a unit", shown()));
    }
    u32::try_from(total).map_err(|_| format!("TTL {} is out of range", shown()))
}

/// Hex digits (whitespace between tokens already removed), as octets.
pub(super) fn hex(digits: &[u8]) -> Result<Vec<u8>, String> {
    if !digits.len().is_multiple_of(2) {
        return Err("an odd number of hex digits".to_owned());
    }
    digits
        .chunks(2)
        .map(|pair| {
            let nibble = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
            match (nibble(pair[0]), nibble(pair[1])) {
                (Some(hi), Some(lo)) => Ok(hi << 4 | lo),
                _ => Err(format!("{:?} is not hex", String::from_utf8_lossy(pair))),
            }
        })
        .collect()
}

/// Base64 (RFC 4648 §4, padding required), as octets.
pub(super) fn base64(text: &[u8]) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("bad base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &[u8] = b"\x07example\x00";

    #[test]
    fn escapes_are_octets() {
        assert_eq!(unescape(br"\127\128\200\255").unwrap(), [127, 128, 200, 255]);
        assert_eq!(unescape(br"\065\.\\x").unwrap(), b"A.\\x");
        assert!(unescape(br"\256").is_err());
        assert!(unescape(br"\12").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(name(b"www", ORIGIN).unwrap(), b"\x03www\x07example\x00");
        assert_eq!(name(b"WWW.Other.", ORIGIN).unwrap(), b"\x03www\x05other\x00");
        assert_eq!(name(b"@", ORIGIN).unwrap(), ORIGIN);
        assert_eq!(name(b".", ORIGIN).unwrap(), b"\x00");
        assert_eq!(name(br"sp\032ace", ORIGIN).unwrap(), b"\x06sp ace\x07example\x00");
        assert_eq!(name(br"a\.b.c.", ORIGIN).unwrap(), b"\x03a.b\x01c\x00");
        assert!(name(b"a..b", ORIGIN).is_err());
        assert!(name(&[b'x'; 64], ORIGIN).is_err());
        // Three 63-octet labels and one of `last` octets: 193 + 1 + last + 1 in wire form.
        let of = |last: usize| format!("{0}.{0}.{0}.{1}.", "a".repeat(63), "a".repeat(last));
        assert_eq!(name(of(61).as_bytes(), ORIGIN).unwrap().len(), 255);
        assert!(name(of(62).as_bytes(), ORIGIN).is_err());
    }

    #[test]
    fn ttls() {
        assert_eq!(ttl(b"300").unwrap(), 300);
        assert_eq!(ttl(b"1h30m").unwrap(), 5400);
        assert_eq!(ttl(b"1W2D").unwrap(), 777_600);
        assert!(ttl(b"1h30").is_err());
        assert!(ttl(b"h").is_err());
        assert!(ttl(b"4294967296").is_err());
    }

    #[test]
    fn hex_and_strings() {
        assert_eq!(hex(b"0a000001").unwrap(), [10, 0, 0, 1]);
        assert!(hex(b"0a0").is_err());
        let mut out = Vec::new();
        character_string(br"a\032b", &mut out).unwrap();
        assert_eq!(out, b"\x03a b");
        assert!(character_string(&[b'x'; 256], &mut Vec::new()).is_err());
    }
}
