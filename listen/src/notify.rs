//! systemd's readiness protocol (`sd_notify(3)`): one datagram of `KEY=VALUE` lines to
//! the Unix socket named by `$NOTIFY_SOCKET` (a path, or `@name` in the abstract
//! namespace). A unit with `Type=notify` counts as started when `READY=1` arrives.
//! Without `$NOTIFY_SOCKET` (not started by systemd) nothing is sent.
//!
//! Hand-written rather than a crate: it is one `sendto` on a socket std already has.
use std::{
    ffi::OsStr,
    os::{
        linux::net::SocketAddrExt,
        unix::{
            ffi::OsStrExt,
            net::{SocketAddr, UnixDatagram},
        },
    },
};

/// Sends `state` to the socket `target` names (`@name`: abstract namespace).
pub fn notify_to(target: &OsStr, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    let address = match target.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(target)?,
    };
    socket.send_to_addr(state.as_bytes(), &address)?;
    Ok(())
}

/// Sends `state` to `$NOTIFY_SOCKET`, if set; a failure is logged, never fatal (the
/// service manager then times the start out, which says more than a crash would).
pub fn notify(state: &str) {
    if let Some(target) = std::env::var_os("NOTIFY_SOCKET") {
        if let Err(err) = notify_to(&target, state) {
            tracing::warn!(%err, ?target, "cannot notify the service manager");
        }
    }
}

/// `READY=1` with a status line for `systemctl status`.
pub fn ready(status: &str) {
    notify(&format!("READY=1\nSTATUS={status}\n"));
}

/// A status line for `systemctl status`.
pub fn status(status: &str) {
    notify(&format!("STATUS={status}\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        notify_to(path.as_os_str(), "READY=1\nSTATUS=up\n").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=up\n");
    }

    #[test]
    fn reaches_an_abstract_socket() {
        let name = format!("qdns-notify-test-{}", std::process::id());
        let listener = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        notify_to(OsStr::new(&format!("@{name}")), "READY=1\n").unwrap();
        let mut buf = [0u8; 16];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }

    #[test]
    fn a_missing_socket_is_an_error() {
        assert!(notify_to(OsStr::new("/nonexistent/qdns/notify"), "READY=1\n").is_err());
    }
}
