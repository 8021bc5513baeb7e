//! Bounded listeners shared by `qdns-edge` and `qdns-control` (no eBPF, no zone data):
//! [`pool`] caps connections in total and per source and, when full, makes room by
//! closing the oldest connection that is idle or has not yet proven itself, so a flood
//! of idle or slow connections cannot lock out the real clients; [`metrics`] serves
//! `/metrics` under such a pool with bounded request heads; [`notify`] tells systemd
//! when a daemon is ready; [`memory`] hands freed pages back after a large reload.
pub mod accounts;
pub mod memory;
pub mod metrics;
pub mod notify;
pub mod pool;

pub use pool::{Limits, Pool, Refusal, Ticket};

/// The next connection on `listener`, or `None` once `shutdown` is cancelled; a failed
/// accept is handled by [`accept_failed`] and the wait goes on.
pub async fn accept_tcp(
    listener: &tokio::net::TcpListener,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(err) => accept_failed(&err).await,
            },
        }
    }
}

/// [`accept_tcp`] for a Unix socket.
pub async fn accept_unix(
    listener: &tokio::net::UnixListener,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Option<tokio::net::UnixStream> {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => return Some(stream),
                Err(err) => accept_failed(&err).await,
            },
        }
    }
}

/// What an accept loop does when `accept` fails: out of descriptors or buffers
/// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) the pending connection stays queued and the
/// next accept would fail at once, so the loop pauses 50 ms instead of spinning; any
/// other failure concerns one connection and the loop goes on.
pub async fn accept_failed(err: &std::io::Error) {
    let exhausted = matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    );
    if exhausted {
        tracing::warn!(%err, "accept failed: out of resources; pausing 50 ms");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    } else {
        tracing::debug!(%err, "accept failed");
    }
}

/// Raises the soft open-file limit to the hard one (a daemon holding its connection
/// caps — 1,024 DNS over TCP, 1,024 edge links, 64 of each other kind — needs more
/// than the usual 1,024). Returns the limit in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

/// At most [`LogLimit::PER_SECOND`] log lines a second for one kind of refusal, so a
/// flood of hostile connections does not become a flood of log lines (the counters
/// still count every one).
#[derive(Default)]
pub struct LogLimit {
    /// `second << 16 | lines logged in it`.
    state: std::sync::atomic::AtomicU64,
}

impl LogLimit {
    /// Lines allowed per second.
    pub const PER_SECOND: u64 = 10;

    /// A limiter with nothing logged yet.
    #[must_use]
    pub const fn new() -> LogLimit {
        LogLimit {
            state: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether one more line may be logged now.
    pub fn allow(&self) -> bool {
        use std::sync::atomic::Ordering;
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (at, count) = (current >> 16, current & 0xFFFF);
            let next = if at == second & 0xFFFF_FFFF_FFFF {
                if count >= Self::PER_SECOND {
                    return false;
                }
                current + 1
            } else {
                (second << 16) | 1
            };
            match self
                .state
                .compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }
}

/// Accept-queue length of every TCP listener (the kernel caps it at `somaxconn`):
/// tokio's and std's 128 overflow under a burst of connections while the accept loop
/// is busy evicting, and each overflowed SYN costs its client a one-second retransmit.
pub const BACKLOG: u32 = 1024;

/// A TCP listener on `addr` (an `ADDR:PORT`, names resolved) with a [`BACKLOG`]-long
/// accept queue and `SO_REUSEADDR` (a restarted daemon binds while old connections sit
/// in `TIME_WAIT`).
pub async fn bind_tcp(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    bind_tcp_quiet(addr).await?.listen(BACKLOG)
}

/// [`bind_tcp`] without the listen: the port is held (a clash is found now), but
/// connections to it are refused until the socket's `listen(BACKLOG)` — for a service
/// that must wait before it takes its first connection, whose clients should try
/// elsewhere meanwhile instead of waiting in an accept queue.
pub async fn bind_tcp_quiet(addr: &str) -> std::io::Result<tokio::net::TcpSocket> {
    let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: no address"));
    for resolved in tokio::net::lookup_host(addr).await? {
        let socket = if resolved.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(resolved) {
            Ok(()) => return Ok(socket),
            Err(err) => last = err,
        }
    }
    Err(last)
}
