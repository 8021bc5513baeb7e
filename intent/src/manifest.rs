//! The manifest of one revision: each file as the names of its chunks.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Smallest chunk (but a file's last).
pub const MIN_CHUNK: u32 = 16 * 1024;
/// Chunk size aimed at: a change rewrites about this much around it.
pub const AVG_CHUNK: u32 = 64 * 1024;
/// Largest chunk: one put stays within etcd's 1.5 MiB request limit.
pub const MAX_CHUNK: u32 = 1024 * 1024;

/// Largest manifest read from the store (a million-record zone's is some tens of KiB).
pub const MAX_MANIFEST: usize = 8 << 20;

/// What one revision holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The publisher's message (`--message`).
    pub message: String,
    /// When it was published (Unix seconds).
    pub published_at: u64,
    /// Each file, by relative path.
    pub files: BTreeMap<String, FileEntry>,
    /// The zones that are signed (`dnssec = true`), by origin, with their algorithm's
    /// mnemonic: the keys a location needs before it signs ([`crate::store::Store::secret_or`]).
    #[serde(default)]
    pub signed: BTreeMap<String, String>,
}

/// One file of a revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its length in octets.
    pub size: u64,
    /// Its chunks in order, each by the lowercase hex SHA-256 of its octets.
    pub chunks: Vec<String>,
}

impl Manifest {
    /// True when both list the same files with the same content.
    #[must_use]
    pub fn same_files(&self, other: &Manifest) -> bool {
        self.files == other.files && self.signed == other.signed
    }
}

/// Lowercase hex SHA-256 of `data`.
#[must_use]
pub fn name(data: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(data)
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// `data` cut into content-defined chunks: (name, octets), in order. The cuts depend on
/// the content around them, so an edit moves the chunks it touches and no others.
#[must_use]
pub fn chunks(data: &[u8]) -> Vec<(String, &[u8])> {
    if data.is_empty() {
        return Vec::new();
    }
    fastcdc::v2020::FastCDC::new(data, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK)
        .map(|chunk| {
            let octets = &data[chunk.offset..chunk.offset + chunk.length];
            (name(octets), octets)
        })
        .collect()
}

/// The file entry of `data`.
#[must_use]
pub fn entry(data: &[u8]) -> FileEntry {
    FileEntry {
        size: data.len() as u64,
        chunks: chunks(data).into_iter().map(|(name, _)| name).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_moves_only_the_chunks_around_it() {
        // A zone-like text of ~4 MiB: lines that differ.
        let text = (0..120_000).fold(String::new(), |mut text, i| {
            use std::fmt::Write as _;
            let _ = writeln!(text, "h{i}.example. 300 IN A 192.0.2.{}", i % 250);
            text
        });
        let before = entry(text.as_bytes());
        assert!(before.chunks.len() > 30, "{}", before.chunks.len());
        let edited = text.replacen("h60000.example. 300", "h60000.example. 301", 1);
        let after = entry(edited.as_bytes());
        let moved = after.chunks.iter().filter(|c| !before.chunks.contains(c)).count();
        assert!(
            (1..=2).contains(&moved),
            "{moved} chunks moved of {}",
            after.chunks.len()
        );
        for (_, chunk) in chunks(text.as_bytes()) {
            assert!(chunk.len() <= MAX_CHUNK as usize);
        }
        assert_eq!(entry(b"").chunks.len(), 0);
        assert_eq!(
            name(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
