//! Operator state (overrides, external statuses, shifts) survives restarts (SPEC §5):
//! written as JSON to `STATE_DIR/operator.json` atomically after every change. What
//! steering has learnt (smoothed round trips, latency choices, load figures) is kept in
//! `STATE_DIR/steering.json`, written every [`STEERING_EVERY`] and at shutdown, so a
//! restart (an upgrade) neither moves a latency set nor restores a shed weight.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use crate::operator::OperatorState;

const FILE: &str = "operator.json";
const STEERING: &str = "steering.json";

/// How often what steering learnt is saved.
pub const STEERING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Saved steering older than this is not taken back (the paths and loads have moved).
pub const STEERING_MAX_AGE_SECS: u64 = 3600;

/// What steering has learnt, as saved.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Steering {
    /// Unix seconds when saved.
    pub saved_at: u64,
    /// Smoothed round trips per check and region.
    pub round_trips: Vec<crate::round_trips::SavedRoundTrip>,
    /// Each latency set's choice: (owner wire, type), member index.
    pub choices: Vec<(crate::latency::SetKey, u32)>,
    /// Load figures: check, checker, thousandths, age in seconds when saved.
    pub loads: Vec<(String, String, u32, u64)>,
}

/// Saves what steering learnt (temp file, fsync, rename).
pub fn save_steering(dir: &Path, steering: &Steering) -> io::Result<()> {
    write_private(dir, STEERING, &serde_json::to_vec(steering).map_err(io::Error::other)?)
}

/// What steering learnt before the last stop, unless it is missing, damaged (logged)
/// or older than [`STEERING_MAX_AGE_SECS`].
#[must_use]
pub fn load_steering(dir: &Path, now: u64) -> Option<Steering> {
    let path = dir.join(STEERING);
    let text = fs::read(&path).ok()?;
    match serde_json::from_slice::<Steering>(&text) {
        Ok(s) if now.saturating_sub(s.saved_at) <= STEERING_MAX_AGE_SECS => Some(s),
        Ok(s) => {
            tracing::info!(
                saved_at = s.saved_at,
                "saved steering is over an hour old: measuring afresh"
            );
            None
        }
        Err(err) => {
            tracing::warn!(%err, path = %path.display(), "saved steering unreadable: measuring afresh");
            None
        }
    }
}

/// Why the operator state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// The operator state file exists but cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The operator state file is damaged.
    #[error("{}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: serde_json::Error,
    },
    /// The operator state could not be written.
    #[error("cannot persist operator state in {}: {source}", .dir.display())]
    Save {
        /// The state directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Loads the operator state; a missing file is an empty state, a damaged one an error.
pub fn load(dir: &Path) -> Result<OperatorState, PersistError> {
    let path = dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<OperatorState>(&text) {
            Ok(mut state) => {
                state.arm();
                Ok(state)
            }
            Err(source) => Err(PersistError::Parse { path, source }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(OperatorState::default()),
        Err(source) => Err(PersistError::Read { path, source }),
    }
}

/// Saves the operator state (temp file, fsync, rename); a failed write removes its
/// temporary file, and the previous file stays whole.
pub fn save(dir: &Path, state: &OperatorState) -> io::Result<()> {
    write_private(dir, FILE, &serde_json::to_vec_pretty(state).map_err(io::Error::other)?)
}

/// Writes `text` as `dir/name`, readable by its owner only, replacing it whole
/// (`qdns_link::protocol::write_private`).
pub(crate) fn write_private(dir: &Path, name: &str, text: &[u8]) -> io::Result<()> {
    qdns_link::protocol::write_private(&dir.join(name), text)
}
