//! The Debian package (`scripts/package`), built from this build's binaries, installed
//! with `dpkg -i` on this machine (needs root, as CI has): the binaries run, the shipped
//! settings pass `--check-config`, `systemd-analyze verify` accepts the units, the
//! daemons' users exist and are kept apart (control and the edge run from the installed
//! settings as their users: the edge's user reads nothing of control's and cannot use
//! its socket, a `qdns-admin` member can, and is named in the timeline); then the
//! package is purged again.
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
        users_are_kept_apart();
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
        exposure_is_held();
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
    // What systemd's RuntimeDirectory= would have made for the daemons run above.
    let _ = std::fs::remove_dir_all("/run/qdns");
    let _ = std::fs::remove_dir_all("/run/qdns-edge");
    let (purged, text) = run("dpkg", &["--purge", "qdns"]);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(purged, "dpkg --purge:\n{text}");
    assert!(!std::path::Path::new("/usr/bin/qdns-edge").exists());
    for user in ["qdns-control", "qdns-edge", "qdns-anycast"] {
        let (exists, _) = run("getent", &["passwd", user]);
        assert!(!exists, "the {user} user is removed on purge");
    }
}

/// systemd's exposure score of each unit (lower is better; Debian's knot.service
/// scores 7.0, nsd 5.0, gdnsd 6.1): printed for OPERATIONS.md, and held where it is.
fn exposure_is_held() {
    for (unit, ceiling) in [("qdns-control", 1.4), ("qdns-edge", 1.9), ("qdns-anycast", 1.3)] {
        let path = format!("/lib/systemd/system/{unit}.service");
        let (_, text) = run("systemd-analyze", &["security", "--offline=true", &path]);
        let overall = text
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or_else(|| panic!("{unit}: no exposure level in\n{text}"));
        eprintln!("{overall}");
        let score: f64 = overall
            .split(": ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{unit}: {overall}"));
        assert!(score <= ceiling, "{unit} exposure {score} over {ceiling}");
    }
}

/// `args` run as `user` (group: the user's own, `nogroup` for `nobody`; `groups` as
/// supplementary groups, else the user's), the way a unit's `User=`, `Group=` and
/// `SupplementaryGroups=` run it.
fn as_user(user: &str, groups: &str, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    let group = if user == "nobody" { "nogroup" } else { user };
    command.args(["--reuid", user, "--regid", group]);
    if groups.is_empty() {
        command.arg("--init-groups");
    } else {
        command.args(["--groups", groups]);
    }
    command.arg("--").args(args);
    command
}

/// The daemon `args` run as `user` (see [`as_user`]) under the system call filter its
/// installed unit declares, as systemd applies it (`qdns_testkit::units`).
fn as_unit(unit: &str, user: &str, groups: &str, args: &[&str]) -> Command {
    let filtered = qdns_testkit::units::filtered(std::path::Path::new(&format!("/lib/systemd/system/{unit}.service")));
    let mut wrapped: Vec<&str> = filtered.iter().map(String::as_str).collect();
    wrapped.extend_from_slice(args);
    as_user(user, groups, &wrapped)
}

/// The edge at `dns` answers over UDP and TCP.
fn serves(dns: std::net::SocketAddr) {
    for transport in ["+notcp", "+tcp"] {
        let (asked, text) = run(
            "dig",
            &[
                &format!("@{}", dns.ip()),
                "-p",
                &dns.port().to_string(),
                transport,
                "+short",
                "+time=2",
                "www.example.com.",
                "A",
            ],
        );
        assert!(asked && text.contains("192.0.2.10"), "{transport}: {text}");
    }
}

fn output(mut command: Command) -> (bool, String) {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Control and the edge from the installed settings, each as its own user; the edge's
/// user cannot read control's state nor use its socket; an admin can, and is named.
fn users_are_kept_apart() {
    for user in ["qdns-control", "qdns-edge", "qdns-anycast"] {
        let (exists, text) = run("getent", &["passwd", user]);
        assert!(exists, "the {user} system user: {text}");
    }
    let (exists, text) = run("getent", &["group", "qdns-admin"]);
    assert!(exists, "the qdns-admin group: {text}");
    let (_, text) = run("stat", &["-c", "%a %U", "/var/lib/qdns/control", "/var/lib/qdns/edge"]);
    assert_eq!(text, "700 qdns-control\n700 qdns-edge\n", "state directories");
    // The runtime directories as the units' RuntimeDirectory= make them.
    for (dir, owner, mode) in [
        ("/run/qdns", "qdns-control", "0711"),
        ("/run/qdns-edge", "qdns-edge", "0700"),
    ] {
        let (made, text) = run("install", &["-d", "-o", owner, "-g", owner, "-m", mode, dir]);
        assert!(made, "{dir}: {text}");
    }
    // No embedded checker: the example zone's checks would probe addresses off this host.
    let control = qdns_testkit::daemon::Daemon::spawn(
        "control",
        as_unit(
            "qdns-control",
            "qdns-control",
            "qdns-admin,qdns-edge",
            &[
                "/usr/bin/qdns-control",
                "--config",
                "/etc/qdns/control.toml",
                "--no-embedded-checker",
            ],
        ),
    );
    control.wait_for("control socket ready");
    let (_, text) = run(
        "stat",
        &["-c", "%a %G", "/run/qdns/control.sock", "/run/qdns/edge.sock"],
    );
    assert_eq!(text, "660 qdns-admin\n660 qdns-edge\n", "socket modes and groups");
    let edge = qdns_testkit::daemon::Daemon::spawn(
        "edge",
        as_unit(
            "qdns-edge",
            "qdns-edge",
            "",
            &[
                "/usr/bin/qdns-edge",
                "--config",
                "/etc/qdns/edge.toml",
                "--listen",
                "127.0.0.1:0",
            ],
        ),
    );
    let listening = edge.wait_for("listening");
    edge.wait_for("snapshot applied");
    serves(common::listening_addr(&listening));

    let (listed, text) = output(as_user("qdns-edge", "", &["ls", "/var/lib/qdns/control"]));
    assert!(
        !listed && text.contains("Permission denied"),
        "the edge's user lists control's state: {text}"
    );
    let (asked, text) = output(as_user(
        "qdns-edge",
        "",
        &["/usr/bin/qdnsctl", "--socket", "/run/qdns/control.sock", "status"],
    ));
    assert!(
        !asked && text.contains("ermission denied"),
        "the edge's user uses the control socket: {text}"
    );
    // The anycast watchdog's user is no admin either.
    let (asked, _) = output(as_user("qdns-anycast", "", &["/usr/bin/qdnsctl", "status"]));
    assert!(!asked, "the watchdog's user uses the control socket");

    // A qdns-admin member may, and a change is logged with who made it.
    let (reloaded, text) = output(as_user("nobody", "qdns-admin", &["/usr/bin/qdnsctl", "reload"]));
    assert!(reloaded, "qdnsctl reload as a qdns-admin member: {text}");
    let (listed, text) = output(as_user("nobody", "qdns-admin", &["/usr/bin/qdnsctl", "events"]));
    assert!(
        listed && text.contains("(by nobody (pid "),
        "the timeline names the operator: {text}"
    );
    // The reload reached the edge through the filter too; nothing either daemon did was
    // refused by it (a refused call fails with EPERM, "Operation not permitted").
    edge.wait_for("snapshot applied");
    for (name, daemon) in [("control", &control), ("edge", &edge)] {
        assert!(
            !daemon.history_has("Operation not permitted") && !daemon.history_has("os error 1)"),
            "{name}: a system call was refused: {}",
            daemon.seen("Operation not permitted")
        );
    }
    drop(edge);
    drop(control);
}
