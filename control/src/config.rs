//! `qdns-control` command line (SPEC §1), every flag also settable in `--config`.
use std::path::PathBuf;

use clap::Parser;
use serde::Deserialize;

/// Command line of `qdns-control`.
#[derive(Debug, Parser)]
#[command(name = "qdns-control", version, about = "qdns control plane of one edge location")]
pub struct Args {
    /// Run as a remote checker instead of a location.
    #[command(subcommand)]
    pub role: Option<Role>,
    /// Accept signed checker reports on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub checker_listen: Option<String>,
    /// TOML file of `[[checker]]` tables (`id`, `region`, `key` in base64).
    #[arg(long, value_name = "FILE")]
    pub checker_keys: Option<PathBuf>,
    /// Serve Prometheus metrics (`/metrics`) and the status page (`/status`) on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Extra trusted CA certificates (PEM) for checks with `tls_verify = true`.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Reject check targets in special-use ranges (loopback, private, link-local, CGNAT,
    /// multicast, documentation, ...).
    #[arg(long)]
    pub deny_special_use_targets: bool,
    /// Seconds DNSSEC signatures are valid from signing [default: 1209600, 14 days].
    #[arg(long, value_name = "SECONDS")]
    pub dnssec_validity: Option<u64>,
    /// Sign again when fewer seconds than this are left of the signatures' validity
    /// [default: 604800, 7 days, or half the validity when less]: validity less this is
    /// how long edges serve valid signatures without control.
    #[arg(long, value_name = "SECONDS")]
    pub dnssec_refresh: Option<u64>,
    /// Directory of zone files (`*.toml`).
    #[arg(long, value_name = "DIR")]
    pub zones: Option<PathBuf>,
    /// Control socket path (mode 0600) for qdnsctl.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Where overrides, external statuses and shifts are kept.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where edges connect: a Unix socket path, tls://ADDR:PORT (mutual TLS, needs the
    /// three --edge-tls-* files) or tcp://ADDR:PORT (neither encrypted nor authenticated).
    #[arg(long, value_name = "PATH|tls://ADDR:PORT|tcp://ADDR:PORT")]
    pub edge_socket: Option<String>,
    /// tls:// edge socket: control's certificate (`qdnsctl pki issue NAME --control`).
    #[arg(long, value_name = "FILE")]
    pub edge_tls_cert: Option<PathBuf>,
    /// tls:// edge socket: control's private key.
    #[arg(long, value_name = "FILE")]
    pub edge_tls_key: Option<PathBuf>,
    /// tls:// edge socket: the CA (PEM, one or more) every edge's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub edge_tls_ca: Option<PathBuf>,
    /// Healthy iff more than this share of reachable checkers say so (0.0..1.0).
    #[arg(long)]
    pub quorum: Option<f64>,
    /// Do not run the embedded checker (health then comes from remote checkers,
    /// external checks and overrides only).
    #[arg(long)]
    pub no_embedded_checker: bool,
    /// The embedded checker's id (default: the host name).
    #[arg(long)]
    pub checker_id: Option<String>,
    /// The embedded checker's region (default `local`).
    #[arg(long)]
    pub region: Option<String>,
    /// TOML file with any of the settings above.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the settings and load the zones, print the result and exit: 0 when
    /// everything would start, 1 with the file, key and reason otherwise.
    #[arg(long)]
    pub check_config: bool,
}

/// Other roles of the binary.
#[derive(Debug, clap::Subcommand)]
pub enum Role {
    /// Probe the checks of the zones and report to one or more locations (SPEC §4).
    Checker {
        /// Checker id (as in the locations' --checker-keys).
        #[arg(long)]
        id: String,
        /// Region.
        #[arg(long)]
        region: String,
        /// Zone directory (the checks to probe).
        #[arg(long, value_name = "DIR")]
        zones: PathBuf,
        /// File holding this checker's key (base64).
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
        /// A location's --checker-listen address; repeat for each location.
        #[arg(long, value_name = "ADDR:PORT", required = true)]
        report_to: Vec<String>,
        /// Local address to send probes from.
        #[arg(long, value_name = "IP")]
        source_ip: Option<std::net::IpAddr>,
        /// Extra trusted CA certificates (PEM) for checks with `tls_verify = true`.
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<PathBuf>,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    metrics: Option<String>,
    tls_ca: Option<PathBuf>,
    checker_listen: Option<String>,
    checker_keys: Option<PathBuf>,
    deny_special_use_targets: Option<bool>,
    dnssec_validity: Option<u64>,
    dnssec_refresh: Option<u64>,
    zones: Option<PathBuf>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    edge_socket: Option<String>,
    edge_tls_cert: Option<PathBuf>,
    edge_tls_key: Option<PathBuf>,
    edge_tls_ca: Option<PathBuf>,
    quorum: Option<f64>,
    no_embedded_checker: Option<bool>,
    checker_id: Option<String>,
    region: Option<String>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Zone directory.
    pub zones: PathBuf,
    /// Control socket.
    pub socket: PathBuf,
    /// State directory.
    pub state_dir: PathBuf,
    /// Edge endpoint.
    pub edge_socket: String,
    /// Certificate, key and CA of a tls:// edge socket.
    pub edge_tls: Option<qdns_link::tls::TlsFiles>,
    /// Quorum share.
    pub quorum: f64,
    /// Run the embedded checker.
    pub embedded_checker: bool,
    /// The embedded checker's id.
    pub checker_id: String,
    /// The embedded checker's region.
    pub region: String,
    /// Metrics address.
    pub metrics: Option<String>,
    /// Extra CA bundle for `tls_verify` checks.
    pub tls_ca: Option<PathBuf>,
    /// Report listener address.
    pub checker_listen: Option<String>,
    /// Checker keys file.
    pub checker_keys: Option<PathBuf>,
    /// Reject special-use check targets.
    pub deny_special_use_targets: bool,
    /// DNSSEC signature validity and refresh window.
    pub dnssec: crate::dnssec::Lifetimes,
}

impl Config {
    /// Merges flags over the config file; every setting is required.
    pub fn from_args(args: Args) -> Result<Config, String> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| format!("{}: {}", path.display(), qdns_zone::load::toml_reason(&text, &e)))?
            }
            None => FileConfig::default(),
        };
        let missing = |flag: &str| format!("{flag} is required (flag or config file)");
        let quorum = args.quorum.or(file.quorum).unwrap_or(crate::state::DEFAULT_QUORUM);
        if !(0.0..1.0).contains(&quorum) {
            return Err(format!("--quorum: {quorum} is outside 0.0..1.0"));
        }
        let checker_listen = args.checker_listen.or(file.checker_listen);
        let checker_keys = args.checker_keys.or(file.checker_keys);
        if checker_listen.is_some() != checker_keys.is_some() {
            return Err("--checker-listen and --checker-keys go together".to_owned());
        }
        let dnssec = crate::dnssec::Lifetimes::new(
            args.dnssec_validity
                .or(file.dnssec_validity)
                .unwrap_or(crate::dnssec::Lifetimes::default().validity),
            args.dnssec_refresh.or(file.dnssec_refresh),
        )?;
        let edge_socket = args
            .edge_socket
            .or(file.edge_socket)
            .ok_or_else(|| missing("--edge-socket"))?;
        let edge_tls = edge_tls(
            &edge_socket,
            args.edge_tls_cert.or(file.edge_tls_cert),
            args.edge_tls_key.or(file.edge_tls_key),
            args.edge_tls_ca.or(file.edge_tls_ca),
        )?;
        Ok(Config {
            edge_socket,
            edge_tls,
            metrics: args.metrics.or(file.metrics),
            tls_ca: args.tls_ca.or(file.tls_ca),
            checker_listen,
            checker_keys,
            deny_special_use_targets: args.deny_special_use_targets || file.deny_special_use_targets.unwrap_or(false),
            dnssec,
            quorum,
            embedded_checker: !(args.no_embedded_checker || file.no_embedded_checker.unwrap_or(false)),
            checker_id: args.checker_id.or(file.checker_id).unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map_or_else(|_| "control".to_owned(), |h| h.trim().to_owned())
            }),
            region: args.region.or(file.region).unwrap_or_else(|| "local".to_owned()),
            zones: args.zones.or(file.zones).ok_or_else(|| missing("--zones"))?,
            socket: args.socket.or(file.socket).ok_or_else(|| missing("--socket"))?,
            state_dir: args
                .state_dir
                .or(file.state_dir)
                .ok_or_else(|| missing("--state-dir"))?,
        })
    }
}

/// The tls:// edge socket's files: all three with tls://, none otherwise.
fn edge_tls(
    edge_socket: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca: Option<PathBuf>,
) -> Result<Option<qdns_link::tls::TlsFiles>, String> {
    let tls = edge_socket.starts_with("tls://");
    match (cert, key, ca) {
        (Some(cert), Some(key), Some(ca)) if tls => Ok(Some(qdns_link::tls::TlsFiles { cert, key, ca })),
        (None, None, None) if !tls => Ok(None),
        _ if tls => Err(format!(
            "--edge-socket {edge_socket}: tls:// needs --edge-tls-cert, --edge-tls-key and --edge-tls-ca \
             (make them with `qdnsctl pki init` and `qdnsctl pki issue`)"
        )),
        _ => Err(format!(
            "--edge-tls-cert/--edge-tls-key/--edge-tls-ca apply to a tls:// edge socket, not {edge_socket}"
        )),
    }
}
