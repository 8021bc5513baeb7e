//! The Debian package (`scripts/package`), built from this build's binaries, installed
//! with `dpkg -i` on this machine (needs root, as CI has): the binaries run, the shipped
//! settings pass `--check-config`, `systemd-analyze verify` accepts the units, the
//! `qdns` user exists; then the package is purged again.
mod common;

use std::{path::PathBuf, process::Command};

use common::edge_bin;
use qdns_testkit::require_root;

/// The workspace's root and this profile's binary directory, with qdns-edge built in it
/// (control's own binaries are built for its tests already).
fn binaries() -> (PathBuf, PathBuf) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = edge_bin().parent().expect("binary directory").to_path_buf();
    (root, dir)
}

fn run(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_debian_package_installs_runs_and_its_units_verify() {
    require_root("dpkg -i");
    let (root, bin_dir) = binaries();
    let out = tempfile::tempdir().unwrap();
    let (built, text) = run(
        "bash",
        &[
            root.join("scripts/package").to_str().unwrap(),
            "--bin-dir",
            bin_dir.to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
            "--compress",
            "none",
        ],
    );
    assert!(built, "scripts/package:\n{text}");
    let deb = text.lines().last().expect("the package's path").trim().to_owned();
    let (listed, contents) = run("dpkg-deb", &["--contents", &deb]);
    assert!(listed, "{contents}");
    for path in [
        "./usr/bin/qdns-edge",
        "./usr/bin/qdns-control",
        "./usr/bin/qdnsctl",
        "./lib/systemd/system/qdns-edge.service",
        "./lib/systemd/system/qdns-control.service",
        "./lib/systemd/system/qdns-anycast.service",
        "./etc/qdns/edge.toml",
        "./etc/qdns/anycast.env",
        "./etc/qdns/control.toml",
        "./etc/qdns/zones/example.com.toml",
        "./usr/share/bash-completion/completions/qdnsctl",
    ] {
        assert!(contents.contains(path), "{path} missing from the package:\n{contents}");
    }

    let (installed, text) = run("dpkg", &["-i", &deb]);
    assert!(installed, "dpkg -i:\n{text}");
    let result = std::panic::catch_unwind(|| {
        let (user, text) = run("getent", &["passwd", "qdns"]);
        assert!(user, "the qdns system user: {text}");
        for bin in ["/usr/bin/qdns-edge", "/usr/bin/qdns-control", "/usr/bin/qdnsctl"] {
            let (ran, text) = run(bin, &["--help"]);
            assert!(ran && text.contains("Usage:"), "{bin} --help:\n{text}");
        }
        let (ok, text) = run(
            "/usr/bin/qdns-control",
            &["--config", "/etc/qdns/control.toml", "--check-config"],
        );
        assert!(ok && text.contains("configuration ok; 1 zones"), "{text}");
        let (ok, text) = run(
            "/usr/bin/qdns-edge",
            &["--config", "/etc/qdns/edge.toml", "--check-config"],
        );
        assert!(ok && text.contains("configuration ok"), "{text}");
        // bash completes qdnsctl's commands from the installed script.
        let (ok, text) = run(
            "bash",
            &[
                "-c",
                "source /usr/share/bash-completion/completions/qdnsctl && COMP_WORDS=(qdnsctl ex) && COMP_CWORD=1 \
                 && _qdnsctl qdnsctl ex qdnsctl && echo \"${COMPREPLY[*]}\"",
            ],
        );
        assert!(
            ok && text.split_whitespace().any(|w| w == "explain"),
            "completion of `qdnsctl ex`: {text}"
        );
        let (verified, text) = run(
            "systemd-analyze",
            &[
                "verify",
                "/lib/systemd/system/qdns-control.service",
                "/lib/systemd/system/qdns-edge.service",
                "/lib/systemd/system/qdns-anycast.service",
            ],
        );
        assert!(verified && text.trim().is_empty(), "systemd-analyze verify:\n{text}");
        // A broken unit fails the same check (so the check can fail).
        let broken = out.path().join("qdns-broken.service");
        std::fs::write(
            &broken,
            "[Service]\nType=notify\nExecStart=/usr/bin/qdns-edge\nProtectSystem=sometimes\n",
        )
        .unwrap();
        let (verified, text) = run("systemd-analyze", &["verify", broken.to_str().unwrap()]);
        assert!(!verified || !text.trim().is_empty(), "a broken unit passed:\n{text}");
    });
    let (purged, text) = run("dpkg", &["--purge", "qdns"]);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(purged, "dpkg --purge:\n{text}");
    assert!(!std::path::Path::new("/usr/bin/qdns-edge").exists());
    let (user, _) = run("getent", &["passwd", "qdns"]);
    assert!(!user, "the qdns user is removed on purge");
}
