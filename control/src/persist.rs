//! Operator state (overrides, external statuses, shifts) survives restarts (SPEC §5):
//! written as JSON to `STATE_DIR/operator.json` atomically after every change.
use std::{fs, io, path::Path};

use crate::state::OperatorState;

const FILE: &str = "operator.json";

/// Loads the operator state; a missing file is an empty state, a damaged one an error.
pub fn load(dir: &Path) -> Result<OperatorState, String> {
    let path = dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(OperatorState::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Saves the operator state (temp file, fsync, rename).
pub fn save(dir: &Path, state: &OperatorState) -> io::Result<()> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let text = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    {
        use io::Write as _;
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
    }
    fs::rename(tmp, path)
}
