//! A real etcd (Debian's `etcd-server`, installed by `scripts/setup-peers`) for the
//! intent tests: one member on loopback ports of its own, its data in a directory the
//! test owns, stopped by its PID on drop. Restarted on the same data it keeps every
//! revision, as a member that was down does.
use std::{
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use crate::{daemon::Daemon, fixtures::free_port};

/// Where Debian installs it.
pub const ETCD: &str = "/usr/bin/etcd";

/// A running single-member etcd.
pub struct Etcd {
    proc: Option<Daemon>,
    data: PathBuf,
    client: u16,
    peer: u16,
}

impl Etcd {
    /// Starts a member keeping its data under `dir/etcd` and waits until it serves.
    ///
    /// # Panics
    /// When etcd is not installed or does not come up within 30 s.
    pub fn start(dir: &Path) -> Etcd {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: scripts/setup-peers installs Debian's etcd-server"
        );
        let mut etcd = Etcd {
            proc: None,
            data: dir.join("etcd"),
            client: free_port(),
            peer: free_port(),
        };
        etcd.resume();
        etcd
    }

    /// `etcd://127.0.0.1:PORT/PREFIX`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.client)
    }

    /// Its client address.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.client))
    }

    /// Stops it (SIGKILL: as a member that dies).
    pub fn kill(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.kill9();
        }
    }

    /// Starts it again on its data, after [`Etcd::kill`].
    pub fn resume(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new(ETCD);
        cmd.arg("--name")
            .arg("qdns-test")
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("qdns-test={peer}"))
            .arg("--log-level")
            .arg("warn");
        self.proc = Some(Daemon::spawn("etcd", cmd));
        let deadline = Instant::now() + Duration::from_secs(30);
        // Serving: its health endpoint answers on the client port.
        while !healthy(self.client) {
            assert!(Instant::now() < deadline, "etcd did not come up on {client}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `GET /health` says `"health":"true"`.
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) =
        TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_secs(1))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
