//! `qdnsctl`: the operator's CLI for the control socket (SPEC §6). Human-readable
//! output by default, the raw JSON `data` with `--json`. Exits non-zero when the
//! request fails, printing control's error.
#![forbid(unsafe_code)]
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use qdns_control::api::{Request, Response};
use serde_json::Value;

mod intent;
mod print;
mod sync;

#[derive(Parser)]
#[command(name = "qdnsctl", version, about = "Operate qdns-control through its control socket")]
struct Cli {
    /// Control socket (default $`QDNS_SOCKET`, else /run/qdns/control.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Print the JSON result instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Zones, serials, snapshot version, fail-open sets, edges.
    Status,
    /// Re-read every zone (validated first; on error nothing changes).
    Reload,
    /// Health of every check, or of one.
    Health { check: Option<String> },
    /// Why NAME answers TYPE as it does.
    Explain {
        name: String,
        rtype: String,
        /// For client-aware sets: the answer, matched rule and scope for this client
        /// address, or ECS prefix ADDR/LEN.
        #[arg(long, value_name = "ADDR[/LEN]")]
        client: Option<String>,
    },
    /// ZONE's record sets as a master file (RFC 1035 §5; policy sets as comments).
    Dump { zone: String },
    /// ZONE's plain records, one a line; those dynamic update added with the key that
    /// added each and when.
    Records {
        zone: String,
        /// Only the records dynamic update added (RFC 2136).
        #[arg(long)]
        dynamic: bool,
    },
    /// Force a check's status for a while.
    Override {
        #[command(subcommand)]
        action: OverrideAction,
    },
    /// Set an external check's status.
    External {
        check: String,
        status: Status,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
    /// Zonal shifts.
    Shift {
        #[command(subcommand)]
        action: ShiftAction,
    },
    /// DNSSEC of a signed zone: DS records for the parent, key rollovers.
    Dnssec {
        #[command(subcommand)]
        action: DnssecAction,
    },
    /// The timeline of health, fail-open, reload, shift and override events.
    Events {
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Publish a zone directory as a new revision of the deployment's intent in etcd
    /// (checked as `reload` does; prints `change REV`; no control socket).
    Publish(intent::PublishArgs),
    /// Which locations of the deployment answer by change REV (INSYNC, PENDING, REFUSED,
    /// CUT OFF); --wait until every location the store hears from does (no control
    /// socket).
    Change(sync::ChangeArgs),
    /// The deployment's locations: their control, revisions, edges and last contact
    /// with the store (no control socket).
    Fleet(sync::FleetArgs),
    /// A secret of the deployment in etcd (no control socket).
    Secret {
        #[command(subcommand)]
        action: SecretAction,
    },
    /// The deployment's intent in etcd.
    Intent {
        #[command(subcommand)]
        action: IntentAction,
    },
    /// Certificates for tls:// control↔edge links (local files; no control socket).
    Pki {
        #[command(subcommand)]
        action: PkiAction,
    },
    /// Print the completion script for SHELL (`qdnsctl completions bash >
    /// /usr/share/bash-completion/completions/qdnsctl`; the package installs it).
    Completions { shell: clap_complete::Shell },
    /// Announce the edge's prefix by BGP only while the edge is ready: enables BIRD 2
    /// protocol PROTOCOL while /ready and a DNS probe pass, disables it otherwise and on
    /// exit (runs on the edge host, beside qdns-edge and BIRD; no control socket).
    Anycast(AnycastArgs),
}

#[derive(clap::Args)]
struct AnycastArgs {
    /// The edge's readiness URL (its --metrics address): http://ADDR:PORT/ready.
    #[arg(long, value_name = "URL")]
    ready: Option<qdns_control::anycast::ReadyUrl>,
    /// A service address the edge answers on, asked the probe name's SOA each interval.
    #[arg(long, value_name = "ADDR:PORT", requires = "probe_name")]
    probe: Option<std::net::SocketAddr>,
    /// A zone apex the edge serves (the probe needs an authoritative NOERROR answer).
    #[arg(long, value_name = "NAME")]
    probe_name: Option<String>,
    /// BIRD's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/bird/bird.ctl")]
    bird_socket: PathBuf,
    /// The BIRD protocol (a `static` one holding the service prefix, `disabled yes`).
    #[arg(long, value_name = "NAME")]
    protocol: String,
    /// Time between checks.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Limit on each check and each BIRD exchange.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Passing checks in a row before the prefix is announced.
    #[arg(long, value_name = "N", default_value_t = 2)]
    rise: u32,
    /// Failing checks in a row before the prefix is withdrawn.
    #[arg(long, value_name = "N", default_value_t = 2)]
    fall: u32,
}

/// Runs the anycast watchdog until SIGTERM or SIGINT.
fn anycast(args: AnycastArgs) -> ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let settings = qdns_control::anycast::Settings {
        ready: args.ready,
        probe: args.probe,
        probe_name: args.probe_name.unwrap_or_default(),
        bird_socket: args.bird_socket,
        protocol: args.protocol,
        interval: args.interval.max(Duration::from_millis(100)),
        timeout: args.timeout,
        rise: args.rise,
        fall: args.fall,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let shutdown = tokio_util::sync::CancellationToken::new();
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return Err(Box::<dyn std::error::Error>::from("cannot handle SIGTERM and SIGINT"));
        };
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            stop.cancel();
        });
        qdns_control::anycast::run(settings, shutdown).await.map_err(Box::from)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand)]
enum SecretAction {
    /// Write NAME from FILE (checked as the daemons read it); prints `change REV`.
    Put(intent::SecretPutArgs),
}

#[derive(Subcommand)]
enum IntentAction {
    /// Write the revision in force back as files (DIR must not exist).
    Export(intent::ExportArgs),
}

#[derive(Subcommand)]
enum PkiAction {
    /// Make the location CA: DIR/ca.pem (give it to control and every edge) and
    /// DIR/ca.key (keep it on this host only).
    Init {
        /// Where the CA lives.
        #[arg(long, default_value = "/etc/qdns/pki")]
        dir: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "qdns location CA")]
        name: String,
        /// Validity in days.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Issue DIR/NAME.pem and DIR/NAME.key from the CA: an edge's (NAME is its
    /// --edge-id) or, with --control, control's (NAME and every --san are the names and
    /// addresses edges dial). Issuing again replaces them: that is rotation.
    Issue {
        /// Edge id, or with --control the name edges dial.
        name: String,
        /// A certificate for control's edge socket instead of an edge.
        #[arg(long)]
        control: bool,
        /// With --control: another DNS name or IP address edges dial; repeat.
        #[arg(long, value_name = "NAME|IP")]
        san: Vec<String>,
        /// Where the CA lives.
        #[arg(long, default_value = "/etc/qdns/pki")]
        dir: PathBuf,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
    /// Revoke DIR/NAME.pem (a leaked or retired edge certificate): DIR/crl.pem lists
    /// every revoked serial; control (--edge-tls-crl DIR/crl.pem) refuses the edge and
    /// drops its link within seconds. `issue NAME` again gives the edge a new one.
    Revoke {
        /// Edge id.
        name: String,
        /// Where the CA lives.
        #[arg(long, default_value = "/etc/qdns/pki")]
        dir: PathBuf,
    },
}

/// `pki revoke`: writes the revocation list.
fn revoke(dir: &std::path::Path, name: &str) -> ExitCode {
    match qdns_link::pki::revoke(dir, name) {
        Ok(crl) => {
            println!("revocation list: {}", crl.display());
            println!("use:             control: --edge-tls-crl (read again when it changes)");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("qdnsctl pki: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a `pki` action: local files only.
fn pki(action: PkiAction) -> ExitCode {
    use qdns_link::pki;
    let (written, usage) = match action {
        PkiAction::Init { dir, name, days } => (
            pki::init(&dir, &name, days),
            "give ca.pem to control (--edge-tls-ca) and to every edge (--control-tls-ca)",
        ),
        PkiAction::Issue {
            name,
            control,
            san,
            dir,
            days,
        } => {
            let (role, usage) = if control {
                (pki::Role::Control, "control: --edge-tls-cert and --edge-tls-key")
            } else {
                (pki::Role::Edge, "the edge: --control-tls-cert and --control-tls-key")
            };
            (pki::issue(&dir, &name, role, &san, days), usage)
        }
        PkiAction::Revoke { name, dir } => return revoke(&dir, &name),
    };
    match written {
        Ok(files) => {
            println!("certificate: {}", files.cert.display());
            println!("key:         {} (mode 0600)", files.key.display());
            println!("use:         {usage}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("qdnsctl pki: {err}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand)]
enum OverrideAction {
    /// Force CHECK healthy or unhealthy until the expiry (at most 72h).
    Set {
        check: String,
        status: Status,
        #[arg(long)]
        expires: String,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
    /// End the override of CHECK.
    Clear {
        check: String,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
}

#[derive(Subcommand)]
enum DnssecAction {
    /// ZONE's keys and the DS records to give its parent.
    Ds { zone: String },
    /// Start a key rollover (a new key signs beside the old; give the parent its DS),
    /// or with --complete retire the old key once the parent has the new DS.
    Rollover {
        zone: String,
        #[arg(long)]
        complete: bool,
    },
}

#[derive(Subcommand)]
enum ShiftAction {
    /// Treat an AZ as unhealthy for a zonal record set until the expiry (required, ≤ 72h).
    Start {
        #[arg(long)]
        rrset: String,
        #[arg(long)]
        az: String,
        #[arg(long)]
        expires: String,
        #[arg(long)]
        comment: Option<String>,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
    /// Set a new expiry (from now, ≤ 72h).
    Update {
        #[arg(long)]
        rrset: String,
        #[arg(long)]
        az: String,
        #[arg(long)]
        expires: String,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
    /// End a shift.
    Cancel {
        #[arg(long)]
        rrset: String,
        #[arg(long)]
        az: String,
        /// Make it at this location only (in a deployment; default: every location).
        #[arg(long, value_name = "NAME")]
        only_location: Option<String>,
    },
    /// Every shift.
    List,
}

#[derive(Clone, Copy, ValueEnum)]
enum Status {
    Healthy,
    Unhealthy,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let socket = cli
        .socket
        .or_else(|| std::env::var_os("QDNS_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/run/qdns/control.sock"));
    let request = match cli.command {
        Command::Pki { action } => return pki(action),
        Command::Publish(args) => return intent::publish(args),
        Command::Change(args) => return sync::change(&args, cli.json),
        Command::Secret {
            action: SecretAction::Put(args),
        } => return intent::secret_put(&args),
        Command::Fleet(args) => return sync::fleet(&args, cli.json),
        Command::Intent {
            action: IntentAction::Export(args),
        } => return intent::export(&args),
        Command::Anycast(args) => return anycast(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "qdnsctl", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        command => match socket_request(command) {
            Some(request) => request,
            None => return ExitCode::FAILURE,
        },
    };
    let response = match call(&socket, &request) {
        Ok(response) => response,
        Err(err) => {
            eprintln!("qdnsctl: {}: {err}", socket.display());
            return ExitCode::from(2);
        }
    };
    if cli.json {
        // The daemon's `data` as is, after checking it is what the request returns.
        let data = response.data.clone().unwrap_or(Value::Null);
        if let Err(err) = response.into_reply(&request) {
            eprintln!("qdnsctl: {err}");
            return ExitCode::FAILURE;
        }
        println!("{}", serde_json::to_string_pretty(&data).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    match response.into_reply(&request) {
        Ok(reply) => {
            print::print_human(&reply);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("qdnsctl: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The control socket request of a command that is one (`None`: run here).
/// The control socket's request for `qdnsctl dnssec ACTION`.
fn dnssec_request(action: DnssecAction) -> Request {
    match action {
        DnssecAction::Ds { zone } => Request::DnssecDs { zone },
        DnssecAction::Rollover { zone, complete } => Request::DnssecRollover {
            zone,
            step: if complete {
                qdns_control::dnssec::RolloverStep::Complete
            } else {
                qdns_control::dnssec::RolloverStep::Start
            },
        },
    }
}

fn socket_request(command: Command) -> Option<Request> {
    Some(match command {
        Command::Status => Request::Status {},
        Command::Reload => Request::Reload {},
        Command::Health { check } => Request::Health { check },
        Command::Explain { name, rtype, client } => Request::Explain { name, rtype, client },
        Command::Dump { zone } => Request::Dump { zone },
        Command::Records { zone, dynamic } => Request::Records { zone, dynamic },
        Command::Dnssec { action } => dnssec_request(action),
        Command::Override {
            action:
                OverrideAction::Set {
                    check,
                    status,
                    expires,
                    only_location,
                },
        } => Request::OverrideSet {
            check,
            healthy: matches!(status, Status::Healthy),
            expires,
            only_location,
        },
        Command::Override {
            action: OverrideAction::Clear { check, only_location },
        } => Request::OverrideClear { check, only_location },
        Command::External {
            check,
            status,
            only_location,
        } => Request::External {
            check,
            healthy: matches!(status, Status::Healthy),
            only_location,
        },
        Command::Shift {
            action:
                ShiftAction::Start {
                    rrset,
                    az,
                    expires,
                    comment,
                    only_location,
                },
        } => Request::ShiftStart {
            rrset,
            az,
            expires,
            comment,
            only_location,
        },
        Command::Shift {
            action:
                ShiftAction::Update {
                    rrset,
                    az,
                    expires,
                    only_location,
                },
        } => Request::ShiftUpdate {
            rrset,
            az,
            expires,
            only_location,
        },
        Command::Shift {
            action:
                ShiftAction::Cancel {
                    rrset,
                    az,
                    only_location,
                },
        } => Request::ShiftCancel {
            rrset,
            az,
            only_location,
        },
        Command::Shift {
            action: ShiftAction::List,
        } => Request::ShiftList {},
        Command::Events { limit } => Request::Events { limit },
        Command::Pki { .. }
        | Command::Publish(_)
        | Command::Change(_)
        | Command::Fleet(_)
        | Command::Secret { .. }
        | Command::Intent { .. }
        | Command::Anycast(_)
        | Command::Completions { .. } => return None,
    })
}

fn call(socket: &PathBuf, request: &Request) -> std::io::Result<Response> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(request).map_err(std::io::Error::other)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}
