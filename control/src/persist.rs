//! Operator state (overrides, external statuses, shifts) survives restarts (SPEC §5):
//! written as JSON to `STATE_DIR/operator.json` atomically after every change.
use std::{fs, io, path::Path};

use crate::state::{OperatorState, State};

const FILE: &str = "operator.json";

/// Loads the operator state; a missing file is an empty state, a damaged one an error.
pub fn load(dir: &Path) -> Result<OperatorState, String> {
    let path = dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(|mut state: OperatorState| {
                state.arm();
                state
            })
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(OperatorState::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Saves `state`'s operator state to `dir`, keeping count: a failure is counted
/// (`qdns_control_persist_failures_total`), kept for `status` until a save succeeds,
/// logged and put in the timeline (once per episode). The caller decides whether the
/// change stands (see `handler::handle`).
pub fn save_operator(dir: &Path, state: &mut State) -> Result<(), String> {
    match save(dir, &state.operator.for_disk()) {
        Ok(()) => {
            if state.persist_error.take().is_some() {
                state.event("persist", format!("operator state saved to {} again", dir.display()));
            }
            Ok(())
        }
        Err(err) => {
            let message = format!("cannot persist operator state in {}: {err}", dir.display());
            state.counters.persist_failures += 1;
            tracing::error!("{message}");
            if state.persist_error.is_none() {
                state.event("persist", message.clone());
            }
            state.persist_error = Some(message.clone());
            Err(message)
        }
    }
}

/// Saves the operator state (temp file, fsync, rename); a failed write removes its
/// temporary file, and the previous file stays whole.
pub fn save(dir: &Path, state: &OperatorState) -> io::Result<()> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let text = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    let written = (|| {
        use io::Write as _;
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}
