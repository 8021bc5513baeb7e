//! The socket edges link to, and when control starts taking them.
//!
//! The socket is bound at start (a clash is a start-up error) but listens only once
//! control has something of the deployment's to serve. With `--intent` that is once it
//! took the deployment's operator state and heard every probed check from its checkers,
//! at most [`EDGES_WAIT`] after start. Until then a connection is refused, so an edge
//! tries the next control of its location (issue 54, SPEC §11) or keeps answering from
//! its last snapshot — instead of linking to a control that would hand it the overrides
//! of its state directory and health decisions from before its restart, and move its
//! answers back and forth on the way. Without `--intent` edges are taken at once.
use std::{path::Path, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpSocket, UnixListener, UnixSocket},
    sync::watch,
};
use tokio_util::sync::CancellationToken;

use crate::{accept, ctx::Ctx, deployed::STORE_TIMEOUT, ControlError};

/// The longest a control with `--intent` keeps its edges waiting after start: as long
/// as the transfer serials wait for the operator state (2 × [`STORE_TIMEOUT`]).
pub const EDGES_WAIT: Duration = Duration::from_secs(2 * STORE_TIMEOUT.as_secs());

/// How often the wait for the checkers looks again.
const HEARD_POLL: Duration = Duration::from_millis(100);

/// The edge socket, bound and not yet listening.
pub enum Quiet {
    /// `tls://` (with its files) or `tcp://` (none).
    Tcp(TcpSocket, Option<Arc<qdns_link::tls::ServerTls>>),
    /// A Unix socket (and its path).
    Unix(UnixSocket, String),
}

/// What a control with `--intent` waits for before it takes edges.
pub struct Gate {
    /// Set once the deployment's operator state is in force here.
    pub caught_up: watch::Receiver<bool>,
    /// Whether any checker reports here (the embedded one, or remote ones over
    /// `--checker-listen`): then every probed check is heard first.
    pub hears_checkers: bool,
}

/// Binds the edge socket `at` (`tls://ADDR:PORT`, `tcp://ADDR:PORT` or a path) without
/// listening; a Unix socket gets `mode` and `group` as control's other sockets do.
pub async fn bind(at: &str, tls: Option<&qdns_link::tls::TlsFiles>, group: Option<u32>) -> Result<Quiet, ControlError> {
    let err = |source| ControlError::Bind {
        what: "edge socket",
        at: at.to_owned(),
        source,
    };
    if let Some(addr) = at.strip_prefix("tls://").or_else(|| at.strip_prefix("tcp://")) {
        let tls = match tls {
            Some(files) => Some(Arc::new(
                qdns_link::tls::ServerTls::new(files.clone()).map_err(ControlError::EdgeTls)?,
            )),
            None => None,
        };
        let socket = qdns_listen::bind_tcp_quiet(addr).await.map_err(err)?;
        return Ok(Quiet::Tcp(socket, tls));
    }
    let path = Path::new(at);
    let socket = crate::bind_unix_quiet(path, "edge socket", group).await?;
    Ok(Quiet::Unix(socket, at.to_owned()))
}

/// The edge socket listening.
pub enum Listening {
    /// `tls://` (with its files) or `tcp://` (none).
    Tcp(TcpListener, Option<Arc<qdns_link::tls::ServerTls>>),
    /// A Unix socket (and its path).
    Unix(UnixListener, String),
}

impl Quiet {
    /// Listens: connections are taken from now on.
    ///
    /// # Errors
    /// The kernel refused (out of memory or file descriptors).
    pub fn listen(self) -> std::io::Result<Listening> {
        Ok(match self {
            Quiet::Tcp(socket, tls) => Listening::Tcp(socket.listen(qdns_listen::BACKLOG)?, tls),
            Quiet::Unix(socket, at) => Listening::Unix(socket.listen(qdns_listen::BACKLOG)?, at),
        })
    }
}

/// Waits for `gate`, then listens and takes edges until `shutdown`.
pub async fn serve_after(quiet: Quiet, gate: Gate, ctx: Ctx, shutdown: CancellationToken) {
    tokio::select! {
        () = wait(gate, &ctx) => {}
        () = shutdown.cancelled() => return,
    }
    match quiet.listen() {
        Ok(listening) => serve(listening, ctx, shutdown).await,
        Err(err) => cannot_listen(&err, &shutdown),
    }
}

/// Takes edges until `shutdown`.
pub async fn serve(listening: Listening, ctx: Ctx, shutdown: CancellationToken) {
    match listening {
        Listening::Tcp(listener, tls) => {
            let scheme = if tls.is_some() { "tls" } else { "tcp" };
            let local = listener.local_addr();
            let at = local
                .as_ref()
                .map_or_else(|_| "?".to_owned(), |a| format!("{scheme}://{a}"));
            tracing::info!(edge_socket = %at, "serving edges");
            if tls.is_none() && !local.as_ref().is_ok_and(|a| a.ip().is_loopback()) {
                tracing::warn!(
                    "the tcp:// edge socket is neither encrypted nor authenticated: anyone who reaches it \
                     reads every zone, and a spoofed control can feed edges; use tls:// (docs/OPERATIONS.md)"
                );
            }
            accept::accept_edges_tcp(listener, tls, ctx, shutdown).await;
        }
        Listening::Unix(listener, at) => {
            tracing::info!(edge_socket = %at, "serving edges");
            accept::accept_edges_unix(listener, ctx, shutdown).await;
        }
    }
}

/// A bound socket that cannot listen (the kernel refused: out of memory or file
/// descriptors): control without edges is of no use, so it stops.
fn cannot_listen(err: &std::io::Error, shutdown: &CancellationToken) {
    tracing::error!(%err, "cannot listen on the edge socket; stopping");
    shutdown.cancel();
}

/// Until the operator state is in force and, when checkers report here, every probed
/// check was heard — or [`EDGES_WAIT`] passed; says which.
async fn wait(mut gate: Gate, ctx: &Ctx) {
    let started = tokio::time::Instant::now();
    let deadline = started + EDGES_WAIT;
    let caught_up = tokio::time::timeout_at(deadline, gate.caught_up.wait_for(|c| *c))
        .await
        .is_ok_and(|seen| seen.is_ok());
    let mut heard = !gate.hears_checkers;
    while !heard {
        heard = ctx.state.lock().await.heard_every_probed_check();
        if heard || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(HEARD_POLL).await;
    }
    let waited_ms = started.elapsed().as_millis();
    if caught_up && heard {
        tracing::info!(
            waited_ms,
            "the deployment's state taken and the checkers heard: taking edges"
        );
    } else {
        tracing::warn!(
            waited_ms,
            operator_state = caught_up,
            checkers_heard = heard,
            "taking edges without all of the deployment's state: the store or a checker did not answer in time"
        );
    }
}
