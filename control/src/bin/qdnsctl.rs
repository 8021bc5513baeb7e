//! `qdnsctl`: the operator's CLI for the control socket (SPEC §6). Human-readable
//! output by default, the raw JSON `data` with `--json`. Exits non-zero when the
//! request fails, printing control's error.
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use clap::{Parser, Subcommand, ValueEnum};
use qdns_control::api::{Request, Response};
use serde_json::Value;

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
    Explain { name: String, rtype: String },
    /// ZONE's record sets as a master file (RFC 1035 §5; policy sets as comments).
    Dump { zone: String },
    /// Force a check's status for a while.
    Override {
        #[command(subcommand)]
        action: OverrideAction,
    },
    /// Set an external check's status.
    External { check: String, status: Status },
    /// Zonal shifts.
    Shift {
        #[command(subcommand)]
        action: ShiftAction,
    },
    /// The timeline of health, fail-open, reload, shift and override events.
    Events {
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Certificates for tls:// control↔edge links (local files; no control socket).
    Pki {
        #[command(subcommand)]
        action: PkiAction,
    },
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
    },
    /// End the override of CHECK.
    Clear { check: String },
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
    },
    /// Set a new expiry (from now, ≤ 72h).
    Update {
        #[arg(long)]
        rrset: String,
        #[arg(long)]
        az: String,
        #[arg(long)]
        expires: String,
    },
    /// End a shift.
    Cancel {
        #[arg(long)]
        rrset: String,
        #[arg(long)]
        az: String,
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
        Command::Status => Request::Status,
        Command::Reload => Request::Reload,
        Command::Health { check } => Request::Health { check },
        Command::Explain { name, rtype } => Request::Explain { name, rtype },
        Command::Dump { zone } => Request::Dump { zone },
        Command::Override {
            action: OverrideAction::Set { check, status, expires },
        } => Request::OverrideSet {
            check,
            healthy: matches!(status, Status::Healthy),
            expires,
        },
        Command::Override {
            action: OverrideAction::Clear { check },
        } => Request::OverrideClear { check },
        Command::External { check, status } => Request::External {
            check,
            healthy: matches!(status, Status::Healthy),
        },
        Command::Shift {
            action:
                ShiftAction::Start {
                    rrset,
                    az,
                    expires,
                    comment,
                },
        } => Request::ShiftStart {
            rrset,
            az,
            expires,
            comment,
        },
        Command::Shift {
            action: ShiftAction::Update { rrset, az, expires },
        } => Request::ShiftUpdate { rrset, az, expires },
        Command::Shift {
            action: ShiftAction::Cancel { rrset, az },
        } => Request::ShiftCancel { rrset, az },
        Command::Shift {
            action: ShiftAction::List,
        } => Request::ShiftList,
        Command::Events { limit } => Request::Events { limit },
    };
    let response = match call(&socket, &request) {
        Ok(response) => response,
        Err(err) => {
            eprintln!("qdnsctl: {}: {err}", socket.display());
            return ExitCode::from(2);
        }
    };
    if !response.ok {
        eprintln!(
            "qdnsctl: {}",
            response.error.unwrap_or_else(|| "request failed".to_owned())
        );
        return ExitCode::FAILURE;
    }
    let data = response.data.unwrap_or(Value::Null);
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&data).unwrap_or_default());
    } else {
        print_human(&request, &data);
    }
    ExitCode::SUCCESS
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

/// Unix seconds as RFC 3339 UTC.
fn time(v: &Value) -> String {
    v.as_u64().map_or_else(
        || s(v),
        |secs| humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(secs)).to_string(),
    )
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

#[expect(clippy::too_many_lines, reason = "one table per command")]
fn print_human(request: &Request, data: &Value) {
    match request {
        Request::Status => {
            println!(
                "snapshot {}  health seq {}",
                s(&data["snapshot_version"]),
                s(&data["health_seq"])
            );
            println!("{:<28} {:>12} {:>7}  FILE", "ZONE", "SERIAL", "RRSETS");
            for z in data["zones"].as_array().into_iter().flatten() {
                println!(
                    "{:<28} {:>12} {:>7}  {}",
                    s(&z["zone"]),
                    s(&z["serial"]),
                    s(&z["rrsets"]),
                    s(&z["file"])
                );
            }
            let fail_open: Vec<String> = data["fail_open"].as_array().into_iter().flatten().map(s).collect();
            println!(
                "fail-open: {}",
                if fail_open.is_empty() {
                    "none".to_owned()
                } else {
                    fail_open.join(", ")
                }
            );
            println!(
                "checkers reachable: {} ({})",
                s(&data["checkers"]["reachable"]),
                s(&data["checkers"]["note"])
            );
            println!("overrides: {}  shifts: {}", s(&data["overrides"]), s(&data["shifts"]));
            println!("{:<24} {:>16} {:>6}  XDP", "EDGE", "SNAPSHOT", "SEQ");
            for e in data["edges"].as_array().into_iter().flatten() {
                println!(
                    "{:<24} {:>16} {:>6}  {}",
                    s(&e["name"]),
                    s(&e["snapshot"]),
                    s(&e["seq"]),
                    xdp_summary(&e["xdp"])
                );
            }
        }
        Request::Health { .. } => {
            println!("{:<36} {:<10} {:<9}  WHY", "CHECK", "TYPE", "STATUS");
            for c in data.as_array().into_iter().flatten() {
                let status = if c["healthy"].as_bool() == Some(true) {
                    "healthy"
                } else {
                    "UNHEALTHY"
                };
                println!(
                    "{:<36} {:<10} {:<9}  {}",
                    s(&c["check"]),
                    s(&c["type"]),
                    status,
                    s(&c["why"])
                );
            }
        }
        Request::Explain { .. } => {
            println!(
                "{} {}  policy {}  ttl {}",
                s(&data["name"]),
                s(&data["type"]),
                s(&data["policy"]),
                s(&data["ttl"])
            );
            if data.get("candidates").is_none() {
                println!("answer: {}", s(&data["answer"]));
                return;
            }
            if data["fail_open"].as_bool() == Some(true) {
                println!("FAIL-OPEN: {}", s(&data["fail_open_note"]));
            }
            println!("{:<10} {:>6} {:<10} {:<9}  WHY", "MEMBER", "WEIGHT", "ROLE", "STATUS");
            for c in data["candidates"].as_array().into_iter().flatten() {
                let status = if c["healthy"].as_bool() == Some(true) {
                    "healthy"
                } else {
                    "UNHEALTHY"
                };
                println!(
                    "{:<10} {:>6} {:<10} {:<9}  {}",
                    s(&c["id"]),
                    s(&c["weight"]),
                    s(&c["role"]),
                    status,
                    s(&c["why"])
                );
            }
            for shift in data["shifts"].as_array().into_iter().flatten() {
                println!(
                    "shift: away from {} for {}s more{}",
                    s(&shift["az"]),
                    s(&shift["expires_in_s"]),
                    if shift["moves_traffic"].as_bool() == Some(false) {
                        " (moves no traffic: fail-open)"
                    } else {
                        ""
                    }
                );
            }
            println!("answers: {}", data["distribution"]);
        }
        Request::ShiftStart { .. } | Request::ShiftUpdate { .. } | Request::ShiftCancel { .. } | Request::ShiftList => {
            println!("{:<28} {:<8} {:>10}  NOTE", "RRSET", "AZ", "EXPIRES_IN");
            for sh in data.as_array().into_iter().flatten() {
                println!(
                    "{:<28} {:<8} {:>9}s  {}",
                    s(&sh["rrset"]),
                    s(&sh["az"]),
                    s(&sh["expires_in_s"]),
                    if sh["note"].is_null() {
                        s(&sh["comment"])
                    } else {
                        s(&sh["note"])
                    }
                );
            }
        }
        Request::Dump { .. } => print!("{}", s(&data["text"])),
        Request::Events { .. } => {
            for e in data.as_array().into_iter().flatten() {
                println!("{}  {:<9} {}", time(&e["time"]), s(&e["kind"]), s(&e["message"]));
            }
        }
        _ => println!("{}", serde_json::to_string_pretty(data).unwrap_or_default()),
    }
}

/// "off", or the interfaces, the table generation, and packets answered / passed.
fn xdp_summary(xdp: &serde_json::Value) -> String {
    let Some(counters) = xdp["counters"].as_array() else {
        return "off".to_owned();
    };
    let (mut answered, mut passed) = (0u64, 0u64);
    for pair in counters {
        let (label, n) = (pair[0].as_str().unwrap_or(""), pair[1].as_u64().unwrap_or(0));
        if label.starts_with("answered_") {
            answered += n;
        } else if label.starts_with("pass_") {
            passed += n;
        }
    }
    let interfaces: Vec<&str> = xdp["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i.as_str())
        .collect();
    format!(
        "{} gen {}: {answered} answered, {passed} passed",
        interfaces.join(","),
        xdp["generation"]
    )
}
