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
        Ok(Config {
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
