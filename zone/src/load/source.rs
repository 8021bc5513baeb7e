//! Where the text of a zone file read in chunks comes from: the file itself — read once
//! in lines to find its tables ([`chunks::Splitter`]) and its newlines, then again for
//! each table's body, in order — or a text already in memory.
//!
//! Why not read the file into one string, as before: for a zone of a million record
//! sets that string was a 122 MB copy of the file held for the whole load, the largest
//! single part of control's peak (docs/BENCHMARKS.md). The file is read through a
//! 1 MiB buffer instead; what the loader keeps of it is the head, the tables' offsets
//! and the newline index for error lines. A file that changes while it is read (its
//! length or modification time moved between the first pass and the last) is an error,
//! not a mix of two versions.
use std::{
    borrow::Cow,
    fs::File,
    io::{BufRead, BufReader, Read, Seek, SeekFrom},
    path::Path,
    time::SystemTime,
};

use super::{
    chunks::{self, Body, Split},
    LineIndex,
};
use crate::{master, ZoneError};

/// Octets the file is read through.
const BUFFER: usize = 1 << 20;

/// The text being read in chunks.
pub(crate) enum Source<'t> {
    /// A text in memory.
    Text(&'t str),
    /// A zone file, read again for each pass.
    File(&'t mut FileSource),
}

impl Source<'_> {
    /// The text of `body`.
    pub(crate) fn body(&mut self, body: Body) -> Result<&str, ZoneError> {
        match self {
            Source::Text(text) => Ok(body.of(text)),
            Source::File(file) => file.body(body),
        }
    }

    /// The whole text (a file whose head holds record sets inline is read whole).
    pub(crate) fn whole(&mut self) -> Result<Cow<'_, str>, ZoneError> {
        match self {
            Source::Text(text) => Ok(Cow::Borrowed(text)),
            Source::File(file) => file.whole().map(Cow::Owned),
        }
    }
}

/// A zone file open for reading in passes.
pub(crate) struct FileSource {
    path: Box<Path>,
    file: BufReader<File>,
    /// The offset `file` reads from next.
    at: u64,
    /// Length and modification time when opened.
    len: u64,
    modified: Option<SystemTime>,
    /// The body read last.
    bytes: Vec<u8>,
}

impl FileSource {
    /// Opens the zone file at `path`: a regular file of at most [`master::MAX_FILE`]
    /// octets.
    pub(crate) fn open(path: &Path) -> Result<FileSource, ZoneError> {
        let io = |source| ZoneError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (file, meta) = master::open_bounded(path).map_err(io)?;
        Ok(FileSource {
            path: path.into(),
            // A small file gets a buffer its size (a directory of many small zones).
            file: BufReader::with_capacity(
                usize::try_from(meta.len().clamp(64, BUFFER as u64)).unwrap_or(BUFFER),
                file,
            ),
            at: 0,
            len: meta.len(),
            modified: meta.modified().ok(),
            bytes: Vec::new(),
        })
    }

    fn io(&self, source: std::io::Error) -> ZoneError {
        ZoneError::Io {
            path: self.path.to_path_buf(),
            source,
        }
    }

    fn changed(&self) -> ZoneError {
        ZoneError::invalid(
            &*self.path,
            None,
            None,
            "the file changed while it was read: reload again once it is written",
        )
    }

    fn not_utf8(&self, at: u64) -> ZoneError {
        ZoneError::invalid(&*self.path, None, None, format!("not UTF-8 (octet {at})"))
    }

    fn seek(&mut self, to: u64) -> Result<(), ZoneError> {
        if to != self.at {
            let moved = match i64::try_from(to.wrapping_sub(self.at)) {
                // Forward within reach: keeps what the buffer holds.
                Ok(ahead) if to > self.at => self.file.seek_relative(ahead),
                _ => self.file.seek(SeekFrom::Start(to)).map(|_| ()),
            };
            moved.map_err(|e| self.io(e))?;
            self.at = to;
        }
        Ok(())
    }

    /// The first pass: the file's tables (`None`: it must be read whole) and its
    /// newlines.
    pub(crate) fn scan(&mut self) -> Result<Option<(Split, LineIndex)>, ZoneError> {
        self.seek(0)?;
        let mut splitter = chunks::Splitter::default();
        let mut newlines = Vec::new();
        let mut line = Vec::new();
        while self.at < self.len {
            line.clear();
            let left = self.len - self.at;
            let read = (&mut self.file)
                .take(left)
                .read_until(b'\n', &mut line)
                .map_err(|e| self.io(e))?;
            if read == 0 {
                return Err(self.changed());
            }
            let start = self.at;
            self.at += read as u64;
            let text = std::str::from_utf8(&line).map_err(|e| self.not_utf8(start + e.valid_up_to() as u64))?;
            let start = usize::try_from(start).unwrap_or(usize::MAX);
            if !splitter.line(start, text) {
                return Ok(None);
            }
            if text.ends_with('\n') {
                newlines.push(u32::try_from(start + text.len() - 1).unwrap_or(u32::MAX));
            }
        }
        newlines.shrink_to_fit();
        let len = usize::try_from(self.len).unwrap_or(usize::MAX);
        Ok(Some((splitter.finish(len), LineIndex::from_newlines(newlines))))
    }

    /// The text of `body`, read from the file.
    fn body(&mut self, body: Body) -> Result<&str, ZoneError> {
        let (start, end) = (body.start() as u64, body.end() as u64);
        self.seek(start)?;
        self.bytes.clear();
        let read = (&mut self.file)
            .take(end.saturating_sub(start))
            .read_to_end(&mut self.bytes)
            .map_err(|e| self.io(e))?;
        self.at += read as u64;
        if self.at != end {
            return Err(self.changed());
        }
        match std::str::from_utf8(&self.bytes) {
            Ok(text) => Ok(text),
            Err(e) => Err(self.not_utf8(start + e.valid_up_to() as u64)),
        }
    }

    /// The whole file as text.
    pub(crate) fn whole(&mut self) -> Result<String, ZoneError> {
        self.seek(0)?;
        let mut bytes = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        let read = (&mut self.file)
            .take(self.len)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io(e))?;
        self.at += read as u64;
        if self.at != self.len {
            return Err(self.changed());
        }
        String::from_utf8(bytes).map_err(|e| self.not_utf8(e.utf8_error().valid_up_to() as u64))
    }

    /// An error unless the file has the length and modification time it had when
    /// opened (call after the last pass).
    pub(crate) fn unchanged(&self) -> Result<(), ZoneError> {
        let meta = self.file.get_ref().metadata().map_err(|e| self.io(e))?;
        if meta.len() != self.len || meta.modified().ok() != self.modified {
            return Err(self.changed());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONE: &str =
        "[zone]\norigin = \"x.\"\n[[rrset]]\nname = \"a\"\n[zone.ns]\nnames = [\"ns\"]\n[[rrset]]\nname = \"b\"\n";

    fn written(text: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("x.toml");
        std::fs::write(&path, text).expect("written");
        (dir, path)
    }

    /// The passes over a file find what the split of its text finds, and its bodies
    /// read back in any order.
    #[test]
    fn the_file_read_in_passes_splits_as_its_text_does() {
        let (_dir, path) = written(ZONE.as_bytes());
        let mut file = FileSource::open(&path).expect("opened");
        let (split, lines) = file.scan().expect("read").expect("the plain layout");
        let want = chunks::split(ZONE).expect("the plain layout");
        assert_eq!(split.head, want.head);
        assert_eq!(split.rrsets.len(), 2);
        for &body in split.rrsets.iter().rev().chain(&split.rrsets) {
            assert_eq!(file.body(body).expect("read"), body.of(ZONE));
        }
        for at in [0, 5, 30, ZONE.len() - 1] {
            assert_eq!(lines.line(at), LineIndex::new(ZONE).line(at), "offset {at}");
        }
        file.unchanged().expect("unchanged");
    }

    /// A file that grows or shrinks between the passes is an error, not a mix.
    #[test]
    fn a_file_that_changes_between_passes_is_refused() {
        let (_dir, path) = written(ZONE.as_bytes());
        let mut file = FileSource::open(&path).expect("opened");
        let (split, _) = file.scan().expect("read").expect("the plain layout");
        std::fs::write(&path, &ZONE.as_bytes()[..20]).expect("truncated in place");
        let err = file.body(split.rrsets[1]).expect_err("cut short").to_string();
        assert!(err.contains("changed while it was read"), "{err}");
        std::fs::write(&path, format!("{ZONE}# more\n")).expect("grown in place");
        assert!(file.unchanged().is_err());
    }

    /// An octet that is not UTF-8 is named by its offset, in either pass.
    #[test]
    fn an_octet_that_is_not_utf8_is_named_by_its_offset() {
        let mut text = ZONE.as_bytes().to_vec();
        text[40] = 0xff;
        let (_dir, path) = written(&text);
        let err = FileSource::open(&path)
            .expect("opened")
            .scan()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("not UTF-8 (octet 40)"), "{err}");
        let err = FileSource::open(&path)
            .expect("opened")
            .whole()
            .expect_err("refused")
            .to_string();
        assert!(err.contains("not UTF-8 (octet 40)"), "{err}");
    }
}
