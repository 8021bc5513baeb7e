//! Writing a response into a caller-owned buffer, bounded by a size limit.
//!
//! Nothing here allocates. Names are written as compression pointers (RFC 1035 §4.1.4)
//! to a copy that is already in the message whenever that copy is within reach of a
//! pointer (offset < 0x4000), and literally otherwise. Names inside RDATA are
//! compressed against the question name: their labels up to the longest suffix they
//! share with it, then a pointer into the question (which is always literal).
use super::name::label_starts;

/// The response would exceed the size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// A name already present at offset `at` of the message being built: its first
/// `literal` octets written there, the rest (if any) written literally at `rest`.
#[derive(Clone, Copy, Debug)]
pub struct NameRef<'n> {
    /// Offset of the name's encoding in the message.
    pub at: usize,
    /// The name's whole wire form (used when a pointer cannot reach `at`).
    pub wire: &'n [u8],
    /// Octets of `wire` written literally at `at` (all of it when uncompressed).
    pub literal: usize,
    /// Where `wire[literal..]` is written literally, when `literal < wire.len()`.
    pub rest: usize,
}

impl<'n> NameRef<'n> {
    /// A name written literally at `at`.
    #[must_use]
    pub fn literal(at: usize, wire: &'n [u8]) -> NameRef<'n> {
        NameRef {
            at,
            wire,
            literal: wire.len(),
            rest: at + wire.len(),
        }
    }

    /// The suffix of this name that starts at label offset `offset` of `wire`.
    #[must_use]
    pub fn suffix(self, offset: usize) -> NameRef<'n> {
        let wire = self.wire.get(offset..).unwrap_or_default();
        if offset < self.literal {
            NameRef {
                at: self.at + offset,
                wire,
                literal: self.literal - offset,
                rest: self.rest,
            }
        } else {
            NameRef::literal(self.rest + (offset - self.literal), wire)
        }
    }
}

/// Largest offset a compression pointer can hold.
const MAX_POINTER: usize = 0x3fff;

/// A response under construction.
pub struct Builder<'b> {
    buf: &'b mut [u8],
    len: usize,
    limit: usize,
}

impl<'b> Builder<'b> {
    /// A builder over `buf` that never writes past `limit` octets (nor past `buf`).
    pub fn new(buf: &'b mut [u8], limit: usize) -> Builder<'b> {
        let limit = limit.min(buf.len());
        Builder { buf, len: 0, limit }
    }

    /// Octets written so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lowers the limit by `octets` (room kept for the OPT record).
    pub fn reserve(&mut self, octets: usize) {
        self.limit = self.limit.saturating_sub(octets);
    }

    /// Raises the limit by `octets` again.
    pub fn release(&mut self, octets: usize) {
        self.limit = (self.limit + octets).min(self.buf.len());
    }

    /// Takes the first `len` octets already in the buffer as written (at most the limit).
    pub fn advance(&mut self, len: usize) {
        self.len = len.min(self.limit);
    }

    /// Forgets everything past `len`.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `bytes`.
    pub fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        let end = self.len + bytes.len();
        if end > self.limit {
            return Err(Full);
        }
        self.buf.get_mut(self.len..end).ok_or(Full)?.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Appends a big-endian `u16`.
    pub fn put_u16(&mut self, value: u16) -> Result<(), Full> {
        self.put(&value.to_be_bytes())
    }

    /// Appends a reference to `name`: a pointer if it can reach, else the literal name.
    /// Returns where a literal copy of the name now is (for later pointers).
    pub fn put_name<'n>(&mut self, name: NameRef<'n>) -> Result<NameRef<'n>, Full> {
        if name.at <= MAX_POINTER {
            self.put_u16(0xc000 | name.at as u16)?;
            Ok(name)
        } else {
            let at = self.len;
            self.put(name.wire)?;
            Ok(NameRef::literal(at, name.wire))
        }
    }

    /// Appends `name` (lowercase wire) as RDATA: its labels up to the longest suffix it
    /// shares with `question` whose copy there is literal, then a pointer to that copy;
    /// all of it literally when they share only the root. Returns where it now is.
    pub fn put_rdata_name<'n>(&mut self, name: &'n [u8], question: NameRef<'_>) -> Result<NameRef<'n>, Full> {
        let at = self.len;
        for start in label_starts(name) {
            let suffix = name.get(start..).unwrap_or_default();
            if suffix.len() <= 1 {
                continue;
            }
            let Some(offset) = question.wire.len().checked_sub(suffix.len()) else {
                continue;
            };
            if question.wire.get(offset..) != Some(suffix) || !label_starts(question.wire).any(|s| s == offset) {
                continue;
            }
            // Only a literal copy of the whole suffix is pointed to (a shorter suffix
            // past a pointer of `question` is found on a later turn).
            let copy = question.suffix(offset);
            if copy.literal != copy.wire.len() || copy.at > MAX_POINTER {
                continue;
            }
            self.put(name.get(..start).unwrap_or_default())?;
            self.put_u16(0xc000 | copy.at as u16)?;
            return Ok(NameRef {
                at,
                wire: name,
                literal: start,
                rest: copy.at,
            });
        }
        self.put(name)?;
        Ok(NameRef::literal(at, name))
    }

    /// Overwrites the `u16` at `at` (header fields, counts).
    pub fn set_u16(&mut self, at: usize, value: u16) {
        if let Some(slot) = self.buf.get_mut(at..at + 2) {
            slot.copy_from_slice(&value.to_be_bytes());
        }
    }

    /// Reads back the `u16` at `at`.
    #[must_use]
    pub fn get_u16(&self, at: usize) -> u16 {
        self.buf.get(at..at + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// The message written so far.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respects_limit_and_writes_pointers() {
        let mut buf = [0u8; 64];
        let mut b = Builder::new(&mut buf, 16);
        b.put(&[0; 12]).unwrap();
        let name = NameRef::literal(12, b"\x01a\x00");
        b.put_name(name).unwrap();
        assert_eq!(b.as_slice()[12..], [0xc0, 12]);
        assert_eq!(b.put(&[1, 2, 3]), Err(Full));
        assert_eq!(b.len(), 14);
        let far = NameRef::literal(0x4000, b"\x01a\x00");
        let mut big = vec![0u8; 64];
        let mut b = Builder::new(&mut big, 64);
        let copy = b.put_name(far).unwrap();
        assert_eq!((copy.at, b.as_slice()), (0, &b"\x01a\x00"[..]));
    }

    #[test]
    fn rdata_names_point_into_the_question() {
        let mut buf = [0u8; 128];
        let mut b = Builder::new(&mut buf, 128);
        b.put(&[0; 12]).unwrap();
        let qname = b"\x03www\x03cut\x02kd\x07example\x00";
        b.put(qname).unwrap();
        let question = NameRef::literal(12, qname);
        let ns = b
            .put_rdata_name(b"\x03ns0\x03cut\x02kd\x07example\x00", question)
            .unwrap();
        assert_eq!(&b.as_slice()[ns.at..], b"\x03ns0\xc0\x10", "pointer to cut.kd.example.");
        // A suffix past the literal labels is where the pointer led.
        let cut = ns.suffix(4);
        assert_eq!((cut.at, cut.literal), (16, cut.wire.len()));
        assert_eq!(ns.suffix(0).at, ns.at);
        // Sharing only a partial label or the root: literal.
        let other = b.put_rdata_name(b"\x02xample\x00", question).unwrap();
        assert_eq!(other.literal, other.wire.len());
        let elsewhere = b.put_rdata_name(b"\x02ns\x05other\x07example\x00", question).unwrap();
        assert_eq!(&b.as_slice()[elsewhere.at..], b"\x02ns\x05other\xc0\x17");
    }

    #[test]
    fn rdata_names_point_only_at_literal_copies() {
        let mut buf = [0u8; 128];
        let mut b = Builder::new(&mut buf, 128);
        b.put(&[0; 12]).unwrap();
        b.put(b"\x07example\x00").unwrap();
        let question = NameRef::literal(12, b"\x07example\x00");
        // "b.a.example." written as "\x01b\x01a" + pointer to the question.
        let target = b.put_rdata_name(b"\x01b\x01a\x07example\x00", question).unwrap();
        assert_eq!((target.literal, target.rest), (4, 12));
        // Against that partly literal name: its copy of "a.example." ends in a pointer,
        // so only "example." (literal in the question) is pointed to.
        let a = b.put_rdata_name(b"\x01x\x01a\x07example\x00", target).unwrap();
        assert_eq!((a.literal, a.rest), (4, 12));
        let e = b.put_rdata_name(b"\x01y\x07example\x00", target).unwrap();
        assert_eq!(e.rest, 12);
    }
}
