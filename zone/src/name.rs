//! Domain names in the snapshot: absolute, lowercase, uncompressed wire format.
//!
//! RFC 1035 §3.1 (labels ≤ 63 octets, names ≤ 255 octets) and §2.3.1 (presentation).
use std::fmt::Write as _;

use hickory_proto::rr::Name;

/// Wire form of `name`, lowercased, uncompressed, ending with the root label.
#[must_use]
pub fn to_wire(name: &Name) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 1);
    for label in name {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
    out
}

/// Presentation form of a wire name, e.g. `www.example.com.`: for messages and logs,
/// and valid in a master file (every octet the reader would misread is escaped).
#[must_use]
pub fn to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        let label = wire.get(pos + 1..pos + 1 + usize::from(len)).unwrap_or_default();
        for &byte in label {
            match byte {
                b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => {
                    out.push('\\');
                    out.push(char::from(byte));
                }
                0x21..=0x7e => out.push(char::from(byte)),
                _ => {
                    let _ = write!(out, "\\{byte:03}");
                }
            }
        }
        out.push('.');
        pos += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// True when wire name `name` equals `apex` or lies below it.
#[must_use]
pub fn is_at_or_below(name: &[u8], apex: &[u8]) -> bool {
    let mut pos = 0;
    while pos < name.len() {
        if name.get(pos..) == Some(apex) {
            return true;
        }
        let Some(&len) = name.get(pos) else {
            return false;
        };
        if len == 0 {
            return false;
        }
        pos += 1 + usize::from(len);
    }
    false
}

/// The parent of a wire name (drops the first label); `None` for the root.
#[must_use]
pub fn parent(name: &[u8]) -> Option<&[u8]> {
    let len = usize::from(*name.first()?);
    if len == 0 {
        return None;
    }
    name.get(1 + len..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_lowercases() {
        let name = Name::from_ascii("WwW.Example.COM.").unwrap();
        let wire = to_wire(&name);
        assert_eq!(wire, b"\x03www\x07example\x03com\x00");
        assert_eq!(to_text(&wire), "www.example.com.");
        assert_eq!(to_text(b"\x00"), ".");
    }

    #[test]
    fn below_and_parent() {
        let apex = b"\x07example\x03com\x00";
        assert!(is_at_or_below(b"\x03www\x07example\x03com\x00", apex));
        assert!(is_at_or_below(apex, apex));
        assert!(!is_at_or_below(b"\x03www\x08example2\x03com\x00", apex));
        assert!(!is_at_or_below(b"\x03com\x00", apex));
        assert_eq!(parent(b"\x03www\x07example\x03com\x00"), Some(&apex[..]));
        assert_eq!(parent(b"\x00"), None);
    }
}
