//! UDP workers. Each socket is served by a crew of up to [`CREW`] threads: a lead that
//! always waits in recvmmsg, and helpers that sleep until the lead falls behind (it
//! received a full batch, so more is queued) and then drain the socket beside it until
//! it is empty. With more workers than one crew, an address gets several sockets on
//! `SO_REUSEPORT` and the kernel spreads queries across them.
//!
//! Why crews rather than one blocked thread per socket: at a moderate rate every
//! blocked thread is woken for a batch of one or two datagrams, and the wake-ups, not
//! the answers, were most of the CPU per query (docs/BENCHMARKS.md). One receiving
//! thread per socket lets batches grow with the load; helpers add cores only when one
//! thread cannot keep up.
//!
//! Every thread receives and sends in batches with recvmmsg/sendmmsg. Buffers are
//! allocated once per thread; the query path does not allocate.
use std::{
    io,
    mem::{size_of, zeroed},
    net::SocketAddr,
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Condvar, Mutex, PoisonError,
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

/// Serves `socket` as its crew's lead until `stop` is set: always waiting for the next
/// datagrams, calling a helper from `crew` when a batch comes back full.
pub fn lead(socket: &Socket, crew: &Crew, serving: &Serving<'_>) {
    let fd = socket.as_raw_fd();
    let mut batch = Batch::new();
    while !serving.stop.load(Ordering::Relaxed) {
        // Blocks until a datagram arrives (or the POLL read timeout passes).
        let Some(received) = batch.receive(fd, libc::MSG_WAITFORONE) else {
            continue; // timeout (EAGAIN) or EINTR: check `stop` and go on
        };
        if received == BATCH {
            crew.call();
        }
        batch.answer(fd, received, serving);
    }
}

/// Serves `socket` as a helper until `stop` is set: sleeps until called, then drains the
/// socket without blocking until it is empty, calling the next helper while batches
/// still come back full.
pub fn helper(socket: &Socket, crew: &Crew, serving: &Serving<'_>) {
    let fd = socket.as_raw_fd();
    let mut batch = Batch::new();
    while !serving.stop.load(Ordering::Relaxed) {
        if !crew.wait(POLL) {
            continue;
        }
        serving.stats.helper_wakeups.fetch_add(1, Ordering::Relaxed);
        while let Some(received) = batch.receive(fd, libc::MSG_DONTWAIT) {
            if received == BATCH {
                crew.call();
            }
            batch.answer(fd, received, serving);
            if serving.stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
}

/// What every thread of every crew shares.
pub struct Serving<'a> {
    /// The answers (replaced whole on reload).
    pub engine: &'a ArcSwap<Engine>,
    /// This thread's counters.
    pub stats: &'a WorkerStats,
    /// The response rate limiter, when configured.
    pub limiter: Option<&'a Limiter>,
    /// Set at shutdown.
    pub stop: &'a AtomicBool,
    /// Query logs, when on.
    pub tap: Option<&'a crate::dnstap::Tap>,
    /// The socket's address (the query logs' response address).
    pub local: SocketAddr,
}

/// Where a crew's helpers sleep until their lead calls them. A call wakes one sleeping
/// helper; when none sleeps (all are draining already) it is dropped, so the lead
/// never blocks and calls never pile up.
#[derive(Default)]
pub struct Crew {
    /// Calls made and not yet taken, never more than the helpers asleep.
    calls: Mutex<usize>,
    /// Helpers waiting in `wait`.
    asleep: AtomicUsize,
    bell: Condvar,
}

impl Crew {
    /// Wakes one sleeping helper, if there is one.
    pub fn call(&self) {
        // Cheap check first: the lead calls on every full batch.
        if self.asleep.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if *calls < self.asleep.load(Ordering::Acquire) {
            *calls += 1;
            self.bell.notify_one();
        }
    }

    /// Sleeps until called (true) or `timeout` passes (false).
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        self.asleep.fetch_add(1, Ordering::AcqRel);
        let deadline = std::time::Instant::now() + timeout;
        let called = loop {
            if *calls > 0 {
                *calls -= 1;
                break true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break false;
            }
            calls = match self.bell.wait_timeout(calls, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        };
        self.asleep.fetch_sub(1, Ordering::AcqRel);
        called
    }
}

impl Batch {
    /// Receives up to [`BATCH`] datagrams; `None` on timeout, EAGAIN or EINTR.
    fn receive(&mut self, fd: std::os::fd::RawFd, flags: libc::c_int) -> Option<usize> {
        self.arm_recv();
        // SAFETY: the headers point into `self`, which outlives the call; the kernel
        // writes at most `iov_len`/`msg_namelen` octets into each buffer.
        let received = unsafe {
            libc::recvmmsg(
                fd,
                self.io.recv_hdrs.as_mut_ptr(),
                BATCH as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        usize::try_from(received).ok().filter(|&n| n > 0).map(|n| n.min(BATCH))
    }

    /// Answers the `received` datagrams of the batch and sends the answers.
    fn answer(&mut self, fd: std::os::fd::RawFd, received: usize, serving: &Serving<'_>) {
        let Serving {
            engine,
            stats,
            limiter,
            tap,
            ..
        } = *serving;
        let engine = engine.load();
        let now = if limiter.is_some() { now_ns() } else { 0 };
        // The batch's arrival, for the query logs (one clock read a batch).
        let arrived = tap.map(|_| std::time::SystemTime::now());
        let mut to_send = 0;
        for i in 0..received.min(BATCH) {
            let hdr = self.io.recv_hdrs[i];
            let len = hdr.msg_len as usize;
            if hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > MAX_QUERY {
                stats.count(None);
                continue;
            }
            let query = &self.queries[i][..len];
            let outcome = match client_of(&self.io.addrs[i]) {
                Some(source) => engine.respond_to(query, &mut self.responses[i], Transport::Udp, source),
                None => engine.respond(query, &mut self.responses[i], Transport::Udp),
            };
            stats.count(outcome);
            let Some(mut outcome) = outcome else { continue };
            let io = &mut *self.io;
            // A client that presented a valid server cookie proved its address: not
            // rate limited (RFC 7873 §5.3's point), in XDP as here.
            let proven = outcome.cookie.is_some_and(|c| c.valid);
            if let Some(limiter) = limiter.filter(|_| !proven) {
                let client = client_of(&io.addrs[i]);
                match client.map(|ip| limiter.charge(ip, now)) {
                    None | Some(RrlOutcome::Allow) => {}
                    Some(RrlOutcome::Drop) => {
                        stats.rrl[0].fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Some(RrlOutcome::Slip) => {
                        let Some(slipped) = engine.slip(&self.queries[i][..len], &mut self.responses[i], outcome)
                        else {
                            stats.rrl[0].fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        outcome = slipped;
                        stats.rrl[1].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if let (Some(tap), Some(received), Some(client)) = (tap, arrived, peer_of(&io.addrs[i])) {
                tap.log(crate::dnstap::Event {
                    query: self.queries[i][..len].into(),
                    response: self.responses[i][..outcome.len].into(),
                    client,
                    server: serving.local,
                    transport: Transport::Udp,
                    received,
                    answered: std::time::SystemTime::now(),
                    members: outcome.members,
                });
            }
            io.send_iov[to_send] = libc::iovec {
                iov_base: self.responses[i].as_mut_ptr().cast(),
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
            // SAFETY: headers [sent, to_send) point into `self` and are fully set above.
            let n = unsafe { libc::sendmmsg(fd, self.io.send_hdrs[sent..].as_mut_ptr(), (to_send - sent) as u32, 0) };
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

/// The address and port of a received datagram's sender.
fn peer_of(addr: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let ip = client_of(addr)?;
    let port = match i32::from(addr.ss_family) {
        // SAFETY: the family says the storage holds a sockaddr_in.
        libc::AF_INET => u16::from_be(unsafe { &*std::ptr::from_ref(addr).cast::<libc::sockaddr_in>() }.sin_port),
        // SAFETY: the family says the storage holds a sockaddr_in6.
        _ => u16::from_be(unsafe { &*std::ptr::from_ref(addr).cast::<libc::sockaddr_in6>() }.sin6_port),
    };
    Some(SocketAddr::new(ip, port))
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

/// Threads per socket at most: a lead and up to three helpers. Past this an address
/// gets another socket (`SO_REUSEPORT`), so no receive queue is shared by more than four
/// threads.
pub const CREW: usize = 4;

/// How many sockets an address gets for `workers` threads.
#[must_use]
pub fn sockets_for(workers: usize) -> usize {
    workers.max(1).div_ceil(CREW)
}

/// How `workers` threads are shared among `sockets` sockets of one address: as evenly
/// as can be, at least one each (an inherited socket must be served even when this
/// edge was given fewer workers than the old one had sockets).
#[must_use]
pub fn crew_sizes(workers: usize, sockets: usize) -> Vec<usize> {
    let sockets = sockets.max(1);
    let workers = workers.max(sockets);
    (0..sockets)
        .map(|i| workers / sockets + usize::from(i < workers % sockets))
        .collect()
}

/// Spawns, for each `(socket, crew size)`, the crew's lead and helpers; `stats` gives
/// one [`WorkerStats`] per thread, in order (reused round-robin if short).
pub fn spawn(
    crews: Vec<(Socket, usize)>,
    engine: &Arc<ArcSwap<Engine>>,
    stats: &[Arc<WorkerStats>],
    limiter: Option<&Arc<Limiter>>,
    tap: Option<&Arc<crate::dnstap::Tap>>,
    stop: &Arc<AtomicBool>,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut handles = Vec::new();
    let mut thread = 0;
    for (i, (socket, size)) in crews.into_iter().enumerate() {
        let local = socket
            .local_addr()
            .ok()
            .and_then(|addr| addr.as_socket())
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let socket = Arc::new(socket);
        let crew = Arc::new(Crew::default());
        for member in 0..size.max(1) {
            let socket = Arc::clone(&socket);
            let crew = Arc::clone(&crew);
            let engine = Arc::clone(engine);
            let stop = Arc::clone(stop);
            let limiter = limiter.cloned();
            let tap = tap.cloned();
            let stats = stats.get(thread % stats.len().max(1)).cloned().unwrap_or_default();
            thread += 1;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("qdns-udp-{i}.{member}"))
                    .spawn(move || {
                        let serving = Serving {
                            engine: &engine,
                            stats: &stats,
                            limiter: limiter.as_deref(),
                            stop: &stop,
                            tap: tap.as_deref(),
                            local,
                        };
                        if member == 0 {
                            lead(&socket, &crew, &serving);
                        } else {
                            helper(&socket, &crew, &serving);
                        }
                    })?,
            );
        }
    }
    Ok(handles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_fill_crews_of_at_most_four() {
        assert_eq!(sockets_for(1), 1);
        assert_eq!(sockets_for(4), 1);
        assert_eq!(sockets_for(5), 2);
        assert_eq!(sockets_for(16), 4);
        assert_eq!(crew_sizes(2, 1), vec![2]);
        assert_eq!(crew_sizes(5, 2), vec![3, 2]);
        assert_eq!(crew_sizes(16, 4), vec![4, 4, 4, 4]);
        // Inherited: more sockets than workers, each still served.
        assert_eq!(crew_sizes(1, 3), vec![1, 1, 1]);
    }

    #[test]
    fn a_call_wakes_a_sleeping_helper_and_is_dropped_when_none_sleeps() {
        let crew = Arc::new(Crew::default());
        // Nobody asleep: the call is dropped, a later wait times out.
        crew.call();
        assert!(!crew.wait(Duration::from_millis(20)));
        let sleeper = {
            let crew = Arc::clone(&crew);
            std::thread::spawn(move || crew.wait(Duration::from_secs(10)))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while crew.asleep.load(Ordering::Acquire) == 0 {
            assert!(std::time::Instant::now() < deadline, "helper never went to sleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        crew.call();
        assert!(sleeper.join().unwrap_or(false), "the call did not wake the helper");
        assert_eq!(crew.asleep.load(Ordering::Acquire), 0);
        assert_eq!(*crew.calls.lock().unwrap(), 0);
    }
}
