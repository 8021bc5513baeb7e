//! `qdns-control` command line (SPEC §1), every flag also settable in `--config`.
use std::path::PathBuf;

use clap::Parser;
use serde::Deserialize;

/// Command line of `qdns-control`.
#[derive(Debug, Parser)]
#[command(name = "qdns-control", version, about = "qdns control plane of one edge location")]
pub struct Args {
    /// Directory of zone files (`*.toml`).
    #[arg(long, value_name = "DIR")]
    pub zones: Option<PathBuf>,
    /// Control socket path (mode 0600) for qdnsctl.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Where overrides, external statuses and shifts are kept.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where edges connect: a Unix socket path or tcp://ADDR:PORT.
    #[arg(long, value_name = "PATH|tcp://ADDR:PORT")]
    pub edge_socket: Option<String>,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    zones: Option<PathBuf>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    edge_socket: Option<String>,
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
    /// Quorum share.
    pub quorum: f64,
    /// Run the embedded checker.
    pub embedded_checker: bool,
    /// The embedded checker's id.
    pub checker_id: String,
    /// The embedded checker's region.
    pub region: String,
}

impl Config {
    /// Merges flags over the config file; every setting is required.
    pub fn from_args(args: Args) -> Result<Config, String> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
                toml::from_str::<FileConfig>(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?
            }
            None => FileConfig::default(),
        };
        let missing = |flag: &str| format!("{flag} is required (flag or config file)");
        let quorum = args.quorum.or(file.quorum).unwrap_or(crate::state::DEFAULT_QUORUM);
        if !(0.0..1.0).contains(&quorum) {
            return Err(format!("--quorum: {quorum} is outside 0.0..1.0"));
        }
        Ok(Config {
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
            edge_socket: args
                .edge_socket
                .or(file.edge_socket)
                .ok_or_else(|| missing("--edge-socket"))?,
        })
    }
}
