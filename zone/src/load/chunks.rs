//! Reading a zone file's `[[rrset]]` and `[[health_check]]` tables one at a time
//! (issue 13: no whole document in memory).
//!
//! `toml::from_str` on a whole zone file builds the document's tree, then the typed
//! tables, and both live until the last record set is compiled: for a zone of 100,000
//! record sets that was most of control's 451 MiB peak. A [`Splitter`], fed the file a
//! line at a time, finds the `[[rrset]]` and `[[health_check]]` tables with a small
//! scanner that knows where TOML strings and multi-line arrays run (so a `[` inside a
//! value is never taken for a header). The rest of the file (`[zone]`, `[zone.soa]`,
//! `[[cidr_collection]]`…) — the head — is parsed as before, from a copy made of its own
//! pieces, with a [`HeadMap`] from each piece back to where it stands in the file so
//! every line number in an error stays right (the copy was the whole file with those
//! tables blanked to spaces: 122 MB for a zone of a million sets). Each cut-out table
//! is then read (`super::source`: from the file again, in order), parsed on its own,
//! used and dropped (a health check compiled as it is read; the document tree of 40,000
//! of them was 92 MB, most of control's peak for a 100,000-set zone). A syntax error in
//! a cut-out table is therefore found when the loader reaches it, after the head's own
//! errors. A file whose record sets or checks use sub-table headers (`[rrset.x]`,
//! `[[rrset.members]]`, `[health_check.x]`, quoted keys), or that writes them as inline
//! arrays at the root (`rrset = [...]`, which the head keeps), is read whole, the old
//! way.

/// A zone file cut into its head and its record-set tables.
pub(crate) struct Split {
    /// The file without its `[[rrset]]` and `[[health_check]]` tables (headers included):
    /// the pieces between them, joined.
    pub(crate) head: String,
    /// Where each piece of `head` stands in the file.
    pub(crate) head_map: HeadMap,
    /// The body of each `[[rrset]]` table (after its header line), in file order.
    pub(crate) rrsets: Vec<Body>,
    /// The body of each `[[health_check]]` table, in file order.
    pub(crate) health_checks: Vec<Body>,
}

/// Where the body of one cut-out table is in the file: 8 octets where a `Range<usize>`
/// took 16 (a million tables; a zone file is at most 2³² octets, and [`split`] takes
/// no larger text).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Body {
    start: u32,
    end: u32,
}

impl Body {
    fn new(start: usize, end: usize) -> Body {
        Body {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// Its first octet's offset in the file.
    pub(crate) fn start(self) -> usize {
        self.start as usize
    }

    /// Its end's offset in the file.
    pub(crate) fn end(self) -> usize {
        self.end as usize
    }

    /// Its text in `text` (the file).
    pub(crate) fn of(self, text: &str) -> &str {
        text.get(self.start as usize..self.end as usize).unwrap_or_default()
    }
}

/// Where the pieces of a [`Split::head`] stand in the file: `(start in the head, start
/// in the file)` of each, in order. Empty: the head is the file itself.
#[derive(Default)]
pub(crate) struct HeadMap(Vec<(usize, usize)>);

impl HeadMap {
    /// No pieces: the head is the file.
    pub(crate) const EMPTY: HeadMap = HeadMap(Vec::new());

    /// The file offset of the head's octet `at`.
    pub(crate) fn original(&self, at: usize) -> usize {
        match self.0.partition_point(|&(head, _)| head <= at).checked_sub(1) {
            Some(piece) => self.0.get(piece).map_or(at, |&(head, file)| file + (at - head)),
            None => at,
        }
    }
}

/// Where a line scan stands inside a value.
#[derive(Default)]
struct Scan {
    /// Inside a `"""` string.
    basic: bool,
    /// Inside a `'''` string.
    literal: bool,
    /// Open `[` of values (multi-line arrays).
    depth: usize,
}

impl Scan {
    /// Whether a line starts outside every value (where a header may stand).
    fn at_top(&self) -> bool {
        !self.basic && !self.literal && self.depth == 0
    }

    /// Moves past `line` (its newline excluded).
    fn line(&mut self, line: &[u8]) {
        let mut i = 0;
        while i < line.len() {
            let rest = &line[i..];
            if self.basic {
                if rest.starts_with(b"\\") {
                    i += 2;
                } else if rest.starts_with(b"\"\"\"") {
                    self.basic = false;
                    i += 3;
                } else {
                    i += 1;
                }
                continue;
            }
            if self.literal {
                if rest.starts_with(b"'''") {
                    self.literal = false;
                    i += 3;
                } else {
                    i += 1;
                }
                continue;
            }
            match rest[0] {
                b'#' => return,
                b'"' if rest.starts_with(b"\"\"\"") => {
                    self.basic = true;
                    i += 3;
                }
                b'\'' if rest.starts_with(b"'''") => {
                    self.literal = true;
                    i += 3;
                }
                b'"' => i += 1 + basic_string_len(&rest[1..]),
                b'\'' => {
                    i += 1 + rest[1..]
                        .iter()
                        .position(|&b| b == b'\'')
                        .map_or(rest.len() - 1, |p| p + 1);
                }
                b'[' => {
                    self.depth += 1;
                    i += 1;
                }
                b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }
}

/// Octets of a one-line basic string after its opening quote, the closing one included.
fn basic_string_len(s: &[u8]) -> usize {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

/// What a header line at the top level names.
enum Header {
    /// `[[rrset]]`.
    Rrset,
    /// `[[health_check]]`.
    HealthCheck,
    /// A table of the head (`[zone]`, `[[cidr_collection]]`, …).
    Other,
    /// A sub-table of a record set, or a key spelled in a way this scanner does not
    /// follow: read the file whole.
    Unsupported,
}

fn header(line: &str) -> Header {
    let code = line.split('#').next().unwrap_or_default().trim();
    let (inner, array) = match code.strip_prefix("[[").and_then(|c| c.strip_suffix("]]")) {
        Some(inner) => (inner, true),
        None => match code.strip_prefix('[').and_then(|c| c.strip_suffix(']')) {
            Some(inner) => (inner, false),
            None => return Header::Unsupported,
        },
    };
    let key: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
    let bare = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if !bare {
        return Header::Unsupported;
    }
    match (key.as_str(), array) {
        ("rrset", true) => Header::Rrset,
        ("health_check", true) => Header::HealthCheck,
        (k, _) if k == "health_check" || k.starts_with("health_check.") => Header::Unsupported,
        (k, _) if k == "rrset" || k.starts_with("rrset.") => Header::Unsupported,
        _ => Header::Other,
    }
}

/// Cuts `text` into its head and its `[[rrset]]` and `[[health_check]]` tables; `None`
/// when it must be read whole (see the module's documentation).
pub(crate) fn split(text: &str) -> Option<Split> {
    let mut splitter = Splitter::default();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if !splitter.line(at, line) {
            return None;
        }
        at += line.len();
    }
    Some(splitter.finish(at))
}

/// [`split`] fed one line at a time (the loader reads a zone file in lines, never
/// whole).
#[derive(Default)]
pub(crate) struct Splitter {
    head: String,
    head_map: Vec<(usize, usize)>,
    /// A piece of the head is being added to (the last line was the head's).
    in_piece: bool,
    rrsets: Vec<Body>,
    health_checks: Vec<Body>,
    scan: Scan,
    /// The open table that is cut out: its kind and where its body starts.
    open: Option<(Header, usize)>,
}

impl Splitter {
    /// Takes the line at offset `start` (its newline included); `false`: the file must
    /// be read whole.
    pub(crate) fn line(&mut self, start: usize, line: &str) -> bool {
        if u32::try_from(start + line.len()).is_err() {
            return false;
        }
        if self.scan.at_top() && line.trim_start().starts_with('[') {
            match header(line) {
                kind @ (Header::Rrset | Header::HealthCheck) => {
                    self.close(start);
                    self.open = Some((kind, start + line.len()));
                    self.in_piece = false;
                    return true;
                }
                Header::Other => self.close(start),
                Header::Unsupported => return false,
            }
        } else {
            self.scan.line(line.trim_end_matches(['\n', '\r']).as_bytes());
        }
        if self.open.is_none() {
            if !self.in_piece {
                self.head_map.push((self.head.len(), start));
                self.in_piece = true;
            }
            self.head.push_str(line);
        }
        true
    }

    fn close(&mut self, end: usize) {
        if let Some((kind, body_at)) = self.open.take() {
            match kind {
                Header::Rrset => self.rrsets.push(Body::new(body_at, end)),
                _ => self.health_checks.push(Body::new(body_at, end)),
            }
        }
    }

    /// The split of a text of `len` octets whose every line was given.
    pub(crate) fn finish(mut self, len: usize) -> Split {
        self.close(len);
        Split {
            head: self.head,
            head_map: HeadMap(self.head_map),
            rrsets: self.rrsets,
            health_checks: self.health_checks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sets_are_cut_out_and_the_head_keeps_every_offset() {
        let text = "[zone]\norigin = \"x.\" # [[rrset]] in a comment\n\n[[rrset]]\nname = \"a\"\nvalues = [\n  \"[[rrset]]\",\n  '''\n[zone]\n''',\n]\n\n[[health_check]]\nid = \"h\"\n[[ rrset ]] # spaced\nname = \"b\"\n";
        let split = split(text).expect("supported");
        for (at, octet) in split.head.bytes().enumerate() {
            assert_eq!(text.as_bytes()[split.head_map.original(at)], octet, "head octet {at}");
        }
        assert_eq!(split.head, "[zone]\norigin = \"x.\" # [[rrset]] in a comment\n\n");
        assert_eq!(split.rrsets.len(), 2, "strings and comments hold no headers");
        assert!(split.rrsets[0].of(text).starts_with("name = \"a\""));
        assert!(split.rrsets[0].of(text).ends_with("]\n\n"));
        assert_eq!(split.rrsets[1].of(text), "name = \"b\"\n");
        assert_eq!(split.health_checks.len(), 1, "health checks are cut out too");
        assert_eq!(split.health_checks[0].of(text), "id = \"h\"\n");
        assert!(!split.head.contains("health_check"), "{}", split.head);
        assert!(split.head.contains("origin = \"x.\""));
        assert!(!split.head.contains("name ="), "{}", split.head);
    }

    #[test]
    fn a_head_table_after_the_cut_tables_maps_to_its_place_in_the_file() {
        let text =
            "[zone]\norigin = \"x.\"\n[[rrset]]\nname = \"a\"\n[zone.soa]\nserial = 1\n[[rrset]]\nname = \"b\"\n";
        let split = split(text).expect("supported");
        assert_eq!(split.head, "[zone]\norigin = \"x.\"\n[zone.soa]\nserial = 1\n");
        let serial = split.head.find("serial").expect("kept");
        assert_eq!(split.head_map.original(serial), text.find("serial").expect("there"));
        assert_eq!(split.head_map.original(0), 0);
        assert_eq!(HeadMap::default().original(7), 7, "no map: the head is the file");
    }

    #[test]
    fn sub_tables_of_record_sets_are_read_whole() {
        for text in [
            "[[rrset]]\nname = \"a\"\n[[rrset.members]]\nid = \"m\"\n",
            "[[rrset]]\nname = \"a\"\n[rrset.extra]\nx = 1\n",
            "[[\"rrset\"]]\nname = \"a\"\n",
            "[[health_check]]\nid = \"h\"\n[health_check.extra]\nx = 1\n",
        ] {
            assert!(split(text).is_none(), "{text}");
        }
    }

    #[test]
    fn escaped_quotes_and_nested_arrays_do_not_confuse_the_scan() {
        let text = "[[rrset]]\nname = \"a\\\"[\"\nvalues = [[\n\"x\"],\n[\"y\"]]\n[[rrset]]\nname = \"b\"\n";
        let split = split(text).expect("supported");
        assert_eq!(split.rrsets.len(), 2);
    }
}
