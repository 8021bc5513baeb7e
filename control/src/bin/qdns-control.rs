//! `qdns-control`: parse the command line, set up logging, run the location (or, with
//! `checker`, a remote checker) until SIGTERM/SIGINT.
#![forbid(unsafe_code)]
use std::{io::IsTerminal, process::ExitCode};

use qdns_control::{
    config::{ConfigError, Role, Settings},
    remote::{run_checker, CheckerConfig, Zones},
    report, Config,
};
use qdns_settings::Declared as _;
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Room for every connection the listeners' caps allow (systemd's LimitNOFILE may
    // set the hard limit).
    if let Err(err) = qdns_listen::raise_open_files_limit() {
        tracing::warn!(%err, "cannot raise the open-file limit");
    }
    let mut settings = match Settings::from_argv(std::env::args_os()) {
        Ok(settings) => settings,
        Err(ConfigError::Cli(err)) => err.exit(),
        Err(err) => return fatal(&err),
    };
    let role = settings.role.take();
    if settings.check_config && role.is_none() {
        return match Config::new(settings) {
            Ok(config) => match qdns_control::check(&config) {
                Ok(summary) => {
                    println!("qdns-control: {summary}");
                    ExitCode::SUCCESS
                }
                Err(err) => fatal(&err),
            },
            Err(err) => fatal(&err),
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fatal(&err),
    };
    let shutdown = CancellationToken::new();
    let signals = shutdown.clone();
    runtime.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        if let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            signals.cancel();
        }
    });
    if let Some(role) = role {
        let config = match checker_config(role) {
            Ok(config) => config,
            Err(err) => return fatal(&err),
        };
        return match runtime.block_on(run_checker(config, shutdown)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => fatal(&err),
        };
    }
    let config = match Config::new(settings) {
        Ok(config) => config,
        Err(err) => return fatal(&err),
    };
    match runtime.block_on(qdns_control::run(config, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fatal(&err),
    }
}

/// The checker's settings from its command line.
fn checker_config(role: Role) -> Result<CheckerConfig, String> {
    let Role::Checker {
        id,
        region,
        zones,
        intent,
        intent_ca,
        intent_cert,
        intent_key,
        insecure_plaintext_link,
        state_dir,
        key_file,
        report_to,
        source_ip,
        tls_ca,
    } = role;
    // Where the checks are: --zones DIR, or the intent at --intent.
    let zones = match intent {
        None => zones.map(Zones::Dir).ok_or("checker: --zones DIR or --intent URL")?,
        Some(url) => {
            let tls = qdns_intent::url::StoreTls {
                ca: intent_ca,
                cert: intent_cert,
                key: intent_key,
            };
            let url = qdns_intent::url::StoreUrl::parse(&url).map_err(|e| e.to_string())?;
            url.check_plaintext(&tls, insecure_plaintext_link)
                .map_err(|e| e.to_string())?;
            Zones::Intent {
                source: qdns_intent::Source { url, tls },
                state_dir,
            }
        }
    };
    // The secret file names itself in its errors (and the fix, when it is not private).
    let key = qdns_link::secret::read_to_string(&key_file)
        .map_err(|e| e.to_string())
        .and_then(|t| report::decode_key(&t).map_err(|e| format!("{}: {e}", key_file.display())))?;
    Ok(CheckerConfig {
        id,
        region,
        zones,
        key,
        report_to,
        source: source_ip,
        tls_ca,
    })
}

fn fatal(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("qdns-control: {err}");
    ExitCode::FAILURE
}
