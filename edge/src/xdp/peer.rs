//! A pass-everything XDP program on an interface in another network namespace.
//!
//! Native XDP on a veth delivers `XDP_TX` answers only while the peer end has a native
//! XDP program of its own (docs/OPERATIONS.md, "veth"). Tests and the QPS harness put the
//! client on the peer end inside a namespace; this attaches qdns's own program there with
//! no service port, so it passes every frame. Attach and detach must happen inside the
//! namespace (netlink and interface names are per namespace), so a thread that entered it
//! holds the program until [`PeerPassProgram`] is dropped.
use std::{os::fd::AsRawFd, sync::mpsc, thread::JoinHandle};

use super::{XdpMode, XdpProgram};

/// The attached program; dropping it detaches it (inside the namespace).
pub struct PeerPassProgram {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PeerPassProgram {
    /// Attaches natively to `iface` in the namespace `netns` (a name under
    /// `/var/run/netns`, as `ip netns add` creates).
    pub fn attach(netns: &str, iface: &str) -> Result<PeerPassProgram, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (ready, attached) = mpsc::channel::<Result<(), String>>();
        let path = format!("/var/run/netns/{netns}");
        let iface = iface.to_string();
        let thread = std::thread::spawn(move || match pass_everything_in(&path, iface) {
            Ok(program) => {
                let _ = ready.send(Ok(()));
                let _ = stopped.recv();
                drop(program);
            }
            Err(err) => {
                let _ = ready.send(Err(err));
            }
        });
        attached
            .recv()
            .map_err(|_| "the peer program's thread ended".to_string())?
            .map_err(|e| format!("XDP program on the peer end: {e}"))?;
        Ok(PeerPassProgram {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for PeerPassProgram {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Enters the namespace at `path` (this thread only) and attaches the program with no
/// service port natively to `iface`.
fn pass_everything_in(path: &str, iface: String) -> Result<XdpProgram, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns affects this thread only; the namespace file is held open.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
    }
    let mut program = XdpProgram::load(&[], 1232).map_err(|e| e.to_string())?;
    program.attach(&[iface], XdpMode::Native).map_err(|e| e.to_string())?;
    Ok(program)
}
