//! Secret files that are not private are refused at start, naming the file, its mode
//! and the fix (issue 53 §7): the TSIG secret `tsig-keygen > FILE` leaves 0644 under the
//! usual umask, the checkers' keys, a checker's own key, the link's TLS key. The same
//! files made 0640 (`root:qdns-control`, as OPERATIONS says) are taken.
mod common;

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command, time::Duration};

use common::{Location, Proc};

const SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=";

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Control (or its checker role) with `args` exits at start, and says why.
fn refused(location: &Location, args: &[&str], file: &Path) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    if args.first() != Some(&"checker") {
        cmd.arg("--zones")
            .arg(location.zones())
            .arg("--socket")
            .arg(location.socket());
        cmd.arg("--state-dir").arg(location.dir.path().join("control-state"));
        cmd.arg("--edge-socket").arg(location.edge_socket());
        cmd.arg("--no-embedded-checker");
    }
    cmd.args(args);
    let mut proc = Proc::spawn("control", cmd);
    let status = proc.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "started with a 0644 secret: {args:?}");
    let said = proc.seen("mode 0644");
    assert!(said.contains(&file.display().to_string()), "{said}");
    assert!(said.contains("chmod 0640"), "{said}");
}

#[test]
fn secret_files_others_may_read_are_refused_and_private_ones_taken() {
    let mut location = Location::prepared();
    let dir = location.dir.path().to_owned();

    // A TSIG secret as tsig-keygen writes it.
    let tsig = dir.join("xfr.key");
    std::fs::write(
        &tsig,
        format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{SECRET}\";\n}};\n"),
    )
    .unwrap();
    chmod(&tsig, 0o644);
    let tsig_arg = format!("name=xfr-key,algorithm=hmac-sha256,secret_file={}", tsig.display());
    refused(&location, &["--tsig-keys", &tsig_arg], &tsig);

    // The checkers' keys at a location.
    let keys = dir.join("checkers.toml");
    std::fs::write(
        &keys,
        format!("[[checker]]\nid = \"c1\"\nregion = \"r1\"\nkey = \"{SECRET}\"\n"),
    )
    .unwrap();
    chmod(&keys, 0o644);
    let checkers_arg = keys.display().to_string();
    refused(
        &location,
        &["--checker-listen", "127.0.0.1:0", "--checker-keys", &checkers_arg],
        &keys,
    );

    // A checker's own key.
    let key = dir.join("c1.key");
    std::fs::write(&key, SECRET).unwrap();
    chmod(&key, 0o644);
    let zones = location.zones().display().to_string();
    let own_key_arg = key.display().to_string();
    refused(
        &location,
        &[
            "checker",
            "--id",
            "c1",
            "--region",
            "r1",
            "--zones",
            &zones,
            "--key-file",
            &own_key_arg,
            "--report-to",
            "fra=127.0.0.1:9",
        ],
        &key,
    );

    // Made 0640, as OPERATIONS says, control starts with all of them.
    for file in [&tsig, &keys] {
        chmod(file, 0o640);
    }
    location.start_control_with(&[
        "--no-embedded-checker",
        "--tsig-keys",
        &tsig_arg,
        "--checker-listen",
        "127.0.0.1:0",
        "--checker-keys",
        &checkers_arg,
    ]);
}
