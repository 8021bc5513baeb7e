//! Query names (RFC 1035 §3.1, §4.1.4): parsed in place, lowercased into a stack buffer.

/// Longest name in wire format (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;
/// Most labels a name can have (each label is at least 2 octets, plus the root).
pub const MAX_LABELS: usize = 128;

/// Why a name could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The message ended inside the name.
    Truncated,
    /// A label type other than a plain length (0x40/0x80), or a compression pointer
    /// where none is allowed (the question of a query).
    BadLabel,
    /// Longer than 255 octets.
    TooLong,
}

/// A lowercased wire name and the offsets of its labels, on the stack.
#[derive(Clone, Copy)]
pub struct NameBuf {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
    starts: [u8; MAX_LABELS],
    labels: u8,
}

impl NameBuf {
    /// No name yet: what [`NameBuf::read`] fills in place.
    pub const EMPTY: NameBuf = NameBuf {
        bytes: [0; MAX_NAME_LEN],
        len: 0,
        starts: [0; MAX_LABELS],
        labels: 0,
    };

    /// Reads an uncompressed name at `msg[start..]`; returns it and the offset after it.
    pub fn parse(msg: &[u8], start: usize) -> Result<(NameBuf, usize), NameError> {
        let mut out = NameBuf::EMPTY;
        let end = out.read(msg, start)?;
        Ok((out, end))
    }

    /// Reads an uncompressed name at `msg[start..]` into `self` (the query path's form:
    /// the 385-octet buffer is filled where it lies, not built and moved); returns the
    /// offset after it. After an error `self` holds the empty name.
    pub fn read(&mut self, msg: &[u8], start: usize) -> Result<usize, NameError> {
        let read = self.read_labels(msg, start);
        if read.is_err() {
            self.len = 0;
            self.labels = 0;
        }
        read
    }

    fn read_labels(&mut self, msg: &[u8], start: usize) -> Result<usize, NameError> {
        self.len = 0;
        self.labels = 0;
        let mut pos = start;
        let mut len = 0usize;
        for _ in 0..MAX_LABELS {
            let label_len = usize::from(*msg.get(pos).ok_or(NameError::Truncated)?);
            if label_len & 0xc0 != 0 {
                return Err(NameError::BadLabel);
            }
            if len + 1 + label_len > MAX_NAME_LEN {
                return Err(NameError::TooLong);
            }
            let label = msg.get(pos..pos + 1 + label_len).ok_or(NameError::Truncated)?;
            let dst = self.bytes.get_mut(len..len + 1 + label_len).ok_or(NameError::TooLong)?;
            for (d, s) in dst.iter_mut().zip(label) {
                *d = s.to_ascii_lowercase();
            }
            if let Some(slot) = self.starts.get_mut(usize::from(self.labels)) {
                *slot = len as u8;
            }
            self.labels += 1;
            len += 1 + label_len;
            pos += 1 + label_len;
            if label_len == 0 {
                self.len = len as u8;
                return Ok(pos);
            }
        }
        Err(NameError::TooLong)
    }

    /// The lowercased wire name, root label included.
    #[must_use]
    pub fn as_wire(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// Number of labels, the root label included.
    #[must_use]
    pub fn label_count(&self) -> usize {
        usize::from(self.labels)
    }

    /// Offset of label `i` (0 is the leftmost).
    #[must_use]
    pub fn label_start(&self, i: usize) -> usize {
        usize::from(self.starts.get(i).copied().unwrap_or(0))
    }
}

/// Skips a possibly compressed name at `msg[pos..]` (e.g. in the additional section);
/// returns the offset after it.
pub fn skip(msg: &[u8], mut pos: usize) -> Result<usize, NameError> {
    for _ in 0..MAX_LABELS {
        let len = *msg.get(pos).ok_or(NameError::Truncated)?;
        match len {
            0 => return Ok(pos + 1),
            1..=63 => pos += 1 + usize::from(len),
            0xc0..=0xff => {
                msg.get(pos + 1).ok_or(NameError::Truncated)?;
                return Ok(pos + 2);
            }
            _ => return Err(NameError::BadLabel),
        }
    }
    Err(NameError::TooLong)
}

/// Offsets at which each label of the wire name `name` starts (for a name from the zone).
pub fn label_starts(name: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut pos = Some(0usize);
    std::iter::from_fn(move || {
        let at = pos?;
        let len = usize::from(*name.get(at)?);
        pos = if len == 0 { None } else { Some(at + 1 + len) };
        Some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_lowercases() {
        let msg = b"xx\x03WwW\x07Example\x03CoM\x00rest";
        let (name, end) = NameBuf::parse(msg, 2).unwrap();
        assert_eq!(name.as_wire(), b"\x03www\x07example\x03com\x00");
        assert_eq!(end, 19);
        assert_eq!(name.label_count(), 4);
        assert_eq!(name.label_start(1), 4);
        assert_eq!(name.label_start(3), 16);
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!(NameBuf::parse(b"\x03ww", 0).err(), Some(NameError::Truncated));
        assert_eq!(NameBuf::parse(b"\xc0\x0c", 0).err(), Some(NameError::BadLabel));
        assert_eq!(NameBuf::parse(b"\x40", 0).err(), Some(NameError::BadLabel));
        let mut long = Vec::new();
        for _ in 0..5 {
            long.push(63);
            long.extend([b'a'; 63]);
        }
        long.push(0);
        assert_eq!(NameBuf::parse(&long, 0).err(), Some(NameError::TooLong));
        assert_eq!(skip(b"\x01a\xc0\x00", 0), Ok(4));
    }

    #[test]
    fn label_offsets_of_zone_names() {
        let starts: Vec<_> = label_starts(b"\x03www\x07example\x00").collect();
        assert_eq!(starts, vec![0, 4, 12]);
    }
}
