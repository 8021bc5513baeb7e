//! Loss-free replacement of a running edge (`qdns-edge --takeover`).
//!
//! A running edge given `--takeover-socket PATH` listens there. A new edge started with
//! `--takeover` (and the same path) connects, and the old one hands over **its own
//! sockets** — every UDP socket, every TCP listener and the metrics listener — by
//! `SCM_RIGHTS`. Why passing descriptors rather than binding a second `SO_REUSEPORT`
//! group: a socket that is closed loses the datagrams queued in it and the connections
//! in its accept backlog, and with two reuseport groups the kernel spreads new
//! datagrams over both until the old one closes. Passed descriptors are the same
//! sockets: nothing is closed, so nothing queued is lost, and whichever process reads a
//! datagram answers it.
//!
//! ```text
//!  new ── "TAKEOVER 1" ──────────────────────────────► old
//!  new ◄─ listeners (JSON) + their descriptors ─────── old
//!  new: workers on the same sockets, XDP loaded and its tables installed
//!  new ── "READY" ───────────────────────────────────► old
//!  new ◄─ "XDP iface=pin,…" (links pinned in bpffs) ── old: stops reading, exits
//!  new: bpf_link_update each link to its own program (atomic), unpins
//!  new ── "DONE" ────────────────────────────────────► old
//! ```
//!
//! The XDP program is replaced without a gap: the old edge pins its XDP links in bpffs
//! (`--bpffs`, default `/sys/fs/bpf`), the new one opens them and points each at its own
//! program with `bpf_link_update`, then removes the pins (the links live on in the new
//! process). Until then the old program answers from the old maps; from then on the new
//! one from the new maps, whose tables were installed before the switch.
//!
//! The old edge answers everything it has read before it exits; established TCP
//! connections it was serving are closed (their clients retry; the listener and its
//! backlog carry on in the new edge).
use std::{
    io::{self, BufRead, BufReader, Read, Write},
    net::SocketAddr,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::net::UnixStream,
    },
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

/// Most descriptors handed over (addresses × workers + listeners).
pub const MAX_FDS: usize = 250;
/// Longest line or description read from the other edge.
const MAX_MESSAGE: usize = 64 * 1024;
/// Longest wait for the other edge at each step.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the descriptors are, in the order they are sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listeners {
    /// Per service address: how many UDP sockets (its `SO_REUSEPORT` group).
    pub udp: Vec<(SocketAddr, usize)>,
    /// The TCP listener of each service address.
    pub tcp: Vec<SocketAddr>,
    /// The metrics listener, if any.
    pub metrics: Option<SocketAddr>,
}

impl Listeners {
    /// Descriptors the description stands for.
    #[must_use]
    pub fn fd_count(&self) -> usize {
        self.udp.iter().map(|(_, n)| n).sum::<usize>() + self.tcp.len() + usize::from(self.metrics.is_some())
    }
}

/// Descriptors received from the old edge, sorted by kind.
#[derive(Debug)]
pub struct Inherited {
    /// UDP sockets per service address.
    pub udp: Vec<(SocketAddr, Vec<socket2::Socket>)>,
    /// TCP listeners per service address.
    pub tcp: Vec<(SocketAddr, std::net::TcpListener)>,
    /// The metrics listener.
    pub metrics: Option<std::net::TcpListener>,
}

/// Why a takeover failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TakeoverError {
    /// Socket I/O failed or timed out.
    #[error("takeover socket {path}: {source}")]
    Io {
        /// The takeover socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The other edge said something unexpected.
    #[error("takeover: {0}")]
    Protocol(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TakeoverError + '_ {
    move |source| TakeoverError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Sends `data` with `fds` attached (`SCM_RIGHTS`).
pub fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS || data.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors or no data",
        ));
    }
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` points at `control`, which has room for one header and `fds`
        // (CMSG_SPACE); CMSG_FIRSTHDR is non-null for a buffer that large.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&raw const msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(header), fd_bytes as usize);
        }
    }
    // SAFETY: `msg` and what it points at live across the call.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
    match usize::try_from(sent) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "short takeover message")),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Receives one message of at most [`MAX_MESSAGE`] octets and its descriptors (at most
/// [`MAX_FDS`]; received descriptors are owned, so closed on every error path).
pub fn recv_with_fds(stream: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut data = vec![0u8; MAX_MESSAGE];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` and its buffers live across the call; MSG_CMSG_CLOEXEC keeps the
    // descriptors from leaking into children.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
    let Ok(got) = usize::try_from(got) else {
        return Err(io::Error::last_os_error());
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG macros walk
    // only inside it, and each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&raw const msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data_at = libc::CMSG_DATA(header);
                let size = std::mem::size_of::<RawFd>();
                for i in 0..payload / size {
                    let mut octets = [0u8; std::mem::size_of::<RawFd>()];
                    std::ptr::copy_nonoverlapping(data_at.add(i * size), octets.as_mut_ptr(), size);
                    fds.push(OwnedFd::from_raw_fd(RawFd::from_ne_bytes(octets)));
                }
            }
            header = libc::CMSG_NXTHDR(&raw const msg, header);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "takeover message or descriptors cut short",
        ));
    }
    data.truncate(got);
    Ok((data, fds))
}

/// One line from `reader`, at most [`MAX_MESSAGE`] octets, without its newline.
pub fn read_line<R: Read>(reader: &mut BufReader<R>) -> io::Result<String> {
    let mut line = Vec::new();
    let n = reader.take(MAX_MESSAGE as u64).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the other edge closed the takeover socket",
        ));
    }
    Ok(String::from_utf8_lossy(&line).trim_end().to_owned())
}

/// The new edge's side, first step: connects to the running edge at `path`, asks for
/// its listeners and receives them.
pub fn request(path: &Path) -> Result<(UnixStream, Inherited), TakeoverError> {
    let stream = UnixStream::connect(path).map_err(io_err(path))?;
    stream.set_read_timeout(Some(STEP_TIMEOUT)).map_err(io_err(path))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT)).map_err(io_err(path))?;
    (&stream).write_all(b"TAKEOVER 1\n").map_err(io_err(path))?;
    let (data, fds) = recv_with_fds(&stream).map_err(io_err(path))?;
    let listeners: Listeners = serde_json::from_slice(&data)
        .map_err(|e| TakeoverError::Protocol(format!("undecodable listener list: {e}")))?;
    if fds.len() != listeners.fd_count() {
        return Err(TakeoverError::Protocol(format!(
            "{} descriptors for {} listeners",
            fds.len(),
            listeners.fd_count()
        )));
    }
    let mut fds = fds.into_iter();
    let mut inherited = Inherited {
        udp: Vec::new(),
        tcp: Vec::new(),
        metrics: None,
    };
    for (addr, n) in &listeners.udp {
        let sockets: Vec<socket2::Socket> = fds.by_ref().take(*n).map(socket2::Socket::from).collect();
        inherited.udp.push((*addr, sockets));
    }
    for addr in &listeners.tcp {
        if let Some(fd) = fds.next() {
            inherited.tcp.push((*addr, std::net::TcpListener::from(fd)));
        }
    }
    if listeners.metrics.is_some() {
        inherited.metrics = fds.next().map(std::net::TcpListener::from);
    }
    Ok((stream, inherited))
}

/// `XDP iface=pin,…` → (interface, pinned link path) pairs.
#[must_use]
pub fn parse_pins(line: &str) -> Option<Vec<(String, PathBuf)>> {
    let rest = line.strip_prefix("XDP")?.trim();
    if rest.is_empty() {
        return Some(Vec::new());
    }
    rest.split(',')
        .map(|pair| pair.split_once('=').map(|(i, p)| (i.to_owned(), PathBuf::from(p))))
        .collect()
}

/// `XDP iface=pin,…` for `pins`.
#[must_use]
pub fn format_pins(pins: &[(String, PathBuf)]) -> String {
    let list: Vec<String> = pins.iter().map(|(i, p)| format!("{i}={}", p.display())).collect();
    format!("XDP {}", list.join(","))
}

/// What the running edge hands over when asked.
pub struct Handover {
    /// What the descriptors are.
    pub listeners: Listeners,
    /// The descriptors, in [`Listeners`] order; valid while the edge serves (its
    /// workers own the sockets until shutdown).
    pub fds: Vec<RawFd>,
    /// The XDP program whose links are handed over.
    pub xdp: Option<std::sync::Arc<std::sync::Mutex<crate::xdp::XdpProgram>>>,
    /// Where links are pinned for the new edge (a bpffs).
    pub bpffs: PathBuf,
}

/// Binds the takeover socket at `path`: refused while another edge answers there (it is
/// to be taken over with `--takeover`, not displaced) unless `replacing` it (this edge
/// just took over from it); a stale file is replaced.
pub fn bind(path: &Path, replacing: bool) -> Result<tokio::net::UnixListener, TakeoverError> {
    if !replacing && UnixStream::connect(path).is_ok() {
        return Err(TakeoverError::Protocol(format!(
            "another edge listens on {}: start this one with --takeover to replace it",
            path.display()
        )));
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_err(path)(err)),
    }
    tokio::net::UnixListener::bind(path).map_err(io_err(path))
}

/// The running edge's side: answers takeover requests on `listener` until `shutdown`;
/// after a handover it cancels `shutdown` (this edge then stops reading and exits).
/// A request that fails before the new edge is ready changes nothing here.
pub async fn serve(
    listener: tokio::net::UnixListener,
    handover: Handover,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let handover = std::sync::Arc::new(handover);
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(%err, "takeover socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let handover = std::sync::Arc::clone(&handover);
        let outcome = tokio::task::spawn_blocking(move || {
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            hand_over(&stream, &handover)
        })
        .await;
        match outcome {
            Ok(Ok(())) => {
                tracing::info!("handed over to a new edge; stopping");
                shutdown.cancel();
                return;
            }
            Ok(Err(err)) => tracing::warn!(%err, "takeover request failed; still serving"),
            Err(err) => tracing::warn!(%err, "takeover request failed; still serving"),
        }
    }
}

/// One handover on `stream` (blocking): listeners out, wait for READY, links pinned.
fn hand_over(stream: &UnixStream, handover: &Handover) -> io::Result<()> {
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let hello = read_line(&mut reader)?;
    if hello != "TAKEOVER 1" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected request {hello:?}"),
        ));
    }
    let description = serde_json::to_vec(&handover.listeners).map_err(io::Error::other)?;
    send_with_fds(stream, &description, &handover.fds)?;
    tracing::info!(
        sockets = handover.fds.len(),
        "takeover: listeners sent; waiting for the new edge"
    );
    let ready = read_line(&mut reader)?;
    if ready != "READY" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected READY, got {ready:?}"),
        ));
    }
    let pins = match &handover.xdp {
        Some(xdp) => {
            let mut program = xdp.lock().map_err(|_| io::Error::other("XDP program lock poisoned"))?;
            program.pin_links(&handover.bpffs).map_err(io::Error::other)?
        }
        None => Vec::new(),
    };
    let mut writer = stream;
    writer.write_all(format!("{}\n", format_pins(&pins)).as_bytes())?;
    // The new edge now answers; its DONE (or its hanging up) is not waited for: the
    // pins hold the links whatever happens to this process.
    let _ = read_line(&mut reader);
    Ok(())
}

/// The new edge's side, last step: READY, the old edge's pinned links, DONE. Returns
/// the pins for the caller to adopt (or remove) before [`finish`].
pub fn ready(stream: &UnixStream) -> Result<Vec<(String, PathBuf)>, TakeoverError> {
    let path = Path::new("(takeover)");
    let mut writer = stream;
    writer.write_all(b"READY\n").map_err(io_err(path))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(io_err(path))?);
    let line = read_line(&mut reader).map_err(io_err(path))?;
    parse_pins(&line).ok_or_else(|| TakeoverError::Protocol(format!("expected XDP pins, got {line:?}")))
}

/// Tells the old edge the takeover is complete.
pub fn finish(stream: &UnixStream) {
    let mut writer = stream;
    let _ = writer.write_all(b"DONE\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_data_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (udp_addr, tcp_addr) = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
        send_with_fds(&a, b"hello", &[udp.as_raw_fd(), tcp.as_raw_fd()]).unwrap();
        let (data, fds) = recv_with_fds(&b).unwrap();
        assert_eq!(data, b"hello");
        assert_eq!(fds.len(), 2);
        // The same sockets: a datagram sent to the original address is read from the copy.
        drop(udp);
        let copy = std::net::UdpSocket::from(fds.into_iter().next().unwrap());
        assert_eq!(copy.local_addr().unwrap(), udp_addr);
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"q", udp_addr).unwrap();
        let mut buf = [0u8; 4];
        copy.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(copy.recv_from(&mut buf).unwrap().0, 1);
        assert_eq!(tcp.local_addr().unwrap(), tcp_addr);
        // Only data, no descriptors.
        send_with_fds(&a, b"x", &[]).unwrap();
        let (data, fds) = recv_with_fds(&b).unwrap();
        assert_eq!((data.as_slice(), fds.len()), (&b"x"[..], 0));
    }

    #[test]
    fn pins_round_trip() {
        let pins = vec![
            ("eth0".to_owned(), PathBuf::from("/sys/fs/bpf/qdns-eth0")),
            ("lo".to_owned(), PathBuf::from("/run/b/qdns-lo")),
        ];
        assert_eq!(parse_pins(&format_pins(&pins)), Some(pins));
        assert_eq!(parse_pins("XDP "), Some(Vec::new()));
        assert_eq!(parse_pins("NOPE"), None);
        assert_eq!(parse_pins("XDP eth0"), None);
    }
}
