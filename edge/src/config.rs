//! The edge's settings (SPEC §1): each declared once below, as a flag that is also a
//! key of the `--config` file ([`qdns_settings`] merges the two; flags win), then
//! checked together into a [`Config`].
use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use qdns_settings::{at_least, within};

use crate::{wire::edns::DEFAULT_UDP_PAYLOAD, xdp::XdpMode};

/// A setting that cannot be used: the file, line and key, or the flag, and why.
pub type ConfigError = qdns_settings::Error;

/// Every setting of `qdns-edge`: the flag, its type, default, range and doc. The
/// `--config` file takes the same names with `_` for `-`.
#[derive(Debug, Clone, clap::Parser)]
#[expect(clippy::struct_excessive_bools, reason = "each is a command-line switch")]
#[command(
    name = "qdns-edge",
    version,
    about = "qdns data plane: authoritative DNS over UDP/TCP, with an XDP fast path"
)]
pub struct Settings {
    /// Address to serve DNS on (UDP and TCP); repeat for several (v4 and v6).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Vec<SocketAddr>,
    /// Standalone mode: load the zone files of this directory (no control plane).
    #[arg(long, value_name = "DIR", conflicts_with = "control")]
    pub zones: Option<PathBuf>,
    /// Standalone: the MaxMind DB file (GeoLite2, GeoIP2, DB-IP; country or city) that
    /// `policy = "geo"` sets are compiled from; re-read on SIGHUP. An edge that follows
    /// control gets compiled tables and never reads it.
    #[arg(long, value_name = "FILE", requires = "zones")]
    pub geoip_db: Option<PathBuf>,
    /// Standalone: this edge's location, for members' `sites` (members whose `sites` do
    /// not name it are left out). Without it every member is kept. An edge that follows
    /// control gets sets already reduced to control's `--location`.
    #[arg(long, value_name = "NAME", requires = "zones")]
    pub location: Option<String>,
    /// Follow qdns-control at this endpoint: a Unix socket path, tls://HOST:PORT (mutual
    /// TLS: needs the --control-tls-* files) or tcp://ADDR:PORT (neither encrypted nor
    /// authenticated). Repeat for the several controls of a location: the edge follows
    /// the first reachable one in order, moves to the next when its link is lost or
    /// silent, and back to an earlier one once it answers again.
    #[arg(long, value_name = "PATH|tls://HOST:PORT|tcp://ADDR:PORT")]
    pub control: Vec<String>,
    /// Accept a tcp:// --control beyond loopback: neither encrypted nor authenticated
    /// (refused without this; control needs the same flag).
    #[arg(long)]
    pub insecure_plaintext_link: bool,
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
    #[arg(long, value_enum, default_value_t)]
    pub xdp_mode: XdpMode,
    /// UDP worker threads per listen address (default: one per core); up to four share
    /// a socket, the extra ones woken only when the first falls behind.
    #[arg(long, value_name = "N", value_parser = within(1usize, 256))]
    pub workers: Option<usize>,
    /// Largest UDP response sent to EDNS clients.
    #[arg(long, value_name = "OCTETS", default_value_t = DEFAULT_UDP_PAYLOAD, value_parser = within(512u16, 4096))]
    pub max_udp_payload: u16,
    /// Identifier returned to NSID requests (RFC 5001): text, or hex as `0x…`; at most
    /// 128 octets. Unset: NSID requests are ignored like other options.
    #[arg(long, value_name = "ID", value_parser = parse_nsid)]
    pub nsid: Option<Arc<[u8]>>,
    /// Query logs: send dnstap (`AUTH_QUERY` and `AUTH_RESPONSE` for every query answered
    /// in user space) to this Frame Streams reader, `unix:PATH` or `tcp:HOST:PORT`.
    #[arg(long, value_name = "unix:PATH|tcp:HOST:PORT", value_parser = crate::dnstap::Target::parse)]
    pub dnstap: Option<crate::dnstap::Target>,
    /// Prefix lengths client addresses are masked to in query logs, IPv4,IPv6 (32,128
    /// keeps them whole).
    #[arg(long, value_name = "V4,V6", default_value = "24,56", value_parser = crate::dnstap::Mask::parse)]
    pub dnstap_mask: crate::dnstap::Mask,
    /// Seconds a TCP connection may stay idle.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = within(1u64, 3600).unit("s"))]
    pub tcp_idle_timeout: u64,
    /// TCP connections served at once (past it a new one replaces the oldest waiting for
    /// a query).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = at_least(1usize))]
    pub max_tcp_connections: usize,
    /// TCP connections from one source at once (an IPv4 address, an IPv6 /64; past it
    /// a new one replaces that source's oldest idle one, or is closed).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = at_least(1usize))]
    pub max_tcp_per_source: usize,
    /// IPv4 prefix length one TCP source covers for --max-tcp-per-source.
    #[arg(long, value_name = "BITS", default_value_t = 32, value_parser = within(1u8, 32))]
    pub tcp_source_ipv4_prefix: u8,
    /// IPv6 prefix length one TCP source covers for --max-tcp-per-source (a host is
    /// given a whole /64, so a cap per address would be none).
    #[arg(long, value_name = "BITS", default_value_t = 64, value_parser = within(1u8, 128))]
    pub tcp_source_ipv6_prefix: u8,
    /// Response rate limiting: UDP responses per second per client prefix, in both the
    /// XDP and the user-space path (0: off).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = within(0u32, 1_000_000))]
    pub rrl_rate: u32,
    /// Every Nth response over the rate is sent slipped (TC=1, no records) instead of
    /// dropped; 0 drops them all, 1 slips them all.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = within(0u32, 100))]
    pub rrl_slip: u32,
    /// IPv4 prefix length a rate-limit bucket covers.
    #[arg(long, value_name = "BITS", default_value_t = 24, value_parser = within(1u8, 32))]
    pub rrl_ipv4_prefix: u8,
    /// IPv6 prefix length a rate-limit bucket covers (buckets cover at most a /64).
    #[arg(long, value_name = "BITS", default_value_t = 56, value_parser = within(1u8, 64))]
    pub rrl_ipv6_prefix: u8,
    /// Ignore COOKIE options (RFC 7873) like unknown ones: no server cookies, and the
    /// rate limiter exempts no client. By default both paths answer with a server cookie
    /// (RFC 9018) under the location's secret, which control sends (standalone: the
    /// edge's own, made at start).
    #[arg(long)]
    pub no_cookies: bool,
    /// Serve Prometheus metrics (`/metrics`) and readiness (`/ready`) on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// With --control: not ready (`/ready` 503) once cut off from control for longer
    /// than this, in seconds (default: a follower stays ready on its last snapshot).
    #[arg(long, value_name = "SECONDS", value_parser = within(1u64, 7 * 86_400).unit("s"))]
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
    /// send its snapshot within this many seconds, and retry.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = within(1u64, 3600).unit("s"))]
    pub control_timeout: u64,
    /// With --control: ask control for keepalives every this many seconds, and send
    /// ours as often; either end drops a link silent for three of them (a hung control
    /// or edge is noticed within 3 × this). 0: off (kernel keepalive only).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = within(0u16, 60).unit("s"))]
    pub control_keepalive: u16,
    /// With --control: the largest frame accepted from control, in octets, checked
    /// before its body is read (a snapshot of 1,000,000 record sets is about 51 MiB; the
    /// ceiling is 1 GiB). A larger snapshot is refused with a log naming this flag.
    #[arg(long, value_name = "OCTETS", default_value_t = 256 << 20, value_parser = within(1u64 << 20, 1 << 30))]
    pub max_snapshot_frame: u64,
    /// Take over from the edge listening on --takeover-socket instead of binding.
    #[arg(long)]
    pub takeover: bool,
    /// A bpffs directory where XDP links are pinned while handed over.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf")]
    pub bpffs: PathBuf,
}

impl qdns_settings::Declared for Settings {
    const CLI_ONLY: &'static [&'static str] = &["config", "check_config", "takeover"];
}

/// The settings checked together, with what follows from them.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings as given.
    pub settings: Settings,
    /// Where answers come from.
    pub source: Source,
    /// This edge's name (`--edge-id` or the host name).
    pub edge_id: String,
    /// UDP workers per address (`--workers` or one per core).
    pub workers: usize,
    /// Response rate limiting, when on.
    pub rrl: Option<qdns_abi::rrl::RrlSettings>,
    /// The answer counters' blocks, shared by every engine this server compiles.
    pub answer_sets: Arc<crate::answers::AnswerSets>,
    /// The cookie secrets and clock, shared by every engine (`None`: `--no-cookies`).
    pub cookies: Option<Arc<crate::cookies::CookieJar>>,
}

/// Where the edge gets its zones.
#[derive(Debug, Clone)]
pub enum Source {
    /// Standalone: load this zone directory (SIGHUP reloads).
    Zones(PathBuf),
    /// Follow qdns-control; persist in the state directory.
    Control {
        /// The control endpoints, in the order they are preferred.
        endpoints: Vec<crate::follow::Endpoint>,
        /// Where the last snapshot is kept.
        state_dir: PathBuf,
    },
}

impl Config {
    /// What standalone zones are loaded with: `--geoip-db` and `--location`.
    #[must_use]
    pub fn zone_sources(&self) -> qdns_zone::Sources<'_> {
        qdns_zone::Sources {
            geoip_db: self.settings.geoip_db.as_deref(),
            location: self.settings.location.as_deref(),
            secondary_dir: None,
            dynamic_dir: None,
        }
    }

    /// The response settings every engine this server compiles gets.
    #[must_use]
    pub fn serve_options(&self) -> crate::engine::ServeOptions {
        crate::engine::ServeOptions {
            max_udp_payload: self.settings.max_udp_payload,
            nsid: self.settings.nsid.clone(),
            answer_sets: Some(Arc::clone(&self.answer_sets)),
            cookies: self.cookies.clone(),
        }
    }

    /// How long a TCP connection may stay idle.
    #[must_use]
    pub fn tcp_idle_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.tcp_idle_timeout)
    }

    /// `--max-snapshot-frame`.
    #[must_use]
    pub fn max_snapshot_frame(&self) -> usize {
        usize::try_from(self.settings.max_snapshot_frame).unwrap_or(qdns_link::protocol::MAX_FRAME)
    }

    /// The keepalive interval asked of control (`None`: off).
    #[must_use]
    pub fn control_keepalive(&self) -> Option<Duration> {
        (self.settings.control_keepalive > 0).then(|| Duration::from_secs(u64::from(self.settings.control_keepalive)))
    }

    /// Longest wait for control to connect and send its snapshot.
    #[must_use]
    pub fn control_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.control_timeout)
    }

    /// Longest a follower may be cut off from control and stay ready.
    #[must_use]
    pub fn ready_max_stale(&self) -> Option<Duration> {
        self.settings.ready_max_stale.map(Duration::from_secs)
    }

    /// Checks the settings that go together (each one's own range is checked as it
    /// is parsed).
    pub fn new(settings: Settings) -> Result<Config, ConfigError> {
        if settings.listen.is_empty() {
            return Err(ConfigError::invalid("--listen", "at least one ADDR:PORT is required"));
        }
        let tls = TlsSettings {
            cert: settings.control_tls_cert.clone(),
            key: settings.control_tls_key.clone(),
            ca: settings.control_tls_ca.clone(),
            name: settings.control_tls_name.clone(),
        };
        for control in &settings.control {
            qdns_link::check_plaintext(control, settings.insecure_plaintext_link)
                .map_err(|reason| ConfigError::invalid("--control", reason))?;
        }
        let controls = settings.control.first().map(|_| &settings.control);
        let source = match (&settings.zones, controls) {
            (Some(zones), None) => {
                tls.none_for("--zones")?;
                Source::Zones(zones.clone())
            }
            (None, Some(controls)) => Source::Control {
                endpoints: controls
                    .iter()
                    .map(|control| endpoint(control, &tls))
                    .collect::<Result<_, _>>()?,
                state_dir: settings.state_dir.clone().ok_or_else(|| {
                    ConfigError::invalid(
                        "--state-dir",
                        "required with --control: the last snapshot is kept there",
                    )
                })?,
            },
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "--zones",
                    "use either --zones (standalone) or --control, not both",
                ))
            }
            (None, None) => {
                return Err(ConfigError::invalid(
                    "--control",
                    "either --control ENDPOINT or --zones DIR (standalone) is required",
                ))
            }
        };
        if settings.ready_max_stale.is_some() && matches!(source, Source::Zones(_)) {
            return Err(ConfigError::invalid(
                "--ready-max-stale",
                "applies to a follower (--control) only: a standalone edge's zones are its own",
            ));
        }
        if settings.takeover && settings.takeover_socket.is_none() {
            return Err(ConfigError::invalid(
                "--takeover",
                "needs --takeover-socket PATH: where the running edge listens",
            ));
        }
        let cookies = if settings.no_cookies {
            None
        } else {
            let jar = crate::cookies::CookieJar::random().map_err(|err| {
                ConfigError::invalid(
                    "--no-cookies",
                    format!("no random cookie secret ({err}); cookies need one"),
                )
            })?;
            Some(Arc::new(jar))
        };
        Ok(Config {
            cookies,
            rrl: rrl_settings(&settings),
            source,
            edge_id: settings
                .edge_id
                .clone()
                .unwrap_or_else(|| qdns_listen::accounts::host_name("edge")),
            workers: settings
                .workers
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from).min(256)),
            answer_sets: Arc::default(),
            settings,
        })
    }
}

/// The rate limiter's settings: `None` when the rate is 0.
fn rrl_settings(settings: &Settings) -> Option<qdns_abi::rrl::RrlSettings> {
    if settings.rrl_rate == 0 {
        return None;
    }
    // A seed per start, so collisions in the bucket table cannot be aimed.
    let seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), settings.rrl_rate);
    Some(qdns_abi::rrl::RrlSettings::new(
        settings.rrl_rate,
        settings.rrl_slip,
        settings.rrl_ipv4_prefix,
        settings.rrl_ipv6_prefix,
        seed,
    ))
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
            return Err(ConfigError::invalid(
                "--control-tls-cert",
                format!("the --control-tls-* settings apply to a tls:// --control, not {what}"),
            ));
        }
        Ok(())
    }
}

/// The control endpoint; a tls:// one with its certificates loaded (they must be
/// usable at start).
fn endpoint(control: &str, tls: &TlsSettings) -> Result<crate::follow::Endpoint, ConfigError> {
    use crate::follow::Endpoint;
    let Some(addr) = control.strip_prefix("tls://") else {
        tls.none_for(control)?;
        return Ok(Endpoint::parse(control));
    };
    let (Some(cert), Some(key), Some(ca)) = (tls.cert.clone(), tls.key.clone(), tls.ca.clone()) else {
        return Err(ConfigError::invalid(
            "--control",
            format!(
                "{control}: tls:// needs --control-tls-cert, --control-tls-key and --control-tls-ca \
                 (made by `qdnsctl pki issue EDGE_ID` on the CA host)"
            ),
        ));
    };
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => {
            return Err(ConfigError::invalid(
                "--control",
                format!("{control}: expected tls://HOST:PORT"),
            ))
        }
    };
    let name = tls.name.clone().unwrap_or_else(|| host.to_owned());
    let client = qdns_link::tls::ClientTls::new(
        qdns_link::tls::TlsFiles {
            cert,
            key,
            ca,
            crl: None,
        },
        &name,
    )
    .map_err(|e| ConfigError::invalid("--control-tls-cert", e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::{parse_nsid, Config, Settings};
    use qdns_settings::Declared;

    fn config(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["qdns-edge", "--listen", "127.0.0.1:53"];
        all.extend_from_slice(args);
        Settings::from_argv(all)
            .and_then(Config::new)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_setting_is_in_config_md_and_only_those() {
        assert_eq!(Settings::in_config_md("Edge settings"), Ok(()));
    }

    #[test]
    fn plaintext_beyond_loopback_needs_the_flag() {
        let far = ["--control", "tcp://10.77.0.1:5400", "--state-dir", "/tmp/x"];
        let err = config(&far).unwrap_err();
        assert!(
            err.starts_with("--control: tcp://10.77.0.1:5400 leaves this host"),
            "{err}"
        );
        assert!(err.contains("--insecure-plaintext-link"), "{err}");
        assert!(config(&[&far[..], &["--insecure-plaintext-link"]].concat()).is_ok());
        assert!(config(&["--control", "tcp://127.0.0.1:5400", "--state-dir", "/tmp/x"]).is_ok());
    }

    #[test]
    fn several_controls_are_followed_in_the_order_given() {
        let two = [
            "--control",
            "/run/qdns/a.sock",
            "--control",
            "/run/qdns/b.sock",
            "--state-dir",
            "/tmp/x",
        ];
        let super::Source::Control { endpoints, .. } = config(&two).unwrap().source else {
            panic!("not a follower")
        };
        let names: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["/run/qdns/a.sock", "/run/qdns/b.sock"]);
        // Each one is checked: a far plaintext one among them is refused.
        let far = [
            &two[..2],
            &["--control", "tcp://10.77.0.1:5400", "--state-dir", "/tmp/x"],
        ]
        .concat();
        assert!(config(&far).unwrap_err().contains("--insecure-plaintext-link"));
    }

    #[test]
    fn defaults() {
        let config = config(&["--zones", "/etc/qdns/zones"]).unwrap();
        let settings = &config.settings;
        assert_eq!(settings.max_udp_payload, crate::wire::edns::DEFAULT_UDP_PAYLOAD);
        assert_eq!(config.tcp_idle_timeout(), std::time::Duration::from_secs(10));
        assert_eq!((settings.max_tcp_connections, settings.max_tcp_per_source), (1024, 64));
        assert_eq!(config.control_timeout(), std::time::Duration::from_secs(60));
        assert!(config.rrl.is_none() && settings.nsid.is_none() && !config.edge_id.is_empty());
        assert!((1..=256).contains(&config.workers));
    }

    #[test]
    fn ranges_are_checked() {
        for (flag, value) in [
            ("--max-udp-payload", "511"),
            ("--max-udp-payload", "4097"),
            ("--workers", "0"),
            ("--workers", "257"),
            ("--tcp-idle-timeout", "0"),
            ("--max-tcp-connections", "0"),
            ("--max-tcp-per-source", "0"),
            ("--rrl-rate", "1000001"),
            ("--rrl-slip", "101"),
            ("--rrl-ipv4-prefix", "33"),
            ("--rrl-ipv6-prefix", "65"),
            ("--control-timeout", "3601"),
        ] {
            let err = config(&["--zones", "/z", flag, value]).unwrap_err();
            assert!(err.contains(flag) && err.contains(value), "{flag} {value}: {err}");
        }
        let rrl = config(&["--zones", "/z", "--rrl-rate", "100"]).unwrap().rrl;
        assert!(rrl.is_some());
    }

    #[test]
    fn ready_max_stale_is_for_followers_and_bounded() {
        let follower = ["--control", "/run/qdns/edge.sock", "--state-dir", "/tmp/x"];
        let ok = config(&[&follower[..], &["--ready-max-stale", "300"]].concat()).unwrap();
        assert_eq!(ok.ready_max_stale(), Some(std::time::Duration::from_secs(300)));
        assert_eq!(config(&follower).unwrap().ready_max_stale(), None);
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
        assert!(ok.settings.takeover && ok.settings.takeover_socket.is_some());
        assert_eq!(ok.settings.bpffs, std::path::Path::new("/sys/fs/bpf"));
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
