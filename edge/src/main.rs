//! `qdns-edge`: parse the command line, set up logging, run until SIGTERM/SIGINT.
use std::{io::IsTerminal, process::ExitCode};

use qdns_edge::{
    config::{ConfigError, Settings},
    Config,
};
use qdns_settings::Declared as _;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let config = match Settings::from_argv(std::env::args_os()).and_then(Config::new) {
        Ok(config) => config,
        Err(ConfigError::Cli(err)) => err.exit(),
        Err(err) => return fatal(&err),
    };
    let check = config.settings.check_config;
    if check {
        return check_config(&config);
    }
    // Still one thread: what is dropped here is dropped for every thread to come.
    if config.settings.xdp.is_empty() {
        match qdns_edge::privileges::drop_xdp_capabilities() {
            Ok(held) if !held.is_empty() => {
                let names: Vec<String> = held.iter().map(ToString::to_string).collect();
                tracing::info!(dropped = %names.join(" "), "capabilities for XDP dropped: this edge runs without --xdp");
            }
            Ok(_) => {}
            Err(err) => return fatal(&format!("cannot drop the XDP capabilities: {err}")),
        }
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
        wait_for_stop_signal().await;
        signals.cancel();
    });
    match runtime.block_on(qdns_edge::run(config, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fatal(&err),
    }
}

/// `--check-config`: the settings parsed; standalone, the zones load and compile.
fn check_config(config: &Config) -> ExitCode {
    match &config.source {
        qdns_edge::config::Source::Zones(dir) => {
            match qdns_edge::server::load_engine(dir, config.zone_sources(), 1, &config.serve_options()) {
                Ok(engine) => {
                    println!(
                        "qdns-edge: configuration ok; {} zones load from {}",
                        engine.zones().count(),
                        dir.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(err) => fatal(&err),
            }
        }
        qdns_edge::config::Source::Control { .. } => {
            println!("qdns-edge: configuration ok; zones come from control");
            ExitCode::SUCCESS
        }
    }
}

fn fatal(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("qdns-edge: {err}");
    ExitCode::FAILURE
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
