//! Real recursive resolvers for the tests: BIND 9 (`named`), Unbound and Knot Resolver
//! (`kresd`), each in a network namespace of the test's, listening on 127.0.0.1:53
//! there, logging to a file in its directory, killed by its PID on drop. The tests
//! write what differs (trust anchors, stub zones); the common heads are here.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Which resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// BIND 9.
    Bind,
    /// Unbound.
    Unbound,
    /// Knot Resolver.
    Knot,
}

impl Kind {
    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            Kind::Bind => "named",
            Kind::Unbound => "unbound",
            Kind::Knot => "kresd",
        }
    }

    /// Its command line for the configuration file `conf`, run from `dir`.
    fn argv(self, conf: &Path, dir: &Path) -> Vec<String> {
        let conf = conf.display().to_string();
        match self {
            Kind::Bind => vec!["named".into(), "-g".into(), "-4".into(), "-c".into(), conf],
            Kind::Unbound => vec!["unbound".into(), "-d".into(), "-c".into(), conf],
            Kind::Knot => vec![
                "kresd".into(),
                "-n".into(),
                "-c".into(),
                conf,
                dir.display().to_string(),
            ],
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.program())
    }
}

/// A resolver process.
pub struct Resolver {
    child: Child,
    kind: Kind,
    log: PathBuf,
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Resolver {
    /// Starts `kind` in namespace `ns` with `config` (written to `dir/KIND.conf`), its
    /// output to `dir/KIND.log`, and waits (at most 30 s) until `ready()` holds — a query
    /// through it that answers as the test needs. Stale pid files in `dir` (a resolver
    /// started there before) are removed first.
    pub fn start(ns: &str, kind: Kind, dir: &Path, config: &str, ready: impl Fn() -> bool) -> Resolver {
        let conf = dir.join(format!("{kind:?}.conf"));
        let log = dir.join(format!("{kind:?}.log"));
        let _ = std::fs::remove_file(dir.join("named.pid"));
        let _ = std::fs::remove_file(dir.join("unbound.pid"));
        std::fs::write(&conf, config).expect("resolver configuration written");
        let file = std::fs::File::create(&log).expect("resolver log");
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(kind.argv(&conf, dir))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("resolver log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{} (scripts/setup-ops installs it): {e}", kind.program()));
        let mut resolver = Resolver { child, kind, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            if let Ok(Some(status)) = resolver.child.try_wait() {
                panic!("{kind:?} exited ({status}):\n{}", resolver.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{kind:?} did not start:\n{}",
                resolver.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        resolver
    }

    /// Which resolver it is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The head of a `named.conf` `options` block for a resolver in `dir` on 127.0.0.1:53
/// (IPv4 only, recursion for anyone); `extra` lines go inside the block. The test adds
/// the closing `};` and its zones after it.
pub fn bind_options(dir: &Path, extra: &[&str]) -> String {
    let mut conf = format!(
        r#"options {{
    directory "{dir}";
    pid-file "{dir}/named.pid";
    managed-keys-directory "{dir}";
    listen-on port 53 {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion yes;
    allow-query {{ any; }};
    allow-recursion {{ any; }};
"#,
        dir = dir.display()
    );
    for line in extra {
        let _ = writeln!(conf, "    {line}");
    }
    conf.push_str("};\n");
    conf
}

/// The head of an `unbound.conf` `server:` clause for a resolver in `dir` on
/// 127.0.0.1:53 (IPv4 only, in the foreground, logging to its output); `extra` lines go
/// inside the clause. The test adds its stub zones after it.
pub fn unbound_server(dir: &Path, extra: &[&str]) -> String {
    unbound_server_on(dir, 53, extra)
}

/// [`unbound_server`] on 127.0.0.1:`port`.
pub fn unbound_server_on(dir: &Path, port: u16, extra: &[&str]) -> String {
    let mut conf = format!(
        r#"server:
    interface: 127.0.0.1
    port: {port}
    do-ip6: no
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{dir}"
    pidfile: "{dir}/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
"#,
        dir = dir.display()
    );
    for line in extra {
        let _ = writeln!(conf, "    {line}");
    }
    conf
}
