//! Real servers for the zone transfer tests, each on a free loopback port with its
//! output in a log file in its directory, killed by its PID on drop: knotd, NSD and
//! BIND 9 (`named`) as secondaries taking one zone from a primary by AXFR/IXFR with TSIG
//! and accepting its NOTIFY ([`Secondary`]); knotd and BIND as primaries serving a zone
//! file, taking dynamic updates (RFC 2136) signed with the key and notifying one
//! secondary ([`Primary`]).
use std::{
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::fixtures::free_port;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// Knot DNS.
    Knot,
    /// NSD.
    Nsd,
    /// BIND 9.
    Bind,
}

/// The TSIG key the secondary signs its requests with.
#[derive(Clone, Debug)]
pub struct TsigKey {
    /// Key name.
    pub name: String,
    /// `hmac-sha256` or `hmac-sha512`.
    pub algorithm: String,
    /// The secret, base64.
    pub secret: String,
}

/// A running secondary.
pub struct Secondary {
    child: Child,
    /// Which server.
    pub server: Server,
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Secondary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Secondary {
    /// Starts `server` in `dir` (made if missing) as a secondary of `primary` for
    /// `zone` (`"xfr.example"`), on `port` (0: a free one). Returns once it answers on
    /// its port (the zone may not be transferred yet).
    pub fn start(server: Server, dir: &Path, zone: &str, primary: SocketAddr, key: &TsigKey, port: u16) -> Secondary {
        Secondary::start_following(server, dir, zone, &[primary], key, port)
    }

    /// [`Secondary::start`] with several primaries, asked in order (knotd: one remote
    /// with every address; NSD: a `request-xfr` each; BIND: each in `primaries`), NOTIFY
    /// taken from each.
    pub fn start_following(
        server: Server,
        dir: &Path,
        zone: &str,
        primaries: &[SocketAddr],
        key: &TsigKey,
        port: u16,
    ) -> Secondary {
        let port = if port == 0 { free_port() } else { port };
        Secondary::start_following_on(
            server,
            dir,
            zone,
            primaries,
            key,
            SocketAddr::from(([127, 0, 0, 1], port)),
        )
    }

    /// [`Secondary::start_following`] answering on `addr` (an IPv4 address of the host
    /// other than loopback: one primaries in network namespaces send NOTIFY to).
    pub fn start_following_on(
        server: Server,
        dir: &Path,
        zone: &str,
        primaries: &[SocketAddr],
        key: &TsigKey,
        addr: SocketAddr,
    ) -> Secondary {
        std::fs::create_dir_all(dir.join("db")).expect("secondary directory");
        let conf = dir.join(format!("{server:?}.conf"));
        let log = dir.join(format!("{server:?}.log"));
        let (text, argv) = match server {
            Server::Knot => (
                knot_conf(dir, zone, primaries, key, addr),
                vec!["knotd".to_owned(), "-c".to_owned()],
            ),
            Server::Nsd => (
                nsd_conf(dir, zone, primaries, key, addr),
                vec!["nsd".to_owned(), "-d".to_owned(), "-c".to_owned()],
            ),
            Server::Bind => (
                bind_conf(dir, zone, primaries, key, addr),
                vec![
                    "named".to_owned(),
                    "-g".to_owned(),
                    "-4".to_owned(),
                    "-n".to_owned(),
                    "1".to_owned(),
                    "-c".to_owned(),
                ],
            ),
        };
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let child = spawn(&argv, dir, (&conf, &text), &log);
        let mut secondary = Secondary {
            child,
            server,
            addr,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = secondary.child.try_wait() {
                panic!("{server:?} exited ({status}):\n{}", secondary.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{server:?} did not listen:\n{}",
                secondary.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        secondary
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Writes the configuration `conf` and runs `argv` with its path last, in `dir`, output
/// to `log`.
fn spawn(argv: &[&str], dir: &Path, (conf, text): (&Path, &str), log: &Path) -> Child {
    std::fs::write(conf, text).expect("configuration");
    let file = std::fs::File::create(log).expect("log");
    Command::new(argv[0])
        .args(&argv[1..])
        .arg(conf)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("{} (scripts/setup-peers and setup-resolvers install it): {e}", argv[0]))
}

fn knot_conf(dir: &Path, zone: &str, primaries: &[SocketAddr], key: &TsigKey, listen: SocketAddr) -> String {
    let (ip, port) = (listen.ip(), listen.port());
    let d = dir.display();
    let addresses: Vec<String> = primaries.iter().map(|p| format!("{}@{}", p.ip(), p.port())).collect();
    let mut ips: Vec<String> = primaries.iter().map(|p| p.ip().to_string()).collect();
    ips.dedup();
    format!(
        "server:\n    listen: {ip}@{port}\n    rundir: {d}\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
         database:\n    storage: {d}/db\n\
         log:\n  - target: stderr\n    any: info\n\
         key:\n  - id: {name}\n    algorithm: {alg}\n    secret: {secret}\n\
         remote:\n  - id: primary\n    address: [{addresses}]\n    key: {name}\n\
         acl:\n  - id: notify_from_primary\n    address: [{ips}]\n    key: {name}\n    action: notify\n\
         template:\n  - id: default\n    storage: {d}\n    zonefile-load: none\n    journal-content: changes\n\
         zone:\n  - domain: {zone}\n    master: primary\n    acl: notify_from_primary\n",
        name = key.name,
        alg = key.algorithm,
        secret = key.secret,
        addresses = addresses.join(", "),
        ips = ips.join(", "),
    )
}

fn nsd_conf(dir: &Path, zone: &str, primaries: &[SocketAddr], key: &TsigKey, listen: SocketAddr) -> String {
    let (ip, port) = (listen.ip(), listen.port());
    let d = dir.display();
    let name = &key.name;
    let mut from = String::new();
    for p in primaries {
        let _ = write!(
            from,
            "    request-xfr: {ip}@{pport} {name}\n    allow-notify: {ip} {name}\n",
            ip = p.ip(),
            pport = p.port()
        );
    }
    format!(
        "server:\n    ip-address: {ip}@{port}\n    username: \"\"\n    chroot: \"\"\n    zonesdir: \"{d}\"\n    \
         pidfile: \"{d}/nsd.pid\"\n    database: \"\"\n    xfrdfile: \"{d}/xfrd.state\"\n    zonelistfile: \"{d}/zone.list\"\n    \
         xfrdir: \"{d}\"\n    server-count: 1\n    verbosity: 2\n    logfile: \"{d}/nsd-internal.log\"\n\
         remote-control:\n    control-enable: no\n\
         key:\n    name: \"{name}\"\n    algorithm: {alg}\n    secret: \"{secret}\"\n\
         zone:\n    name: \"{zone}\"\n    zonefile: \"{zone}.zone\"\n{from}",
        alg = key.algorithm,
        secret = key.secret,
    )
}

fn bind_conf(dir: &Path, zone: &str, primaries: &[SocketAddr], key: &TsigKey, listen: SocketAddr) -> String {
    let (ip, port) = (listen.ip(), listen.port());
    let d = dir.display();
    let name = &key.name;
    let mut from = String::new();
    for p in primaries {
        let _ = write!(from, "{} port {} key \"{name}\"; ", p.ip(), p.port());
    }
    let mut notifiers: Vec<String> = primaries.iter().map(|p| format!("{}; ", p.ip())).collect();
    notifiers.dedup();
    let notifiers = notifiers.concat();
    format!(
        "options {{\n    directory \"{d}\";\n    pid-file \"{d}/named.pid\";\n    managed-keys-directory \"{d}\";\n    \
         listen-on port {port} {{ {ip}; }};\n    listen-on-v6 {{ none; }};\n    recursion no;\n    allow-query {{ any; }};\n    \
         notify no;\n    dnssec-validation no;\n}};\n\
         controls {{ }};\n\
         key \"{name}\" {{ algorithm {alg}; secret \"{secret}\"; }};\n\
         zone \"{zone}\" {{\n    type secondary;\n    primaries {{ {from}}};\n    file \"{d}/{zone}.db\";\n    \
         allow-notify {{ {notifiers}}};\n}};\n",
        alg = key.algorithm,
        secret = key.secret,
    )
}

/// A running primary.
pub struct Primary {
    child: Child,
    /// Which server.
    pub server: Server,
    /// Where it answers.
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Primary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Primary {
    /// Starts `server` (Knot or BIND) in `dir` as the primary of `zones` (name, zone
    /// file text; `"in.example"`), allowing transfers and updates signed with `key` and
    /// notifying `secondary`. Returns once it answers the first zone's SOA.
    pub fn start(server: Server, dir: &Path, zones: &[(&str, &str)], key: &TsigKey, secondary: SocketAddr) -> Primary {
        std::fs::create_dir_all(dir.join("db")).expect("primary directory");
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.display();
        let (name, alg, secret) = (&key.name, &key.algorithm, &key.secret);
        let (sip, sport) = (secondary.ip(), secondary.port());
        let mut knot_zones = String::from("zone:\n");
        let mut bind_zones = String::new();
        for (zone, master) in zones {
            std::fs::write(dir.join(format!("{zone}.zone")), master).expect("zone file");
            let _ = write!(
                knot_zones,
                "  - domain: {zone}\n    storage: {d}\n    file: {zone}.zone\n    notify: secondary\n    acl: out\n"
            );
            let _ = write!(
                bind_zones,
                "zone \"{zone}\" {{\n    type primary;\n    file \"{d}/{zone}.zone\";\n    allow-transfer {{ key \"{name}\"; }};\n    \
                 allow-update {{ key \"{name}\"; }};\n    also-notify {{ {sip} port {sport} key \"{name}\"; }};\n}};\n"
            );
        }
        let zone = zones.first().map_or("", |z| z.0);
        let (text, argv): (String, Vec<&str>) = match server {
            Server::Knot => (
                format!(
                    "server:\n    listen: 127.0.0.1@{port}\n    rundir: {d}\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
                     database:\n    storage: {d}/db\n\
                     log:\n  - target: stderr\n    any: info\n\
                     key:\n  - id: {name}\n    algorithm: {alg}\n    secret: {secret}\n\
                     remote:\n  - id: secondary\n    address: {sip}@{sport}\n    key: {name}\n\
                     acl:\n  - id: out\n    address: 127.0.0.0/8\n    key: {name}\n    action: [transfer, update]\n\
                     {knot_zones}"
                ),
                vec!["knotd", "-c"],
            ),
            Server::Bind | Server::Nsd => (
                format!(
                    "options {{\n    directory \"{d}\";\n    pid-file \"{d}/named.pid\";\n    managed-keys-directory \"{d}\";\n    \
                     listen-on port {port} {{ 127.0.0.1; }};\n    listen-on-v6 {{ none; }};\n    recursion no;\n    \
                     dnssec-validation no;\n    notify explicit;\n    notify-delay 0;\n    max-ixfr-ratio unlimited;\n}};\n\
                     controls {{ }};\n\
                     key \"{name}\" {{ algorithm {alg}; secret \"{secret}\"; }};\n{bind_zones}"
                ),
                vec!["named", "-g", "-4", "-n", "1", "-c"],
            ),
        };
        assert!(
            server != Server::Nsd,
            "NSD takes no dynamic updates: a primary here is Knot or BIND"
        );
        let conf = dir.join(format!("{server:?}-primary.conf"));
        let log = dir.join(format!("{server:?}-primary.log"));
        let child = spawn(&argv, dir, (&conf, &text), &log);
        let mut primary = Primary {
            child,
            server,
            addr,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let soa = Command::new("kdig")
                .args([
                    &format!("@{}", addr.ip()),
                    "-p",
                    &port.to_string(),
                    "+short",
                    "+timeout=1",
                    "SOA",
                    zone,
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if !soa.trim().is_empty() {
                return primary;
            }
            if let Ok(Some(status)) = primary.child.try_wait() {
                panic!("{server:?} exited ({status}):\n{}", primary.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{server:?} did not serve {zone}:\n{}",
                primary.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `updates` (nsupdate lines: `update add NAME TTL TYPE VALUE`, …) to the
    /// primary as one dynamic update signed with `key`; the primary moves its serial and
    /// notifies.
    pub fn update(&self, zone: &str, key: &TsigKey, updates: &[&str]) {
        use std::io::Write as _;
        let mut script = format!("server {} {}\nzone {zone}\n", self.addr.ip(), self.addr.port());
        for line in updates {
            script.push_str(line);
            script.push('\n');
        }
        script.push_str("send\n");
        let mut child = Command::new("nsupdate")
            .args(["-y", &format!("{}:{}:{}", key.algorithm, key.name, key.secret)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nsupdate (bind9-dnsutils)");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("nsupdate script");
        let out = child.wait_with_output().expect("nsupdate");
        assert!(
            out.status.success(),
            "nsupdate: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
