//! `qdns-edge`: parse the command line, set up logging, run until SIGTERM/SIGINT.
use std::{io::IsTerminal, process::ExitCode};

use clap::Parser;
use qdns_edge::{config::Args, Config};
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
        wait_for_stop_signal().await;
        signals.cancel();
    });
    match runtime.block_on(qdns_edge::run(config, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fatal(&err),
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
