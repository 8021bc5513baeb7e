//! RFC 1035 §5 master files, parsed with hickory-proto's zone file reader.
//!
//! The reader reports no line numbers, so on an error this module finds the first
//! entry that fails by bisecting over entry boundaries (error path only) and names its
//! line. RDATA is re-encoded in wire format with uncompressed names.
use std::collections::HashMap;
use std::path::Path;

use hickory_proto::{
    rr::{DNSClass, Name, RData, RecordType},
    serialize::{
        binary::{BinEncodable, BinEncoder},
        txt::Parser,
    },
};

use crate::{name, ZoneError};

/// Records of one owner and type, as parsed (not yet validated against the zone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedSet {
    /// Owner (wire, lowercase).
    pub name: Vec<u8>,
    /// Type code.
    pub rtype: u16,
    /// Smallest TTL of the set's records (RFC 2181 §5.2 asks for one TTL per set).
    pub ttl: u32,
    /// Wire RDATA per record.
    pub rdata: Vec<Vec<u8>>,
    /// 1-based line of the set's first record, when known.
    pub line: Option<usize>,
}

/// Parses master-file `text` (from `path`, for errors and `$INCLUDE`) under `origin`,
/// with `default_ttl` for records without a TTL and no `$TTL`.
pub fn parse(text: &str, path: &Path, origin: &Name, default_ttl: u32) -> Result<Vec<ParsedSet>, ZoneError> {
    let run = |body: &str| {
        // The reader wants a TTL for every record; `$TTL` first supplies the zone default
        // (a `$TTL` in the file still overrides it from its line on).
        let input = format!("$TTL {default_ttl}\n{body}");
        Parser::new(input, Some(path.to_path_buf()), Some(origin.clone())).parse()
    };
    let (_, sets) = match run(text) {
        Ok(parsed) => parsed,
        Err(err) => {
            let line = first_failing_entry(text, |prefix| run(prefix).is_err());
            return Err(ZoneError::invalid(path, line, None, err.to_string()));
        }
    };
    let mut out = Vec::with_capacity(sets.len());
    let lines = owner_lines(text);
    for (_, set) in sets {
        let mut rdata = Vec::with_capacity(set.records_count());
        let mut ttl = u32::MAX;
        for record in set.records_without_rrsigs() {
            if record.dns_class != DNSClass::IN {
                return Err(ZoneError::invalid(
                    path,
                    None,
                    None,
                    format!("{} {}: only class IN is served", record.name, record.record_type()),
                ));
            }
            ttl = ttl.min(record.ttl);
            rdata.push(
                encode_rdata(&record.data)
                    .map_err(|reason| ZoneError::invalid(path, None, None, format!("{}: {reason}", record.name)))?,
            );
        }
        if rdata.is_empty() {
            continue;
        }
        let owner = name::to_wire(set.name());
        let line = find_owner_line(&lines, set.name(), origin);
        out.push(ParsedSet {
            name: owner,
            rtype: u16::from(set.record_type()),
            ttl,
            rdata,
            line,
        });
    }
    Ok(out)
}

/// Parses the presentation-format `value` of one record of `rtype` owned by `owner`.
/// Relative names in the value are relative to `origin`.
pub fn parse_value(origin: &Name, owner: &Name, rtype: RecordType, value: &str) -> Result<Vec<u8>, String> {
    if value.contains('\n') || value.contains('$') && value.trim_start().starts_with('$') {
        return Err("a value must be one line of RDATA".to_owned());
    }
    // Addresses are most values: parse them directly rather than through a master-file
    // parser per value (same result; measured in benches/benches/snapshot.rs).
    match rtype {
        RecordType::A => {
            return value
                .trim()
                .parse::<std::net::Ipv4Addr>()
                .map(|a| a.octets().to_vec())
                .map_err(|e| e.to_string())
        }
        RecordType::AAAA => {
            return value
                .trim()
                .parse::<std::net::Ipv6Addr>()
                .map(|a| a.octets().to_vec())
                .map_err(|e| e.to_string())
        }
        _ => {}
    }
    let text = format!("{owner} 0 IN {rtype} {value}\n");
    let (_, sets) = Parser::new(text, None, Some(origin.clone()))
        .parse()
        .map_err(|err| err.to_string())?;
    let mut records = sets.into_values().flat_map(|set| {
        set.records_without_rrsigs()
            .map(|record| record.data.clone())
            .collect::<Vec<_>>()
    });
    match (records.next(), records.next()) {
        (Some(rdata), None) if rdata.record_type() == rtype => encode_rdata(&rdata),
        _ => Err(format!("not one {rtype} record")),
    }
}

/// The mnemonic of an RR type code (`A`, `AAAA`, `TYPE65534`).
#[must_use]
pub fn type_name(rtype: u16) -> String {
    RecordType::from(rtype).to_string()
}

/// The type code of a mnemonic (`a`, `AAAA`), if it is a known type.
#[must_use]
pub fn type_code(mnemonic: &str) -> Option<u16> {
    use std::str::FromStr as _;
    RecordType::from_str(&mnemonic.to_ascii_uppercase()).ok().map(u16::from)
}

/// Wire RDATA with uncompressed names.
fn encode_rdata(rdata: &RData) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let mut encoder = BinEncoder::new(&mut buf);
    // Canonical form: no name compression inside RDATA, so the bytes stand alone.
    encoder.set_canonical_form(true);
    rdata.emit(&mut encoder).map_err(|err| err.to_string())?;
    if buf.len() > usize::from(u16::MAX) {
        return Err("RDATA longer than 65535 octets".to_owned());
    }
    Ok(buf)
}

/// 1-based line of the first entry whose inclusion makes `fails` true.
fn first_failing_entry(text: &str, fails: impl Fn(&str) -> bool) -> Option<usize> {
    let ends = entry_ends(text);
    // Smallest k such that the prefix up to the end of entry k fails.
    let (mut lo, mut hi) = (0usize, ends.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let end = ends.get(mid).map_or(text.len(), |&(end, _)| end);
        if fails(text.get(..end).unwrap_or(text)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    ends.get(lo).map(|&(_, line)| line)
}

/// For each entry of a master file: (byte offset just past it, its 1-based first line).
/// Entries end at a newline outside parentheses and quotes (RFC 1035 §5.1).
fn entry_ends(text: &str) -> Vec<(usize, usize)> {
    let mut ends = Vec::new();
    let (mut depth, mut quoted, mut comment, mut escaped) = (0u32, false, false, false);
    let mut line = 1;
    let mut start_line = 1;
    let mut has_content = false;
    for (offset, byte) in text.bytes().enumerate() {
        if byte == b'\n' {
            line += 1;
            comment = false;
            if depth == 0 && !quoted {
                if has_content {
                    ends.push((offset + 1, start_line));
                }
                has_content = false;
                start_line = line;
            }
            continue;
        }
        if comment {
            continue;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' => escaped = true,
            b'"' => quoted = !quoted,
            b';' if !quoted => comment = true,
            b'(' if !quoted => depth += 1,
            b')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
        if !byte.is_ascii_whitespace() && !comment {
            if !has_content {
                start_line = line;
            }
            has_content = true;
        }
    }
    if has_content {
        ends.push((text.len(), start_line));
    }
    ends
}

/// The first line (1-based) of each owner written at the start of a line, keyed by the
/// owner as written, lowercased: built once per file (a scan per record set made large
/// files quadratic: 20,000 records took 8 s to load).
fn owner_lines(text: &str) -> HashMap<String, usize> {
    let mut lines = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.starts_with([' ', '\t']) {
            continue;
        }
        if let Some(first) = raw.split_whitespace().next() {
            lines.entry(first.to_ascii_lowercase()).or_insert(index + 1);
        }
    }
    lines
}

/// Best-effort line of the first entry owned by `owner` (for validation messages).
fn find_owner_line(lines: &HashMap<String, usize>, owner: &Name, origin: &Name) -> Option<usize> {
    let full = owner.to_ascii().to_ascii_lowercase();
    let origin_text = origin.to_ascii().to_ascii_lowercase();
    let relative = full
        .strip_suffix(&origin_text)
        .map(|rel| rel.trim_end_matches('.').to_owned());
    let candidates = [
        lines.get(&full).copied(),
        relative.and_then(|r| lines.get(&r).copied()),
        (owner == origin).then(|| lines.get("@").copied()).flatten(),
    ];
    candidates.into_iter().flatten().min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Name {
        Name::from_ascii("example.com.").unwrap()
    }

    #[test]
    fn parses_records_and_groups_sets() {
        let text = "www 300 IN A 192.0.2.1\nwww IN A 192.0.2.2\nmail IN MX 10 mx.example.com.\n";
        let sets = parse(text, Path::new("z.zone"), &origin(), 60).unwrap();
        let www = sets.iter().find(|s| s.rtype == 1).unwrap();
        assert_eq!(www.name, b"\x03www\x07example\x03com\x00");
        assert_eq!(www.rdata, vec![vec![192, 0, 2, 1], vec![192, 0, 2, 2]]);
        assert_eq!(www.ttl, 60, "the smallest TTL of the set wins");
        let mx = sets.iter().find(|s| s.rtype == 15).unwrap();
        assert_eq!(mx.rdata[0], b"\x00\x0a\x02mx\x07example\x03com\x00");
        assert_eq!(mx.line, Some(3));
    }

    #[test]
    fn error_names_the_failing_line() {
        let text = "a IN A 192.0.2.1\nb IN TXT ( \"x\"\n  \"y\" )\nc IN A 300.1.1.1\nd IN A 192.0.2.4\n";
        let err = parse(text, Path::new("z.zone"), &origin(), 60).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("z.zone:4: "), "{msg}");
    }

    #[test]
    fn value_parsing() {
        let owner = Name::from_ascii("www.example.com.").unwrap();
        assert_eq!(
            parse_value(&origin(), &owner, RecordType::A, "192.0.2.7").unwrap(),
            vec![192, 0, 2, 7]
        );
        assert!(parse_value(&origin(), &owner, RecordType::A, "192.0.2").is_err());
        assert_eq!(
            parse_value(&origin(), &owner, RecordType::TXT, "\"hello world\"").unwrap(),
            b"\x0bhello world"
        );
        assert_eq!(
            parse_value(&origin(), &owner, RecordType::CNAME, "web").unwrap(),
            b"\x03web\x07example\x03com\x00"
        );
    }
}
