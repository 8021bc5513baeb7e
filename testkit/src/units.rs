//! Running a daemon as its systemd unit would, on machines where systemd does not run
//! the units: under the unit's system call filter (`testkit/bin/seccomp-run`, which
//! applies the `SystemCallFilter=` lines with libseccomp as systemd merges them) and
//! with the soft open-file limit at the hard one, as `LimitNOFILE=` sets it (so the
//! daemon has nothing to raise with `setrlimit`, which the filter refuses).
use std::path::{Path, PathBuf};

/// The unit file `name` (`qdns-edge`) as this repository ships it.
#[must_use]
pub fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../contrib/systemd/{name}.service"))
}

/// The command words to put before a daemon's own to run it under `unit_file`'s filter.
#[must_use]
pub fn filtered(unit_file: &Path) -> Vec<String> {
    let filter = Path::new(env!("CARGO_MANIFEST_DIR")).join("bin/seccomp-run");
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        "ulimit -Sn $(ulimit -Hn) && exec \"$@\"".to_owned(),
        "sh".to_owned(),
        filter.display().to_string(),
        unit_file.display().to_string(),
        "--".to_owned(),
    ]
}
