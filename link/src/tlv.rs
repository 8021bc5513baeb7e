//! Type–length–value entries: how the edge's hello and the checker's report carry the
//! fields added since their last positional version (the way QUIC transport parameters
//! and EDNS options do). An entry is its id (u16, big-endian), the length of its value
//! (u32, big-endian) and the value (postcard). A reader takes the ids it knows and skips
//! the others, so a field is added by giving it the next free id — no version to bump,
//! no form to freeze — and a reader that predates it reads the rest as before.
//!
//! Entries are read only from a frame that is already bounded (the hello's, the
//! report's); a length past the end or an id given twice makes the whole list
//! malformed.
use serde::{de::DeserializeOwned, Serialize};

/// Octets before an entry's value: its id and its length.
const HEAD: usize = 2 + 4;

/// Why entries could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlvError {
    /// An entry runs past the end of the octets.
    #[error("entry {id} runs past the end")]
    Truncated {
        /// Its id (0 when even the head is cut short).
        id: u16,
    },
    /// An id is given twice.
    #[error("entry {id} given twice")]
    Duplicate {
        /// The id.
        id: u16,
    },
    /// A known entry's value does not decode as its type.
    #[error("entry {id} does not decode: {reason}")]
    Value {
        /// The id.
        id: u16,
        /// postcard's reason.
        reason: String,
    },
    /// A value does not encode (postcard).
    #[error("entry {id} does not encode: {reason}")]
    Encode {
        /// The id.
        id: u16,
        /// postcard's reason.
        reason: String,
    },
}

/// Entries being written, in the order given.
#[derive(Debug, Default)]
pub struct Writer {
    octets: Vec<u8>,
}

impl Writer {
    /// Appends entry `id` holding `value`.
    ///
    /// # Errors
    /// When `value` does not encode, or is 4 GiB or more.
    pub fn put<T: Serialize>(&mut self, id: u16, value: &T) -> Result<(), TlvError> {
        let encode = |reason: String| TlvError::Encode { id, reason };
        let value = postcard::to_stdvec(value).map_err(|e| encode(e.to_string()))?;
        let len = u32::try_from(value.len()).map_err(|_| encode("over 4 GiB".into()))?;
        self.octets.extend_from_slice(&id.to_be_bytes());
        self.octets.extend_from_slice(&len.to_be_bytes());
        self.octets.extend_from_slice(&value);
        Ok(())
    }

    /// The entries' octets.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        self.octets
    }
}

/// Entries read from octets: each id with its value's octets.
#[derive(Debug, PartialEq, Eq)]
pub struct Entries<'a> {
    entries: Vec<(u16, &'a [u8])>,
}

impl<'a> Entries<'a> {
    /// Splits `octets` (all of them) into entries.
    ///
    /// # Errors
    /// When an entry runs past the end or an id is given twice.
    pub fn read(mut octets: &'a [u8]) -> Result<Entries<'a>, TlvError> {
        let mut entries: Vec<(u16, &[u8])> = Vec::new();
        while !octets.is_empty() {
            let (head, rest) = octets.split_at_checked(HEAD).ok_or(TlvError::Truncated { id: 0 })?;
            let id = u16::from_be_bytes([head[0], head[1]]);
            let len = u32::from_be_bytes([head[2], head[3], head[4], head[5]]) as usize;
            let (value, rest) = rest.split_at_checked(len).ok_or(TlvError::Truncated { id })?;
            if entries.iter().any(|&(seen, _)| seen == id) {
                return Err(TlvError::Duplicate { id });
            }
            entries.push((id, value));
            octets = rest;
        }
        Ok(Entries { entries })
    }

    /// Entry `id`'s value, `None` when there is no such entry (a writer that predates
    /// it). The value must span the entry exactly.
    ///
    /// # Errors
    /// When the entry is there and does not decode as a `T`.
    pub fn get<T: DeserializeOwned>(&self, id: u16) -> Result<Option<T>, TlvError> {
        let Some(&(_, value)) = self.entries.iter().find(|&&(seen, _)| seen == id) else {
            return Ok(None);
        };
        let invalid = |reason: String| TlvError::Value { id, reason };
        match postcard::take_from_bytes::<T>(value) {
            Ok((decoded, [])) => Ok(Some(decoded)),
            Ok(_) => Err(invalid("octets left over".into())),
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// The ids read, in order (those this build knows and those it skips).
    pub fn ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.entries.iter().map(|&(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_unknown_ids_are_skipped() {
        let mut writer = Writer::default();
        writer.put(1, &5u16).unwrap();
        writer.put(900, &"from a later version").unwrap();
        writer.put(2, &vec![(b"a".to_vec(), 7u64)]).unwrap();
        let octets = writer.finish();
        // Golden: id, length, postcard value.
        assert_eq!(octets[..7], [0, 1, 0, 0, 0, 1, 5]);
        let entries = Entries::read(&octets).unwrap();
        assert_eq!(entries.get::<u16>(1).unwrap(), Some(5));
        assert_eq!(
            entries.get::<Vec<(Vec<u8>, u64)>>(2).unwrap(),
            Some(vec![(b"a".to_vec(), 7)])
        );
        assert_eq!(entries.get::<u16>(3).unwrap(), None);
        assert_eq!(entries.ids().collect::<Vec<_>>(), [1, 900, 2]);
        assert_eq!(Entries::read(&[]).unwrap().ids().count(), 0);
    }

    #[test]
    fn malformed_entries_are_refused() {
        let mut writer = Writer::default();
        writer.put(1, &5u16).unwrap();
        let one = writer.finish();
        assert_eq!(Entries::read(&one[..3]), Err(TlvError::Truncated { id: 0 }));
        let mut long = one.clone();
        long[5] = 9;
        assert_eq!(Entries::read(&long), Err(TlvError::Truncated { id: 1 }));
        let twice = [one.clone(), one.clone()].concat();
        assert_eq!(Entries::read(&twice), Err(TlvError::Duplicate { id: 1 }));
        // A value that is not its id's type, or leaves octets over.
        let entries = Entries::read(&one).unwrap();
        assert!(matches!(entries.get::<String>(1), Err(TlvError::Value { id: 1, .. })));
        let mut writer = Writer::default();
        writer.put(1, &(5u16, 6u16)).unwrap();
        let pair = writer.finish();
        assert!(matches!(
            Entries::read(&pair).unwrap().get::<u16>(1),
            Err(TlvError::Value { id: 1, .. })
        ));
    }
}
