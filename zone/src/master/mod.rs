//! RFC 1035 §5 master files: `$ORIGIN`, `$TTL`, `$INCLUDE`, owners carried over from
//! the previous entry, TTL and class in either order, every type's presentation form we
//! serve and the RFC 3597 generic form for any type. Errors name the file and line.
//!
//! Modules: `lexer` (entries and raw tokens), `text` (field decoders), `rdata` (per
//! type), `svcb` (`SvcParams`), `types` (mnemonics and the types a zone may not hold),
//! `present` (the way back: `qdnsctl dump`).
mod lexer;
pub mod present;
mod rdata;
mod svcb;
mod text;
mod types;

use std::collections::HashMap;

/// The index of sets read so far: zone files are the operator's, not the network's, and
/// a keyed hash costs a sixth of a large load (`SipHash`, measured); foldhash is seeded
/// per process all the same.
type Index = HashMap<(Vec<u8>, u16), usize, foldhash::fast::RandomState>;
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use hickory_proto::rr::{Name, RecordType};

use crate::{name, ZoneError};
use lexer::{Cut, Entry, Lexer, Token};
pub use present::{name_text, rdata_text, zone_text};

/// Deepest `$INCLUDE` nesting followed (a loop of includes ends here with an error).
const MAX_INCLUDE_DEPTH: usize = 16;
/// The octets of a master file read at a time ([`parse_file_each`]).
const PIECE: usize = 1 << 20;
/// Longest entry (a record with its parentheses' lines) of a file read in pieces.
const MAX_ENTRY: usize = 16 << 20;

/// Records of one owner and type, as parsed (not yet validated against the zone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedSet {
    /// Owner (wire, lowercase).
    pub name: Vec<u8>,
    /// Type code.
    pub rtype: u16,
    /// Smallest TTL of the set's records (RFC 2181 §5.2 asks for one TTL per set).
    pub ttl: u32,
    /// Wire RDATA per record, duplicates dropped (RFC 2181 §5).
    pub rdata: Vec<Vec<u8>>,
    /// The file of the set's first record (`$INCLUDE` may name another), shared by
    /// every set read from it (a million sets, one path).
    pub path: Arc<Path>,
    /// 1-based line of the set's first record.
    pub line: Option<usize>,
}

/// Largest zone or master file read (a 10-million-record zone is about 500 MB).
pub const MAX_FILE: u64 = 4 << 30;

/// Opens a zone or master file to read: a regular file of at most [`MAX_FILE`] octets
/// (see [`read_bounded`]), with its metadata.
pub(crate) fn open_bounded(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > MAX_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} octets, over the {MAX_FILE}-octet limit", meta.len()),
        ));
    }
    Ok((file, meta))
}

/// Reads a zone or master file: a regular file of at most [`MAX_FILE`] octets (not a
/// device, FIFO or directory a mistaken path or `$INCLUDE` could name, which would
/// block or never end).
pub fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, meta) = open_bounded(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("over the {MAX_FILE}-octet limit"),
        ));
    }
    Ok(bytes)
}

/// Parses master-file `text` (from `path`, for errors and `$INCLUDE`) under `origin`,
/// with `default_ttl` for records without a TTL and no `$TTL` before them; the records
/// grouped into sets, in order of first appearance.
pub fn parse(text: &[u8], path: &Path, origin: &Name, default_ttl: u32) -> Result<Vec<ParsedSet>, ZoneError> {
    let mut sets = Sets::default();
    parse_each(text, path, origin, default_ttl, &mut |record| {
        sets.add(record);
        Ok(())
    })?;
    Ok(sets.sets)
}

/// One record as read, handed on by [`parse_each`].
pub struct ParsedRecord<'a> {
    /// Owner (wire, lowercase).
    pub name: Vec<u8>,
    /// Type code.
    pub rtype: u16,
    /// TTL.
    pub ttl: u32,
    /// Wire RDATA, names uncompressed.
    pub rdata: Vec<u8>,
    /// The file it was read from, shared by its records.
    pub path: &'a Arc<Path>,
    /// 1-based line of the record.
    pub line: usize,
}

/// Like [`parse`], but each record goes to `each` as soon as it is read, so a large
/// file is never held as a list of parsed sets (the zone loader merges them into its
/// own). An `Err(reason)` from `each` stops the read with that reason at the record's
/// file and line.
pub fn parse_each(
    text: &[u8],
    path: &Path,
    origin: &Name,
    default_ttl: u32,
    each: &mut dyn FnMut(ParsedRecord<'_>) -> Result<(), String>,
) -> Result<(), ZoneError> {
    let mut reader = Reader::new(each);
    let mut state = FileState::new(origin, default_ttl);
    reader.entries(text, 1, true, path, &mut state, 0).map(|_| ())
}

/// Like [`parse_each`], but reads the file at `path` itself, in pieces (a large file is
/// never held whole); the same errors, and "cannot read" at no line when the file
/// cannot be opened or read.
pub fn parse_file_each(
    path: &Path,
    origin: &Name,
    default_ttl: u32,
    each: &mut dyn FnMut(ParsedRecord<'_>) -> Result<(), String>,
) -> Result<(), ZoneError> {
    let mut reader = Reader::new(each);
    let mut state = FileState::new(origin, default_ttl);
    reader.file(path, &mut state, 0).map_err(|err| err.in_file(path))
}

/// The newlines of the file at `path`, read in pieces: about the records it holds, for
/// room made up front.
pub fn count_lines(path: &Path) -> std::io::Result<usize> {
    use std::io::Read;
    let (file, _) = open_bounded(path)?;
    let mut file = file.take(MAX_FILE);
    let mut buf = vec![0; PIECE];
    let mut lines = 0;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(lines),
            Ok(n) => lines += memchr::memchr_iter(b'\n', buf.get(..n).unwrap_or_default()).count(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Records grouped into sets by (owner, type), in order of first appearance: the
/// smallest TTL of a set's records (RFC 2181 §5.2 asks for one), duplicates dropped
/// (RFC 2181 §5).
#[derive(Default)]
struct Sets {
    sets: Vec<ParsedSet>,
    index: Index,
}

impl Sets {
    fn add(&mut self, record: ParsedRecord<'_>) {
        let key = (record.name, record.rtype);
        if let Some(&i) = self.index.get(&key) {
            if let Some(set) = self.sets.get_mut(i) {
                set.ttl = set.ttl.min(record.ttl);
                if !set.rdata.contains(&record.rdata) {
                    set.rdata.push(record.rdata);
                }
            }
            return;
        }
        self.index.insert(key.clone(), self.sets.len());
        self.sets.push(ParsedSet {
            name: key.0,
            rtype: record.rtype,
            ttl: record.ttl,
            rdata: vec![record.rdata],
            path: Arc::clone(record.path),
            line: Some(record.line),
        });
    }
}

/// Parses the presentation-format `value` of one record of `rtype` owned by `owner`.
/// Relative names in the value are relative to `origin`.
pub fn parse_value(origin: &Name, owner: &Name, rtype: RecordType, value: &str) -> Result<Vec<u8>, String> {
    let _ = owner;
    // Addresses are most values: parse them directly (measured in benches/benches/snapshot.rs).
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
    let mut lexer = Lexer::new(value.as_bytes());
    let entry = lexer
        .next_entry()
        .map_err(|(_, reason)| reason)?
        .ok_or_else(|| "empty value".to_owned())?;
    if lexer.next_entry().map_err(|(_, reason)| reason)?.is_some() {
        return Err("a value must be one line of RDATA".to_owned());
    }
    let origin = name::to_wire(origin);
    rdata::encode(u16::from(rtype), &mut rdata::Fields::new(&entry.tokens, &origin))
}

/// A name in presentation form (`@`, relative to `origin`, or absolute; RFC 1035 §5.1
/// escapes, `\DDD` decimal), lowercased.
pub fn parse_name(raw: &str, origin: &Name) -> Result<Name, String> {
    let wire = text::name(raw.as_bytes(), &name::to_wire(origin))?;
    let mut labels = Vec::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        labels.push(wire.get(pos + 1..pos + 1 + usize::from(len)).unwrap_or_default());
        pos += 1 + usize::from(len);
    }
    let mut parsed = Name::from_labels(labels).map_err(|e| e.to_string())?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// [`parse_name`] into lowercase wire form, relative names under `origin` (wire).
pub fn parse_name_wire(raw: &str, origin: &[u8]) -> Result<Vec<u8>, String> {
    text::name(raw.as_bytes(), origin)
}

/// A record set's name for people: `www.shop.example. A`.
#[must_use]
pub fn set_label(set: &crate::RecordSet) -> String {
    format!("{} {}", crate::name::to_text(&set.name), type_name(set.rtype))
}

/// The mnemonic of an RR type code (`A`, `AAAA`, `TYPE65534`).
#[must_use]
pub fn type_name(rtype: u16) -> String {
    types::name(rtype)
}

/// The type code of a mnemonic (`a`, `AAAA`) or of `TYPEnnn` (RFC 3597 §5).
#[must_use]
pub fn type_code(mnemonic: &str) -> Option<u16> {
    types::code(mnemonic)
}

/// Why `rtype` cannot be zone data here, if it cannot (DNSSEC, meta and question types).
pub fn refused_type(rtype: u16) -> Result<(), String> {
    types::refuse(rtype)
}

/// Reads files, handing each record on.
struct Reader<'e> {
    each: &'e mut dyn FnMut(ParsedRecord<'_>) -> Result<(), String>,
    /// The path of the file being read, shared by its records.
    path: Option<Arc<Path>>,
    /// Octets of a file read at a time, and the most one entry may take
    /// ([`PIECE`], [`MAX_ENTRY`]; tests make them small).
    piece: usize,
    max_entry: usize,
}

impl<'e> Reader<'e> {
    fn new(each: &'e mut dyn FnMut(ParsedRecord<'_>) -> Result<(), String>) -> Reader<'e> {
        Reader {
            each,
            path: None,
            piece: PIECE,
            max_entry: MAX_ENTRY,
        }
    }
}

/// What one file's entries inherit (RFC 1035 §5.1; `$INCLUDE` starts a copy).
#[derive(Clone)]
struct FileState {
    origin: Vec<u8>,
    /// TTL of a record written without one: `$TTL`'s, else (RFC 1035 §5.1) the last
    /// TTL written, else the zone's default.
    ttl: u32,
    /// A `$TTL` was seen (RFC 2308 §4): explicit TTLs no longer change the default.
    dollar_ttl: bool,
    owner: Option<Vec<u8>>,
}

impl FileState {
    fn new(origin: &Name, default_ttl: u32) -> FileState {
        FileState {
            origin: name::to_wire(origin),
            ttl: default_ttl,
            dollar_ttl: false,
            owner: None,
        }
    }
}

impl Reader<'_> {
    /// The entries of `text`, the whole of `path` (or a piece of it starting at the
    /// start of `line` and ending after a newline; `last` when it ends where the file
    /// does). Returns where the unread rest starts: an entry whose `(` this piece does
    /// not close is left for the next.
    fn entries(
        &mut self,
        text: &[u8],
        line: usize,
        last: bool,
        path: &Path,
        state: &mut FileState,
        depth: usize,
    ) -> Result<Cut, ZoneError> {
        let mut lexer = Lexer::piece(text, line, last);
        loop {
            let entry = match lexer.next_entry() {
                Ok(Some(entry)) => entry,
                Ok(None) => return Ok(lexer.rest()),
                Err((line, reason)) => return Err(ZoneError::invalid(path, Some(line), None, reason)),
            };
            let line = entry.line;
            self.entry(&entry, path, state, depth).map_err(|err| match err {
                Failure::Here(reason) => ZoneError::invalid(path, Some(line), None, reason),
                Failure::Nested(err) => err,
            })?;
            lexer.recycle(entry);
        }
    }

    /// The entries of the file at `path`, read in pieces of [`PIECE`] octets (a file of
    /// 10,000,000 records is 270 MB; it is never held whole). A piece ends after its
    /// last newline; an entry longer than a piece (parentheses over many lines) grows
    /// the buffer up to [`MAX_ENTRY`].
    fn file(&mut self, path: &Path, state: &mut FileState, depth: usize) -> Result<(), Failure> {
        use std::io::Read;
        let read_error = |e: std::io::Error| Failure::Here(format!("cannot read {}: {e}", path.display()));
        let (file, opened) = open_bounded(path).map_err(read_error)?;
        let mut file = file.take(MAX_FILE + 1);
        let mut buf: Vec<u8> = Vec::new();
        let mut room = self.piece.clamp(1, self.max_entry.max(1));
        let mut line = 1;
        let mut read: u64 = 0;
        loop {
            // Fill the buffer to `room`: short reads are fine, 0 is the end.
            let mut last = false;
            while buf.len() < room {
                let have = buf.len();
                buf.resize(room, 0);
                let got = file.read(buf.get_mut(have..).unwrap_or_default());
                buf.truncate(have + got.as_ref().map_or(0, |n| *n));
                match got {
                    Ok(0) => {
                        last = true;
                        break;
                    }
                    Ok(n) => read += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(read_error(e)),
                }
            }
            if read > MAX_FILE {
                return Err(Failure::Here(format!(
                    "cannot read {}: over the {MAX_FILE}-octet limit",
                    path.display()
                )));
            }
            // Complete lines only, unless the file ends here.
            let end = if last {
                buf.len()
            } else {
                memchr::memrchr(b'\n', &buf).map_or(0, |at| at + 1)
            };
            let text = buf.get(..end).unwrap_or_default();
            let rest = self
                .entries(text, line, last, path, state, depth)
                .map_err(Failure::Nested)?;
            if last && rest.pos >= buf.len() {
                // Written in place while read (not replaced by a rename, which this
                // open file would not see): what was read may be torn.
                // ctime too: a same-length rewrite with its mtime put back changes it.
                use std::os::unix::fs::MetadataExt as _;
                let now = file.get_ref().metadata().map_err(read_error)?;
                if now.len() != opened.len()
                    || now.modified().ok() != opened.modified().ok()
                    || (now.ctime(), now.ctime_nsec()) != (opened.ctime(), opened.ctime_nsec())
                {
                    return Err(Failure::Here(format!(
                        "{} changed while it was read: reload again once it is written",
                        path.display()
                    )));
                }
                return Ok(());
            }
            if rest.pos == 0 {
                // Not one whole entry in the buffer: a longer line or entry.
                if room >= self.max_entry {
                    return Err(Failure::Nested(ZoneError::invalid(
                        path,
                        Some(rest.open.max(line)),
                        None,
                        format!("an entry over {} octets (a '(' never closed?)", self.max_entry),
                    )));
                }
                room = room.saturating_mul(2).min(self.max_entry);
            } else {
                buf.drain(..rest.pos);
                line = rest.line;
            }
        }
    }

    fn entry(&mut self, entry: &Entry<'_>, path: &Path, state: &mut FileState, depth: usize) -> Result<(), Failure> {
        let tokens = entry.tokens.as_slice();
        let first = tokens.first().ok_or_else(|| Failure::Here("empty entry".to_owned()))?;
        if !first.quoted && first.text.starts_with(b"$") {
            return self.directive(entry, path, state, depth);
        }
        let (owner, rest) = if entry.blank_owner {
            let owner = state.owner.clone().ok_or_else(|| {
                Failure::Here("the record has no owner: the first record of a file must name one".to_owned())
            })?;
            (owner, tokens)
        } else {
            let owner = text::name(word(first, "owner")?, &state.origin).map_err(Failure::Here)?;
            (owner, tokens.get(1..).unwrap_or_default())
        };
        // [TTL] [class] TYPE, or [class] [TTL] TYPE.
        let mut ttl = None;
        let mut class = false;
        let mut at = 0;
        while let Some(token) = rest.get(at).filter(|t| !t.quoted) {
            let field = token.text;
            if field.first().is_some_and(u8::is_ascii_digit) && ttl.is_none() {
                ttl = Some(text::ttl(field).map_err(Failure::Here)?);
            } else if !class && is_class(field) {
                if !field.eq_ignore_ascii_case(b"IN") && !field.eq_ignore_ascii_case(b"CLASS1") {
                    return Err(Failure::Here(format!(
                        "class {}: only class IN is served",
                        String::from_utf8_lossy(field)
                    )));
                }
                class = true;
            } else {
                break;
            }
            at += 1;
        }
        let type_token = rest
            .get(at)
            .ok_or_else(|| Failure::Here("missing the record type".to_owned()))?;
        let mnemonic = String::from_utf8_lossy(type_token.text);
        let rtype = types::code(&mnemonic)
            .filter(|_| !type_token.quoted)
            .ok_or_else(|| Failure::Here(format!("unknown record type {mnemonic:?}")))?;
        let fields = rest.get(at + 1..).unwrap_or_default();
        let rdata = rdata::encode(rtype, &mut rdata::Fields::new(fields, &state.origin))
            .map_err(|reason| Failure::Here(format!("{}: {reason}", types::name(rtype))))?;
        // The previous owner's buffer reused: no allocation for the copy.
        match &mut state.owner {
            Some(previous) => {
                previous.clear();
                previous.extend_from_slice(&owner);
            }
            None => state.owner = Some(owner.clone()),
        }
        if let (Some(explicit), false) = (ttl, state.dollar_ttl) {
            state.ttl = explicit;
        }
        self.add(owner, rtype, ttl.unwrap_or(state.ttl), rdata, path, entry.line)
            .map_err(Failure::Here)
    }

    fn directive(
        &mut self,
        entry: &Entry<'_>,
        path: &Path,
        state: &mut FileState,
        depth: usize,
    ) -> Result<(), Failure> {
        let tokens = entry.tokens.as_slice();
        let name = tokens.first().map(|t| t.text.to_ascii_uppercase()).unwrap_or_default();
        let arg = |i: usize, what: &str| -> Result<&[u8], Failure> {
            tokens
                .get(i)
                .ok_or_else(|| Failure::Here(format!("{} needs {what}", String::from_utf8_lossy(&name))))
                .and_then(|t| word(t, what))
        };
        let arity = |max: usize| -> Result<(), Failure> {
            match tokens.get(max + 1) {
                Some(extra) => Err(Failure::Here(format!(
                    "unexpected {:?} after {}",
                    String::from_utf8_lossy(extra.text),
                    String::from_utf8_lossy(&name)
                ))),
                None => Ok(()),
            }
        };
        match name.as_slice() {
            b"$ORIGIN" => {
                arity(1)?;
                state.origin = text::name(arg(1, "a name")?, &state.origin).map_err(Failure::Here)?;
            }
            b"$TTL" => {
                arity(1)?;
                state.ttl = text::ttl(arg(1, "a TTL")?).map_err(Failure::Here)?;
                state.dollar_ttl = true;
            }
            b"$INCLUDE" => {
                arity(2)?;
                if depth >= MAX_INCLUDE_DEPTH {
                    return Err(Failure::Here(format!(
                        "$INCLUDE nested deeper than {MAX_INCLUDE_DEPTH} files (an include loop?)"
                    )));
                }
                let file = text::unescape(arg(1, "a file name")?).map_err(Failure::Here)?;
                let file = PathBuf::from(String::from_utf8_lossy(&file).into_owned());
                let target = if file.is_absolute() {
                    file
                } else {
                    path.parent().unwrap_or_else(|| Path::new(".")).join(file)
                };
                let mut nested = state.clone();
                if tokens.len() > 2 {
                    nested.origin = text::name(arg(2, "an origin")?, &state.origin).map_err(Failure::Here)?;
                }
                nested.owner = None;
                self.file(&target, &mut nested, depth + 1).map_err(|err| match err {
                    Failure::Here(reason) => Failure::Here(format!("$INCLUDE {reason}")),
                    nested @ Failure::Nested(_) => nested,
                })?;
            }
            other => {
                return Err(Failure::Here(format!(
                    "unknown or unsupported directive {} (supported: $ORIGIN, $TTL, $INCLUDE)",
                    String::from_utf8_lossy(other)
                )))
            }
        }
        Ok(())
    }

    fn add(
        &mut self,
        owner: Vec<u8>,
        rtype: u16,
        ttl: u32,
        rdata: Vec<u8>,
        path: &Path,
        line: usize,
    ) -> Result<(), String> {
        if self.path.as_deref() != Some(path) {
            self.path = Some(Arc::from(path));
        }
        let Reader {
            each,
            path: Some(shared),
            ..
        } = self
        else {
            return Ok(());
        };
        each(ParsedRecord {
            name: owner,
            rtype,
            ttl,
            rdata,
            path: shared,
            line,
        })
    }
}

/// An entry's error: about this entry, or already located in an included file.
enum Failure {
    Here(String),
    Nested(ZoneError),
}

impl Failure {
    /// The error of reading the file at `path` (no line: it could not be read).
    fn in_file(self, path: &Path) -> ZoneError {
        match self {
            Failure::Here(reason) => ZoneError::invalid(path, None, None, reason),
            Failure::Nested(err) => err,
        }
    }
}

fn word<'a>(token: &Token<'a>, what: &str) -> Result<&'a [u8], Failure> {
    if token.quoted {
        return Err(Failure::Here(format!("{what} must not be quoted")));
    }
    Ok(token.text)
}

/// IN, CH, HS, CS, NONE or `CLASSnnn` (RFC 3597 §5).
fn is_class(field: &[u8]) -> bool {
    let upper = field.to_ascii_uppercase();
    matches!(upper.as_slice(), b"IN" | b"CH" | b"HS" | b"CS" | b"NONE")
        || upper
            .strip_prefix(b"CLASS")
            .is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Name {
        Name::from_ascii("example.com.").unwrap()
    }

    fn sets(text: &str) -> Vec<ParsedSet> {
        parse(text.as_bytes(), Path::new("z.zone"), &origin(), 60).unwrap()
    }

    fn error(text: &str) -> String {
        parse(text.as_bytes(), Path::new("z.zone"), &origin(), 60)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn parses_records_and_groups_sets() {
        let sets =
            sets("www 300 IN A 192.0.2.1\nwww 60 IN A 192.0.2.2\nwww A 192.0.2.2\nmail IN MX 10 mx.example.com.\n");
        let www = sets.iter().find(|s| s.rtype == 1).unwrap();
        assert_eq!(www.name, b"\x03www\x07example\x03com\x00");
        assert_eq!(
            www.rdata,
            vec![vec![192, 0, 2, 1], vec![192, 0, 2, 2]],
            "duplicates dropped"
        );
        assert_eq!(www.ttl, 60, "the smallest TTL of the set wins");
        let mx = sets.iter().find(|s| s.rtype == 15).unwrap();
        assert_eq!(mx.rdata[0], b"\x00\x0a\x02mx\x07example\x03com\x00");
        assert_eq!(mx.line, Some(4));
    }

    #[test]
    fn directives_owners_ttl_and_class_order() {
        let text = "$TTL 1h\n$ORIGIN sub.example.com.\na A 192.0.2.1\n  IN 5m TXT x\n\
                    $ORIGIN example.com.\n@ 7 IN NS ns\nB\\032c CLASS1 AAAA ::1\n";
        let sets = sets(text);
        let a = &sets[0];
        assert_eq!(
            (a.name.as_slice(), a.ttl),
            (&b"\x01a\x03sub\x07example\x03com\x00"[..], 3600)
        );
        assert_eq!(
            (sets[1].rtype, sets[1].ttl, sets[1].name.as_slice()),
            (16, 300, a.name.as_slice())
        );
        assert_eq!(
            (sets[2].name.as_slice(), sets[2].ttl),
            (&b"\x07example\x03com\x00"[..], 7)
        );
        assert_eq!(sets[2].rdata[0], b"\x02ns\x07example\x03com\x00");
        assert_eq!(
            sets[3].name, b"\x03b c\x07example\x03com\x00",
            "escaped octet in a label, lowercased"
        );
    }

    #[test]
    fn omitted_ttls() {
        // No $TTL: the last TTL written (RFC 1035 §5.1), the zone default before one.
        let s = sets("a A 192.0.2.1\nb 77 A 192.0.2.2\nc A 192.0.2.3\n$TTL 9\nd 5 A 192.0.2.4\ne A 192.0.2.5\n");
        let ttls: Vec<u32> = s.iter().map(|set| set.ttl).collect();
        assert_eq!(ttls, [60, 77, 77, 5, 9]);
    }

    #[test]
    fn the_issue_cases_load_exactly() {
        let text = "t TXT \"\\127\\128\\200\\255\" \"\\065\"\nsp\\032ace A 192.0.2.1\n\
                    x TYPE65280 \\# 4 0a000001\ny A \\# 4 c0000263\nsub NS ns.sub\n\
                    sub DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118\n";
        let sets = sets(text);
        assert_eq!(sets[0].rdata[0], [4, 127, 128, 200, 255, 1, b'A']);
        assert_eq!(sets[1].name, b"\x06sp ace\x07example\x03com\x00");
        assert_eq!(
            (sets[2].rtype, sets[2].rdata[0].as_slice()),
            (65280, &[10, 0, 0, 1][..])
        );
        assert_eq!(sets[3].rdata[0], [192, 0, 2, 99]);
        assert_eq!(sets[5].rtype, 43);
        assert_eq!(sets[5].rdata[0].len(), 24);
    }

    #[test]
    fn error_names_the_failing_line() {
        let msg = error("a IN A 192.0.2.1\nb IN TXT ( \"x\"\n  \"y\" )\nc IN A 300.1.1.1\nd IN A 192.0.2.4\n");
        assert!(msg.starts_with("z.zone:4: "), "{msg}");
        for (text, line, says) in [
            ("a CH A 192.0.2.1\n", 1, "only class IN"),
            ("\n\na FOO 1\n", 3, "unknown record type"),
            ("a A 192.0.2.1\n  RRSIG A 8 2 300 1 2 3 x. AAAA\n", 2, "not served"),
            ("$GENERATE 1-2 a$ A 192.0.2.$\n", 1, "unsupported directive"),
            ("  A 192.0.2.1\n", 1, "no owner"),
            ("a TXT \"\\300\"\n", 1, "not an octet"),
            ("a..b A 192.0.2.1\n", 1, "empty label"),
            ("$INCLUDE missing.zone\n", 1, "cannot read"),
            ("$INCLUDE /dev/zero\n", 1, "not a regular file"),
            ("$INCLUDE /\n", 1, "not a regular file"),
            (
                "a LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m\n",
                1,
                "generic form",
            ),
        ] {
            let msg = error(text);
            assert!(
                msg.starts_with(&format!("z.zone:{line}: ")) && msg.contains(says),
                "{text:?}: {msg}"
            );
        }
    }

    #[test]
    fn include_with_origin_and_nested_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("inc.zone"), "www A 192.0.2.9\nbad A x\n").unwrap();
        std::fs::write(dir.path().join("ok.zone"), "www A 192.0.2.9\n").unwrap();
        let main = dir.path().join("main.zone");
        let parsed = parse(b"$INCLUDE ok.zone sub\n", &main, &origin(), 60).unwrap();
        assert_eq!(parsed[0].name, b"\x03www\x03sub\x07example\x03com\x00");
        assert_eq!(*parsed[0].path, *dir.path().join("ok.zone"));
        let err = parse(b"a A 192.0.2.1\n$INCLUDE inc.zone\n", &main, &origin(), 60).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("inc.zone:2: "), "{msg}");
        std::fs::write(dir.path().join("loop.zone"), "$INCLUDE loop.zone\n").unwrap();
        let err = parse(b"$INCLUDE loop.zone\n", &main, &origin(), 60).unwrap_err();
        assert!(err.to_string().contains("nested deeper"), "{err}");
    }

    /// (owner, type, TTL, RDATA, line) of each record read.
    type Read = Vec<(Vec<u8>, u16, u32, Vec<u8>, usize)>;

    fn read_text(text: &[u8], path: &Path) -> Result<Read, ZoneError> {
        let mut out = Read::new();
        parse_each(text, path, &origin(), 60, &mut |r| {
            out.push((r.name, r.rtype, r.ttl, r.rdata, r.line));
            Ok(())
        })?;
        Ok(out)
    }

    /// The file at `path` read in pieces of `piece` octets, entries of at most `max_entry`.
    fn read_in_pieces(path: &Path, piece: usize, max_entry: usize) -> Result<Read, ZoneError> {
        let mut out = Read::new();
        let mut each = |r: ParsedRecord<'_>| {
            out.push((r.name, r.rtype, r.ttl, r.rdata, r.line));
            Ok(())
        };
        let mut reader = Reader::new(&mut each);
        (reader.piece, reader.max_entry) = (piece, max_entry);
        let mut state = FileState::new(&origin(), 60);
        reader.file(path, &mut state, 0).map_err(|err| err.in_file(path))?;
        Ok(out)
    }

    /// Pieces cut anywhere — inside parentheses, quotes, comments, CRLF pairs, an entry
    /// longer than a piece — read what the whole text reads, lines included; the last
    /// line needs no newline.
    #[test]
    fn a_file_read_in_pieces_reads_as_the_whole_text() {
        let mut text =
            String::from("$TTL 300\r\n@ SOA ns.example.com. host.example.com. (\r\n 1 ; serial (\n 2 3 4\n 5 )\n");
        for i in 0..40 {
            use std::fmt::Write;
            write!(
                text,
                "n{i} A 192.0.2.{i}\n  TXT \"a ( b\" \"; c\" ; ( comment\nm{i} 77 IN TXT ( \"x\"\n\n  \"y{i}\" )\n$ORIGIN s{i}.example.com.\n"
            )
            .unwrap();
        }
        text.push_str("last A 192.0.2.255");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.zone");
        std::fs::write(&path, &text).unwrap();
        let whole = read_text(text.as_bytes(), &path).unwrap();
        assert_eq!(whole.len(), 1 + 40 * 3 + 1);
        for piece in [1, 2, 7, 64, 1000, PIECE] {
            assert_eq!(
                read_in_pieces(&path, piece, MAX_ENTRY).unwrap(),
                whole,
                "pieces of {piece}"
            );
        }
        // A mistake deep in the file: the same line either way.
        let bad = text.replace("m30 77", "m30 x77");
        std::fs::write(&path, &bad).unwrap();
        let want = read_text(bad.as_bytes(), &path).unwrap_err().to_string();
        assert!(want.contains(":188: "), "{want}");
        for piece in [3, 64, 1000] {
            assert_eq!(read_in_pieces(&path, piece, MAX_ENTRY).unwrap_err().to_string(), want);
        }
    }

    /// A `(` never closed: at the end of the file, or once its entry is over the
    /// largest an entry may be, the error names the line it opened on.
    #[test]
    fn an_unclosed_parenthesis_is_named_by_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("open.zone");
        let mut text = String::from("a A 192.0.2.1\nb TXT ( x\n");
        for _ in 0..100 {
            text.push_str("  y\n");
        }
        std::fs::write(&path, &text).unwrap();
        let err = read_in_pieces(&path, 16, MAX_ENTRY).unwrap_err().to_string();
        assert!(
            err.contains(":2: ") && err.contains("never closed before the end"),
            "{err}"
        );
        let err = read_in_pieces(&path, 16, 128).unwrap_err().to_string();
        assert!(err.contains(":2: ") && err.contains("over 128 octets"), "{err}");
    }

    /// A file written in place while it is read is refused, not half read.
    #[test]
    fn a_file_written_while_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("moving.zone");
        std::fs::write(&path, "a A 192.0.2.1\nb A 192.0.2.2\n").unwrap();
        let mut each = |_: ParsedRecord<'_>| {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(|e| e.to_string())?;
            file.write_all(b"c A 192.0.2.3\n").map_err(|e| e.to_string())
        };
        let err = parse_file_each(&path, &origin(), 60, &mut each)
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed while it was read"), "{err}");
        assert_eq!(count_lines(&path).unwrap(), 4);
    }

    #[test]
    fn names_with_escapes() {
        let parsed = parse_name("sp\\032ace", &origin()).unwrap();
        assert_eq!(name::to_wire(&parsed), b"\x06sp ace\x07example\x03com\x00");
        assert_eq!(parse_name("@", &origin()).unwrap(), origin());
        assert!(parse_name("a..b", &origin()).is_err());
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
            parse_value(&origin(), &owner, RecordType::TXT, "\"\\200\"").unwrap(),
            [1, 200]
        );
        assert_eq!(
            parse_value(&origin(), &owner, RecordType::CNAME, "web").unwrap(),
            b"\x03web\x07example\x03com\x00"
        );
        assert_eq!(
            parse_value(&origin(), &owner, RecordType::DS, "1 13 2 ABCD").unwrap(),
            [0, 1, 13, 2, 0xab, 0xcd]
        );
        assert!(parse_value(&origin(), &owner, RecordType::TXT, "a\nb").is_err());
    }
}
