//! netsniff-ng's trafgen as the veth pair's generator: it sends from the client
//! namespace through a `PF_PACKET` TX ring, one frame per query of the mix (Ethernet,
//! IPv4, UDP and the DNS query, built here once per mix from the same query lines
//! kxdpgun reads; a query id and a source port per frame), round robin. It depends on
//! none of the servers it measures, and loads nothing into the kernel.
//!
//! trafgen 0.6.8 paces only in its slow path (one `sendto` and a `nanosleep` per frame:
//! 370k frames/s at most here), so it runs in its fast path, as fast as the ring goes,
//! and a token bucket (`tbf`) on the client end holds the offered load: the rate in
//! octets a second is the load in queries a second times the mix's mean frame length,
//! exact over a run since the frames go round robin. What the bucket lets through is
//! what was offered (the qdisc's own count of packets sent); what it drops never reached
//! the pair. Replies are counted by the kernel on the client end (`sink.rs`).
//!
//! Two settings trafgen would make itself but cannot from inside a namespace: the
//! socket buffer default (`net.core.wmem_default`, global; trafgen raises it so its
//! ring's frames in flight are not refused with `EAGAIN`, which 0.6.8 treats as fatal)
//! is raised for the stage by [`SocketBuffers`] and put back when it drops; and it is
//! told to leave the interface's IRQ affinity alone (`-Q`; veth has no IRQ).
use std::{
    fmt::Write as _,
    io::{BufRead, BufReader},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use super::{
    super::veth::{Pair, PORT, SERVER},
    SERVER_CPU,
};

/// The client end's address (testkit's pair: `.2` of the server's /24).
fn client_address() -> [u8; 4] {
    let mut octets: [u8; 4] = SERVER
        .parse::<std::net::Ipv4Addr>()
        .map_or([10, 79, 0, 1], |a| a.octets());
    octets[3] = 2;
    octets
}

/// One mix's frames, written as a trafgen configuration.
#[derive(Debug, Clone)]
pub struct Templates {
    /// The configuration file.
    pub config: PathBuf,
    /// Mean frame length in octets (Ethernet header included, as the qdisc counts).
    pub mean_octets: f64,
    /// The longest frame.
    pub max_octets: usize,
}

/// What one run sent and got back.
#[derive(Debug, Clone, Copy)]
pub struct Traffic {
    /// Queries that left the client end (the token bucket's sent count).
    pub sent: u64,
    /// Replies the sink counted on the client end.
    pub replied: u64,
    /// Seconds trafgen's send loop ran (its own account).
    pub seconds: f64,
    /// Frames the generator put on the wire or tried to (trafgen's own count: what the
    /// bucket dropped over the rate included), when it says.
    pub attempted: Option<u64>,
    /// Share of the server's CPU busy while the load ran (`/proc/stat`), when measured
    /// over the sending alone.
    pub server_cpu_busy: Option<f64>,
}

impl Templates {
    /// Builds a frame for each query line of `text` (`name TYPE [E|D]`, as kxdpgun reads)
    /// from the client end to the server end of `pair`, and writes them to `path`.
    pub fn write(pair: &Pair, text: &str, path: &Path) -> Result<Templates, String> {
        let server_mac = mac(&pair.server, &pair.server_if)?;
        let client_mac = mac(&pair.client, &pair.client_if)?;
        let src = client_address();
        let dst: [u8; 4] = SERVER
            .parse::<std::net::Ipv4Addr>()
            .map_err(|e| e.to_string())?
            .octets();
        let mut config = String::with_capacity(text.len() * 40);
        let (mut frames, mut total, mut max_octets) = (0usize, 0usize, 0usize);
        for (index, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let query = query(line, index as u16)?;
            let frame = frame(
                (client_mac, server_mac),
                (src, dst),
                1024 + (index % 60_000) as u16,
                &query,
            );
            config.push('{');
            for (i, octet) in frame.iter().enumerate() {
                let _ = write!(config, "{}0x{octet:02x}", if i == 0 { " " } else { ", " });
            }
            config.push_str(" }\n");
            frames += 1;
            total += frame.len();
            max_octets = max_octets.max(frame.len());
        }
        if frames == 0 {
            return Err("trafgen: no queries".into());
        }
        std::fs::write(path, config).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Templates {
            config: path.to_owned(),
            mean_octets: total as f64 / frames as f64,
            max_octets,
        })
    }

    /// Offers `rate` queries a second for `seconds`: the bucket set to the rate, trafgen
    /// run until `seconds` after it started sending, then interrupted as ^C would.
    pub fn send(&self, pair: &Pair, seconds: u32, rate: u32) -> Result<Traffic, String> {
        let bytes_per_second = (f64::from(rate) * self.mean_octets).ceil() as u64;
        // A bucket of 5 ms (never less than two frames): deep enough for the timer's
        // granularity, shallow enough that a step starts at its rate.
        let burst = (bytes_per_second / 200).max(2 * self.max_octets as u64);
        let ns = &pair.client;
        let dev = &pair.client_if;
        super::super::veth::ip(&[
            "netns",
            "exec",
            ns,
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            &format!("{}bit", bytes_per_second * 8),
            "burst",
            &burst.to_string(),
            "limit",
            &burst.to_string(),
        ])?;
        let sent_before = qdisc_sent(pair)?;
        let replied_before = client_counter(pair, "rx_queue_0_xdp_drops");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "trafgen", "-o", dev, "-i"])
            .arg(&self.config)
            // One sender (pinned by trafgen to CPU 0, the generator's), the qdisc path
            // (through the bucket), no socket memory or IRQ tuning of its own (above), and
            // a ring of 64 KiB (32 frames): the frames left in the ring when it is
            // interrupted go out after its send loop's clock stops, 256 of them with its
            // default 512 KiB (a 6 % excess at 5,000 qps for 1 s, measured); it sends as
            // fast with the small ring (2.07M frames in 3.04 s against 1.92M in 3.20 s).
            .args(["-P", "1", "-q", "--no-sock-mem", "-Q", "-S", "64KiB"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("trafgen: {e}"))?;
        let group = i32::try_from(child.id()).map_err(|e| format!("trafgen: {e}"))?;
        let stdout = child.stdout.take().ok_or("trafgen: no stdout")?;
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        // It compiles the configuration (about 0.5 s for 20,000 frames), says "Running!"
        // and sends.
        let mut text = String::new();
        let started = loop {
            match lines_rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    let running = line.contains("Running!");
                    text.push_str(&line);
                    text.push('\n');
                    if running {
                        break true;
                    }
                }
                Err(_) => break false,
            }
        };
        let busy_before = cpu_times(SERVER_CPU);
        if started {
            std::thread::sleep(Duration::from_secs(u64::from(seconds)));
        }
        let server_cpu_busy = busy_share(busy_before, cpu_times(SERVER_CPU));
        // SAFETY: signals the process group this call started (trafgen and its sender).
        unsafe { libc::kill(-group, libc::SIGINT) };
        let status = wait_or_kill(&mut child, group, Duration::from_secs(10));
        let _ = reader.join();
        text.extend(lines_rx.try_iter().map(|l| l + "\n"));
        let mut stderr = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
        }
        // Replies still on their way.
        std::thread::sleep(Duration::from_millis(100));
        let sent = qdisc_sent(pair)?.saturating_sub(sent_before);
        let replied = client_counter(pair, "rx_queue_0_xdp_drops").saturating_sub(replied_before);
        let loop_seconds = send_loop_seconds(&text);
        match (started, status, loop_seconds) {
            (true, Some(_), Some(seconds)) if seconds > 0.0 => Ok(Traffic {
                sent,
                replied,
                seconds,
                attempted: attempted(&text),
                server_cpu_busy,
            }),
            _ => Err(format!("trafgen failed: {}{}", text.trim(), stderr.trim())),
        }
    }
}

/// Waits for `child` for up to `grace`, then kills its group; its status, if it ended.
fn wait_or_kill(child: &mut std::process::Child, group: i32, grace: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    None
}

/// trafgen's own account of its send loop: `S sec, U usec on CPU0 (N packets)`.
fn send_loop_seconds(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(" usec on CPU"))?;
    let mut words = line.split_whitespace();
    let sec: f64 = words.next()?.parse().ok()?;
    words.next(); // "sec,"
    let usec: f64 = words.next()?.parse().ok()?;
    Some(sec + usec / 1e6)
}

/// trafgen's count of the frames it put into its ring: `N packets outgoing`.
fn attempted(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.contains("packets outgoing"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (busy, total) clock ticks of `cpu` so far (`/proc/stat`; idle and iowait are not busy).
pub fn cpu_times(cpu: usize) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with(&format!("cpu{cpu} ")))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle, total))
}

/// The busy share between two readings of [`cpu_times`].
pub fn busy_share(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((busy0, total0), (busy1, total1)) = (before?, after?);
    let total = total1.checked_sub(total0).filter(|&t| t > 0)?;
    Some(busy1.saturating_sub(busy0) as f64 / total as f64)
}

/// Packets the client end's root qdisc (the bucket) has sent.
fn qdisc_sent(pair: &Pair) -> Result<u64, String> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.client,
            "tc",
            "-s",
            "-j",
            "qdisc",
            "show",
            "dev",
            &pair.client_if,
        ])
        .output()
        .map_err(|e| format!("tc: {e}"))?;
    let qdiscs: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("tc -j qdisc show: {e}"))?;
    qdiscs
        .as_array()
        .and_then(|all| all.iter().find(|q| q["kind"] == "tbf"))
        .and_then(|q| q["packets"].as_u64())
        .ok_or_else(|| format!("no token bucket on {}", pair.client_if))
}

/// A counter of `ethtool -S` on the client end (0 when missing).
fn client_counter(pair: &Pair, name: &str) -> u64 {
    super::super::veth::ethtool_counter((&pair.client, &pair.client_if), name)
}

/// An interface's MAC address in a namespace.
fn mac(ns: &str, iface: &str) -> Result<[u8; 6], String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", &format!("/sys/class/net/{iface}/address")])
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let octets: Vec<u8> = text
        .trim()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    octets
        .try_into()
        .map_err(|_| format!("{iface} in {ns}: no MAC address ({})", text.trim()))
}

/// The DNS query of one line: `name TYPE`, then `E` (EDNS, 1232 octets) or `D` (EDNS
/// with DO=1), as kxdpgun reads its input; id `id`, no flags set.
fn query(line: &str, id: u16) -> Result<Vec<u8>, String> {
    let mut words = line.split_whitespace();
    let (Some(name), Some(kind)) = (words.next(), words.next()) else {
        return Err(format!("trafgen: query line {line:?}: want NAME TYPE [E|D]"));
    };
    let qtype: u16 = match kind {
        "A" => 1,
        "NS" => 2,
        "SOA" => 6,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => 28,
        "DS" => 43,
        "DNSKEY" => 48,
        "ANY" => 255,
        other => return Err(format!("trafgen: query line {line:?}: type {other} not known here")),
    };
    let edns = match words.next() {
        None => None,
        Some("E") => Some(false),
        Some("D") => Some(true),
        Some(other) => return Err(format!("trafgen: query line {line:?}: flag {other}: want E or D")),
    };
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|&n| (1..=63).contains(&n))
            .ok_or_else(|| format!("trafgen: {name}: a label of {} octets", label.len()))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    if let Some(dnssec_ok) = edns {
        // OPT: root owner, type 41, UDP size 1232, extended RCODE and version 0, DO, no data.
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    Ok(q)
}

/// The Internet checksum of `parts`, one after another (each of even length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        for pair in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet frame carrying `payload` in a UDP datagram from `sport` to the service port.
fn frame(
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    (src, dst): ([u8; 4], [u8; 4]),
    sport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + payload.len() as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    ip[4..6].copy_from_slice(&sport.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let ip_sum = checksum(&[&ip]);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src);
    pseudo[4..8].copy_from_slice(&dst);
    pseudo[9] = 17;
    pseudo[10..12].copy_from_slice(&udp_len.to_be_bytes());
    let udp_sum = match checksum(&[&pseudo, &udp, payload]) {
        0 => 0xffff,
        sum => sum,
    };
    udp[6..8].copy_from_slice(&udp_sum.to_be_bytes());
    let mut frame = Vec::with_capacity(42 + payload.len());
    frame.extend_from_slice(&dst_mac);
    frame.extend_from_slice(&src_mac);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&udp);
    frame.extend_from_slice(payload);
    frame
}

/// `net.core.wmem_default` raised for the stage (trafgen's TX ring keeps up to its
/// whole ring in flight; the default 208 KiB refuses frames with `EAGAIN`, which
/// trafgen 0.6.8 treats as fatal), put back as it was when dropped. trafgen raises it
/// itself when run outside a namespace, and puts it back likewise.
pub struct SocketBuffers {
    was: Option<String>,
}

const WMEM_DEFAULT: &str = "/proc/sys/net/core/wmem_default";

impl SocketBuffers {
    /// Raises the default to 16 MiB, where it is lower.
    pub fn raise() -> Result<SocketBuffers, String> {
        let was = std::fs::read_to_string(WMEM_DEFAULT).map_err(|e| format!("{WMEM_DEFAULT}: {e}"))?;
        let want = 16 << 20;
        if was.trim().parse::<u64>().is_ok_and(|v| v >= want) {
            return Ok(SocketBuffers { was: None });
        }
        std::fs::write(WMEM_DEFAULT, want.to_string()).map_err(|e| format!("{WMEM_DEFAULT}: {e}"))?;
        Ok(SocketBuffers { was: Some(was) })
    }
}

impl Drop for SocketBuffers {
    fn drop(&mut self) {
        if let Some(was) = self.was.take() {
            let _ = std::fs::write(WMEM_DEFAULT, was.trim());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_frame_has_valid_checksums_and_parses_as_dns() {
        let q = query("h1.bench.test. AAAA D", 7).unwrap();
        let f = frame(([2; 6], [4; 6]), ([10, 79, 0, 2], [10, 79, 0, 1]), 4000, &q);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(checksum(&[&f[14..34]]), 0, "IP header checksum");
        let udp = &f[34..];
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&f[26..30]);
        pseudo[4..8].copy_from_slice(&f[30..34]);
        pseudo[9] = 17;
        pseudo[10..12].copy_from_slice(&(udp.len() as u16).to_be_bytes());
        assert_eq!(checksum(&[&pseudo, udp]), 0, "UDP checksum");
        let message = hickory_proto::op::Message::from_vec(&udp[8..]).unwrap();
        assert_eq!(message.metadata.id, 7);
        assert_eq!(message.queries[0].name().to_ascii(), "h1.bench.test.");
        assert_eq!(u16::from(message.queries[0].query_type()), 28);
        assert!(message.edns.as_ref().unwrap().flags().dnssec_ok);
        assert_eq!(message.edns.as_ref().unwrap().max_payload(), 1232);
    }

    #[test]
    fn plain_and_edns_queries() {
        let plain = hickory_proto::op::Message::from_vec(&query("x.test. A", 1).unwrap()).unwrap();
        assert!(plain.edns.is_none());
        let edns = hickory_proto::op::Message::from_vec(&query("x.test. A E", 1).unwrap()).unwrap();
        assert!(!edns.edns.as_ref().unwrap().flags().dnssec_ok);
        assert!(query("x.test. WKS", 1).is_err());
        assert!(query("x.test. A X", 1).is_err());
    }

    #[test]
    fn loop_time_from_trafgen_output() {
        let text = "\n      999888 packets outgoing\n    75881045 bytes outgoing\n           2 sec, 706485 usec on CPU0 (999888 packets)\n";
        assert_eq!(send_loop_seconds(text), Some(2.706_485));
        assert_eq!(attempted(text), Some(999_888));
    }
}
