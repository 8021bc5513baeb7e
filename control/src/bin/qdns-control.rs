//! `qdns-control`: parse the command line, set up logging, run until SIGTERM/SIGINT.
use std::{io::IsTerminal, process::ExitCode};

use clap::Parser;
use qdns_control::{config::Args, Config};
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
    let config = match Config::from_args(Args::parse()) {
        Ok(config) => config,
        Err(err) => return fatal(&err),
    };
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
    match runtime.block_on(qdns_control::run(config, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fatal(&err),
    }
}

fn fatal(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("qdns-control: {err}");
    ExitCode::FAILURE
}
