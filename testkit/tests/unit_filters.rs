//! The shipped units' system call filters (contrib/systemd/*.service), applied as systemd
//! applies them (`testkit/bin/seccomp-run`), refuse what no qdns daemon uses and an
//! attacker inside one would reach for (issue 53 §6): `io_uring` (`@aio`: a kernel
//! attack surface of its own, and a way around the filter's view of I/O), `userfaultfd`
//! (stalls the kernel mid-copy: the favourite of use-after-free exploits) and the
//! keyring calls (`@keyring`). The calls are made for real, with Python's `ctypes`, under
//! each unit's filter: refused with EPERM there, while an ordinary call still works.
use std::process::Command;

/// `x86_64` system call numbers, and what each is.
const REFUSED: [(i64, &str); 6] = [
    (425, "io_uring_setup"),
    (426, "io_uring_enter"),
    (323, "userfaultfd"),
    (248, "add_key"),
    (249, "request_key"),
    (250, "keyctl"),
];

/// Makes each call of [`REFUSED`] (arguments that would fail anyway, so nothing is set
/// up when a filter lets it through) and `getppid`; prints `NAME ERRNO` a line (0: it
/// returned without an error).
const PROBE: &str = r"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for number in map(int, sys.argv[1:]):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    print(number, ctypes.get_errno() if result == -1 else 0)
";

/// `call number → errno` for every call of [`REFUSED`] plus `getppid` (110) under
/// `unit`'s filter, or unfiltered when `unit` is `None`.
fn probe(unit: Option<&str>) -> Vec<(i64, i32)> {
    let numbers: Vec<String> = REFUSED
        .iter()
        .map(|(n, _)| n.to_string())
        .chain(["110".to_owned()])
        .collect();
    let mut words: Vec<String> = match unit {
        Some(unit) => qdns_testkit::units::filtered(&qdns_testkit::units::shipped(unit)),
        None => Vec::new(),
    };
    words.extend(["/usr/bin/python3".to_owned(), "-c".to_owned(), PROBE.to_owned()]);
    words.extend(numbers);
    let out = Command::new(&words[0])
        .args(&words[1..])
        .output()
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    assert!(
        out.status.success(),
        "{unit:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let mut words = line.split_whitespace().map(|w| w.parse::<i64>().unwrap());
            (words.next().unwrap(), i32::try_from(words.next().unwrap()).unwrap())
        })
        .collect()
}

#[test]
fn every_units_filter_refuses_io_uring_userfaultfd_and_the_keyring() {
    const EPERM: i32 = 1;
    // Unfiltered, the kernel takes every call far enough to say something else about
    // the arguments (so EPERM below is the filter's, not the kernel's).
    for (number, errno) in probe(None) {
        assert_ne!(errno, EPERM, "call {number} without a filter");
    }
    for unit in ["qdns-edge", "qdns-control", "qdns-anycast"] {
        let said = probe(Some(unit));
        for (number, name) in REFUSED {
            let errno = said.iter().find(|(n, _)| *n == number).map(|(_, e)| *e);
            assert_eq!(errno, Some(EPERM), "{unit}: {name} not refused ({said:?})");
        }
        assert_eq!(said.last(), Some(&(110, 0)), "{unit}: getppid refused");
    }
}
