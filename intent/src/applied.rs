//! The last revision a control applied, kept under its state directory (`intent/`):
//! `applied` (the revision), `rev-N/` (that revision's zone directory, which control
//! loads) and `chunks/` (the chunks read, so a later revision fetches only new ones).
//! A control started while the store is down serves what `applied` names.
use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::{files, Intent, IntentError};

/// A control's applied intent on disk.
#[derive(Debug, Clone)]
pub struct Applied {
    dir: PathBuf,
}

impl Applied {
    /// The applied intent under `state_dir`.
    #[must_use]
    pub fn under(state_dir: &Path) -> Applied {
        Applied {
            dir: state_dir.join("intent"),
        }
    }

    /// The revision applied last; `None` before the first.
    #[must_use]
    pub fn revision(&self) -> Option<u64> {
        fs::read_to_string(self.dir.join("applied")).ok()?.trim().parse().ok()
    }

    /// When the revision applied last was recorded (Unix seconds): the store answered
    /// then at least.
    #[must_use]
    pub fn committed_at(&self) -> Option<u64> {
        let modified = fs::metadata(self.dir.join("applied")).ok()?.modified().ok()?;
        modified.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs())
    }

    /// The zone directory of `revision`.
    #[must_use]
    pub fn zones_dir(&self, revision: u64) -> PathBuf {
        self.dir.join(format!("rev-{revision}"))
    }

    /// Where chunks read from the store are kept.
    #[must_use]
    pub fn chunks(&self) -> PathBuf {
        self.dir.join("chunks")
    }

    /// Writes `intent` as its zone directory (unless there already) for control to
    /// load; nothing is applied until [`Applied::commit`].
    ///
    /// # Errors
    /// A file that cannot be written, or a path from the store outside the directory.
    pub fn stage(&self, intent: &Intent) -> Result<PathBuf, IntentError> {
        let dir = self.zones_dir(intent.revision);
        if dir.is_dir() {
            return Ok(dir);
        }
        fs::create_dir_all(&self.dir).map_err(|e| IntentError::io(&self.dir, e))?;
        files::write_dir(&intent.files, &dir)?;
        Ok(dir)
    }

    /// Drops a staged revision control refused.
    pub fn discard(&self, revision: u64) {
        if self.revision() != Some(revision) {
            let _ = fs::remove_dir_all(self.zones_dir(revision));
        }
    }

    /// Records `revision` as applied (atomically), and removes the zone directories of
    /// the others.
    ///
    /// # Errors
    /// When the record cannot be written.
    pub fn commit(&self, revision: u64) -> Result<(), IntentError> {
        let path = self.dir.join("applied");
        qdns_link::protocol::write_private(&path, format!("{revision}\n").as_bytes())
            .map_err(|e| IntentError::io(&path, e))?;
        if let Ok(entries) = fs::read_dir(&self.dir) {
            let keep = format!("rev-{revision}");
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("rev-") && name != keep {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_revision_counts_once_committed() {
        let state = tempfile::tempdir().unwrap();
        let applied = Applied::under(state.path());
        assert_eq!(applied.revision(), None);
        let intent = |revision: u64| Intent {
            revision,
            message: String::new(),
            files: files::Files::from([("z.toml".to_owned(), format!("{revision}").into_bytes())]),
            signed: std::collections::BTreeMap::new(),
        };
        let dir = applied.stage(&intent(5)).unwrap();
        assert_eq!(fs::read(dir.join("z.toml")).unwrap(), b"5");
        assert_eq!(applied.revision(), None, "staged, not applied");
        applied.commit(5).unwrap();
        assert_eq!(applied.revision(), Some(5));
        // A later one refused: discarded, 5 stays.
        applied.stage(&intent(9)).unwrap();
        applied.discard(9);
        assert!(!applied.zones_dir(9).exists());
        applied.stage(&intent(12)).unwrap();
        applied.commit(12).unwrap();
        assert_eq!(applied.revision(), Some(12));
        assert!(!applied.zones_dir(5).exists() && applied.zones_dir(12).is_dir());
    }
}
