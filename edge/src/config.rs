//! The edge's configuration: command line (SPEC §1) merged over an optional TOML file.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;
use serde::Deserialize;

use crate::{wire::edns::DEFAULT_UDP_PAYLOAD, xdp::XdpMode};

/// Command line of `qdns-edge`. Every flag can also be set in the `--config` file
/// (same names, `_` for `-`); flags win.
#[derive(Debug, Parser, Default)]
#[command(
    name = "qdns-edge",
    version,
    about = "qdns data plane: authoritative DNS over UDP/TCP, with an XDP fast path"
)]
pub struct Args {
    /// Address to serve DNS on (UDP and TCP); repeat for several (v4 and v6).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Vec<SocketAddr>,
    /// Standalone mode: load the zone files of this directory (no control plane).
    #[arg(long, value_name = "DIR", conflicts_with = "control")]
    pub zones: Option<PathBuf>,
    /// Follow qdns-control at this endpoint: a Unix socket path, tls://HOST:PORT (mutual
    /// TLS: needs the --control-tls-* files) or tcp://ADDR:PORT (neither encrypted nor
    /// authenticated).
    #[arg(long, value_name = "PATH|tls://HOST:PORT|tcp://ADDR:PORT")]
    pub control: Option<String>,
    /// tls:// control: this edge's certificate (`qdnsctl pki issue EDGE_ID`).
    #[arg(long, value_name = "FILE")]
    pub control_tls_cert: Option<PathBuf>,
    /// tls:// control: this edge's private key.
    #[arg(long, value_name = "FILE")]
    pub control_tls_key: Option<PathBuf>,
    /// tls:// control: the CA (PEM, one or more) control's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub control_tls_ca: Option<PathBuf>,
    /// tls:// control: the name control's certificate must carry (default: HOST).
    #[arg(long, value_name = "NAME|IP")]
    pub control_tls_name: Option<String>,
    /// This edge's name as control shows it (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub edge_id: Option<String>,
    /// Directory for persisted state.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Attach the XDP program to this interface; repeat for several.
    #[arg(long, value_name = "IFACE")]
    pub xdp: Vec<String>,
    /// XDP attach mode.
    #[arg(long, value_enum)]
    pub xdp_mode: Option<XdpMode>,
    /// UDP worker threads per listen address (default: one per core); up to four share
    /// a socket, the extra ones woken only when the first falls behind.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Largest UDP response sent to EDNS clients (512..=4096).
    #[arg(long)]
    pub max_udp_payload: Option<u16>,
    /// Identifier returned to NSID requests (RFC 5001): text, or hex as `0x…`; at most
    /// 128 octets. Unset: NSID requests are ignored like other options.
    #[arg(long, value_name = "ID")]
    pub nsid: Option<String>,
    /// Seconds a TCP connection may stay idle.
    #[arg(long)]
    pub tcp_idle_timeout: Option<u64>,
    /// TCP connections served at once (past it a new one replaces the oldest waiting for
    /// a query).
    #[arg(long)]
    pub max_tcp_connections: Option<usize>,
    /// TCP connections from one address at once (past it a new one replaces that
    /// address's oldest idle one, or is closed).
    #[arg(long)]
    pub max_tcp_per_source: Option<usize>,
    /// Response rate limiting: UDP responses per second per client prefix, in both the
    /// XDP and the user-space path (0 or unset: off).
    #[arg(long, value_name = "N")]
    pub rrl_rate: Option<u32>,
    /// Every Nth response over the rate is sent slipped (TC=1, no records) instead of
    /// dropped; 0 drops them all, 1 slips them all (default 2).
    #[arg(long, value_name = "N")]
    pub rrl_slip: Option<u32>,
    /// IPv4 prefix length a rate-limit bucket covers (default 24).
    #[arg(long, value_name = "BITS")]
    pub rrl_ipv4_prefix: Option<u8>,
    /// IPv6 prefix length a rate-limit bucket covers, at most 64 (default 56).
    #[arg(long, value_name = "BITS")]
    pub rrl_ipv6_prefix: Option<u8>,
    /// Serve Prometheus metrics (`/metrics`) and readiness (`/ready`) on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// With --control: not ready (`/ready` 503) once cut off from control for longer
    /// than this, in seconds (default: a follower stays ready on its last snapshot).
    #[arg(long, value_name = "SECONDS")]
    pub ready_max_stale: Option<u64>,
    /// TOML file with any of the settings above.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the settings (and, standalone, load the zones), print the result and exit:
    /// 0 when everything would start, 1 with the file, key and reason otherwise.
    #[arg(long)]
    pub check_config: bool,
    /// Listen here for a new edge taking over (`--takeover`): this edge's sockets and
    /// XDP links are handed to it without losing a query.
    #[arg(long, value_name = "PATH")]
    pub takeover_socket: Option<PathBuf>,
    /// With --control: give up on a connection to control that does not connect or
    /// send its snapshot within this many seconds (default 60), and retry.
    #[arg(long, value_name = "SECONDS")]
    pub control_timeout: Option<u64>,
    /// Take over from the edge listening on --takeover-socket instead of binding.
    #[arg(long)]
    pub takeover: bool,
    /// A bpffs directory where XDP links are pinned while handed over (default
    /// /sys/fs/bpf).
    #[arg(long, value_name = "DIR")]
    pub bpffs: Option<PathBuf>,
}

/// The `--config` file: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    listen: Vec<SocketAddr>,
    zones: Option<PathBuf>,
    control: Option<String>,
    control_tls_cert: Option<PathBuf>,
    control_tls_key: Option<PathBuf>,
    control_tls_ca: Option<PathBuf>,
    control_tls_name: Option<String>,
    edge_id: Option<String>,
    state_dir: Option<PathBuf>,
    #[serde(default)]
    xdp: Vec<String>,
    xdp_mode: Option<XdpMode>,
    workers: Option<usize>,
    max_udp_payload: Option<u16>,
    nsid: Option<String>,
    tcp_idle_timeout: Option<u64>,
    max_tcp_connections: Option<usize>,
    max_tcp_per_source: Option<usize>,
    rrl_rate: Option<u32>,
    rrl_slip: Option<u32>,
    rrl_ipv4_prefix: Option<u8>,
    rrl_ipv6_prefix: Option<u8>,
    metrics: Option<SocketAddr>,
    ready_max_stale: Option<u64>,
    control_timeout: Option<u64>,
    takeover_socket: Option<PathBuf>,
    bpffs: Option<PathBuf>,
}

impl FileConfig {
    fn read(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: qdns_zone::load::toml_reason(&text, &e),
        })
    }
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Addresses to serve on.
    pub listen: Vec<SocketAddr>,
    /// Where answers come from.
    pub source: Source,
    /// This edge's name.
    pub edge_id: String,
    /// Persisted state directory.
    pub state_dir: Option<PathBuf>,
    /// Interfaces for the XDP program.
    pub xdp: Vec<String>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// UDP workers per address.
    pub workers: usize,
    /// UDP payload ceiling.
    pub max_udp_payload: u16,
    /// NSID identifier, if set.
    pub nsid: Option<std::sync::Arc<[u8]>>,
    /// TCP idle timeout.
    pub tcp_idle_timeout: Duration,
    /// TCP connection cap.
    pub max_tcp_connections: usize,
    /// TCP connection cap per source address.
    pub max_tcp_per_source: usize,
    /// Metrics address.
    pub metrics: Option<SocketAddr>,
    /// Longest a follower may be cut off from control and stay ready.
    pub ready_max_stale: Option<Duration>,
    /// The answer counters' blocks, shared by every engine this server compiles.
    pub answer_sets: std::sync::Arc<crate::answers::AnswerSets>,
    /// Longest wait for control to connect and send its snapshot.
    pub control_timeout: Duration,
    /// Where this edge listens for a new edge taking over.
    pub takeover_socket: Option<PathBuf>,
    /// Take over from the edge at `takeover_socket` instead of binding.
    pub takeover: bool,
    /// bpffs directory for XDP links in a handover.
    pub bpffs: PathBuf,
    /// Response rate limiting, when on.
    pub rrl: Option<qdns_abi::rrl::RrlSettings>,
}

/// Where the edge gets its zones.
#[derive(Debug, Clone)]
pub enum Source {
    /// Standalone: load this zone directory (SIGHUP reloads).
    Zones(PathBuf),
    /// Follow qdns-control; persist in the state directory.
    Control {
        /// The control endpoint.
        endpoint: crate::follow::Endpoint,
        /// Where the last snapshot is kept.
        state_dir: PathBuf,
    },
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file cannot be read or parsed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A setting is missing or out of range.
    #[error("{key}: {reason}")]
    Invalid {
        /// The flag or key.
        key: &'static str,
        /// Why, and what to do.
        reason: String,
    },
}

impl Config {
    /// The response settings every engine this server compiles gets.
    #[must_use]
    pub fn serve_options(&self) -> crate::engine::ServeOptions {
        crate::engine::ServeOptions {
            max_udp_payload: self.max_udp_payload,
            nsid: self.nsid.clone(),
            answer_sets: Some(std::sync::Arc::clone(&self.answer_sets)),
        }
    }

    /// Merges `args` over the `--config` file and validates the result.
    pub fn from_args(args: Args) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        let listen = if args.listen.is_empty() {
            file.listen
        } else {
            args.listen
        };
        if listen.is_empty() {
            return Err(ConfigError::Invalid {
                key: "--listen",
                reason: "at least one ADDR:PORT is required".to_owned(),
            });
        }
        let state_dir = args.state_dir.or(file.state_dir);
        let tls = TlsSettings {
            cert: args.control_tls_cert.or(file.control_tls_cert),
            key: args.control_tls_key.or(file.control_tls_key),
            ca: args.control_tls_ca.or(file.control_tls_ca),
            name: args.control_tls_name.or(file.control_tls_name),
        };
        let source = match (args.zones.or(file.zones), args.control.or(file.control)) {
            (Some(zones), None) => {
                tls.none_for("--zones")?;
                Source::Zones(zones)
            }
            (None, Some(control)) => Source::Control {
                endpoint: endpoint(&control, tls)?,
                state_dir: state_dir.clone().ok_or(ConfigError::Invalid {
                    key: "--state-dir",
                    reason: "required with --control: the last snapshot is kept there".to_owned(),
                })?,
            },
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "--zones",
                    reason: "use either --zones (standalone) or --control, not both".to_owned(),
                })
            }
            (None, None) => {
                return Err(ConfigError::Invalid {
                    key: "--control",
                    reason: "either --control ENDPOINT or --zones DIR (standalone) is required".to_owned(),
                })
            }
        };
        let edge_id = args.edge_id.or(file.edge_id).unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map_or_else(|_| "edge".to_owned(), |h| h.trim().to_owned())
        });
        let workers = args
            .workers
            .or(file.workers)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        if !(1..=256).contains(&workers) {
            return Err(ConfigError::Invalid {
                key: "--workers",
                reason: format!("{workers} is outside 1..=256"),
            });
        }
        let max_udp_payload = args
            .max_udp_payload
            .or(file.max_udp_payload)
            .unwrap_or(DEFAULT_UDP_PAYLOAD);
        if !(512..=4096).contains(&max_udp_payload) {
            return Err(ConfigError::Invalid {
                key: "--max-udp-payload",
                reason: format!("{max_udp_payload} is outside 512..=4096"),
            });
        }
        let nsid = match args.nsid.or(file.nsid) {
            Some(text) => Some(parse_nsid(&text).map_err(|reason| ConfigError::Invalid { key: "--nsid", reason })?),
            None => None,
        };
        let idle = args.tcp_idle_timeout.or(file.tcp_idle_timeout).unwrap_or(10);
        if !(1..=3600).contains(&idle) {
            return Err(ConfigError::Invalid {
                key: "--tcp-idle-timeout",
                reason: format!("{idle} s is outside 1..=3600"),
            });
        }
        let max_tcp_connections = args.max_tcp_connections.or(file.max_tcp_connections).unwrap_or(1024);
        if max_tcp_connections == 0 {
            return Err(ConfigError::Invalid {
                key: "--max-tcp-connections",
                reason: "must be at least 1".to_owned(),
            });
        }
        let max_tcp_per_source = args.max_tcp_per_source.or(file.max_tcp_per_source).unwrap_or(64);
        if max_tcp_per_source == 0 {
            return Err(ConfigError::Invalid {
                key: "--max-tcp-per-source",
                reason: "must be at least 1".to_owned(),
            });
        }
        let ready_max_stale = ready_max_stale(args.ready_max_stale.or(file.ready_max_stale), &source)?;
        let control_timeout = match args.control_timeout.or(file.control_timeout).unwrap_or(60) {
            secs @ 1..=3600 => Duration::from_secs(secs),
            secs => {
                return Err(ConfigError::Invalid {
                    key: "--control-timeout",
                    reason: format!("{secs} s is outside 1..=3600"),
                })
            }
        };
        let (takeover, takeover_socket) = (args.takeover, args.takeover_socket.or(file.takeover_socket));
        if takeover && takeover_socket.is_none() {
            return Err(ConfigError::Invalid {
                key: "--takeover",
                reason: "needs --takeover-socket PATH: where the running edge listens".to_owned(),
            });
        }
        let rrl = rrl_settings(
            args.rrl_rate.or(file.rrl_rate),
            args.rrl_slip.or(file.rrl_slip),
            args.rrl_ipv4_prefix.or(file.rrl_ipv4_prefix),
            args.rrl_ipv6_prefix.or(file.rrl_ipv6_prefix),
        )?;
        Ok(Config {
            rrl,
            listen,
            source,
            edge_id,
            state_dir,
            xdp: if args.xdp.is_empty() { file.xdp } else { args.xdp },
            xdp_mode: args.xdp_mode.or(file.xdp_mode).unwrap_or_default(),
            workers,
            max_udp_payload,
            nsid,
            metrics: args.metrics.or(file.metrics),
            ready_max_stale,
            answer_sets: std::sync::Arc::default(),
            control_timeout,
            takeover,
            takeover_socket,
            bpffs: args
                .bpffs
                .or(file.bpffs)
                .unwrap_or_else(|| PathBuf::from("/sys/fs/bpf")),
            tcp_idle_timeout: Duration::from_secs(idle),
            max_tcp_connections,
            max_tcp_per_source,
        })
    }
}

/// The rate limiter's settings: `None` when the rate is unset or 0.
fn rrl_settings(
    rate: Option<u32>,
    slip: Option<u32>,
    v4: Option<u8>,
    v6: Option<u8>,
) -> Result<Option<qdns_abi::rrl::RrlSettings>, ConfigError> {
    let rate = rate.unwrap_or(0);
    let (slip, v4, v6) = (slip.unwrap_or(2), v4.unwrap_or(24), v6.unwrap_or(56));
    if rate > 1_000_000 {
        return Err(ConfigError::Invalid {
            key: "--rrl-rate",
            reason: format!("{rate} is over 1000000 responses per second"),
        });
    }
    if slip > 100 {
        return Err(ConfigError::Invalid {
            key: "--rrl-slip",
            reason: format!("{slip} is outside 0..=100"),
        });
    }
    if !(1..=32).contains(&v4) {
        return Err(ConfigError::Invalid {
            key: "--rrl-ipv4-prefix",
            reason: format!("{v4} is outside 1..=32"),
        });
    }
    if !(1..=64).contains(&v6) {
        return Err(ConfigError::Invalid {
            key: "--rrl-ipv6-prefix",
            reason: format!("{v6} is outside 1..=64 (buckets cover at most a /64)"),
        });
    }
    if rate == 0 {
        return Ok(None);
    }
    // A seed per start, so collisions in the bucket table cannot be aimed.
    let seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), rate);
    Ok(Some(qdns_abi::rrl::RrlSettings::new(rate, slip, v4, v6, seed)))
}

/// The `--control-tls-*` settings as given.
struct TlsSettings {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca: Option<PathBuf>,
    name: Option<String>,
}

impl TlsSettings {
    fn none_for(&self, what: &str) -> Result<(), ConfigError> {
        if self.cert.is_some() || self.key.is_some() || self.ca.is_some() || self.name.is_some() {
            return Err(ConfigError::Invalid {
                key: "--control-tls-cert",
                reason: format!("the --control-tls-* settings apply to a tls:// --control, not {what}"),
            });
        }
        Ok(())
    }
}

/// The control endpoint; a tls:// one with its certificates loaded (they must be
/// usable at start).
fn endpoint(control: &str, tls: TlsSettings) -> Result<crate::follow::Endpoint, ConfigError> {
    use crate::follow::Endpoint;
    let Some(addr) = control.strip_prefix("tls://") else {
        tls.none_for(control)?;
        return Ok(Endpoint::parse(control));
    };
    let (Some(cert), Some(key), Some(ca)) = (tls.cert, tls.key, tls.ca) else {
        return Err(ConfigError::Invalid {
            key: "--control",
            reason: format!(
                "{control}: tls:// needs --control-tls-cert, --control-tls-key and --control-tls-ca \
                 (made by `qdnsctl pki issue EDGE_ID` on the CA host)"
            ),
        });
    };
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => {
            return Err(ConfigError::Invalid {
                key: "--control",
                reason: format!("{control}: expected tls://HOST:PORT"),
            })
        }
    };
    let name = tls.name.unwrap_or_else(|| host.to_owned());
    let client = qdns_link::tls::ClientTls::new(qdns_link::tls::TlsFiles { cert, key, ca }, &name).map_err(|e| {
        ConfigError::Invalid {
            key: "--control-tls-cert",
            reason: e.to_string(),
        }
    })?;
    Ok(Endpoint::Tls {
        addr: addr.to_owned(),
        tls: std::sync::Arc::new(client),
    })
}

/// An NSID setting: `0x` and hex digits, or the text's octets; 1..=128 octets.
fn parse_nsid(text: &str) -> Result<std::sync::Arc<[u8]>, String> {
    let octets: Vec<u8> = match text.strip_prefix("0x") {
        Some(hex) => {
            if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{text:?}: 0x must be followed by pairs of hex digits"));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_default())
                .collect()
        }
        None => text.as_bytes().to_vec(),
    };
    if octets.is_empty() || octets.len() > crate::wire::edns::NSID_MAX {
        return Err(format!(
            "{} octets; 1..={} allowed",
            octets.len(),
            crate::wire::edns::NSID_MAX
        ));
    }
    Ok(octets.into())
}

/// `--ready-max-stale`: a follower's only, 1 s to a week.
fn ready_max_stale(secs: Option<u64>, source: &Source) -> Result<Option<Duration>, ConfigError> {
    match secs {
        None => Ok(None),
        Some(_) if matches!(source, Source::Zones(_)) => Err(ConfigError::Invalid {
            key: "--ready-max-stale",
            reason: "applies to a follower (--control) only: a standalone edge's zones are its own".to_owned(),
        }),
        Some(secs) if (1..=7 * 86_400).contains(&secs) => Ok(Some(Duration::from_secs(secs))),
        Some(secs) => Err(ConfigError::Invalid {
            key: "--ready-max-stale",
            reason: format!("{secs} s is outside 1..=604800"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_nsid, Args, Config};
    use clap::Parser;

    fn config(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["qdns-edge", "--listen", "127.0.0.1:53"];
        all.extend_from_slice(args);
        Config::from_args(Args::parse_from(all)).map_err(|e| e.to_string())
    }

    #[test]
    fn ready_max_stale_is_for_followers_and_bounded() {
        let follower = ["--control", "/run/qdns/edge.sock", "--state-dir", "/tmp/x"];
        let ok = config(&[&follower[..], &["--ready-max-stale", "300"]].concat()).unwrap();
        assert_eq!(ok.ready_max_stale, Some(std::time::Duration::from_secs(300)));
        assert_eq!(config(&follower).unwrap().ready_max_stale, None);
        let zero = config(&[&follower[..], &["--ready-max-stale", "0"]].concat()).unwrap_err();
        assert!(zero.contains("--ready-max-stale") && zero.contains("outside"), "{zero}");
        let standalone = config(&["--zones", "/etc/qdns/zones", "--ready-max-stale", "30"]).unwrap_err();
        assert!(standalone.contains("follower"), "{standalone}");
    }

    #[test]
    fn takeover_needs_the_socket() {
        let zones = ["--zones", "/etc/qdns/zones"];
        let err = config(&[&zones[..], &["--takeover"]].concat()).unwrap_err();
        assert!(err.contains("--takeover") && err.contains("--takeover-socket"), "{err}");
        let ok = config(&[&zones[..], &["--takeover", "--takeover-socket", "/run/t.sock"]].concat()).unwrap();
        assert!(ok.takeover && ok.takeover_socket.is_some());
        assert_eq!(ok.bpffs, std::path::Path::new("/sys/fs/bpf"));
    }

    #[test]
    fn nsid_text_or_hex() {
        assert_eq!(&*parse_nsid("edge-fra-1").unwrap(), b"edge-fra-1");
        assert_eq!(&*parse_nsid("0x0a0B").unwrap(), [10, 11]);
        assert!(parse_nsid("0x0a0").is_err());
        assert!(parse_nsid("0xzz").is_err());
        assert!(parse_nsid("").is_err());
        assert!(parse_nsid(&"x".repeat(129)).is_err());
    }
}
