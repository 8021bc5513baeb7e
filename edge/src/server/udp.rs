//! UDP workers: one thread per socket, several sockets per address on `SO_REUSEPORT` so
//! the kernel spreads queries across cores; each worker receives and sends in batches
//! with recvmmsg/sendmmsg. Buffers are allocated once per worker; the query path does
//! not allocate.
use std::{
    io,
    mem::{size_of, zeroed},
    net::SocketAddr,
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use socket2::{Domain, Protocol, Socket, Type};

use qdns_abi::rrl::RrlOutcome;

use super::rrl::{now_ns, Limiter};
use crate::{stats::WorkerStats, Engine, Transport};

/// Datagrams per recvmmsg/sendmmsg call.
pub const BATCH: usize = 32;
/// Largest query accepted; a longer datagram is dropped and counted (queries are small;
/// this also bounds the receive buffers).
pub const MAX_QUERY: usize = 4096;
/// Largest response buffer (our UDP payload ceiling is lower; see `--max-udp-payload`).
const MAX_RESPONSE: usize = 4096;
/// How often a blocked worker wakes to check for shutdown.
const POLL: Duration = Duration::from_millis(200);

/// Binds one `SO_REUSEPORT` UDP socket on `addr`.
pub fn bind(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_port(true)?;
    // Best effort: a larger buffer absorbs bursts; the kernel caps it at rmem_max.
    let _ = socket.set_recv_buffer_size(4 << 20);
    let _ = socket.set_send_buffer_size(4 << 20);
    socket.bind(&addr.into())?;
    socket.set_read_timeout(Some(POLL))?;
    Ok(socket)
}

/// Per-worker buffers and message headers for batched I/O.
struct Batch {
    queries: Vec<[u8; MAX_QUERY]>,
    responses: Vec<[u8; MAX_RESPONSE]>,
    io: Box<Headers>,
}

/// The libc message headers of a batch (plain old data; boxed so addresses stay put).
struct Headers {
    addrs: [libc::sockaddr_storage; BATCH],
    recv_iov: [libc::iovec; BATCH],
    recv_hdrs: [libc::mmsghdr; BATCH],
    send_iov: [libc::iovec; BATCH],
    send_hdrs: [libc::mmsghdr; BATCH],
}

impl Batch {
    fn new() -> Batch {
        Batch {
            queries: vec![[0; MAX_QUERY]; BATCH],
            responses: vec![[0; MAX_RESPONSE]; BATCH],
            // SAFETY: `Headers` holds only libc structs of integers and raw pointers,
            // for which all-zero bytes (null pointers, zero lengths) are valid values.
            io: Box::new(unsafe { zeroed() }),
        }
    }

    /// Points the receive headers at the buffers (the Box keeps addresses stable).
    fn arm_recv(&mut self) {
        let io = &mut *self.io;
        for (i, query) in self.queries.iter_mut().enumerate().take(BATCH) {
            io.recv_iov[i] = libc::iovec {
                iov_base: query.as_mut_ptr().cast(),
                iov_len: MAX_QUERY,
            };
            let hdr = &mut io.recv_hdrs[i].msg_hdr;
            hdr.msg_name = std::ptr::from_mut(&mut io.addrs[i]).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &raw mut io.recv_iov[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            hdr.msg_flags = 0;
            io.recv_hdrs[i].msg_len = 0;
        }
    }
}

/// Serves `socket` until `stop` is set.
pub fn worker(
    socket: &Socket,
    engine: &ArcSwap<Engine>,
    stats: &WorkerStats,
    limiter: Option<&Limiter>,
    stop: &AtomicBool,
) {
    let fd = socket.as_raw_fd();
    let mut batch = Batch::new();
    while !stop.load(Ordering::Relaxed) {
        batch.arm_recv();
        // SAFETY: the headers point into `batch`, which outlives the call; the kernel
        // writes at most `iov_len`/`msg_namelen` octets into each buffer.
        let received = unsafe {
            libc::recvmmsg(
                fd,
                batch.io.recv_hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        let Ok(received) = usize::try_from(received) else {
            continue; // timeout (EAGAIN) or EINTR: check `stop` and go on
        };
        let engine = engine.load();
        let now = if limiter.is_some() { now_ns() } else { 0 };
        let mut to_send = 0;
        for i in 0..received.min(BATCH) {
            let hdr = batch.io.recv_hdrs[i];
            let len = hdr.msg_len as usize;
            if hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > MAX_QUERY {
                stats.count(None);
                continue;
            }
            let outcome = engine.respond(&batch.queries[i][..len], &mut batch.responses[i], Transport::Udp);
            stats.count(outcome);
            let Some(mut outcome) = outcome else { continue };
            let io = &mut *batch.io;
            if let Some(limiter) = limiter {
                let client = client_of(&io.addrs[i]);
                match client.map(|ip| limiter.charge(ip, now)) {
                    None | Some(RrlOutcome::Allow) => {}
                    Some(RrlOutcome::Drop) => {
                        stats.rrl[0].fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Some(RrlOutcome::Slip) => {
                        let Some(slipped) = engine.slip(&batch.queries[i][..len], &mut batch.responses[i], outcome)
                        else {
                            stats.rrl[0].fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        outcome = slipped;
                        stats.rrl[1].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            io.send_iov[to_send] = libc::iovec {
                iov_base: batch.responses[i].as_mut_ptr().cast(),
                iov_len: outcome.len,
            };
            let send = &mut io.send_hdrs[to_send].msg_hdr;
            send.msg_name = std::ptr::from_mut(&mut io.addrs[i]).cast();
            send.msg_namelen = hdr.msg_hdr.msg_namelen;
            send.msg_iov = &raw mut io.send_iov[to_send];
            send.msg_iovlen = 1;
            send.msg_control = std::ptr::null_mut();
            send.msg_controllen = 0;
            to_send += 1;
        }
        let mut sent = 0;
        while sent < to_send {
            // SAFETY: headers [sent, to_send) point into `batch` and are fully set above.
            let n = unsafe { libc::sendmmsg(fd, batch.io.send_hdrs[sent..].as_mut_ptr(), (to_send - sent) as u32, 0) };
            match usize::try_from(n) {
                Ok(0) | Err(_) => {
                    // EAGAIN or an error for the first datagram (e.g. unreachable peer):
                    // skip it rather than spin; UDP is best effort.
                    sent += 1;
                }
                Ok(n) => sent += n,
            }
        }
    }
}

/// The address of a received datagram's sender.
fn client_of(addr: &libc::sockaddr_storage) -> Option<std::net::IpAddr> {
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let v4 = unsafe { &*std::ptr::from_ref(addr).cast::<libc::sockaddr_in>() };
            Some(std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let v6 = unsafe { &*std::ptr::from_ref(addr).cast::<libc::sockaddr_in6>() };
            Some(std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

/// Spawns `per_addr` worker threads for each of `sockets`.
pub fn spawn(
    sockets: Vec<Socket>,
    engine: &Arc<ArcSwap<Engine>>,
    stats: &[Arc<WorkerStats>],
    limiter: Option<&Arc<Limiter>>,
    stop: &Arc<AtomicBool>,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut handles = Vec::with_capacity(sockets.len());
    for (i, socket) in sockets.into_iter().enumerate() {
        let engine = Arc::clone(engine);
        let stop = Arc::clone(stop);
        let limiter = limiter.cloned();
        let stats = stats.get(i % stats.len().max(1)).cloned().unwrap_or_default();
        handles.push(
            std::thread::Builder::new()
                .name(format!("qdns-udp-{i}"))
                .spawn(move || worker(&socket, &engine, &stats, limiter.as_deref(), &stop))?,
        );
    }
    Ok(handles)
}
