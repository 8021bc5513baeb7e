//! Noticing a dead control↔edge path over TCP (`tcp://`, `tls://`).
//!
//! The link is quiet while nothing changes, so a path that silently drops packets (a
//! partition, a host that lost power) would leave both ends believing they are linked
//! for as long as TCP keeps an idle connection — for ever: the edge would stay ready
//! behind a dead path (`--ready-max-stale` never starts counting) and control would
//! list an edge that is gone. Kernel TCP keepalive probes an idle link, and
//! `TCP_USER_TIMEOUT` bounds how long sent data may go unacknowledged, so either end
//! learns of a dead path within [`DEAD_AFTER`] — without a frame added to the link
//! protocol, so edges and controls of different versions still understand each other.
use std::{os::fd::AsFd, time::Duration};

/// Idle time before the first keepalive probe.
pub const IDLE: Duration = Duration::from_secs(10);
/// Time between probes.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is dropped.
pub const PROBES: u32 = 3;
/// Longest a dead path goes unnoticed: idle + probes × interval, which is also the
/// bound on unacknowledged data.
pub const DEAD_AFTER: Duration = Duration::from_secs(10 + 3 * 5);

/// Arms keepalive and the unacknowledged-data bound on a link connection.
///
/// # Errors
/// When the kernel refuses an option (the caller logs it; the link still works).
pub fn watch<S: AsFd>(stream: &S) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(stream);
    socket.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(IDLE)
            .with_interval(INTERVAL)
            .with_retries(PROBES),
    )?;
    socket.set_tcp_user_timeout(Some(DEAD_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_reach_the_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        watch(&stream).unwrap();
        let socket = socket2::SockRef::from(&stream);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.keepalive_time().unwrap(), IDLE);
        assert_eq!(socket.keepalive_interval().unwrap(), INTERVAL);
        assert_eq!(socket.keepalive_retries().unwrap(), PROBES);
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(DEAD_AFTER));
    }
}
