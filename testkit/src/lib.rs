//! Test support shared by the integration tests of every crate (a dev-dependency only):
//! [`daemon::Daemon`] (a daemon under test and its log), [`fixtures`] (example zones,
//! free ports, metrics scrapes), [`netns`] (namespaces and veth pairs), [`Rng`],
//! [`require_root`], and the hostile crowds below.
//!
//!
//! [`Crowd`] is the hostile-network client the listener tests use: thousands of TCP
//! connections from many loopback source addresses (so per-source caps alone cannot
//! protect a listener), either idle or slowloris (a partial request, then one octet at
//! a time).
#![allow(clippy::missing_panics_doc, reason = "test support: a failure is the test failing")]
#![allow(
    clippy::must_use_candidate,
    reason = "test support: helpers are called for their effect as often as for their value"
)]

pub mod daemon;
pub mod delay_line;
pub mod dns;
pub mod etcd;
pub mod fixtures;
pub mod link_client;
pub mod mmdb;
pub mod netns;
pub mod resolvers;
pub mod transfer_peers;
pub mod units;

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    time::Duration,
};

/// A seeded xorshift generator (xorshift64*): reproducible noise for generated zones,
/// queries and hostile frames (print the seed; a failure replays from it).
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from `QDNS_TEST_SEED` when set (to replay a failed run), else from the
    /// clock; the seed is printed.
    pub fn from_env() -> Self {
        let seed = std::env::var("QDNS_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| Self::from_clock().0);
        eprintln!("seed {seed} (QDNS_TEST_SEED replays it)");
        Self(seed)
    }

    /// Seeded from the clock (not reproducible: for noise a test does not replay).
    pub fn from_clock() -> Self {
        Self(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1,
        )
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait, reason = "an endless generator, not an iterator")]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (not 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// `n` random octets.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Writes a secret file (a TSIG secret, checker keys) as an operator must: mode 0600.
/// The daemons refuse secret files others may read (`qdns_link::secret`).
///
/// # Panics
/// When the file cannot be written.
pub fn write_secret(path: &std::path::Path, contents: impl AsRef<[u8]>) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// True when the tests run as root (network namespaces, XDP, dpkg need it).
#[must_use]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails the test (never skips it) when not run as root: a green run must mean the
/// privileged parts were exercised. `needs` says what for.
pub fn require_root(needs: &str) {
    assert!(
        is_root(),
        "this test needs root ({needs}); run it as root, as .ci/run does"
    );
}

/// Raises this process's open-file limit to its hard limit (crowds hold thousands).
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit), 0);
    }
}

/// Resident memory of process `pid`, KiB.
#[must_use]
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// A TCP connection to `to` from the loopback address `source`.
#[must_use]
pub fn connect_from(source: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&SocketAddr::from((source, 0)).into()).ok()?;
    socket.connect_timeout(&to.into(), Duration::from_secs(2)).ok()?;
    Some(socket.into())
}

/// Whether the server closed `stream` (EOF or reset), without waiting: a stream still
/// open has nothing to read.
pub fn closed<S: Read + AsNonBlocking>(stream: &mut S) -> bool {
    stream.non_blocking();
    let mut buf = [0u8; 64];
    !matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Streams [`closed`] can poll.
pub trait AsNonBlocking {
    /// Puts the stream in non-blocking mode.
    fn non_blocking(&mut self);
}

impl AsNonBlocking for TcpStream {
    fn non_blocking(&mut self) {
        self.set_nonblocking(true).unwrap();
    }
}

impl AsNonBlocking for std::os::unix::net::UnixStream {
    fn non_blocking(&mut self) {
        self.set_nonblocking(true).unwrap();
    }
}

/// Waits (at most `limit`) until the server has closed all but `keep` of `streams`:
/// it has taken in the whole crowd, evicting what its caps do not hold. Returns how
/// many are still open.
pub fn settle<S: Read + AsNonBlocking>(streams: &mut [S], keep: usize, limit: Duration) -> usize {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let open = streams.iter_mut().map(closed).filter(|c| !c).count();
        if open <= keep || std::time::Instant::now() > deadline {
            return open;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `n` attacker source addresses, 127.1.X.Y, none of them a legitimate client's
/// (tests use 127.0.0.x for those).
#[must_use]
pub fn attacker_sources(n: usize) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8))
        .collect()
}

/// Idle and slowloris connections to one listener.
pub struct Crowd {
    /// Connections that send nothing.
    pub idle: Vec<TcpStream>,
    /// Connections that sent a partial request and dribble one octet at a time.
    pub slow: Vec<TcpStream>,
}

impl Crowd {
    /// Opens `idle` idle and `slow` slowloris connections to `to`, spread round-robin
    /// over `sources`; each slow one sends `opening` (a partial request) first. Counts
    /// what the listener let connect (the kernel completes handshakes before accept, so
    /// nearly all do).
    #[must_use]
    pub fn open(to: SocketAddr, idle: usize, slow: usize, sources: &[Ipv4Addr], opening: &[u8]) -> Crowd {
        let mut from = sources.iter().copied().cycle();
        let idle = (0..idle)
            .filter_map(|_| connect_from(from.next().unwrap_or(Ipv4Addr::LOCALHOST), to))
            .collect();
        let mut slow: Vec<TcpStream> = (0..slow)
            .filter_map(|_| connect_from(from.next().unwrap_or(Ipv4Addr::LOCALHOST), to))
            .collect();
        for s in &mut slow {
            let _ = s.write_all(opening);
        }
        Crowd { idle, slow }
    }

    /// Every slow connection sends one more octet of `octet` (one whose server closed
    /// it fails, quietly).
    pub fn trickle(&mut self, octet: u8) {
        for s in &mut self.slow {
            let _ = s.write(&[octet]);
        }
    }

    /// Waits (at most `limit`) until the server holds at most `keep` of the crowd;
    /// returns how many it holds.
    pub fn settle(&mut self, keep: usize, limit: Duration) -> usize {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let (idle, slow) = self.still_open();
            if idle + slow <= keep || std::time::Instant::now() > deadline {
                return idle + slow;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// How many idle and slow connections the server has not closed.
    pub fn still_open(&mut self) -> (usize, usize) {
        (
            self.idle.iter_mut().map(closed).filter(|c| !c).count(),
            self.slow.iter_mut().map(closed).filter(|c| !c).count(),
        )
    }

    /// Connections opened.
    #[must_use]
    pub fn len(&self) -> usize {
        self.idle.len() + self.slow.len()
    }

    /// True when none connected.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
