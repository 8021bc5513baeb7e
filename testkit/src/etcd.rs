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

/// A real etcd cluster of several members on loopback, each a process of its own that
/// a test kills and starts again (a member lost, the leader lost, quorum lost).
pub struct EtcdCluster {
    members: Vec<Member>,
    /// Addresses each member also serves clients on, beside 127.0.0.1.
    also_on: Vec<String>,
}

/// One member of an [`EtcdCluster`].
struct Member {
    name: String,
    data: PathBuf,
    client: u16,
    peer: u16,
    proc: Option<Daemon>,
}

impl EtcdCluster {
    /// Starts `size` members keeping their data under `dir/etcd-N` and waits until
    /// every one serves.
    ///
    /// # Panics
    /// When etcd is not installed or a member does not come up within 30 s.
    pub fn start(dir: &Path, size: usize) -> EtcdCluster {
        EtcdCluster::start_also_on(dir, size, &[])
    }

    /// [`EtcdCluster::start`], each member serving clients on the same port at each
    /// address of `also_on` too (addresses a test gave the host's ends of its veth
    /// links, for controls in network namespaces: [`EtcdCluster::url_at`]).
    ///
    /// # Panics
    /// As [`EtcdCluster::start`].
    pub fn start_also_on(dir: &Path, size: usize, also_on: &[&str]) -> EtcdCluster {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: scripts/setup-peers installs Debian's etcd-server"
        );
        let members: Vec<Member> = (0..size)
            .map(|n| Member {
                name: format!("m{n}"),
                data: dir.join(format!("etcd-{n}")),
                client: free_port(),
                peer: free_port(),
                proc: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            also_on: also_on.iter().map(|a| (*a).to_owned()).collect(),
        };
        for n in 0..size {
            cluster.spawn(n);
        }
        for n in 0..size {
            cluster.wait_healthy(n);
        }
        cluster
    }

    fn spawn(&mut self, n: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let member = &mut self.members[n];
        let client = format!("http://127.0.0.1:{}", member.client);
        let listen: Vec<String> = std::iter::once(client.clone())
            .chain(self.also_on.iter().map(|a| format!("http://{a}:{}", member.client)))
            .collect();
        let peer = format!("http://127.0.0.1:{}", member.peer);
        let mut cmd = Command::new(ETCD);
        cmd.args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.data)
            .args([
                "--listen-client-urls",
                &listen.join(","),
                "--advertise-client-urls",
                &client,
            ])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new", "--initial-cluster-token", "qdns-test"])
            .args(["--log-level", "warn"]);
        member.proc = Some(Daemon::spawn("etcd", cmd));
    }

    fn wait_healthy(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(self.members[n].client) {
            assert!(Instant::now() < deadline, "etcd member {n} did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,…/PREFIX`: every member.
    pub fn url(&self, prefix: &str) -> String {
        let members: Vec<String> = self.members.iter().map(|m| format!("127.0.0.1:{}", m.client)).collect();
        format!("etcd://{}/{prefix}", members.join(","))
    }

    /// `etcd://ADDRESS:P1,ADDRESS:P2,…/PREFIX`: every member at `address` (one of
    /// `also_on`).
    pub fn url_at(&self, address: &str, prefix: &str) -> String {
        let members: Vec<String> = self.members.iter().map(|m| format!("{address}:{}", m.client)).collect();
        format!("etcd://{}/{prefix}", members.join(","))
    }

    /// Stops member `n` (SIGKILL: as a member that dies).
    pub fn kill(&mut self, n: usize) {
        if let Some(mut proc) = self.members[n].proc.take() {
            proc.kill9();
        }
    }

    /// Starts member `n` again on its data, after [`EtcdCluster::kill`]; waits until it
    /// serves when `wait` (a member alone without quorum does not say healthy).
    pub fn resume(&mut self, n: usize, wait: bool) {
        self.spawn(n);
        if wait {
            self.wait_healthy(n);
        }
    }

    /// The member that leads now, as the running members see it.
    pub fn leader(&self) -> Option<usize> {
        for member in self.members.iter().filter(|m| m.proc.is_some()) {
            let Some(status) = post(member.client, "/v3/maintenance/status", "{}") else {
                continue;
            };
            let leader = status["leader"].as_str().map(str::to_owned);
            for (n, other) in self.members.iter().enumerate() {
                let Some(other_status) = post(other.client, "/v3/maintenance/status", "{}") else {
                    continue;
                };
                if other_status["header"]["member_id"].as_str().map(str::to_owned) == leader {
                    return Some(n);
                }
            }
        }
        None
    }

    /// Compacts the history up to the store's revision now (physically): a watch or a
    /// read from an earlier revision fails as compacted.
    ///
    /// # Panics
    /// When no member answers.
    pub fn compact_now(&self) -> u64 {
        for member in self.members.iter().filter(|m| m.proc.is_some()) {
            let Some(status) = post(member.client, "/v3/maintenance/status", "{}") else {
                continue;
            };
            let revision: u64 = status["header"]["revision"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let body = format!("{{\"revision\":\"{revision}\",\"physical\":true}}");
            if post(member.client, "/v3/kv/compaction", &body).is_some() {
                return revision;
            }
        }
        panic!("no etcd member compacted the history");
    }
}

/// `POST PATH` with a JSON body to etcd's gRPC gateway on `port`: the JSON answer.
fn post(port: u16, path: &str, body: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut stream =
        TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let (head, json) = answer.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    // A chunked answer: the JSON is the first chunk's body.
    let json = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        json.split_once("\r\n")?.1
    } else {
        json
    };
    let end = json.rfind('}')?;
    serde_json::from_str(&json[..=end]).ok()
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for n in 0..self.members.len() {
            self.kill(n);
        }
    }
}
