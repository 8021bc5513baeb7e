//! A delay line between two network namespaces, for tests that need real round trips
//! on a kernel without `netem`: each namespace has a TUN device, and threads of the test
//! copy every IPv4 packet from one to the other — holding those bound for the far side
//! for the delay of their destination address, so a TCP connect from `near` to a far
//! address takes that long, as over a long path. Delays change at run time.
//!
//! `near` has 10.79.1.1; `far` has 10.79.2.1, 10.79.2.2, … — one address per delay.
//! Everything is removed on drop (the threads stop, the devices go with their
//! namespaces).
use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    fs::File,
    io::{Read, Write},
    net::Ipv4Addr,
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::netns::{run, Netns};

/// `TUNSETIFF` (`_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// The near end's address.
pub const NEAR: Ipv4Addr = Ipv4Addr::new(10, 79, 1, 1);

/// Packets on their way to the far side, by the time they are due.
type Queue = (Mutex<BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>>, Condvar);

/// Two namespaces joined by a delay line.
pub struct DelayLine {
    /// Where the clients run (probe from here).
    pub near: Netns,
    /// Where the endpoints listen.
    pub far: Netns,
    delays: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl DelayLine {
    /// A line to one far address per entry of `delays` (the delay of its packets).
    ///
    /// # Panics
    /// When the namespaces or devices cannot be made (not root).
    #[must_use]
    pub fn new(delays: &[Duration]) -> DelayLine {
        let near = Netns::new("qdns-dln");
        let far = Netns::new("qdns-dlf");
        let id = std::process::id() % 100_000;
        let (near_if, far_if) = (format!("dln{id}"), format!("dlf{id}"));
        let near_tun = tun_in(&near, &near_if);
        let far_tun = tun_in(&far, &far_if);
        run(&["ip", "-n", near.name(), "addr", "add", "10.79.1.1/32", "dev", &near_if]);
        run(&["ip", "-n", near.name(), "link", "set", &near_if, "up"]);
        run(&["ip", "-n", near.name(), "route", "add", "10.79.2.0/24", "dev", &near_if]);
        for i in 0..delays.len() {
            let addr = format!("{}/32", Self::far_addr(i));
            run(&["ip", "-n", far.name(), "addr", "add", &addr, "dev", &far_if]);
        }
        run(&["ip", "-n", far.name(), "link", "set", &far_if, "up"]);
        run(&["ip", "-n", far.name(), "route", "add", "10.79.1.0/24", "dev", &far_if]);
        let delays = Arc::new(Mutex::new(delays.to_vec()));
        let stop = Arc::new(AtomicBool::new(false));
        let queue: Arc<Queue> = Arc::new((Mutex::new(BinaryHeap::new()), Condvar::new()));
        let near_tun = Arc::new(near_tun);
        let far_tun = Arc::new(far_tun);
        let mut threads = Vec::new();
        // Near → far: held for the destination's delay.
        {
            let (tun, delays, stop, queue) = (
                Arc::clone(&near_tun),
                Arc::clone(&delays),
                Arc::clone(&stop),
                Arc::clone(&queue),
            );
            threads.push(std::thread::spawn(move || {
                let mut seq = 0u64;
                read_packets(&tun, &stop, |packet| {
                    let Some(index) = far_index(packet) else { return };
                    let delay = delays
                        .lock()
                        .map_or(Duration::ZERO, |d| d.get(index).copied().unwrap_or_default());
                    seq += 1;
                    if let Ok(mut heap) = queue.0.lock() {
                        heap.push(Reverse((Instant::now() + delay, seq, packet.to_vec())));
                    }
                    queue.1.notify_one();
                });
            }));
        }
        {
            let (tun, stop, queue) = (Arc::clone(&far_tun), Arc::clone(&stop), Arc::clone(&queue));
            threads.push(std::thread::spawn(move || deliver(&tun, &stop, &queue)));
        }
        // Far → near: at once.
        {
            let (from, to, stop) = (Arc::clone(&far_tun), Arc::clone(&near_tun), Arc::clone(&stop));
            threads.push(std::thread::spawn(move || {
                read_packets(&from, &stop, |packet| {
                    if packet.first().is_some_and(|b| b >> 4 == 4) {
                        let _ = (&*to).write(packet);
                    }
                });
            }));
        }
        DelayLine {
            near,
            far,
            delays,
            stop,
            threads,
        }
    }

    /// The far address with the `i`th delay.
    #[must_use]
    pub fn far_addr(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 79, 2, u8::try_from(i + 1).unwrap_or(u8::MAX))
    }

    /// Changes the delay of the `i`th far address (packets already held keep theirs).
    ///
    /// # Panics
    /// When `i` is not one of the line's addresses.
    pub fn set_delay(&self, i: usize, delay: Duration) {
        self.delays.lock().unwrap()[i] = delay;
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A TUN device `name` (no packet information header) made inside `ns`.
fn tun_in(ns: &Netns, name: &str) -> File {
    let name = name.to_owned();
    ns.run(move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .expect("open /dev/net/tun");
        // struct ifreq: the name, then the flags (a short) in the union.
        let mut ifreq = [0u8; 40];
        ifreq[..name.len()].copy_from_slice(name.as_bytes());
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI) as u16;
        ifreq[16..18].copy_from_slice(&flags.to_ne_bytes());
        // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `ifreq` is as large as.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, ifreq.as_mut_ptr()) };
        assert_eq!(rc, 0, "TUNSETIFF {name}: {}", std::io::Error::last_os_error());
        // Non-blocking, so readers can notice the stop flag.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        // The descriptor stays valid on threads outside the namespace.
        file
    })
}

/// Calls `each` with every packet read from `tun` until `stop`.
fn read_packets(tun: &File, stop: &AtomicBool, mut each: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = libc::pollfd {
            fd: tun.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        if unsafe { libc::poll(&raw mut fds, 1, 50) } <= 0 {
            continue;
        }
        match (&*tun).read(&mut buf) {
            Ok(n) if n > 0 => each(&buf[..n]),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Writes each held packet into `tun` when it is due, until `stop`.
fn deliver(tun: &File, stop: &AtomicBool, queue: &Queue) {
    let Ok(mut heap) = queue.0.lock() else { return };
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = match heap.peek() {
            Some(Reverse((due, _, _))) if *due <= now => {
                if let Some(Reverse((_, _, packet))) = heap.pop() {
                    let _ = (&*tun).write(&packet);
                }
                continue;
            }
            Some(Reverse((due, _, _))) => (*due - now).min(Duration::from_millis(50)),
            None => Duration::from_millis(50),
        };
        heap = match queue.1.wait_timeout(heap, wait) {
            Ok((heap, _)) => heap,
            Err(_) => return,
        };
    }
}

/// The index of a far address an IPv4 packet is for.
fn far_index(packet: &[u8]) -> Option<usize> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let [a, b, c, d] = [packet[16], packet[17], packet[18], packet[19]];
    (a == 10 && b == 79 && c == 2 && d > 0).then(|| usize::from(d - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP connect through the line takes the far address's delay, and a new delay
    /// applies to the next connect.
    #[test]
    fn a_connect_takes_the_delay_of_its_destination() {
        crate::require_root("network namespaces and TUN devices for the delay line");
        let line = DelayLine::new(&[Duration::from_millis(5), Duration::from_millis(40)]);
        let listeners: Vec<std::net::TcpListener> = (0..2)
            .map(|i| {
                let addr = DelayLine::far_addr(i);
                line.far.run(move || std::net::TcpListener::bind((addr, 7000)).unwrap())
            })
            .collect();
        let connect = |i: usize| {
            let addr = std::net::SocketAddr::from((DelayLine::far_addr(i), 7000));
            line.near.run(move || {
                let start = Instant::now();
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
                start.elapsed()
            })
        };
        let (fast, slow) = (connect(0), connect(1));
        assert!(
            fast >= Duration::from_millis(5) && fast < Duration::from_millis(30),
            "{fast:?}"
        );
        assert!(
            slow >= Duration::from_millis(40) && slow < Duration::from_millis(70),
            "{slow:?}"
        );
        line.set_delay(0, Duration::from_millis(60));
        let slower = connect(0);
        assert!(slower >= Duration::from_millis(60), "{slower:?}");
        drop(listeners);
    }
}
